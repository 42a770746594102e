"""Readers for the job traces in ``data/trace/``; each returns ``Job`` value objects.

* ``elasticflow_philly_876.csv`` (ElasticFlow): model, global batch, GPUs and total
  iterations are all in the file.
* ``pollux_workload-{1..8}.csv`` (Pollux): model, GPUs and batch are in the file; the
  work is not. Pollux runs a job until it reaches its validation target, so the total
  iterations are taken from the last row of ``data/perf/pollux_t4/<model>/
  validation-<batch>.csv`` -- the measured run at that very batch size.
* ``philly_week.csv`` (Microsoft Philly via Pollux): only submit time, duration and
  GPUs. Models are assigned by Pollux's GPU-time buckets (< 1 GPU-h: cifar10 or ncf;
  < 10: deepspeech2 or bert; < 100: yolov3; above: imagenet), choosing within a pair by a
  seeded RNG. The batch of a model is the one the Pollux workloads use most often
  (computed from ``pollux_workload-*.csv``), and the total iterations are the job's
  measured duration times the model's speed at the requested GPUs, so that at its
  requested size the job runs as long as it did on Philly.

Jobs are elastic between ``min_gpus=1`` and ``max_gpus`` (a reader parameter): the
traces record what the user asked for, not what an elastic scheduler may give.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import random
import re
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from scheduling.core.csv_rows import rows_of
from scheduling.core.types import GpuConfig, Job, PerfCatalog

DEFAULT_TEAM = "default"
# GPU-hour thresholds and the models of each bucket, in Pollux's order.
PHILLY_BUCKETS: tuple[tuple[float, tuple[str, ...]], ...] = (
    (1.0, ("cifar10", "ncf")),
    (10.0, ("deepspeech2", "bert")),
    (100.0, ("yolov3",)),
    (float("inf"), ("imagenet",)),
)


class TraceError(ValueError):
    """A trace file is missing or malformed; the message is one line."""


def _rows(path: Path, required: Iterable[str]) -> list[dict[str, str]]:
    return [row for _, row in _numbered_rows(path, required)]


def _numbered_rows(path: Path, required: Iterable[str]) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) of each row: the file's line, where counting rows from 2 named
    the wrong one after a blank line or a quoted field holding a line break."""
    try:
        # utf-8-sig: a CSV saved with a byte-order mark (a spreadsheet's "CSV UTF-8") read
        # its first column as "\ufeffjob_id", and was refused as missing job_id.
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            missing = set(required) - set(reader.fieldnames or ())
            if missing:
                raise TraceError(f"{path.name}: missing column(s) {sorted(missing)}")
            # (a longer row's tail would be dropped: "1,000" iterations ran as 1)
            return list(rows_of(reader, path.name, TraceError))
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        # (it escaped `manage.py replay_trace`, `simulate` and the CLI as a traceback)
        raise TraceError(f"{path.name}: not UTF-8 text ({exc.reason})") from exc


# The largest submit time (100 years) and iteration count (the live service's bound) a
# trace may hold: finite but absurd values (1e308) made a run that never ended, one
# budget period per step, and wrote infinities to its outputs (an independent sweep).
MAX_SUBMIT_S = 100 * 365.25 * 86_400.0
MAX_ITERS = 1e12
_LIMITS = {
    "submit_time": MAX_SUBMIT_S,
    "time": MAX_SUBMIT_S,
    "duration": MAX_SUBMIT_S,
    "iteration": MAX_ITERS,
}


def _number(
    row: dict[str, str],
    column: str,
    path: Path,
    line_no: int,
    kind: type = float,
    *,
    positive: bool = False,
) -> float | int:
    """The column's value as a finite number >= 0 (> 0 with ``positive``; an ``int``
    for ``kind=int``, refusing a fraction), or a
    ``TraceError`` naming the file, line and column: a NaN or an infinity would
    otherwise reach the scheduler's arithmetic and fail far from the bad row."""
    raw = row.get(column)
    try:
        number = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TraceError(f"{path.name}:{line_no}: {column}={raw!r} is not a number") from None
    if not math.isfinite(number):
        raise TraceError(f"{path.name}:{line_no}: {column}={raw!r} is not a finite number")
    if number < 0:
        raise TraceError(f"{path.name}:{line_no}: {column}={raw!r} is negative")
    if positive and number <= 0:
        raise TraceError(f"{path.name}:{line_no}: {column}={raw!r} must be positive")
    limit = _LIMITS.get(column)
    if limit is not None and number > limit:
        raise TraceError(f"{path.name}:{line_no}: {column}={raw!r} is more than {limit:g}")
    if kind is int:
        if not number.is_integer():
            raise TraceError(f"{path.name}:{line_no}: {column}={raw!r} is not a whole number")
        return int(number)
    return number


def _check_batch_covers_gpus(
    batch: int, n_gpus: int, path: Path, line_no: int, columns: tuple[str, str]
) -> None:
    """Refuse a global batch smaller than the GPUs the row asks for: each GPU computes at
    least one sample a step (the live service refuses such a job too). A batch of 2 on 4
    GPUs was read and run by ``fifo`` on its 4 GPUs at the perf model's extrapolation."""
    if batch < n_gpus:
        raise TraceError(
            f"{path.name}:{line_no}: {columns[0]}={batch} is smaller than {columns[1]}={n_gpus}: "
            "each GPU computes at least one sample a step"
        )


def _job_id(row: dict[str, str], column: str, path: Path, line_no: int) -> str:
    """The column's job id, or a ``TraceError`` naming the line where it is blank: a job
    without one ran, and its row of the results named no job."""
    job_id = row.get(column) or ""
    if not job_id.strip():
        raise TraceError(f"{path.name}:{line_no}: {column}={job_id!r} is blank (a job id)")
    return job_id


def has_model(catalog: PerfCatalog, workload: str, gpu_model: str) -> bool:
    """Whether the catalog, the simulator's ground truth, can run ``workload`` on
    ``gpu_model`` (the ``PerfCatalog`` protocol has ``get`` only)."""
    try:
        catalog.get(workload, gpu_model)
    except KeyError:  # the catalog's UnknownPerfModelError
        return False
    return True


def no_model_error(
    trace_name: str, missing: list[str], gpu_model: str, catalog: PerfCatalog
) -> TraceError:
    """The one-line refusal of a trace whose workloads the catalog has no model of on the
    cluster's GPU: a job without one could never run (it used to wait as
    ``no_perf_model`` until the run stopped as stalled, or end in a traceback)."""
    known = [w for w in catalog.workloads() if has_model(catalog, w, gpu_model)]
    shown = ", ".join(repr(w) for w in missing[:5]) + (" ..." if len(missing) > 5 else "")
    if not known:
        # No workload at all: the cluster names a GPU model the catalog does not have (a
        # typo such as "a100"); say which it has.
        gpus = getattr(catalog, "gpu_models", None)
        have = ", ".join(gpus()) if callable(gpus) else "none"
        return TraceError(
            f"{trace_name}: the perf catalog has no GPU model {gpu_model!r}, so the simulator "
            f"cannot run {shown} on it (its GPU models: {have})"
        )
    return TraceError(
        f"{trace_name}: no perf model of {shown} on {gpu_model}, so the simulator cannot run "
        f"{'it' if len(missing) == 1 else 'them'} (its {gpu_model} workloads: {', '.join(known)})"
    )


def _sorted(jobs: list[Job], path: Path) -> tuple[Job, ...]:
    """The jobs by submit time, equal times by job id, once each: a job id seen twice is
    refused, since every record of a run is kept by job id. (Equal times once kept their
    file order, so shuffling a trace's rows changed a learned run's JCTs and the jobs
    ``--max-jobs`` kept.)"""
    seen: Counter[str] = Counter(j.job_id for j in jobs)
    twice = sorted(job_id for job_id, n in seen.items() if n > 1)
    if twice:
        shown = ", ".join(repr(job_id) for job_id in twice[:5]) + (" ..." if len(twice) > 5 else "")
        raise TraceError(f"{path.name}: job id(s) {shown} appear more than once")
    return tuple(sorted(jobs, key=lambda j: (j.submit_time_s, j.job_id)))


def read_elasticflow_trace(
    path: str | Path, *, max_gpus: int = 64, team: str = DEFAULT_TEAM
) -> tuple[Job, ...]:
    path = Path(path)
    columns = ("job_id", "submit_time", "model_name", "batch_size", "num_gpu", "iteration")
    jobs = []
    for line_no, row in _numbered_rows(path, columns):
        n_gpus = _number(row, "num_gpu", path, line_no, int, positive=True)
        batch = _number(row, "batch_size", path, line_no, int, positive=True)
        _check_batch_covers_gpus(batch, n_gpus, path, line_no, ("batch_size", "num_gpu"))
        jobs.append(
            Job(
                job_id=_job_id(row, "job_id", path, line_no),
                workload=row["model_name"],
                team=team,
                submit_time_s=_number(row, "submit_time", path, line_no),
                total_iters=_number(row, "iteration", path, line_no, positive=True),
                global_batch=batch,
                requested_gpus=n_gpus,
                min_gpus=1,
                max_gpus=max(max_gpus, n_gpus),
            )
        )
    return _sorted(jobs, path)


def pollux_total_iters(perf_dir: str | Path, workload: str, batch: int) -> float:
    """Iterations of Pollux's measured run of ``workload`` at global ``batch`` to its target."""
    path = Path(perf_dir) / "pollux_t4" / workload / f"validation-{batch}.csv"
    rows = _rows(path, ("iteration",))
    if not rows:
        raise TraceError(f"{path.name}: no rows")
    return float(rows[-1]["iteration"])


def _check_pollux_run(
    perf_dir: str | Path, workload: str, batch: int, path: Path, line_no: int
) -> None:
    """A row's (application, batch_size) must be one Pollux measured to its target: its
    iterations are that run's. Refused naming the row and what was measured (a row at batch
    100 read "cannot read trace .../validation-100.csv", which said nothing of why)."""
    runs = Path(perf_dir) / "pollux_t4" / workload
    if (runs / f"validation-{batch}.csv").is_file():
        return
    measured = sorted(
        int(p.stem.removeprefix("validation-"))
        for p in runs.glob("validation-*.csv")
        if p.stem.removeprefix("validation-").isdigit()
    )
    if not measured:
        raise TraceError(
            f"{path.name}:{line_no}: application {workload!r} has no Pollux runs "
            f"(none under {runs})"
        )
    raise TraceError(
        f"{path.name}:{line_no}: {workload} has no Pollux run at batch_size={batch}; "
        f"its measured batches are {', '.join(map(str, measured))}"
    )


def read_pollux_workload(
    path: str | Path, *, perf_dir: str | Path, max_gpus: int = 64, team: str = DEFAULT_TEAM
) -> tuple[Job, ...]:
    path = Path(path)
    iters_cache: dict[tuple[str, int], float] = {}
    jobs = []
    for line_no, row in _numbered_rows(
        path, ("name", "time", "application", "num_replicas", "batch_size")
    ):
        workload = row["application"]
        batch = _number(row, "batch_size", path, line_no, int, positive=True)
        n_gpus = _number(row, "num_replicas", path, line_no, int, positive=True)
        _check_batch_covers_gpus(batch, n_gpus, path, line_no, ("batch_size", "num_replicas"))
        key = (workload, batch)
        if key not in iters_cache:
            _check_pollux_run(perf_dir, workload, batch, path, line_no)
            iters_cache[key] = pollux_total_iters(perf_dir, workload, batch)
        jobs.append(
            Job(
                job_id=_job_id(row, "name", path, line_no),
                workload=workload,
                team=team,
                submit_time_s=_number(row, "time", path, line_no),
                total_iters=iters_cache[key],
                global_batch=batch,
                requested_gpus=n_gpus,
                min_gpus=1,
                max_gpus=max(max_gpus, n_gpus),
            )
        )
    return _sorted(jobs, path)


def pollux_modal_batches(trace_dir: str | Path) -> dict[str, int]:
    """The batch size each application uses most often across ``pollux_workload-*.csv``."""
    counts: dict[str, Counter[int]] = {}
    paths = sorted(Path(trace_dir).glob("pollux_workload-*.csv"))
    if not paths:
        raise TraceError(f"no pollux_workload-*.csv in {trace_dir}")
    for path in paths:
        for row in _rows(path, ("application", "batch_size")):
            counts.setdefault(row["application"], Counter())[int(row["batch_size"])] += 1
    # Ties go to the smaller batch so the choice does not depend on file order.
    return {app: max(sorted(c), key=lambda b: c[b]) for app, c in counts.items()}


def philly_model_for(gpu_time_s: float, rng: random.Random) -> str:
    gpu_h = gpu_time_s / 3600.0
    for limit_h, models in PHILLY_BUCKETS:
        if gpu_h < limit_h:
            return models[0] if len(models) == 1 else rng.choice(models)
    raise AssertionError("the last bucket is unbounded")


def read_philly_week(
    path: str | Path,
    *,
    catalog: PerfCatalog,
    gpu_model: str,
    batches: dict[str, int],
    seed: int = 0,
    max_gpus: int = 64,
) -> tuple[Job, ...]:
    """Philly jobs mapped to Pollux's models; time 0 is the earliest submission.

    ``batches`` gives the global batch per model (see :func:`pollux_modal_batches`).
    The team of a job is its Philly virtual cluster.
    """
    path = Path(path)
    rows = _numbered_rows(path, ("timestamp", "duration", "num_gpus", "gpu_time", "cluster"))
    rng = random.Random(seed)
    parsed = []
    # A job's id is its row's number (philly-1 the first), its messages name its line.
    for number, (line_no, row) in enumerate(rows, start=1):
        try:
            submitted = datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S")  # noqa: DTZ007 - zone-less local time; only differences are used
        except ValueError:
            raise TraceError(
                f"{path.name}:{line_no}: timestamp={row['timestamp']!r} is not YYYY-mm-dd HH:MM:SS"
            ) from None
        n_gpus = _number(row, "num_gpus", path, line_no, int, positive=True)
        workload = philly_model_for(_number(row, "gpu_time", path, line_no), rng)
        parsed.append(
            (
                number,
                line_no,
                submitted,
                _number(row, "duration", path, line_no, positive=True),
                n_gpus,
                workload,
                row["cluster"],
            )
        )
    if not parsed:
        raise TraceError(f"{path.name}: no rows")
    t0 = min(p[2] for p in parsed)
    speed: dict[tuple[str, int], float] = {}  # iterations per second at the request
    jobs = []
    for number, line_no, submitted, duration_s, n_gpus, workload, cluster in parsed:
        if workload not in batches:
            raise TraceError(f"{path.name}:{line_no}: no batch size known for model {workload!r}")
        key = (workload, n_gpus)
        if key not in speed:
            try:
                model = catalog.get(workload, gpu_model)
            except KeyError:  # the catalog's UnknownPerfModelError
                raise no_model_error(path.name, [workload], gpu_model, catalog) from None
            speed[key] = 1.0 / model.iter_time_s(
                GpuConfig(n_gpus=n_gpus, global_batch=batches[workload])
            )
        jobs.append(
            Job(
                job_id=f"philly-{number}",
                workload=workload,
                team=cluster,
                submit_time_s=(submitted - t0).total_seconds(),
                total_iters=duration_s * speed[key],
                global_batch=batches[workload],
                requested_gpus=n_gpus,
                min_gpus=1,
                max_gpus=max(max_gpus, n_gpus),
            )
        )
    return _sorted(jobs, path)


def with_batch_range(jobs: Iterable[Job], max_batch_factor: int) -> tuple[Job, ...]:
    """Let each job's global batch grow up to ``max_batch_factor`` x the submitted one.

    The traces fix the batch. Allowing a range lets PowerFlow-style policies tune it;
    work is useful samples, so what a larger batch gains depends on the job's
    statistical efficiency (``Job.noise_scale``, ``scheduling/core/goodput.py``), and a
    job whose efficiency is unknown keeps its submitted batch.
    """
    if max_batch_factor < 1:
        raise TraceError("max_batch_factor must be at least 1")
    return tuple(
        dataclasses.replace(
            j, min_batch=j.global_batch, max_batch=j.global_batch * max_batch_factor
        )
        for j in jobs
    )


def with_arrival_scale(jobs: Iterable[Job], factor: float) -> tuple[Job, ...]:
    """Multiply every submit time by ``factor`` (< 1 compresses arrivals: more load).

    The usual way to study a trace at another load; the jobs themselves are unchanged.
    """
    if not factor > 0:
        raise TraceError("the arrival scale must be positive")
    scaled = tuple(dataclasses.replace(j, submit_time_s=j.submit_time_s * factor) for j in jobs)
    latest = max((j.submit_time_s for j in scaled), default=0.0)
    if latest > MAX_SUBMIT_S:
        raise TraceError(
            f"an arrival scale of {factor:g} puts the last submit at {latest:.3g} s, more than "
            f"{MAX_SUBMIT_S:g} s (100 years)"
        )
    return scaled


def read_trace(
    path: str | Path,
    *,
    data_dir: str | Path,
    catalog: PerfCatalog | None = None,
    gpu_model: str | None = None,
    seed: int = 0,
    max_gpus: int = 64,
) -> tuple[Job, ...]:
    """Pick the reader by the file name; ``data_dir`` is the repository's ``data/``."""
    path = Path(path)
    data_dir = Path(data_dir)
    name = path.name
    # Before the name: a missing file read "unknown trace format" when misspelt.
    if not path.exists():
        raise TraceError(f"trace {path} does not exist")
    if path.is_dir():
        raise TraceError(f"trace {path} is a folder, not a file")
    if name.startswith("elasticflow_"):
        return read_elasticflow_trace(path, max_gpus=max_gpus)
    if re.fullmatch(r"pollux_workload-\d+\.csv", name):
        return read_pollux_workload(path, perf_dir=data_dir / "perf", max_gpus=max_gpus)
    if name.startswith("philly_week"):
        if catalog is None or gpu_model is None:
            raise TraceError("philly_week needs the perf catalog and the cluster's GPU model")
        batches = pollux_modal_batches(data_dir / "trace")
        jobs = read_philly_week(
            path,
            catalog=catalog,
            gpu_model=gpu_model,
            batches=batches,
            seed=seed,
            max_gpus=max_gpus,
        )
        # Its submit times come from timestamps and its iterations from durations: the
        # bounds of the other formats' columns, checked on the jobs built.
        for job in jobs:
            if job.submit_time_s > MAX_SUBMIT_S or job.total_iters > MAX_ITERS:
                raise TraceError(
                    f"{name}: job {job.job_id} is submitted {job.submit_time_s:.3g} s after "
                    f"the first with {job.total_iters:.3g} iterations, beyond "
                    f"{MAX_SUBMIT_S:g} s (100 years) or {MAX_ITERS:g}"
                )
        return jobs
    expected = "elasticflow_*.csv, pollux_workload-N.csv or philly_week*.csv"
    raise TraceError(f"unknown trace format {name!r}: expected {expected}")
