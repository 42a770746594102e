"""Statistical efficiency: how much of a batch is useful progress (goodput).

A larger global batch processes more samples per iteration, but past the gradient noise
scale the extra samples mostly average away noise the smaller batch could already live
with, so reaching the same model quality takes *more* samples. The core counts a job's
work in useful samples at its submitted batch, and this module converts.

The model (McCandlish et al., "An Empirical Model of Large-Batch Training", 2018, in the
form Pollux/AdaptDL use; reconstructed, not copied)::

    noise scale    B = tr(Sigma) / |G|^2                        samples
                   (|G|^2: squared norm of the true gradient; tr(Sigma): per-sample
                   gradient variance)
    from stats     grad_sqr ~ |G|^2 and grad_var ~ tr(Sigma) / m, both measured at
                   global batch m (AdaptDL's estimator), so B = grad_var * m / grad_sqr
    efficiency     E(b) = (B + b0) / (B + b)        relative to the submitted batch b0
    useful work    one iteration at batch b does b * E(b) samples of progress at b0;
                   goodput = throughput x E

E(b0) = 1; E < 1 above b0 (a bigger batch is never free) and E > 1 below it.

What a job's reported statistics are worth: the noise scale measured at a small batch
early in training understates the one that governs large batches later (it grows as
training proceeds, and Pollux's own validation runs measure a larger one at larger
batches). ``calibration`` multiplies a reported noise scale; it is fitted, leave one
workload out, on Pollux's validation curves (``scheduling/fitting/goodput_fit.py``, results in
``docs/benchmarks.md``) and shipped in ``goodput_curves.json`` with, per workload, the
noise scale that best reproduces that workload's measured samples-to-target at every
batch (the *learned efficiency curve* used for a job that reports nothing).

A reported noise scale below ``MIN_NOISE_SCALE`` (one sample) is not used: it would say
that one sample's gradient is less noisy than the mean gradient is large, so that no
batch above one sample is worth anything; what it measures is the estimator (AdaptDL's
is a difference of two noisy estimates, and its first report after a random
initialisation averages the transient), not the job. The job then falls back to its
workload's learned curve, as if it had reported nothing.

A job with no noise scale at all (``Job.noise_scale is None``): its efficiency is
unknown, so the core assumes the worst any noise scale allows, useful samples per
iteration ``min(b, b0)``. No batch other than the submitted one can then look better,
and :func:`batch_choices` keeps the policies from trying.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduling.core.types import Job

CURVES_PATH = Path(__file__).resolve().with_name("goodput_curves.json")
# Below one sample a reported noise scale is an artefact of the estimator (module docstring).
MIN_NOISE_SCALE = 1.0
# Above a trillion samples it is no measurement either: more samples than any training run
# processes, so every batch a job could run would count as free. Statistics that give more
# (each finite, 1.0 and 5e305 at batch 256) are refused; the calibration made such a scale
# infinite.
MAX_NOISE_SCALE = 1e12


def ratio_beyond_measurement(grad_sqr: float, grad_var: float) -> bool:
    """True where ``grad_var / grad_sqr`` is above ``MAX_NOISE_SCALE`` (or overflows, or
    the gradient's norm is 0, where the ratio has no value): the noise scale, that ratio
    times a batch of at least one, would be no measurement. The API refuses such
    statistics and the agent leaves them out of what it sends (a zero norm was stored,
    and replaced the job's measured noise scale with none)."""
    return not (grad_sqr > 0 and grad_var / grad_sqr <= MAX_NOISE_SCALE)


def noise_scale_from_stats(grad_sqr: float, grad_var: float, batch: float) -> float | None:
    """Gradient noise scale (samples) from AdaptDL-style statistics measured at ``batch``:
    ``grad_sqr`` the squared norm of the gradient, ``grad_var`` the variance of the
    mini-batch gradient at that batch. None when the numbers cannot give one (non-finite,
    negative, a zero gradient norm, a non-positive batch, or a scale above
    ``MAX_NOISE_SCALE``, an overflow included)."""
    values = (grad_sqr, grad_var, batch)
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
        return None
    if grad_sqr <= 0.0 or grad_var < 0.0 or batch <= 0:
        return None
    scale = grad_var * batch / grad_sqr
    # Two finite statistics can still overflow (5e-324 and 1e308): an infinite noise scale
    # would read as "every batch is free".
    return scale if scale <= MAX_NOISE_SCALE else None


def efficiency(noise_scale: float | None, batch: float, ref_batch: float) -> float:
    """Useful samples per sample at global ``batch``, relative to ``ref_batch`` (the job's
    submitted batch). ``noise_scale=inf`` is perfect scaling (every batch equally
    efficient: the old "batch is free" model); ``None`` is unknown: the bound that holds
    for every noise scale, ``min(batch, ref_batch) / batch``."""
    if batch <= 0 or ref_batch <= 0:
        raise ValueError("batch sizes must be positive")
    if batch == ref_batch:
        return 1.0
    if noise_scale is None:
        return min(batch, ref_batch) / batch
    if math.isinf(noise_scale):
        return 1.0
    return (noise_scale + ref_batch) / (noise_scale + batch)


def iterations_per_submitted(
    noise_scale: float | None, batch: float, submitted_batch: float
) -> float:
    """Iterations at global ``batch`` that make the useful samples of one iteration at
    ``submitted_batch`` (a job's unit of work): ``b0 / (b x E(b))``."""
    if batch == submitted_batch:
        return 1.0
    return submitted_batch / (batch * efficiency(noise_scale, batch, submitted_batch))


def useful_samples_per_iter(job: Job, batch: float) -> float:
    """Samples of progress, at the job's submitted batch, that one iteration at ``batch``
    makes."""
    return batch * efficiency(job.noise_scale, batch, job.global_batch)


def iters_to_finish(job: Job, batch: float) -> float:
    """Iterations at ``batch`` that the job's remaining work needs. The work is
    ``remaining_iters`` iterations at the submitted batch (the core's convention)."""
    return job.remaining_iters * job.global_batch / useful_samples_per_iter(job, batch)


def batch_choices(job: Job, candidates: Iterable[int]) -> tuple[int, ...]:
    """The batches a batch-tuning policy may consider for ``job``: ``candidates`` plus
    the submitted batch when the job's efficiency is known, only the submitted batch
    when it is not (nothing says a different batch would pay)."""
    if job.noise_scale is None:
        return (job.global_batch,)
    return tuple(sorted(set(candidates) | {job.global_batch}))


# --- the learned curves ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkloadCurve:
    """One workload's learned efficiency curve: a noise scale fitted to measured
    samples-to-target at several batches."""

    noise_scale: float  # samples
    ref_batch: int  # the smallest batch measured (the curve's reference)
    batches: tuple[int, ...] = ()  # batches it was fitted on
    median_error: float = 0.0  # in-sample median relative error of samples-to-target
    max_error: float = 0.0


@dataclass(frozen=True)
class GoodputCurves:
    """The shipped efficiency knowledge: a calibration for reported statistics and a
    learned curve per workload (``aliases`` map a workload onto another's curve)."""

    version: str
    calibration: float  # multiplies a noise scale computed from a job's own statistics
    workloads: Mapping[str, WorkloadCurve]
    aliases: Mapping[str, str] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def curve(self, workload: str) -> WorkloadCurve | None:
        key = self.aliases.get(workload, workload)
        return self.workloads.get(key)

    def noise_scale(
        self,
        workload: str,
        *,
        grad_sqr: float | None = None,
        grad_var: float | None = None,
        batch: float | None = None,
    ) -> float | None:
        """The noise scale the core should use for a job: from its own statistics
        (calibrated) when it reported usable ones (at least ``MIN_NOISE_SCALE``), else its
        workload's learned curve, else None (unknown)."""
        if grad_sqr is not None and grad_var is not None and batch is not None:
            reported = noise_scale_from_stats(grad_sqr, grad_var, batch)
            if reported is not None and reported >= MIN_NOISE_SCALE:
                return reported * self.calibration
        curve = self.curve(workload)
        return None if curve is None else curve.noise_scale


def curves_from_dict(data: Mapping[str, Any]) -> GoodputCurves:
    workloads = {
        name: WorkloadCurve(
            noise_scale=float(w["noise_scale"]),
            ref_batch=int(w["ref_batch"]),
            batches=tuple(int(b) for b in w.get("batches", ())),
            median_error=float(w.get("median_error", 0.0)),
            max_error=float(w.get("max_error", 0.0)),
        )
        for name, w in data["workloads"].items()
    }
    return GoodputCurves(
        version=str(data["version"]),
        calibration=float(data["calibration"]),
        workloads=workloads,
        aliases=dict(data.get("aliases", {})),
        meta=dict(data.get("meta", {})),
    )


def curves_to_dict(curves: GoodputCurves) -> dict[str, Any]:
    return {
        "version": curves.version,
        "meta": dict(curves.meta),
        "calibration": curves.calibration,
        "workloads": {
            name: {
                "noise_scale": w.noise_scale,
                "ref_batch": w.ref_batch,
                "batches": list(w.batches),
                "median_error": w.median_error,
                "max_error": w.max_error,
            }
            for name, w in sorted(curves.workloads.items())
        },
        "aliases": dict(sorted(curves.aliases.items())),
    }


_LOADED: dict[Path, GoodputCurves] = {}


def load_curves(path: Path | str | None = None) -> GoodputCurves:
    """Read a curves JSON (default: ``goodput_curves.json`` beside this module); the
    default is read once per process."""
    target = Path(path or CURVES_PATH)
    hit = _LOADED.get(target)
    if hit is None:
        with target.open(encoding="utf-8") as fh:
            hit = curves_from_dict(json.load(fh))
        _LOADED[target] = hit
    return hit


def with_noise_scales(
    jobs: Iterable[Job], curves: GoodputCurves | None = None, *, override: float | None = None
) -> tuple[Job, ...]:
    """``jobs`` with ``noise_scale`` set from their workload's learned curve where they
    have none (``override``: the same noise scale for every job, e.g. ``math.inf`` for
    the old free-batch model)."""
    curves = curves if curves is not None else load_curves()
    out = []
    for job in jobs:
        if override is not None:
            scale: float | None = override
        elif job.noise_scale is not None:
            scale = job.noise_scale
        else:
            scale = curves.noise_scale(job.workload)
        out.append(dataclasses.replace(job, noise_scale=scale))
    return tuple(out)
