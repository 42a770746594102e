"""Leave one workload out, and leave one GPU model out: how well the online performance model
(``scheduling/core/online_model.py``) learns a job the catalog has never seen.

    nice .venv/bin/python benchmarks/bench_online_model.py [--steps 1 5 20] [--json out.json]
        [--weight 60] [--network-level 0.5] [--idle split|lowest|catalog] [--floor-pool K]
        [--floor-estimate off|catalog|all|zeus [--job-cap] [--estimate-share S]]
        [--explore-batch half|double] [--probe-common half|double] [--probe-at N]

``--network-level`` sets how much of a job's time level moves its prior's all-reduce
(``online_model.NETWORK_LEVEL``, whose value is the default; 1 is the rule before 6 Dec).

``--explore-batch`` puts a batch probe among a job's first five observations: the fifth is
the same job at half (or double) its first global batch, at its first GPU count, power
limit and clock, where the data measured it (``batch_probe``). ``--probe-common`` scores the
never-observed configurations without that probe's and the one it displaces, with or
without the probe, so that the two replays are scored on the same set. ``--probe-at 6``
makes the probe the sixth observation instead (as the live probe comes, one more step after
the limits: ``exploration.BATCH_PROBE``); scored after 6 with it against after 5 without,
the probe is added, not substituted.

``--weight`` counts each replayed configuration as that many measurements (1, the default:
one each; a live round pools every progress interval and NVML sample of a configuration,
dozens a minute).

For each held-out (workload, GPU model) pair the script hides the pair from the priors,
then replays its measured configurations as observations in the order a running job
would produce them, and after 1, 5 and 20 observations scores the model's predictions of
iteration time and of energy per iteration against the measurements: on configurations
already observed and on configurations never observed (median and max relative error).

* ``elasticflow_a100`` / ``pollux_t4``: the catalog's other workloads on that GPU are the
  candidate priors (iteration time only: these data sets measured no power). The job starts
  at the median global batch on the fewest GPUs, is resized through the other GPU counts
  at that batch, then tries the other batches, nearest first. A Pollux observation is one
  measured row (the first of its placement); it is scored against the median of the rows.
* ``zeus_<gpu>`` (leave one workload out): the other Zeus workloads on the same GPU, each
  fitted with ``perf_fit.fit_power_limit`` and mapped on a normalized batch axis
  (``batch_matched_prior``: the job's first batch at the candidate's median one), are the
  candidates, chosen on time and draw, the draw's level included. Each candidate's compute
  time is split into fixed and per-sample parts, and its draw's batch shape set, from the
  job's own draw at the default limit (``draw_shaped_prior``: the busy fraction between the
  GPU's idle draw as the live service estimates it and the most loading candidate's draw,
  the draw's shape from the least loading candidate's draw; ``--idle``, ``--draw-split``,
  ``--no-draw-shape``).
  The job starts at its median batch at the default (highest) power limit, steps the limit
  down 25 W at a time (Zeus' just-in-time profiling), then moves to the other batches,
  nearest first.
* ``perseus_<gpu>`` (leave one model out, at set SM clocks; ``_perseus_cases``): a job is
  one pipeline stage of bloom or gpt3-175b on an A100 or A40, its iteration the stage's
  forward and backward pass; it runs from the top clock down, one 15 MHz step at a time,
  with the other model's clock shape on the same GPU as its prior.
* ``gpu_out_<gpu>`` (leave one GPU model out): the same workload's fits on every other Zeus
  GPU, given the hidden GPU's power-limit range (what NVML reports) and their busy draw
  scaled by the ratio of the highest limits, are the candidates; the job's model is the
  geometric mean of one fit per candidate (``BlendedPerfModel``).

Zeus measured time per epoch; at a fixed batch an epoch is a fixed number of iterations,
so relative errors are those per iteration. A Zeus prior's iteration time is its epoch time
x batch / 100,000 samples: the level is unknown and is learned from the first observation.

``--baseline`` also scores the previous live path (the nearest prior times the clamped
``refine_scales`` scales) on the same replays.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tqdm import tqdm  # noqa: E402

from scheduling.core import gpu_estimates, online_model  # noqa: E402
from scheduling.core.gpu_estimates import (  # noqa: E402
    MeasuredSpan,
    NvmlGpu,
    catalog_spans,
    gpu_draw_range_w,
    light_work_span_or_estimate_w,
    measured_span,
)
from scheduling.core.online_fit import fit_online  # noqa: E402
from scheduling.core.online_model import (  # noqa: E402
    BlendedPerfModel,
    Observation,
    at_default_power,
    batch_matched_prior,
    draw_range_w,
    draw_shaped_prior,
    measured_draw_span_w,
    model_draws_w,
    nearest_prior,
    param_scaled_prior,
)
from scheduling.core.perf_models import (  # noqa: E402
    DvfsParams,
    FittedPerfModel,
    GpuSpec,
    PowerParams,
    ThroughputParams,
    load_catalog,
    refine_scales,
)
from scheduling.fitting import perf_data  # noqa: E402
from scheduling.fitting.perf_build import zeus_fits  # noqa: E402
from scheduling.fitting.perf_fit import PowerLimitFit  # noqa: E402

NOMINAL_EPOCH_SAMPLES = 100_000.0
PARAM_COUNTS = ROOT / "data" / "perf" / "param_counts.csv"
# --params: how a known parameter count enters the prior (leave one workload out only):
# "off"; "beta" compute time per sample x the job's / candidate's count; "comm" also the
# all-reduce terms; "nearest" picks, before two configurations are seen, the candidate
# nearest in parameter count (instead of the first); "nearest+beta" both.
PARAM_MODES = ("off", "beta", "comm", "nearest", "nearest+beta")
PARAMS = "off"
BY_WORKLOAD = False  # --by-workload: one row per (data set, workload)
BY_POOL = False  # --by-pool: one row per (data set, --floor-pool subset)
# --draw-split: where candidates share the job's GPU model (``Case.draw_level``), how the
# compute time's fixed / per-sample split at the job's batch is set (``draw_shaped_prior``):
# "off" the candidate's own; "draw" from the job's draw alone; "blend" the logit mean of both.
DRAW_SPLIT_MODES = {"off": None, "draw": 0.0, "blend": 0.5}
DRAW_SPLIT = "draw"
# --weight: measurements per configuration. 1 (the default) is one observation each; a live
# round pools every progress interval and NVML sample of a configuration, dozens a minute.
WEIGHT = 1.0
DRAW_SHAPE = True  # --no-draw-shape: keep the candidate's draw-versus-batch shape
# --idle: what a job's draw is read against where the data measured no idle draw (the Zeus
# GPUs). "split" (the default since 8 Dec 2026, as the service's ``fit_prior`` reads a
# draw since then): the time's split against the GPU's idle draw as the live service
# estimates it for a GPU model the catalog lacks (``service_draw_range_w``), the draw's
# batch shape from the floor and busy maximum of the other workloads measured on the GPU
# (``measured_draw_span_w`` of the candidates, or of each ``--floor-pool`` subset of them;
# with too few, as the service: no floor, the nearest catalog GPU's busy maximum carried
# over, ``service_draw_range_w``); "catalog" (the service before 8 Dec): the idle
# estimate and no floor, the most loading candidate's draw as the busy maximum; "lowest"
# (the rule before 7 Dec, which the service never used): both against the least loading
# candidate's draw.
# --carried-busy-above (diagnostic, measured and not kept: docs/benchmarks.md, "The energy a
# batch needs"): with a measured floor, a job whose own draw exceeds the measured most reads
# its split against the larger of that and the carried busy maximum.
CARRIED_BUSY_ABOVE = False
IDLE_MODES = ("split", "lowest", "catalog")
IDLE = "split"
# --floor-pool K: score each Zeus case once per K-subset of its other workloads as the
# ones the service has measured on the GPU (``FLOOR_MIN_WORKLOADS`` or more set the floor).
FLOOR_POOL: int | None = None
# --floor-estimate: with fewer than ``FLOOR_MIN_WORKLOADS`` other workloads measured on the
# job's GPU (``--floor-pool 0|1``), the floor estimated from other GPU models' measured
# floors (``gpu_estimates.estimated_floor_w``): "off" none (the idle draw, the service before
# 7 Dec's tenth pass); "catalog" the catalog's GPU models (A100, T4) as references; "all"
# those and the other Zeus GPUs (their five other workloads' draws), as a cluster that has
# already run three other uncatalogued GPU models would have them; "zeus" the other Zeus
# GPUs alone. ``--job-cap``: the job's own draws at the default limit cap the estimate.
FLOOR_ESTIMATES = ("off", "catalog", "all", "zeus")
FLOOR_ESTIMATE = "off"
# --estimate-share S (diagnostic, with --floor-estimate other than off): the references
# replaced by one whose floor sits at that share of the idle-to-limit span.
ESTIMATE_SHARE: float | None = None
# --explore-batch half|double: one of a job's first observations is the same job at another
# batch (a batch probe): the configuration at its first GPU count, power limit and clock at
# half its first global batch (or double; the other where the data lack it) replaces
# observation ``EXPLORE_AT`` + 1 (the fifth: after four limits on a Zeus GPU, after the
# other GPU counts on ElasticFlow / Pollux), the rest moving one later. None: as replayed.
EXPLORE_RULES = ("half", "double")
EXPLORE_BATCH: str | None = None
EXPLORE_AT = 4
# --probe-common: the never-observed scores leave out the probe's configuration and the one
# it displaces, with or without the probe, so that both replays are scored on the same set.
PROBE_COMMON = False
ESTIMATE_OWN = True  # --no-estimate-own: the one workload measured does not cap the floor
# The Zeus GPUs' fitted draws, GPU -> (highest limit, workload -> draws): the references.
ZEUS_DRAWS: dict[str, tuple[float, dict[str, list[float]]]] = {}


def param_counts() -> dict[str, float]:
    import csv

    with PARAM_COUNTS.open() as f:
        return {r["workload"]: float(r["params"]) for r in csv.DictReader(f)}


@dataclass(frozen=True)
class Case:
    """One held-out pair: its configurations in replay order and its candidate priors."""

    dataset: str
    workload: str
    configs: list[Observation]  # replay order; the observation the job makes there
    truth: list[tuple[float, float | None]]  # (iteration time, energy per iteration) per config
    candidates: list[FittedPerfModel]
    # Map each candidate's batch axis onto the job's (``batch_matched_prior``): the job's
    # first per-GPU batch is put at the candidate's median one. Only where a candidate's
    # batch sizes are per-GPU batches (the one-GPU Zeus sweeps).
    batch_matched: bool = False
    # Candidates measured on the job's own GPU model: their draw's level says how the
    # workload loads the GPU (``nearest_prior(draw_level=True)``).
    draw_level: bool = False
    # Blend the models fitted against every candidate (``BlendedPerfModel``) instead of
    # choosing one: for a hidden GPU, whose candidates are the workload's own fits on the
    # other GPUs, which a few same-batch observations cannot tell apart.
    blend: bool = False
    # The other workloads whose draws the service has measured on the GPU model
    # (``--floor-pool``); None: every candidate's.
    pool: tuple[str, ...] | None = None
    # Positions in ``configs`` left out of the never-observed scores (``--probe-common``).
    unscored: frozenset[int] = frozenset()


def say(line: str) -> None:
    sys.stdout.write(line + "\n")


# --- throughput data (A100, T4) ---------------------------------------------------------


def _throughput_cases(dataset: str, gpu: str, rows: list[perf_data.ThroughputRow]) -> list[Case]:
    catalog = load_catalog()
    by_w: dict[str, list] = defaultdict(list)
    for r in rows:
        by_w[r.workload].append(r)
    cases = []
    for workload, rs in sorted(by_w.items()):
        groups: dict[tuple, list] = defaultdict(list)
        for r in rs:
            groups[r.key].append(r)
        keys = list(groups)
        batches = sorted({round(k[0] * k[2]) for k in keys})
        start_batch = batches[len(batches) // 2]

        def order(k: tuple, start_batch=start_batch) -> tuple:
            g = round(k[0] * k[2])
            return (abs(math.log(g / start_batch)), g, k[0], k[1])

        keys.sort(key=order)
        configs, truth = [], []
        for k in keys:
            first = groups[k][0]
            median_t = statistics.median(r.iter_time_s for r in groups[k])
            configs.append(
                Observation(
                    n_gpus=first.n_gpus,
                    n_nodes=first.n_nodes,
                    local_batch=first.local_batch,
                    iter_time_s=first.iter_time_s,
                )
            )
            truth.append((median_t, None))
        hidden = {workload}
        hidden |= {w for (w, g), t in catalog.aliases().items() if g == gpu and t == workload}
        candidates = [
            m for m in catalog.models() if m.gpu_model == gpu and m.workload not in hidden
        ]
        cases.append(Case(dataset, workload, configs, truth, candidates))
    return cases


# --- Zeus (power limit x batch, one GPU) -------------------------------------------------


def _zeus_prior(
    name: str, fit: PowerLimitFit, limits: tuple[float, float], power_factor: float = 1.0
) -> FittedPerfModel:
    """A Zeus sweep's fit in the catalog's equations (one GPU, so no all-reduce terms)."""
    pts = [(b, t * b / NOMINAL_EPOCH_SAMPLES) for b, t in fit.epoch_time_s]
    # Least squares of iteration time on batch, both constants kept positive.
    n = len(pts)
    mb = sum(b for b, _ in pts) / n
    mt = sum(t for _, t in pts) / n
    sbb = sum((b - mb) ** 2 for b, _ in pts)
    beta = max(sum((b - mb) * (t - mt) for b, t in pts) / sbb, 0.0) if sbb > 0 else 0.0
    alpha = max(mt - beta * mb, 0.05 * mt)
    gpu = GpuSpec(
        name=name,
        idle_power_w=0.0,
        gpus_per_node=1,
        clocks_mhz=(),
        power_limit_min_w=limits[0],
        power_limit_max_w=limits[1],
        dvfs=DvfsParams(
            max_clock_mhz=1000,
            min_clock_mhz=max(1, round(1000 * fit.min_ratio)),
            time_fixed_frac=fit.time_fixed_frac,
            power_static_frac=fit.power_static_frac,
            power_exp=fit.power_exp,
            peak_to_avg=fit.peak_to_avg,
        ),
    )
    return FittedPerfModel(
        workload=name.split("@")[0],
        gpu=gpu,
        batch_sizes=tuple(b for b, _ in fit.epoch_time_s),
        throughput=ThroughputParams(alpha, beta, 0.0, 0.0, 0.0, 0.0, 1.0),
        power=PowerParams(
            busy_max_w=fit.busy_max_w * power_factor,
            batch_half=fit.batch_half,
            busy_floor_frac=fit.busy_floor_frac,
        ),
    )


def _zeus_replay(rs: list[perf_data.PowerLimitRow]) -> tuple[list[Observation], list]:
    batches = sorted({r.batch_size for r in rs})
    start = batches[len(batches) // 2]
    ordered = sorted(
        rs,
        key=lambda r: (abs(math.log(r.batch_size / start)), r.batch_size, -r.power_limit_w),
    )
    configs, truth = [], []
    for r in ordered:
        t = r.time_per_epoch_s * r.batch_size / NOMINAL_EPOCH_SAMPLES
        configs.append(
            Observation(
                n_gpus=1,
                n_nodes=1,
                local_batch=float(r.batch_size),
                iter_time_s=t,
                power_w=r.average_power_w,
                power_limit_w=r.power_limit_w,
            )
        )
        truth.append((t, t * r.average_power_w))
    return configs, truth


def _zeus_cases(*, gpu_out: bool) -> list[Case]:
    rows = perf_data.read_zeus()
    fits = zeus_fits(rows)
    limits = {
        g: (
            min(r.power_limit_w for r in rows if r.gpu == g),
            max(r.power_limit_w for r in rows if r.gpu == g),
        )
        for g in perf_data.ZEUS_GPUS
    }
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for r in rows:
        groups[(r.gpu, r.workload)].append(r)
    cases = []
    for (gpu, workload), rs in sorted(groups.items()):
        configs, truth = _zeus_replay(rs)
        if gpu_out:
            others = [g for g in perf_data.ZEUS_GPUS if g != gpu and (g, workload) in fits]
            # Every other GPU's fit of the workload, carried onto the hidden GPU's limit
            # range (its draw scaled by the ratio of the highest limits); the nearest by
            # highest limit first, the prior until two configurations are observed.
            others.sort(key=lambda g: (abs(math.log(limits[g][1] / limits[gpu][1])), g))
            candidates = [
                _zeus_prior(
                    f"{workload}@{g}",
                    fits[(g, workload)],
                    limits[gpu],
                    power_factor=limits[gpu][1] / limits[g][1],
                )
                for g in others
            ]
            cases.append(Case(f"gpu_out_{gpu}", workload, configs, truth, candidates, blend=True))
        else:
            candidates = [
                _zeus_prior(f"{w}@{g}", fit, limits[g])
                for (g, w), fit in sorted(fits.items())
                if g == gpu and w != workload
            ]
            ZEUS_DRAWS.setdefault(gpu, (limits[gpu][1], {}))[1].update(
                {c.workload: model_draws_w(c) for c in candidates}
            )
            cases.append(
                Case(
                    f"zeus_{gpu}",
                    workload,
                    configs,
                    truth,
                    candidates,
                    batch_matched=True,
                    draw_level=True,
                )
            )
    return cases


# --- Perseus (SM clock, one GPU) ---------------------------------------------------------


def _perseus_limits_w() -> dict[str, tuple[float, float]]:
    """The power-limit range of each Perseus GPU: the catalog's A100, the A40's from Zeus'
    sweeps on it. The replays run at set clocks and the default limit; the range only
    places the prior's pseudo-observations at the lowest limit."""
    a100 = load_catalog().gpus["A100"]
    a40 = [r.power_limit_w for r in perf_data.read_zeus() if r.gpu == "a40"]
    return {
        "A100": (a100.power_limit_min_w, a100.power_limit_max_w),
        "A40": (min(a40), max(a40)),
    }


def _perseus_prior(
    name: str, fits: Sequence, clocks: Sequence[int], gpu: str, limits_w: tuple[float, float]
) -> FittedPerfModel:
    """The clock shape of another model's passes on the same GPU (the medians of their
    fits, as the catalog's A100 takes them from every pass): one GPU, the time all
    compute, the draw independent of the batch. Its level is one pass's (the median fit's
    time at the top clock), about half an iteration: the first observation sets the level."""
    gpu_spec = GpuSpec(
        name=gpu,
        idle_power_w=0.0,
        gpus_per_node=1,
        clocks_mhz=tuple(clocks),
        power_limit_min_w=limits_w[0],
        power_limit_max_w=limits_w[1],
        dvfs=DvfsParams(
            max_clock_mhz=max(clocks),
            min_clock_mhz=min(clocks),
            time_fixed_frac=statistics.median(f.time_fixed_frac for f in fits),
            power_static_frac=statistics.median(f.power_static_frac for f in fits),
            power_exp=statistics.median(f.power_exp for f in fits),
            peak_to_avg=1.0,
        ),
    )
    return FittedPerfModel(
        workload=name,
        gpu=gpu_spec,
        batch_sizes=(1,),
        throughput=ThroughputParams(
            statistics.median(f.time_max_s for f in fits), 0.0, 0.0, 0.0, 0.0, 0.0, 1.0
        ),
        power=PowerParams(
            busy_max_w=statistics.median(f.power_max_w for f in fits),
            batch_half=1e-3,
            busy_floor_frac=1.0,
        ),
    )


def _perseus_cases() -> list[Case]:
    """Leave one model out on Perseus' clock sweeps: a job is one pipeline stage (its
    forward and backward pass, one iteration) of one model on one GPU, run at set SM
    clocks from the top down, one 15 MHz step at a time (as Zeus steps its limit); its
    prior is the other model's clock shape on the same GPU. After 5 observations the job
    has seen the top 60 MHz only: what it predicts at the clocks below is the clock-energy
    shape that a fit observed near the top keeps or loses. A sweep the data repeat for
    another stage (every model's stages 0-6 are one sweep) is one case: four a GPU."""
    from scheduling.fitting.perf_fit import fit_clock_series

    rows = perf_data.read_perseus()
    limits_w = _perseus_limits_w()
    top = {g: max(r.clock_mhz for r in rows if r.gpu_model == g) for g in limits_w}
    series: dict[tuple, list] = defaultdict(list)
    for r in rows:
        series[(r.model, r.gpu_model, r.stage, r.instruction)].append(r)
    fits = {k: fit_clock_series(v, top[k[1]]) for k, v in series.items()}
    cases, seen_truth = [], set()
    for model, gpu, stage in sorted({(k[0], k[1], k[2]) for k in series}):
        by_clock: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for r in series[(model, gpu, stage, "forward")] + series[(model, gpu, stage, "backward")]:
            by_clock[r.clock_mhz][0] += r.time_s
            by_clock[r.clock_mhz][1] += r.energy_j
        clocks = sorted(by_clock, reverse=True)
        configs = [
            Observation(
                n_gpus=1,
                n_nodes=1,
                local_batch=1.0,
                iter_time_s=by_clock[c][0],
                power_w=by_clock[c][1] / by_clock[c][0],
                sm_clock_mhz=c,
            )
            for c in clocks
        ]
        truth = [(by_clock[c][0], by_clock[c][1]) for c in clocks]
        if (gpu, tuple(truth)) in seen_truth:
            continue  # the data repeat a stage's sweep for stages alike (bloom's 0-6): once
        seen_truth.add((gpu, tuple(truth)))
        # The iteration's draw is its passes' energy over their time: the prior's shape is
        # the median of the other model's forward and backward fits on this GPU.
        other = {k: f for k, f in fits.items() if k[1] == gpu and k[0] != model}
        source = "+".join(sorted({k[0] for k in other}))  # the models the prior is from
        prior = _perseus_prior(source, list(other.values()), clocks, gpu, limits_w[gpu])
        cases.append(Case(f"perseus_{gpu}", f"{model}/stage{stage}", configs, truth, [prior]))
    return cases


# --- scoring ------------------------------------------------------------------------------


def _candidates(case: Case, seen: Sequence[Observation]) -> list[FittedPerfModel]:
    out = case.candidates
    if case.batch_matched:
        out = [batch_matched_prior(c, seen[0].local_batch) for c in out]
    prior_share = DRAW_SPLIT_MODES[DRAW_SPLIT]
    if case.draw_level and prior_share is not None:
        # The GPU's idle and busy-maximum draw: the spec's idle where known, else the least
        # loading candidate's draw (``--idle``); the most loading candidate's (Zeus specs
        # know no idle).
        low_w, high_w = draw_range_w(case.candidates)
        idle_w = case.candidates[0].gpu.idle_power_w or low_w
        floor_w = None
        if IDLE != "lowest":
            # The GPU's idle as the live service estimates it; with "split" the draw's
            # batch shape from the draws measured on the GPU, as ``fit_prior`` reads them.
            idle_w, carried_busy_w = service_draw_range_w(case.candidates[0].gpu.power_limit_max_w)
            if IDLE == "split":
                pool = {
                    c.workload: model_draws_w(c)
                    for c in case.candidates
                    if case.pool is None or c.workload in case.pool
                }
                # As ``fit_prior``: with too few workloads measured, the floor estimated from
                # other GPU models' (``--floor-estimate``; the service's: the catalog's).
                floor_w, high_w, _ = light_work_span_or_estimate_w(
                    idle_w,
                    carried_busy_w,
                    case.candidates[0].gpu.power_limit_max_w,
                    pool if ESTIMATE_OWN or measured_draw_span_w(pool) else {},
                    _references(case),
                    job_draws=[
                        o.power_w
                        for o in seen
                        if o.power_w is not None and at_default_power(o, case.candidates[0].gpu)
                    ]
                    if gpu_estimates.ESTIMATE_JOB_CAP
                    else (),
                )
        if CARRIED_BUSY_ABOVE and IDLE == "split" and floor_w is not None:
            # --carried-busy-above: a job drawing more than every workload measured reads
            # its split against the carried busy maximum where that is higher.
            own_w = [
                o.power_w
                for o in seen
                if o.power_w is not None and at_default_power(o, case.candidates[0].gpu)
            ]
            if own_w and max(own_w) > high_w:
                high_w = max(high_w, carried_busy_w)
        out = [
            draw_shaped_prior(
                c,
                seen,
                idle_w=idle_w,
                busy_max_w=high_w,
                prior_share=prior_share,
                draw_shape=DRAW_SHAPE,
                floor_w=floor_w,
            )
            for c in out
        ]
    if PARAMS in ("beta", "comm", "nearest+beta") and not case.blend:
        counts = param_counts()
        own = counts.get(case.workload)
        if own is not None:
            out = [
                param_scaled_prior(c, own / counts[c.workload], comm=PARAMS == "comm")
                if c.workload in counts
                else c
                for c in out
            ]
    return out


def _references(case: Case) -> list:
    """The GPU models whose floor a case's estimate is carried from (``--floor-estimate``),
    none of them with the held-out workload measured: the catalog's GPUs (their models,
    the catalog's idle draw) and, with "all", the other Zeus GPUs (the service's idle
    estimate for them)."""
    refs = []
    if FLOOR_ESTIMATE == "off":
        return refs
    if ESTIMATE_SHARE is not None:
        return [MeasuredSpan("fixed", 0.0, 1.0, ESTIMATE_SHARE, 1.0)]
    if FLOOR_ESTIMATE in ("catalog", "all"):
        refs += catalog_spans(load_catalog(), exclude=case.workload)
    if FLOOR_ESTIMATE in ("all", "zeus"):
        own = case.dataset.removeprefix("zeus_")
        for g, (max_w, by_w) in sorted(ZEUS_DRAWS.items()):
            if g == own:
                continue
            draws = {w: d for w, d in by_w.items() if w != case.workload}
            ref = measured_span(g, service_draw_range_w(max_w)[0], max_w, draws)
            if ref is not None:
                refs.append(ref)
    return refs


def service_draw_range_w(max_limit_w: float) -> tuple[float, float]:
    """(idle, busy maximum) the live service reads a job's draw against on a GPU model the
    catalog lacks whose highest power limit is ``max_limit_w``, with too few workloads
    measured on it: the nearest catalog GPU's, carried over by the ratio of the highest
    limits (``gpu_estimates.gpu_draw_range_w``, the service's own function)."""
    gpu = NvmlGpu("uncatalogued", max_limit_w, max_limit_w, max_limit_w)
    span = gpu_draw_range_w(load_catalog(), gpu.model, gpu)
    assert span is not None
    return span


def _floor_pools(cases: list[Case], k: int | None) -> list[Case]:
    """Each draw-level case once per ``k``-subset of its candidates' workloads (``--floor-
    pool``): the workloads the service has measured on the GPU. None: the cases as given."""
    if k is None:
        return cases
    out = []
    for case in cases:
        if not case.draw_level:
            out.append(case)
            continue
        names = sorted({c.workload for c in case.candidates})
        if k > len(names):
            raise SystemExit(f"--floor-pool {k}: {case.dataset} has {len(names)} workloads")
        out += [replace(case, pool=sub) for sub in itertools.combinations(names, k)]
    return out


def batch_probe(case: Case, rule: str, at: int = EXPLORE_AT, *, move: bool = True) -> Case:
    """``case`` with its batch probe moved to observation ``at`` (0-based; ``--explore-
    batch``): the first configuration after ``at`` that runs as the first observation does
    (GPUs, nodes, power limit, clock) at ``rule``'s global batch, half or double the first's,
    else the other. The case as given where neither is measured or one is already among
    the first ``at + 1``. The probe's and the displaced configuration's positions are
    ``unscored`` (used by ``--probe-common``); with ``move`` False the order is kept and
    only they are marked (the replay without the probe, scored on the same set)."""
    first = case.configs[0]
    b0 = first.local_batch * first.n_gpus
    targets = (b0 / 2, b0 * 2) if rule == "half" else (b0 * 2, b0 / 2)

    def runs_as_first(o: Observation) -> bool:
        return (
            o.n_gpus == first.n_gpus
            and o.n_nodes == first.n_nodes
            and o.power_limit_w == first.power_limit_w
            and o.sm_clock_mhz == first.sm_clock_mhz
        )

    for target in targets:
        at_target = [
            i
            for i, o in enumerate(case.configs)
            if runs_as_first(o) and abs(o.local_batch * o.n_gpus - target) < 0.5
        ]
        if not at_target:
            continue
        j = at_target[0]
        if j <= at:
            return case
        if not move:
            return replace(case, unscored=frozenset({at, j}))
        order = list(range(len(case.configs)))
        order.insert(at, order.pop(j))
        return replace(
            case,
            configs=[case.configs[i] for i in order],
            truth=[case.truth[i] for i in order],
            unscored=frozenset({at, at + 1}),
        )
    return case


def _hint(case: Case, candidates: Sequence[FittedPerfModel]) -> str | None:
    """The candidate nearest in parameter count (``--params nearest``), where known."""
    if not PARAMS.startswith("nearest") or case.blend:
        return None
    counts = param_counts()
    own = counts.get(case.workload)
    known = [c.workload for c in candidates if c.workload in counts]
    if own is None or not known:
        return None
    return min(known, key=lambda w: (abs(math.log(counts[w] / own)), w))


def fit_case(case: Case, seen: Sequence[Observation]):
    """The job's online model after ``seen``: one fit against the nearest candidate, or the
    blend of one fit per candidate (``case.blend``)."""
    candidates = _candidates(case, seen)
    if case.blend:
        return BlendedPerfModel([fit_online(c, seen) for c in candidates])
    prior = nearest_prior(
        candidates, seen, draw_level=case.draw_level, hint=_hint(case, candidates)
    )
    return fit_online(prior, seen)


def _online_predict(case: Case, seen: Sequence[Observation]) -> Callable[[Observation], tuple]:
    model = fit_case(case, seen)

    def predict(obs: Observation) -> tuple[float, float]:
        cfg = obs.config()
        return model.iter_time_s(cfg), model.energy_per_iter_j(cfg)

    return predict


def _baseline_predict(case: Case, seen: Sequence[Observation]) -> Callable[[Observation], tuple]:
    prior = nearest_prior(case.candidates, seen)
    ts, ps = 1.0, 1.0
    for obs in seen:  # one refinement per observation, as rounds would fold them
        cfg = obs.config()
        upd = refine_scales(
            predicted_iter_time_s=prior.iter_time_s(cfg),
            predicted_power_w=prior.power_w(cfg),
            observed_iter_times_s=[obs.iter_time_s] if obs.iter_time_s else [],
            observed_powers_w=[obs.power_w] if obs.power_w else [],
            iter_time_scale=ts,
            power_scale=ps,
        )
        ts, ps = upd

    def predict(obs: Observation) -> tuple[float, float]:
        cfg = obs.config()
        return prior.iter_time_s(cfg) * ts, prior.energy_per_iter_j(cfg) * ts * ps

    return predict


def score(cases: list[Case], steps: Sequence[int], predictor, label: str) -> dict:
    """errors[dataset][step][observed|unobserved][time|energy] -> list of relative errors."""
    errors: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
    for case in tqdm(cases, desc=label, unit="pair", file=sys.stderr):
        for k in steps:
            if k > len(case.configs):
                continue
            seen = case.configs[:k]
            if WEIGHT != 1.0:
                seen = [replace(o, weight=WEIGHT) for o in seen]
            predict = predictor(case, seen)
            key = f"{case.dataset}/{case.workload}" if BY_WORKLOAD else case.dataset
            if BY_POOL and case.pool is not None:
                key = f"{case.dataset}/{'+'.join(case.pool)}"
            for i, (obs, (t_true, e_true)) in enumerate(zip(case.configs, case.truth, strict=True)):
                where = "observed" if i < k else "unobserved"
                if where == "unobserved" and PROBE_COMMON and i in case.unscored:
                    continue
                t_pred, e_pred = predict(obs)
                errors[key][k][where]["time"].append(abs(t_pred / t_true - 1.0))
                if e_true is not None:
                    errors[key][k][where]["energy"].append(abs(e_pred / e_true - 1.0))
    return errors


def table(errors: dict, steps: Sequence[int]) -> list[dict]:
    out = []
    for dataset in sorted(errors):
        for k in steps:
            for where in ("observed", "unobserved"):
                for q in ("time", "energy"):
                    vals = errors[dataset][k][where][q]
                    if vals:
                        out.append(
                            {
                                "dataset": dataset,
                                "obs": k,
                                "configs": where,
                                "quantity": q,
                                "n": len(vals),
                                "median": statistics.median(vals),
                                "max": max(vals),
                            }
                        )
    return out


def print_table(rows: list[dict], title: str) -> None:
    say(f"\n{title}")
    say(f"{'data set':36} {'obs':>4} {'configs':11} {'qty':7} {'n':>5} {'median':>8} {'max':>8}")
    for r in rows:
        target = 0.05 if r["configs"] == "observed" else 0.15
        flag = "" if r["obs"] != 5 else ("  ok" if r["median"] <= target else "  MISS")
        say(
            f"{r['dataset']:36} {r['obs']:>4} {r['configs']:11} {r['quantity']:7} {r['n']:>5} "
            f"{100 * r['median']:7.1f}% {100 * r['max']:7.1f}%{flag}"
        )


def main() -> int:
    # Here, not at the top: tests and bench_exploration import this file as a module.
    from bench_args import add_floor_args, apply_floor_args, non_negative_int

    global PARAMS, BY_WORKLOAD, BY_POOL, DRAW_SPLIT, DRAW_SHAPE, WEIGHT, IDLE
    global FLOOR_ESTIMATE, ESTIMATE_OWN, ESTIMATE_SHARE, CARRIED_BUSY_ABOVE, EXPLORE_BATCH
    global PROBE_COMMON
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--baseline", action="store_true", help="also score refine_scales")
    parser.add_argument("--json", type=Path, help="write the tables here")
    parser.add_argument(
        "--params", choices=PARAM_MODES, default="off", help="parameter-count prior (above)"
    )
    parser.add_argument("--no-gpu-out", action="store_true", help="skip leave one GPU out")
    parser.add_argument(
        "--zeus-only", action="store_true", help="leave one workload out on the Zeus GPUs only"
    )
    parser.add_argument("--by-workload", action="store_true", help="a row per workload")
    parser.add_argument(
        "--by-pool",
        action="store_true",
        help="a row per --floor-pool subset (the median of its cases)",
    )
    parser.add_argument(
        "--draw-split", choices=list(DRAW_SPLIT_MODES), default=DRAW_SPLIT, help="(above)"
    )
    parser.add_argument("--no-draw-shape", action="store_true", help="(above)")
    parser.add_argument("--idle", choices=IDLE_MODES, default=IDLE, help="(above)")
    parser.add_argument("--floor-pool", type=non_negative_int, help="(above; with --idle split)")
    parser.add_argument(
        "--floor-estimate", choices=FLOOR_ESTIMATES, default=FLOOR_ESTIMATE, help="(above)"
    )
    parser.add_argument(
        "--estimate-share",
        type=float,
        help="diagnostic: the estimated floor at this share of the idle-to-limit span",
    )
    parser.add_argument(
        "--job-cap",
        action="store_true",
        help="gpu_estimates.ESTIMATE_JOB_CAP = True: the job's own draws cap the estimate",
    )
    parser.add_argument(
        "--no-estimate-own",
        action="store_true",
        help="the one workload measured on the GPU does not cap the estimated floor",
    )
    add_floor_args(parser)
    parser.add_argument(
        "--carried-busy-above",
        action="store_true",
        help="diagnostic: a job drawing above the measured most reads the carried busy maximum",
    )
    parser.add_argument(
        "--explore-batch",
        choices=EXPLORE_RULES,
        help="one of the first five observations at half / double the first batch (above)",
    )
    parser.add_argument(
        "--probe-common",
        choices=EXPLORE_RULES,
        help="never-observed scores without that rule's probe and the configuration it "
        "displaces, with or without --explore-batch (the same set both ways)",
    )
    parser.add_argument(
        "--probe-at",
        type=int,
        default=EXPLORE_AT + 1,
        help="the batch probe's observation (1-based; 5 the default, 6 as the live probe)",
    )
    parser.add_argument("--weight", type=float, default=1.0, help="measurements per configuration")
    parser.add_argument(
        "--network-level",
        type=float,
        default=online_model.NETWORK_LEVEL,
        help="how much of the time level moves the all-reduce (online_model.NETWORK_LEVEL)",
    )
    args = parser.parse_args()
    if not (math.isfinite(args.network_level) and 0.0 <= args.network_level <= 1.0):
        parser.error("--network-level must be between 0 and 1")
    online_model.NETWORK_LEVEL = args.network_level
    if not (math.isfinite(args.weight) and args.weight > 0):
        parser.error("--weight must be a finite positive number")
    WEIGHT = args.weight
    DRAW_SHAPE = not args.no_draw_shape
    IDLE = args.idle
    apply_floor_args(args)
    online_model.FLOOR_CAP = args.floor_cap
    PARAMS, BY_WORKLOAD, DRAW_SPLIT = args.params, args.by_workload, args.draw_split
    BY_POOL = args.by_pool
    CARRIED_BUSY_ABOVE = args.carried_busy_above
    EXPLORE_BATCH = args.explore_batch
    if args.probe_common is not None and EXPLORE_BATCH not in (None, args.probe_common):
        parser.error("--probe-common names another rule than --explore-batch")
    PROBE_COMMON = args.probe_common is not None
    FLOOR_ESTIMATE, ESTIMATE_OWN = args.floor_estimate, not args.no_estimate_own
    gpu_estimates.ESTIMATE_JOB_CAP = args.job_cap
    if args.estimate_share is not None:
        ESTIMATE_SHARE = args.estimate_share
    if args.probe_at < 2:
        parser.error("--probe-at must be at least 2")
    if any(k < 1 for k in args.steps):
        parser.error("--steps must be positive")
    zeus = _floor_pools(_zeus_cases(gpu_out=False), args.floor_pool)
    workload_out = (
        zeus
        if args.zeus_only
        else _throughput_cases("elasticflow_a100", "A100", perf_data.read_elasticflow())
        + _throughput_cases("pollux_t4", "T4", perf_data.read_pollux())
        + zeus
        + _perseus_cases()
    )
    gpu_out = _zeus_cases(gpu_out=True)
    rule = EXPLORE_BATCH or args.probe_common
    if rule is not None:
        move = EXPLORE_BATCH is not None
        at = args.probe_at - 1
        workload_out = [batch_probe(c, rule, at, move=move) for c in workload_out]
        gpu_out = [batch_probe(c, rule, at, move=move) for c in gpu_out]
    result = {}
    sets = [("leave one workload out", workload_out), ("leave one GPU out", gpu_out)]
    for name, cases in sets[:1] if args.no_gpu_out else sets:
        rows = table(score(cases, args.steps, _online_predict, name), args.steps)
        print_table(rows, f"{name}: online model")
        result[name] = rows
        if args.baseline:
            base = table(score(cases, args.steps, _baseline_predict, name), args.steps)
            print_table(base, f"{name}: previous live path (prior x clamped scales)")
            result[f"{name} (baseline)"] = base
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
