"""Fit the statistical-efficiency model (``scheduling/core/goodput.py``) to Pollux's
validation curves and check it, leave one workload out.

The data: ``data/perf/pollux_t4/<workload>/validation-<batch>.csv``, one real training
run per global batch (Pollux artifact, AdaptDL with its learning-rate scaling), a row
per "epoch" of progress with the validation metric and the gradient statistics
(``grad_sqr``, ``grad_var``) AdaptDL measured then. ``grad_var`` is normalised to the
smallest batch of the workload (AdaptDL's convention, which its own simulator follows),
so the noise scale of a row is ``grad_var * b_ref / grad_sqr``.

What is measured: the *target* is the best validation metric that the worst batch
reaches (so every batch reaches it); the samples a run needs to reach it are
``batch x`` the iteration at which its running best metric crosses the target
(interpolated linearly between the two rows around the crossing). The ratio of those
samples to the reference batch's is the quantity the model must predict.

Two predictions:

* **learned curve** (per workload, in sample): the one noise scale ``B`` whose
  ``(B + b) / (B + b_ref)`` best matches that workload's measured ratios (least squares
  in log space). It is what the core uses for a job that reports no statistics.
* **from the job's own statistics** (what a running job gives the core): the reference
  run's reported noise scale, times a ``calibration`` fitted on the *other* workloads,
  integrated over training up to the target: ``samples(b) / samples(b_ref) = mean over
  progress of (k B_t + b) / (k B_t + b_ref)``, each report's ``B_t`` standing for the
  progress since the previous one (a report below ``MIN_NOISE_SCALE`` is refused, as the
  core refuses it, and the next report covers its stretch). This is the
  leave-one-workload-out check.

numpy only (a golden-section search in log space), so it can run wherever the core
runs; it is not part of the pure core because it reads the data files.
Run ``python -m scheduling.fitting.goodput_fit --write`` to rebuild ``goodput_curves.json``.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scheduling.core.goodput import (
    CURVES_PATH,
    MIN_NOISE_SCALE,
    GoodputCurves,
    WorkloadCurve,
    curves_to_dict,
    noise_scale_from_stats,
)

REPO_DATA = Path(__file__).resolve().parents[2] / "data"
POLLUX_DIR = REPO_DATA / "perf" / "pollux_t4"
VERSION = "goodput-2"  # 2: reported scales below one sample refused
# ElasticFlow's A100 "resnet50" is ResNet-50 on ImageNet, Pollux's "imagenet".
ALIASES = {"resnet50": "imagenet"}
COLUMNS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")


@dataclass(frozen=True, slots=True)
class Row:
    progress: float  # AdaptDL progress, in reference-batch iterations
    iteration: float
    metric: float
    grad_sqr: float
    grad_var: float


@dataclass(frozen=True)
class Workload:
    name: str
    runs: Mapping[int, tuple[Row, ...]]  # global batch -> rows

    @property
    def ref_batch(self) -> int:
        return min(self.runs)

    @property
    def batches(self) -> tuple[int, ...]:
        return tuple(sorted(self.runs))

    @property
    def increasing(self) -> bool:
        rows = self.runs[self.ref_batch]
        return rows[0].metric < rows[-1].metric

    @property
    def target(self) -> float:
        best = max if self.increasing else min
        worst = min if self.increasing else max
        return worst(best(r.metric for r in rows) for rows in self.runs.values())


def read_workload(directory: Path) -> Workload:
    runs = {}
    for path in sorted(directory.glob("validation-*.csv")):
        batch = int(path.stem.rsplit("-", 1)[1])
        with path.open(newline="", encoding="utf-8") as fh:
            rows = tuple(Row(*(float(r[k]) for k in COLUMNS)) for r in csv.DictReader(fh))
        if not rows:
            raise ValueError(f"{path}: no rows")
        runs[batch] = rows
    if len(runs) < 2:
        raise ValueError(f"{directory}: fewer than two validation runs")
    return Workload(directory.name, runs)


def read_workloads(pollux_dir: Path = POLLUX_DIR) -> tuple[Workload, ...]:
    return tuple(
        read_workload(d) for d in sorted(pollux_dir.iterdir()) if any(d.glob("validation-*.csv"))
    )


def crossing(workload: Workload, batch: int) -> tuple[float, float]:
    """(iteration, progress) at which the run at ``batch`` first reaches the target,
    interpolated between the rows around the crossing of its running best metric."""
    target, up = workload.target, workload.increasing
    best = None
    prev_it = prev_prog = 0.0
    for row in workload.runs[batch]:
        reached = row.metric >= target if up else row.metric <= target
        if reached:
            if best is None or row.metric == best:
                frac = 1.0
            else:
                frac = (target - best) / (row.metric - best)
            return (
                prev_it + frac * (row.iteration - prev_it),
                prev_prog + frac * (row.progress - prev_prog),
            )
        best = row.metric if best is None else (max if up else min)(best, row.metric)
        prev_it, prev_prog = row.iteration, row.progress
    raise ValueError(f"{workload.name} at batch {batch} never reaches {target}")


def measured_ratios(workload: Workload) -> dict[int, float]:
    """Samples to the target at each batch / samples at the reference batch."""
    ref = workload.ref_batch
    ref_samples = crossing(workload, ref)[0] * ref
    return {b: crossing(workload, b)[0] * b / ref_samples for b in workload.batches}


def reported_noise_scales(workload: Workload) -> list[tuple[float, float]]:
    """(progress at the row's end, noise scale) of the reference run, row by row: what a
    job at the reference batch would have reported as it trained."""
    ref = workload.ref_batch
    out = []
    for row in workload.runs[ref]:
        scale = noise_scale_from_stats(row.grad_sqr, row.grad_var, ref)
        # The core's rule: a scale below one sample is the estimator's, not the job's.
        if scale is not None and scale >= MIN_NOISE_SCALE:
            out.append((row.progress, scale))
    return out


def ratio_from_stats(workload: Workload, batch: int, calibration: float) -> float:
    """Predicted samples(batch) / samples(ref) from the reference run's own statistics:
    the efficiency at each moment integrated over progress up to the target."""
    ref = workload.ref_batch
    upto = crossing(workload, ref)[1]
    total = weight = 0.0
    prev = 0.0
    for progress, scale in reported_noise_scales(workload):
        end = min(progress, upto)
        if end <= prev:
            break
        k_scale = calibration * scale
        total += (end - prev) * (k_scale + batch) / (k_scale + ref)
        weight += end - prev
        prev = end
    return total / weight if weight > 0 else 1.0


def golden_min(f: Callable[[float], float], lo: float, hi: float, iters: int = 200) -> float:
    """Minimiser of a unimodal ``f`` on [lo, hi]."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2.0


def fit_noise_scale(ratios: Mapping[int, float], ref: int) -> float:
    """The noise scale whose efficiency curve best matches ``ratios`` (log least squares)."""
    points = [(b, r) for b, r in ratios.items() if b != ref and r > 0]

    def loss(log_scale: float) -> float:
        scale = math.exp(log_scale)
        return sum(math.log((scale + b) / (scale + ref) / r) ** 2 for b, r in points)

    return math.exp(golden_min(loss, math.log(1e-2), math.log(1e10)))


def fit_calibration(workloads: Sequence[Workload]) -> float:
    """The factor on reported noise scales that best predicts every batch of ``workloads``."""
    measured = [(w, measured_ratios(w)) for w in workloads]

    def loss(log_k: float) -> float:
        k = math.exp(log_k)
        return sum(
            math.log(ratio_from_stats(w, b, k) / r) ** 2
            for w, ratios in measured
            for b, r in ratios.items()
            if b != w.ref_batch
        )

    return math.exp(golden_min(loss, math.log(1e-2), math.log(1e3), iters=80))


@dataclass(frozen=True, slots=True)
class Point:
    workload: str
    batch: int
    ref_batch: int
    measured_ratio: float  # samples to target / samples at the reference batch
    predicted_ratio: float
    calibration: float

    @property
    def error(self) -> float:
        return abs(self.predicted_ratio - self.measured_ratio) / self.measured_ratio


def leave_one_out(workloads: Sequence[Workload]) -> list[Point]:
    """For each workload: calibrate on the others, predict it from its own statistics."""
    points = []
    for held in workloads:
        k = fit_calibration([w for w in workloads if w.name != held.name])
        for b, r in measured_ratios(held).items():
            if b == held.ref_batch:
                continue
            points.append(Point(held.name, b, held.ref_batch, r, ratio_from_stats(held, b, k), k))
    return points


def learned_curves(workloads: Sequence[Workload]) -> dict[str, WorkloadCurve]:
    out = {}
    for w in workloads:
        ratios = measured_ratios(w)
        scale = fit_noise_scale(ratios, w.ref_batch)
        errors = sorted(
            abs((scale + b) / (scale + w.ref_batch) - r) / r
            for b, r in ratios.items()
            if b != w.ref_batch
        )
        out[w.name] = WorkloadCurve(
            noise_scale=scale,
            ref_batch=w.ref_batch,
            batches=w.batches,
            median_error=median(errors),
            max_error=errors[-1],
        )
    return out


def median(values: Sequence[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def build_curves(workloads: Sequence[Workload]) -> GoodputCurves:
    return GoodputCurves(
        version=VERSION,
        calibration=fit_calibration(workloads),
        workloads=learned_curves(workloads),
        aliases=dict(ALIASES),
        meta={
            "source": "data/perf/pollux_t4/*/validation-*.csv (Pollux OSDI'21 artifact)",
            "built_by": "python -m scheduling.fitting.goodput_fit --write",
            "target": "best validation metric that the worst batch reaches",
        },
    )


def main(argv: list[str] | None = None) -> int:
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pollux-dir", default=str(POLLUX_DIR))
    parser.add_argument("--write", action="store_true", help=f"rewrite {CURVES_PATH.name}")
    args = parser.parse_args(argv)
    try:
        workloads = read_workloads(Path(args.pollux_dir))
    except (OSError, ValueError, KeyError) as exc:
        sys.stderr.write(f"goodput_fit: {exc}\n")
        return 2
    curves = build_curves(workloads)
    text = json.dumps(curves_to_dict(curves), indent=1) + "\n"
    if args.write:
        partial = CURVES_PATH.with_name(CURVES_PATH.name + ".partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(CURVES_PATH)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
