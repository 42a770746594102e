"""What the scheduler can say of a GPU model from what NVML reports of it, for one the perf
catalog lacks: the catalog GPU nearest to it, a catalog model carried onto it, and the
(idle, busy maximum) draw a job's draw is read against. Pure (no Django): the live service
(``scheduling.workload_profiles``) and the benchmarks (``bench_online_model``) share it."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from scheduling.core import online_model as om
from scheduling.core.context import catalog_idle_power_w
from scheduling.core.perf_models import Catalog, FittedPerfModel


@dataclass(frozen=True)
class NvmlGpu:
    """What NVML reports about a GPU model the catalog may not know (``Gpu`` rows)."""

    model: str
    min_power_limit_w: float
    max_power_limit_w: float
    default_power_limit_w: float
    clocks_mhz: tuple[int, ...] = ()


def nearest_catalog_gpu(catalog: Catalog, gpu: NvmlGpu) -> str | None:
    """The catalog GPU model whose highest power limit is closest (in ratio) to ``gpu``'s:
    board power is what NVML says of every model, and draw and speed scale with it more
    than with anything else it reports."""
    known = sorted(catalog.gpus)
    if not known:
        return None
    return min(
        known,
        key=lambda g: (abs(math.log(catalog.gpus[g].power_limit_max_w / gpu.max_power_limit_w)), g),
    )


def estimated_for(prior: FittedPerfModel, gpu: NvmlGpu) -> FittedPerfModel:
    """``prior`` (another GPU model's) carried onto ``gpu``: NVML's power-limit range and
    clocks (those within the borrowed clock model's fitted range), the busy draw scaled by
    the ratio of the highest limits; speed as the prior's until the job's first report sets
    its level."""
    spec = prior.gpu
    ratio = gpu.max_power_limit_w / spec.power_limit_max_w
    clocks = tuple(sorted(gpu.clocks_mhz)) or spec.clocks_mhz
    dvfs = spec.dvfs
    if gpu.clocks_mhz:
        # Only the clocks down to the share of the top clock that the borrowed clock model
        # was fitted to (the A100's: 855 of 1410 MHz): NVML lists an H100's from 345 of
        # 1980 MHz, where the model's time and draw would be extrapolations the rounds
        # could pick as the cheapest.
        top = max(clocks)
        floor = top * dvfs.min_clock_mhz / dvfs.max_clock_mhz
        clocks = tuple(c for c in clocks if c >= floor) or (top,)
        dvfs = replace(dvfs, max_clock_mhz=top, min_clock_mhz=min(clocks))
    new_spec = replace(
        spec,
        name=gpu.model,
        idle_power_w=spec.idle_power_w * ratio,
        clocks_mhz=clocks,
        power_limit_min_w=gpu.min_power_limit_w,
        power_limit_max_w=gpu.max_power_limit_w,
        dvfs=dvfs,
        sources={"estimated_from": spec.name},
    )
    return FittedPerfModel(
        workload=prior.workload,
        gpu=new_spec,
        batch_sizes=prior.batch_sizes,
        throughput=prior.throughput,
        power=replace(prior.power, busy_max_w=prior.power.busy_max_w * ratio),
        sources={"estimated_from": f"{prior.workload}@{spec.name}"},
    )


def gpu_draw_range_w(
    catalog: Catalog, gpu_model: str, nvml: NvmlGpu | None = None
) -> tuple[float, float] | None:
    """(idle, busy maximum) draw of one GPU of ``gpu_model``: what a job's draw is read
    against (``online_model.draw_busy_fraction``), from what is known of the GPU model, not
    of the job's workload. None: no catalog model to read it from.

    * A catalog GPU model: idle is the catalog's idle draw for it (``catalog_idle_power_w``,
      the lowest of its models', what the rounds charge an idle GPU of it); the busy maximum is
      the most loading catalog model's draw on it (``draw_range_w``: each at its own batch
      sizes, top clock, default limit).
    * A GPU model the catalog lacks: the same of the catalog GPU nearest to what NVML
      reports (``nearest_catalog_gpu``), its models carried onto this GPU as its prior is
      (``estimated_for``: idle and busy draw x the ratio of the highest limits), so the
      range and the prior's draw agree. The idle draw is the catalog's carried over, not
      the least loading model's draw: on the A100 that one draws 200 W, 4x its 50 W idle,
      and would read every job under 150 W on an A40 as never busy. (The rounds charge
      such a GPU's idle as its samples measure it, ``uncatalogued_idle_w``; a job's draw
      is read against this estimate, the floor of its prior.)

    Where the idle draw is unknown (0), the least loading model's draw stands for it, as
    in the benchmark (``bench_online_model``, where the Zeus GPUs' idle is unknown)."""
    models = [m for m in catalog.models() if m.gpu_model == gpu_model]
    if models:
        idle_w = catalog_idle_power_w(catalog, gpu_model)
    else:
        near = None if nvml is None else nearest_catalog_gpu(catalog, nvml)
        if near is None:
            return None
        models = [estimated_for(m, nvml) for m in catalog.models() if m.gpu_model == near]
        # The nearest GPU's catalog idle, carried over (the lowest of its carried models').
        idle_w = min((m.idle_power_w for m in models), default=0.0)
    span = om.draw_range_w(models)
    if span is None:
        return None
    return (idle_w or span[0]), span[1]


@dataclass(frozen=True)
class MeasuredSpan:
    """A GPU model whose light-work floor and busy maximum were measured (the draws of
    ``online_model.FLOOR_MIN_WORKLOADS`` or more workloads, ``measured_draw_span_w``), with
    its idle draw and highest power limit: a reference that ``estimated_floor_w`` carries
    to a GPU model with too few workloads measured."""

    gpu_model: str
    idle_w: float
    max_limit_w: float
    floor_w: float
    busy_max_w: float

    def floor_share(self) -> float | None:
        """The floor's share of the span from idle to the highest limit (None: no span)."""
        span_w = self.max_limit_w - self.idle_w
        if not (math.isfinite(span_w) and span_w > 0 and math.isfinite(self.floor_w)):
            return None
        return min(max((self.floor_w - self.idle_w) / span_w, 0.0), 1.0)


def measured_span(
    gpu_model: str, idle_w: float, max_limit_w: float, draws: Mapping[str, Sequence[float]]
) -> MeasuredSpan | None:
    """``gpu_model``'s ``MeasuredSpan`` from the draws of other workloads measured on it
    (``online_model.measured_draw_span_w``); None with too few."""
    span = om.measured_draw_span_w(draws)
    if span is None:
        return None
    return MeasuredSpan(gpu_model, idle_w, max_limit_w, span[0], span[1])


def estimated_floor_w(
    idle_w: float,
    max_limit_w: float,
    references: Iterable[MeasuredSpan],
    *,
    own: Mapping[str, Sequence[float]] | None = None,
) -> float | None:
    """The light-work floor of a GPU model with fewer than ``FLOOR_MIN_WORKLOADS`` other
    workloads measured on it, estimated from the GPU models where enough were
    (``references``): the median of their floors' shares of the span from their idle draw
    to their highest power limit, put on this GPU's span (``idle_w`` to ``max_limit_w``,
    what NVML reports). ``own``: draws of the workloads measured on this GPU model, too few
    for a floor of their own; the floor is no higher than the least of them (the floor is
    the least any workload draws). None: no reference, or a floor at the idle draw."""
    shares = sorted(s for r in references if (s := r.floor_share()) is not None)
    span_w = max_limit_w - idle_w
    if not shares or not (math.isfinite(span_w) and span_w > 0):
        return None
    floor_w = idle_w + statistics.median(shares) * span_w
    drawn = [d for ds in (own or {}).values() for d in ds if math.isfinite(d) and d > 0]
    if drawn:
        floor_w = min(floor_w, min(drawn))
    return floor_w if floor_w > idle_w else None


# Whether a GPU model with too few other workloads measured on it gets a light-work floor
# estimated from the catalog's GPU models (``light_work_span_or_estimate_w``), and whether
# the job's own draws cap that estimate (``job_draws``). Both off: measured, not kept
# (docs/benchmarks.md, "A floor for the first jobs on a new GPU model": it meets 15% on the
# Zeus A40 and RTX6000 and breaks the H100's energy, whose light work draws a third of the
# share); the benchmarks turn them on (``--floor-estimate``, ``--job-cap``).
ESTIMATE_FLOOR = False
ESTIMATE_JOB_CAP = False


def catalog_spans(catalog: Catalog, *, exclude: str = "") -> list[MeasuredSpan]:
    """Each catalog GPU model's ``MeasuredSpan``: its catalog models' draws (``exclude``'s
    left out) at their batch sizes, its catalog idle draw, its highest power limit."""
    out = []
    for gpu_model, spec in sorted(catalog.gpus.items()):
        draws = {
            m.workload: om.model_draws_w(m)
            for m in catalog.models()
            if m.gpu_model == gpu_model and m.workload != exclude
        }
        idle_w = catalog_idle_power_w(catalog, gpu_model)
        span = measured_span(gpu_model, idle_w, spec.power_limit_max_w, draws)
        if span is not None:
            out.append(span)
    return out


def light_work_span_or_estimate_w(
    idle_w: float,
    busy_max_w: float,
    max_limit_w: float,
    draws: Mapping[str, Sequence[float]],
    references: Sequence[MeasuredSpan],
    *,
    job_draws: Sequence[float] = (),
) -> tuple[float | None, float, str | None]:
    """(floor, busy maximum, what the floor was estimated from) a job's draw is read against
    on a GPU model: with enough other workloads measured on it, their least and most draw
    (``online_model.light_work_span_w``; estimated from: None); with fewer, the floor
    ``estimated_floor_w`` from ``references`` (none: no floor) and the carried
    ``busy_max_w``. ``job_draws``: the job's own draws of one GPU at the default limit and
    top clock; the estimate is no higher than the least of them either (the job is a
    workload measured on the GPU too: one that draws less at a smaller batch is not at a
    floor above that)."""
    if not references or om.measured_draw_span_w(draws) is not None:
        floor_w, high_w = om.light_work_span_w(idle_w, busy_max_w, draws)
        return floor_w, high_w, None
    own = {**draws, "(the job)": list(job_draws)} if job_draws else draws
    floor_w = estimated_floor_w(idle_w, max_limit_w, references, own=own)
    if floor_w is None:
        return None, busy_max_w, None
    return floor_w, busy_max_w, ",".join(r.gpu_model for r in references)
