"""Lower bounds on average JCT that no scheduling policy can beat on a scenario.

A matched-budget ratio ("baseline's average JCT / the candidate's") only means something
next to what is possible at all. This module bounds it from the perf models alone,
without simulating any policy, by relaxing everything that makes jobs wait on each
other:

* every job has the whole cluster to itself from the first instant a plan can start it
  (the next round boundary after its arrival, or its arrival with ``replan_on_events`` or
  any budget: a budgeted run also plans at each period's start and end, where a probe of a
  prior-only job ends and where the hard-limit watch stops a stretch, none of them on the
  rounds' grid);
* it may run any configuration the core can grant: any GPU count from its ``min_gpus`` to
  ``max_gpus`` (capped by the GPUs of its model), any batch of its allowed range (every
  one, or a grid with a point between neighbours that no batch between them beats:
  ``_batch_grid``), any clock the GPU supports, no clock at all (the default, highest),
  or a power limit every ``POWER_LIMIT_STEP_W`` down from the highest (the limits
  ``zeus`` grants among them),
  spread over whichever number of nodes communicates fastest (not always the fewest: the
  fitted A100 model of bert runs 8 GPUs slightly faster on 8 nodes than on one);
* it never pays a checkpoint-restart.

``ones`` alone grows a job's global batch with its GPUs (``n`` times its per-GPU batch)
whether or not the job names a batch range; a bound for runs of ``ones`` has those
batches too (``ones_batches``). They make many jobs several times faster (ncf on four T4s
does four times the samples per second; Philly's bound falls from 7.61 to 5.07 h), so the
bound of runs without ``ones`` leaves them out: for those policies a job's batch stays in
its range.

**Without a budget** a job's JCT is at least its wait for that first plan plus its
remaining work at its fastest configuration; the average over jobs bounds every policy's
average JCT (``JctBound.avg_jct_s``).

**Under an energy budget** ``E`` (what a matched comparison gives the candidate: the
baseline's total energy, idle draw included) a run spends at least the idle draw of the
powered cluster until its last job can end (``floor_energy_j``) plus, per job, its draw
above idle while it works. If a job does a share ``x_c`` of its work in configuration
``c``, its time is ``sum x_c t_c`` and its energy above idle ``sum x_c e_c``, so for any
price ``lam >= 0``, ``t + lam * e >= min_c (t_c + lam * e_c)``. Summing over jobs
(Lagrangian relaxation, weak duality):

    avg JCT >= ( sum_j [wait_j + min_c (t_jc + lam * e_jc)] - lam * (E - floor) ) / N

for every ``lam``; :meth:`JctBound.avg_jct_at_energy_s` takes the best ``lam`` of a
geometric grid. Below ``floor + sum_j min_c e_jc`` (``min_energy_j``) no policy can finish
the trace at all.

Pure Python and numpy; no Django.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from scheduling.core.goodput import useful_samples_per_iter
from scheduling.core.policies.ones import global_batch_for as ones_global_batch
from scheduling.core.types import GpuConfig, Job, PerfCatalog
from scheduling.simulator.engine import idle_power_by_model
from scheduling.simulator.scenario import Scenario
from scheduling.simulator.state import run_start_s

# Power limits tried: every 5 W down from the GPU's highest (Zeus' 25 W steps among them).
POWER_LIMIT_STEP_W = 5.0


@dataclass(frozen=True)
class JobFrontier:
    """One job's fastest-to-leanest trade-off: (seconds, joules above idle) to finish its
    remaining work, on the Pareto frontier, fastest first."""

    job_id: str
    earliest_start_s: float  # when a plan can first start it
    wait_s: float  # earliest_start_s - submit time
    time_s: tuple[float, ...]  # ascending
    energy_above_idle_j: tuple[float, ...]  # descending
    # The least energy its GPUs draw, idle draw included, to finish it: what a team budget,
    # which pays its jobs' whole GPUs, pays for it at least.
    least_gpu_energy_j: float = 0.0


@dataclass(frozen=True)
class JctBound:
    """Bounds for one scenario; see the module docstring for why they hold."""

    jobs: tuple[JobFrontier, ...]
    idle_power_w: float  # the whole powered cluster's idle draw (0 if idle nodes power off)
    start_s: float = 0.0  # where a run's clock begins (``state.run_start_s``)

    @property
    def n_jobs(self) -> int:
        return len(self.jobs)

    @cached_property
    def avg_jct_s(self) -> float:
        """No policy, with any energy, has a lower average JCT."""
        if not self.jobs:
            return 0.0
        return sum(f.wait_s + f.time_s[0] for f in self.jobs) / len(self.jobs)

    @cached_property
    def min_makespan_s(self) -> float:
        """No run ends before every job could have run at its fastest."""
        return max((f.earliest_start_s + f.time_s[0] for f in self.jobs), default=0.0)

    @cached_property
    def floor_energy_j(self) -> float:
        """Idle draw of the powered cluster from the run's start until the earliest
        possible end."""
        return self.idle_power_w * max(self.min_makespan_s - self.start_s, 0.0)

    @cached_property
    def min_energy_j(self) -> float:
        """No policy finishes every job with less energy than this."""
        return self.floor_energy_j + sum(f.energy_above_idle_j[-1] for f in self.jobs)

    def avg_jct_at_energy_s(self, energy_j: float, *, grid: int = 400) -> float:
        """A lower bound on the average JCT of any run that uses at most ``energy_j``
        (``math.inf`` when that is below :attr:`min_energy_j`)."""
        if not self.jobs:
            return 0.0
        if energy_j < self.min_energy_j * (1 - 1e-12):
            return math.inf
        spare_j = energy_j - self.floor_energy_j
        t, e, slopes = self._frontier_arrays
        best = self.avg_jct_s  # lam = 0
        if slopes.size == 0:
            return best
        waits = sum(f.wait_s for f in self.jobs)
        lams = np.geomspace(slopes.min(), slopes.max(), grid)
        for lam in lams:
            g = (waits + np.min(t + lam * e, axis=1).sum() - lam * spare_j) / len(self.jobs)
            best = max(best, float(g))
        return best

    @cached_property
    def _frontier_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(times, energies, slopes): one row per job, built once for every budget a
        report asks about. Shorter frontiers repeat their leanest point, which changes
        no minimum and adds no slope; the slopes (s/J) between neighbouring points are
        the prices worth trying."""
        width = max(len(f.time_s) for f in self.jobs)
        t = np.empty((len(self.jobs), width))
        e = np.empty((len(self.jobs), width))
        for i, f in enumerate(self.jobs):
            k = len(f.time_s)
            t[i, :k], t[i, k:] = f.time_s, f.time_s[-1]
            e[i, :k], e[i, k:] = f.energy_above_idle_j, f.energy_above_idle_j[-1]
        dt = np.diff(t, axis=1)
        de = -np.diff(e, axis=1)
        return t, e, dt[de > 0] / de[de > 0]


def _pareto(points: Iterable[tuple[float, float]]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Points no other point beats in both time and energy, fastest first."""
    times: list[float] = []
    energies: list[float] = []
    for time_s, energy_j in sorted(points):
        if not energies or energy_j < energies[-1]:
            times.append(time_s)
            energies.append(energy_j)
    return tuple(times), tuple(energies)


def _fewest_nodes(node_gpus: Sequence[int], n: int) -> int:
    """How few of these nodes can hold ``n`` GPUs (largest first)."""
    held = 0
    for k, gpus in enumerate(sorted(node_gpus, reverse=True), start=1):
        held += gpus
        if held >= n:
            return k
    return len(node_gpus)


def _configurations(
    catalog: PerfCatalog,
    job: Job,
    gpu_model: str,
    node_gpus: Sequence[int],
    ones_batches: bool = False,
) -> list[tuple[float, int, float]]:
    """(seconds per submitted-batch iteration, GPUs, watts per GPU) of every
    configuration the core could grant this job; [] if no perf model covers it."""
    try:
        model = catalog.get(job.workload, gpu_model)
    except (KeyError, LookupError, ValueError):
        return []
    hi = min(max(job.max_gpus, job.min_gpus), sum(node_gpus))
    batches = {job.global_batch}
    grid: list[int] = []
    if job.min_batch is not None and job.max_batch is not None:
        grid = _batch_grid(job.min_batch, job.max_batch, {job.global_batch, *model.batch_sizes})
        batches |= set(grid)
    # Pairs of neighbouring grid batches with batches between them that are not evaluated:
    # each gets one point no batch between them beats (see ``_batch_grid``).
    spans = [(lo, up) for lo, up in zip(grid, grid[1:], strict=False) if up - lo > 1]
    settings: list[tuple[int | None, float | None]] = [(None, None)]
    settings += [(c, None) for c in model.clocks_mhz]
    limits = getattr(model, "power_limits_w", None)  # optional in the PerfModel protocol
    if limits:
        # Down from the highest limit, as Zeus steps (its 25 W steps are on this grid).
        lo_w, hi_w = limits
        steps = max(int((hi_w - lo_w) / POWER_LIMIT_STEP_W), 0)
        settings += [(None, hi_w - k * POWER_LIMIT_STEP_W) for k in range(steps + 1)]
        settings.append((None, lo_w))
    parts = getattr(model, "evaluate_parts", None)  # a FittedPerfModel's uncached path
    points = []
    for n in range(job.min_gpus, hi + 1):
        # The spread over nodes changes only the communication time, so the node count
        # that is fastest at one clock and batch is fastest at all of them.
        shapes = [
            _spread(n, k) for k in range(_fewest_nodes(node_gpus, n), min(n, len(node_gpus)) + 1)
        ]
        shape = min(
            shapes,
            key=lambda sh: model.iter_time_s(
                GpuConfig(n_gpus=n, global_batch=job.global_batch, gpus_per_node=sh)
            ),
        )
        # ONES grows the global batch with the GPUs (its per-GPU batch fixed) whether or
        # not the job names a batch range.
        at: dict[tuple[int, int | None, float | None], tuple[float, float]] = {}
        n_nodes = sum(1 for k in shape if k > 0) or 1
        for b in batches | ({ones_global_batch(job, n)} if ones_batches else set()):
            for clock, limit in settings:
                if parts is not None:
                    # (what model.time_and_power computes, without a GpuConfig and the
                    # model's cache for each of the many configurations)
                    iter_s, power_w = parts(n, n_nodes, max(b, 1) / n, clock, limit)
                else:
                    cfg = GpuConfig(
                        n_gpus=n,
                        global_batch=b,
                        sm_clock_mhz=clock,
                        power_limit_w=limit,
                        gpus_per_node=shape,
                    )
                    iter_s, power_w = model.iter_time_s(cfg), model.power_w(cfg)
                at[b, clock, limit] = (iter_s, power_w)
                # Work is useful samples: at batch b the job needs submitted_batch /
                # (b x efficiency) iterations per submitted-batch iteration.
                points.append(
                    (iter_s * job.global_batch / useful_samples_per_iter(job, b), n, power_w)
                )
        for lo, up in spans:
            # Every batch between lo and up iterates no faster and draws no less than at
            # lo, and makes no more useful samples an iteration than at up.
            useful_up = useful_samples_per_iter(job, up)
            for clock, limit in settings:
                iter_s, power_w = at[lo, clock, limit]
                points.append((iter_s * job.global_batch / useful_up, n, power_w))
    return points


# A job's batch range is evaluated at every batch where it holds at most this many, else
# at a geometric grid of this ratio (with the range's ends and the catalog's sizes).
EXACT_BATCHES = 32
BATCH_STEP = 2.0 ** (1 / 4)


def _batch_grid(lo: int, hi: int, fixed: Iterable[int]) -> list[int]:
    """The batches of ``lo..hi`` the bound evaluates, ascending.

    A policy may grant any batch of a job's range, not only the catalog's sizes: a learned
    model's sizes are the catalog's scaled to the job's own batch (an independent sweep saw
    a bert job of batch 1, range 1-8, run at 2-8 and finish in 99 s against a bound of
    467 s that had taken batch 1 alone). Where the range is short every batch is
    evaluated; else a grid, and between two neighbours ``lo < b < up`` the bound takes
    ``lo``'s iteration time and draw with ``up``'s useful samples an iteration. That
    beats every batch between them because, at a fixed GPU count and setting, iteration
    time and draw do not fall as the batch grows (per-GPU compute linear in the batch,
    a busier GPU throttled more under a power limit), and useful samples an iteration
    do not fall either (``goodput.efficiency``); the price is a bound up to
    ``BATCH_STEP`` looser on a batch between grid points."""
    if hi < lo:
        return []
    if hi - lo + 1 <= EXACT_BATCHES:
        return list(range(lo, hi + 1))
    grid = {lo, hi} | {b for b in fixed if lo <= b <= hi}
    b = float(lo)
    while b < hi:
        grid.add(int(b))
        b *= BATCH_STEP
    return sorted(grid)


def _spread(n: int, k: int) -> tuple[int, ...]:
    """``n`` GPUs over ``k`` nodes, as even as can be."""
    return tuple(n // k + (1 if i < n % k else 0) for i in range(k))


def jct_bound(
    jobs: Sequence[Job],
    *,
    catalog: PerfCatalog,
    node_gpus_by_model: dict[str, tuple[int, ...]],
    idle_power_by_model: dict[str, float],
    round_length_s: float,
    replan_on_events: bool = False,
    power_off_idle_nodes: bool = False,
    ones_batches: bool = False,
    budgeted: bool = False,
) -> JctBound:
    """Bounds for ``jobs`` on a cluster whose schedulable nodes hold
    ``node_gpus_by_model[model]`` GPUs each (see the module docstring).

    A job may run on any GPU model the cluster has and its perf catalog knows (or only
    its ``gpu_model``); a job none can run is left out of the bound (the simulator
    reports such jobs as unfinished). ``ones_batches``: also the batches ``ones`` gives
    (see the module docstring), for a bound that runs of ``ones`` cannot beat either.
    ``budgeted``: for runs under any budget, whose plans also come between rounds.
    """
    configurations: dict[tuple, list[tuple[float, int, float]]] = {}
    per_work: dict[tuple, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    least_per_work: dict[tuple, float] = {}
    frontiers = []
    for job in jobs:
        models = [job.gpu_model] if job.gpu_model else sorted(node_gpus_by_model)
        points: list[tuple[float, float]] = []
        least_j = math.inf
        for gpu_model in models:
            if gpu_model not in node_gpus_by_model:
                continue
            key = (
                job.workload,
                gpu_model,
                job.min_gpus,
                job.max_gpus,
                job.global_batch,
                job.min_batch,
                job.max_batch,
                job.noise_scale,
                # what ``ones``' batch on n GPUs depends on besides
                (job.requested_gpus, job.per_gpu_batch, job.base_lr, job.max_lr)
                if ones_batches
                else None,
            )
            if key not in configurations:
                configurations[key] = _configurations(
                    catalog, job, gpu_model, node_gpus_by_model[gpu_model], ones_batches
                )
            # As the engine runs it: time and power scaled by the job's refinements, and
            # with idle GPUs powered a busy GPU adds only its draw above idle. Both scale
            # with the work, so the frontier per unit of work is computed once.
            idle_w = 0.0 if power_off_idle_nodes else idle_power_by_model[gpu_model]
            unit_key = (key, job.power_scale, idle_w)
            if unit_key not in per_work:
                per_work[unit_key] = _pareto(
                    (iter_s, n * max(power_w * job.power_scale - idle_w, 0.0) * iter_s)
                    for iter_s, n, power_w in configurations[key]
                )
            work = job.remaining_iters * job.iter_time_scale
            unit_t, unit_e = per_work[unit_key]
            points += [(t * work, e * work) for t, e in zip(unit_t, unit_e, strict=True)]
            # The least whole-cluster-share energy per unit of work, once per configuration
            # set: listed again for every job, 50,000 one-iteration jobs on 4,096 GPUs spent
            # 240 of a run's 300 s here (the product is monotone in it: the same figure).
            least_key = (key, job.power_scale)
            if least_key not in least_per_work:
                least_per_work[least_key] = min(
                    (n * power_w * job.power_scale * t for t, n, power_w in configurations[key]),
                    default=math.inf,
                )
            least_j = min(least_j, work * least_per_work[least_key])
        if not points:
            continue
        start = job.submit_time_s
        if not (replan_on_events or budgeted):
            start = math.ceil(start / round_length_s) * round_length_s
        times, energies = _pareto(points)
        frontiers.append(
            JobFrontier(job.job_id, start, start - job.submit_time_s, times, energies, least_j)
        )
    cluster_idle_w = 0.0
    if not power_off_idle_nodes:
        cluster_idle_w = sum(
            sum(gpus) * idle_power_by_model[m] for m, gpus in node_gpus_by_model.items()
        )
    return JctBound(
        jobs=tuple(frontiers),
        idle_power_w=cluster_idle_w,
        start_s=run_start_s((j.submit_time_s for j in jobs), round_length_s),
    )


def scenario_bound(
    scenario: Scenario, *, ones_batches: bool = False, budgeted: bool = False
) -> JctBound:
    """:func:`jct_bound` for a loaded scenario, with the engine's settings and idle power
    (``ones_batches``: where the runs include ``ones``; ``budgeted``: where some run has a
    budget)."""
    node_gpus: dict[str, list[int]] = {}
    for node in scenario.cluster.nodes:
        if not node.schedulable:
            continue
        for gpu_model, count in Counter(g.model for g in node.gpus).items():
            node_gpus.setdefault(gpu_model, []).append(count)
    config = scenario.config
    return jct_bound(
        scenario.jobs,
        catalog=scenario.catalog,
        node_gpus_by_model={m: tuple(c) for m, c in node_gpus.items()},
        idle_power_by_model=idle_power_by_model(
            scenario.catalog, set(node_gpus), override_w=config.idle_power_w
        ),
        round_length_s=config.round_length_s,
        replan_on_events=config.replan_on_events,
        power_off_idle_nodes=config.power_off_idle_nodes,
        ones_batches=ones_batches,
        budgeted=budgeted,
    )
