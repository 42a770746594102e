"""A runnable Wattflow training job: logistic regression by mini-batch SGD, numpy only.

It follows the agent's protocol through ``wattflow_client`` (beside this file): trains at
``WATTFLOW_BATCH_SIZE``, counts on from ``WATTFLOW_COMPLETED_ITERATIONS``, reports its
iterations, samples and gradient statistics (from the per-example gradients of each
batch, split into ``--parts`` parts as GPUs would hold them), checkpoints into
``WATTFLOW_CHECKPOINT_DIR`` when asked to stop (SIGTERM or the stop file) and resumes from
it, and exits 0 when it reaches ``WATTFLOW_TOTAL_ITERATIONS``.

The data is a fixed synthetic problem (``--seed``): points from two Gaussian classes in
``--features`` dimensions, so the job needs no download. Submit it with a command such as
``exec python /path/to/jobclient/train_logreg.py``; the simulated agent ignores the command
and advances the job by the perf model, the process agent runs it. Outside Wattflow::

    python jobclient/train_logreg.py --iterations 500 --batch-size 64
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wattflow_client as wf  # noqa: E402


def make_data(seed: int, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=d) / np.sqrt(d)
    y = rng.integers(0, 2, size=n).astype(np.float64)
    x = rng.normal(size=(n, d)) + np.outer(2.0 * y - 1.0, direction) * 1.5
    return x, y


def per_example_gradients(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gradients of the logistic loss of each example, shape (batch, features)."""
    p = 1.0 / (1.0 + np.exp(-(x @ w)))
    return (p - y)[:, None] * x


def loss_and_accuracy(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    z = x @ w
    loss = float(np.mean(np.logaddexp(0.0, z) - y * z))
    return loss, float(np.mean((z > 0) == (y > 0.5)))


def save_checkpoint(path: Path, **arrays) -> None:
    """Write the checkpoint beside ``path`` and rename it over it: written in place, a save
    cut short (a full disk, the agent's SIGKILL after its grace period) destroyed the last
    good checkpoint and left a truncated one that every restart failed to load."""
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return value


def _finite(low: float, *, open_low: bool):
    def parse(text: str) -> float:
        value = float(text)
        if not math.isfinite(value) or value < low or (open_low and value == low):
            bound = f"above {low:g}" if open_low else f"{low:g} or more"
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number {bound}")
        return value

    return parse


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not the usage first
        self.exit(2, f"train_logreg: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(description=__doc__.splitlines()[0])
    positive = _finite(0.0, open_low=True)
    parser.add_argument("--iterations", type=positive, help="total, if the agent gives none")
    parser.add_argument(
        "--batch-size", type=_positive_int, default=64, help="if the agent gives none"
    )
    parser.add_argument("--lr", type=positive, default=0.05)
    parser.add_argument("--parts", type=int, default=4, help="parts per batch (>= 2)")
    parser.add_argument("--features", type=_positive_int, default=32)
    parser.add_argument("--examples", type=_positive_int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--step-delay-s", type=_finite(0.0, open_low=False), default=0.0, help="sleep per step"
    )
    args = parser.parse_args(argv)

    try:
        job = wf.connect()
    except ValueError as exc:
        sys.stderr.write(f"train_logreg: {exc}\n")
        return 2
    batch = job.batch_size or args.batch_size
    total = job.total_iterations if job.total_iterations is not None else args.iterations
    if total is None:
        sys.stderr.write("train_logreg: no WATTFLOW_TOTAL_ITERATIONS and no --iterations\n")
        return 2
    if batch < args.parts or args.parts < 2:
        sys.stderr.write(f"train_logreg: batch {batch} cannot be split into {args.parts} parts\n")
        return 2
    x, y = make_data(args.seed, args.examples, args.features)
    try:
        ckpt = job.checkpoint_path("logreg.npz")
    except ValueError as exc:
        sys.stderr.write(f"train_logreg: {exc}\n")
        return 2
    w = np.zeros(args.features)
    samples_done = 0.0
    if ckpt.exists():
        with np.load(ckpt) as saved:
            w, samples_done = saved["w"], float(saved["samples_done"])
        sys.stdout.write(f"resumed from {ckpt} after {samples_done:.0f} samples\n")
    rng = np.random.default_rng(args.seed + int(samples_done))
    noise = wf.GradientNoise()
    it = job.completed_iterations
    # Wattflow counts work from the server's number (the agent may have resized the job
    # since the checkpoint); the checkpoint keeps the weights.
    job.report(it, force=True)
    while it < total and not job.should_stop():
        idx = rng.integers(0, len(y), size=batch)
        grads = per_example_gradients(w, x[idx], y[idx])
        parts = np.array_split(grads, args.parts)
        part_means = [p.mean(axis=0) for p in parts]
        mean = grads.mean(axis=0)
        noise.update([float(g @ g) for g in part_means], float(mean @ mean))
        w -= args.lr * mean
        it += 1
        samples_done += batch
        job.report(it, grad_sqr=noise.grad_sqr, grad_var=noise.grad_var)
        if args.step_delay_s:
            import time

            time.sleep(args.step_delay_s)
    save_checkpoint(ckpt, w=w, samples_done=samples_done)
    job.report(it, grad_sqr=noise.grad_sqr, grad_var=noise.grad_var, force=True)
    loss, acc = loss_and_accuracy(w, x, y)
    scale = noise.noise_scale(batch)
    why = "stopped" if job.should_stop() else "done"
    sys.stdout.write(
        f"{why} at iteration {it:.0f} (batch {batch}): loss {loss:.4f} accuracy {acc:.3f} "
        f"noise scale {'n/a' if scale is None else f'{scale:.0f}'} samples\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
