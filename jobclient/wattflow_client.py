"""Wattflow's job-side client: report progress, find the checkpoint, learn when to stop.

Standard library only, one file: copy it next to a training script and ``import
wattflow_client``. Outside Wattflow (no ``WATTFLOW_*`` variables) it still works: progress
goes nowhere, the checkpoint directory is ``./checkpoint`` and nothing asks the job to stop.

The protocol is the node agent's (``telemetry/agent/jobs.py``, ``docs/job_client.md``):

- the agent starts the job with ``WATTFLOW_BATCH_SIZE`` (the global batch of its current
  allocation, which the scheduler may set apart from the submitted one),
  ``WATTFLOW_GPU_COUNT``, ``WATTFLOW_CHECKPOINT_DIR``, ``WATTFLOW_PROGRESS_FILE``,
  ``WATTFLOW_STOP_FILE``, ``WATTFLOW_TOTAL_ITERATIONS`` and
  ``WATTFLOW_COMPLETED_ITERATIONS`` (both counted at ``WATTFLOW_BATCH_SIZE``);
- the job overwrites the progress file with one JSON object: ``iterations`` done (at
  ``WATTFLOW_BATCH_SIZE``, counting on from ``WATTFLOW_COMPLETED_ITERATIONS``), ``samples``,
  ``ts`` (Unix seconds when that count was reached, which the agent reports as the
  progress's time) and, optionally, its gradient statistics ``grad_sqr`` (squared norm of
  the gradient) and ``grad_var`` (variance of the mini-batch gradient at this batch), from which the
  scheduler learns how much a larger batch is worth;
- to stop or resize the job the agent creates the stop file and sends SIGTERM; the job saves
  a checkpoint into the checkpoint directory and exits with status 0 within the grace period
  (30 s by default); it resumes from that checkpoint when started again;
- the job has done its work when ``iterations`` reaches ``WATTFLOW_TOTAL_ITERATIONS``; it
  then exits 0.

Typical use::

    import wattflow_client as wf

    job = wf.connect()  # reads the environment, handles SIGTERM
    state = load(job.checkpoint_path("state.npz"))  # or start afresh
    noise = wf.GradientNoise()
    it = job.completed_iterations
    while not job.finished(it) and not job.should_stop():
        ...  # one step at job.batch_size; feed noise.update(...) if you can
        it += 1
        job.report(it, grad_sqr=noise.grad_sqr, grad_var=noise.grad_var)
    save(job.checkpoint_path("state.npz"))
    job.report(it, force=True)
"""

from __future__ import annotations

import json
import math
import numbers
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["GradientNoise", "Job", "connect"]


def _env_float(env, name: str, default: float | None) -> float | None:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={text!r} must be a finite non-negative number")
    return value


def _env_count(env, name: str, default: int | None) -> int | None:
    """A whole number of at least 1 (a batch, a GPU count): "0.5" was read as batch 0."""
    value = _env_float(env, name, None)
    if value is None:
        return default
    if value < 1 or value != int(value):
        raise ValueError(f"{name}={env.get(name)!r} must be a whole number of at least 1")
    return int(value)


class Job:
    """The running job as the agent set it up; ``connect()`` builds it from the environment."""

    def __init__(
        self,
        *,
        job_id: str | None = None,
        batch_size: int | None = None,
        gpu_count: int = 1,
        checkpoint_dir: str | os.PathLike = "checkpoint",
        progress_file: str | os.PathLike | None = None,
        stop_file: str | os.PathLike | None = None,
        total_iterations: float | None = None,
        completed_iterations: float = 0.0,
        report_interval_s: float = 1.0,
    ) -> None:
        self.job_id = job_id
        self.batch_size = batch_size
        self.gpu_count = gpu_count
        self.checkpoint_dir = Path(checkpoint_dir)
        self.progress_file = None if progress_file is None else Path(progress_file)
        self.stop_file = None if stop_file is None else Path(stop_file)
        self.total_iterations = total_iterations
        self.completed_iterations = completed_iterations
        self.report_interval_s = report_interval_s
        self._stop_signalled = False
        # whether SIGTERM sets ``should_stop()`` (``handle_signals``)
        self.signals_handled = False
        self._last_report = -math.inf
        # The count last seen and when it was first seen (Unix seconds): what ``report``
        # writes as ``ts``, so a report forced after the checkpoint save still carries the
        # time of the last step, not the save's.
        self._reached: tuple[float, float] | None = None

    # --- where things are ------------------------------------------------------------
    def checkpoint_path(self, name: str) -> Path:
        """``name`` inside the checkpoint directory (created if missing). Raises
        ``ValueError`` naming the variable if the directory cannot be made."""
        try:
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file there (FileExistsError), no permission, ...
            raise ValueError(
                f"WATTFLOW_CHECKPOINT_DIR={str(self.checkpoint_dir)!r}: cannot be a directory "
                f"for checkpoints: {exc.strerror or exc}"
            ) from None
        return self.checkpoint_dir / name

    # --- when to stop ------------------------------------------------------------------
    def handle_signals(self) -> bool:
        """Turn SIGTERM (the agent's stop order) into ``should_stop()``, instead of dying
        mid-step; the training loop then checkpoints and exits 0. Python lets only the main
        thread set a signal handler: called from another thread this sets none and returns
        False (``signals_handled``); the stop file, which the agent creates before its
        SIGTERM, still makes ``should_stop()`` true, and SIGTERM is the main thread's to
        handle (by default it ends the process)."""
        if threading.current_thread() is not threading.main_thread():
            return False

        def on_term(signum, frame):  # noqa: ARG001 - the signal module's signature
            self._stop_signalled = True

        signal.signal(signal.SIGTERM, on_term)
        self.signals_handled = True
        return True

    def should_stop(self) -> bool:
        """True once the agent asked the job to stop (SIGTERM or the stop file)."""
        if self._stop_signalled:
            return True
        if self.stop_file is None:
            return False
        try:
            return self.stop_file.exists()
        except OSError:  # a path the job cannot look at (too long, a folder it may not read)
            return False  # the agent's SIGTERM still stops it

    def finished(self, iterations: float) -> bool:
        """True when ``iterations`` (at ``batch_size``) reach the work the server assigned."""
        return self.total_iterations is not None and iterations >= self.total_iterations

    # --- progress ----------------------------------------------------------------------
    def report(
        self,
        iterations: float,
        *,
        samples: float | None = None,
        grad_sqr: float | None = None,
        grad_var: float | None = None,
        force: bool = False,
    ) -> bool:
        """Write progress for the agent: ``iterations`` done at ``batch_size`` (counting on
        from ``completed_iterations``), when that count was first reported (``ts``, Unix
        seconds: call this after every step, written or not, and the time is the step's),
        optionally the gradient statistics (both or neither; non-finite or negative ones
        are left out, as is such a ``samples``). At most one write per
        ``report_interval_s`` unless ``force``; True if it wrote. The agent never takes
        half of it (``_write_progress``)."""
        # numbers.Real, as for the statistics: a count kept in numpy (np.int64, np.float32)
        # raised ValueError out of the training loop
        if isinstance(iterations, bool) or not (
            isinstance(iterations, numbers.Real) and _finite(iterations)
        ):
            shown = (
                "an integer past any float"
                if isinstance(iterations, numbers.Integral) and not isinstance(iterations, bool)
                else repr(iterations)[:40]
            )
            raise ValueError(f"iterations must be a finite number, not {shown}")
        if iterations < 0:
            raise ValueError("iterations must not be negative")
        if self._reached is None or self._reached[0] != iterations:
            self._reached = (iterations, time.time())
        now = time.monotonic()
        if not force and now - self._last_report < self.report_interval_s:
            return False
        self._last_report = now
        if self.progress_file is None:
            return False
        data: dict[str, float] = {"iterations": float(iterations), "ts": self._reached[1]}
        if samples is None and self.batch_size is not None:
            samples = iterations * self.batch_size
        if _usable(samples):  # (NaN was written as NaN, which is not JSON)
            data["samples"] = float(samples)
        if _usable(grad_sqr) and _usable(grad_var):
            data["grad_sqr"] = float(grad_sqr)
            data["grad_var"] = float(grad_var)
        _write_progress(self.progress_file, json.dumps(data) + "\n")
        return True


def _finite(value: int | float) -> bool:
    """``math.isfinite`` that says False for an int past any float (10**400), where
    ``math.isfinite`` raised OverflowError out of ``report``, not the documented ValueError."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _usable(value) -> bool:
    # numbers.Real: numpy's and torch's scalars (np.int64, np.float32) are counts too
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and _finite(value)
        and value >= 0
    )


def _write_progress(path: Path, text: str) -> None:
    """Write ``text`` as the progress file: a temporary file beside it renamed over it,
    so the agent never reads half of it; where the job may not do that (the Slurm handoff
    folder is root's, and the Prolog gives the job only its own file), the file in place
    (a read before the write ends sees no whole JSON object, and the agent reads again at
    its next tick)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".progress-", dir=path.parent)
    except PermissionError:
        _write_in_place(path, text)
        return
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except PermissionError:  # a sticky folder, the file another user's: in place
        Path(tmp).unlink(missing_ok=True)
        _write_in_place(path, text)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_in_place(path: Path, text: str) -> None:
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def _check_progress_file(path: Path) -> None:
    """Raise ``ValueError`` now, naming the variable, if ``report`` could not write
    ``path`` (``_write_progress``): it failed only at the first report (a directory there:
    IsADirectoryError mid-training)."""
    name = f"WATTFLOW_PROGRESS_FILE={str(path)!r}"
    try:  # (a name too long for the file system raised OSError here, a traceback)
        is_dir, folder = path.is_dir(), path.parent.is_dir()
        other = path.exists() and not path.is_file()
    except OSError as exc:
        raise ValueError(f"{name}: cannot be looked at: {exc.strerror or exc}") from None
    if is_dir:
        raise ValueError(f"{name} is a directory, not a file the job can overwrite")
    if other:
        # A device, a FIFO or a socket: a report writes beside it and renames over it, so
        # it was replaced by a regular file (a probe's /dev/null and /dev/full, run as
        # root, were gone for the whole machine).
        raise ValueError(f"{name} is not a regular file (a device or a pipe): it would be replaced")
    if not folder:
        raise ValueError(f"{name}: its folder {str(path.parent)!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".progress-", dir=path.parent)
    except PermissionError:
        if path.is_file() and os.access(path, os.W_OK):
            return  # written in place
        raise ValueError(
            f"{name}: the job may write neither in its folder nor "
            f"{'the file' if path.exists() else 'a file there (there is none yet)'}"
        ) from None
    except OSError as exc:
        raise ValueError(f"{name}: cannot write in its folder: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(tmp)


def connect(env=None, *, handle_signals: bool = True, report_interval_s: float = 1.0) -> Job:
    """The job as the agent started it (``env``: default ``os.environ``). Raises
    ``ValueError`` with the variable's name if the agent's numbers are unreadable or the
    progress file cannot be written. ``handle_signals``: SIGTERM sets ``should_stop()``
    (``Job.handle_signals``; from a thread other than the main one none is set, and the
    stop file alone stops the job)."""
    env = os.environ if env is None else env
    job = Job(
        job_id=env.get("WATTFLOW_JOB_ID"),
        batch_size=_env_count(env, "WATTFLOW_BATCH_SIZE", None),
        gpu_count=_env_count(env, "WATTFLOW_GPU_COUNT", 1),
        checkpoint_dir=env.get("WATTFLOW_CHECKPOINT_DIR") or "checkpoint",
        progress_file=env.get("WATTFLOW_PROGRESS_FILE") or None,
        stop_file=env.get("WATTFLOW_STOP_FILE") or None,
        total_iterations=_env_float(env, "WATTFLOW_TOTAL_ITERATIONS", None),
        completed_iterations=_env_float(env, "WATTFLOW_COMPLETED_ITERATIONS", 0.0) or 0.0,
        report_interval_s=report_interval_s,
    )
    if job.progress_file is not None:
        _check_progress_file(job.progress_file)
    # Only the agent's folder: outside Wattflow the default ``checkpoint`` may be a file of
    # the script's own (TensorFlow's checkpoint index is one), which it need never use here.
    named = bool(env.get("WATTFLOW_CHECKPOINT_DIR"))
    try:
        is_file = named and job.checkpoint_dir.exists() and not job.checkpoint_dir.is_dir()
    except OSError as exc:  # (a name too long for the file system: a traceback)
        raise ValueError(
            f"WATTFLOW_CHECKPOINT_DIR={str(job.checkpoint_dir)!r}: cannot be looked at: "
            f"{exc.strerror or exc}"
        ) from None
    if is_file:
        # (found at the first save otherwise, after the first stretch of training)
        raise ValueError(
            f"WATTFLOW_CHECKPOINT_DIR={str(job.checkpoint_dir)!r} is a file, not a directory"
        )
    if handle_signals:
        job.handle_signals()
    return job


class GradientNoise:
    """Running estimates of ``grad_sqr`` and ``grad_var`` from each step's gradients.

    Per step, give the squared norms of ``k >= 2`` gradients of equal parts of the batch
    (micro-batches, or per-GPU gradients before the all-reduce) and the squared norm of
    their mean. With ``m`` samples per part and batch ``B = k m``::

        E |g_i|^2    = |G|^2 + tr(Sigma) / m
        E |mean|^2   = |G|^2 + tr(Sigma) / B

    so ``grad_sqr = (k |mean|^2 - mean_i |g_i|^2) / (k - 1)`` estimates ``|G|^2`` and
    ``grad_var = (mean_i |g_i|^2 - |mean|^2) / (k - 1)`` estimates ``tr(Sigma) / B``, the
    variance of the mini-batch gradient at this batch (what the protocol reports). Both are
    unbiased but noisy, so they are averaged exponentially (``smoothing`` per step, with
    the start-up bias divided out); a negative average (noise) reads as None.
    """

    def __init__(self, smoothing: float = 0.95) -> None:
        if not 0.0 <= smoothing < 1.0:
            raise ValueError("smoothing must be in [0, 1)")
        self.smoothing = smoothing
        self._sqr = self._var = self._weight = 0.0

    def update(self, part_sqr_norms, mean_sqr_norm: float) -> None:
        parts = [float(x) for x in part_sqr_norms]
        k = len(parts)
        if k < 2:
            raise ValueError("need the gradients of at least two parts of the batch")
        values = (*parts, float(mean_sqr_norm))
        if not all(math.isfinite(x) and x >= 0 for x in values):
            return  # a step with overflowed gradients says nothing
        local = sum(parts) / k
        sqr = (k * mean_sqr_norm - local) / (k - 1)
        var = (local - mean_sqr_norm) / (k - 1)
        a = self.smoothing
        new_sqr = a * self._sqr + (1 - a) * sqr
        new_var = a * self._var + (1 - a) * var
        if not (math.isfinite(new_sqr) and math.isfinite(new_var)):
            # finite inputs whose sums overflow (norms near 1e308) say nothing either;
            # taken in, the averages would stay infinite for the rest of the run
            return
        self._sqr, self._var = new_sqr, new_var
        self._weight = a * self._weight + (1 - a)

    @property
    def grad_sqr(self) -> float | None:
        if self._weight == 0.0:
            return None
        value = self._sqr / self._weight
        return value if value > 0 else None

    @property
    def grad_var(self) -> float | None:
        if self._weight == 0.0:
            return None
        value = self._var / self._weight
        return value if value >= 0 else None

    def noise_scale(self, batch_size: int) -> float | None:
        """``tr(Sigma) / |G|^2`` in samples (what the scheduler derives), or None before a
        step was measured; ``ValueError`` for a batch that is not a finite number above 0
        (a NaN batch gave a NaN noise scale)."""
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, numbers.Real)
            or not (math.isfinite(batch_size) and batch_size > 0)
        ):
            raise ValueError(f"batch_size must be a finite number above 0, got {batch_size!r}")
        sqr, var = self.grad_sqr, self.grad_var
        if sqr is None or var is None:
            return None
        return var * batch_size / sqr
