"""The one translation layer between ORM rows and the scheduling core's value types.

``build_snapshot`` reads the database into a frozen ``Snapshot`` (rows -> core), and
``allocation_changes`` turns a ``Plan`` back into row-level changes (core -> rows) that
``scheduling.services`` applies with conditional updates. Whole jobs, clusters and budgets are
translated only here: the what-if (``frontend/predictions.py``) reuses ``job_from_row`` and
``cluster_from_rows``. Modules that evaluate a perf model for one configuration
(``observations``, ``feasibility``, ``frontend/predictions.py``, ``seed_demo``) build the
core's ``GpuConfig`` themselves.

Identifiers: a core job id is the job's primary key as text; a core GPU id is the GPU's NVML
UUID; a core team is the team's slug; a core budget id is the budget's primary key as text.
Times are Unix seconds (``Snapshot.epoch_s`` stays 0 in the service).
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection

from cluster.choices import ACTIVE_JOB_STATES, WAITING_JOB_STATES, JobState, NodeStatus
from cluster.models import Budget, Gpu, Job, JobAllocation, Node, gpus_in_service
from scheduling import observations, workload_profiles
from scheduling.core import online_model
from scheduling.core import types as core
from scheduling.core.perf_models import Catalog
from scheduling.models import JobSchedulingState
from scheduling.perf_lookup import current_catalog
from telemetry.carbon import carbon_signal
from telemetry.models import GpuSample
from telemetry.usage import budget_usages


def _s(when: datetime | None) -> float | None:
    return None if when is None else when.timestamp()


# --- rows -> snapshot ----------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotRows:
    """The snapshot and the rows it was built from, keyed by the core's ids."""

    snapshot: core.Snapshot
    jobs: Mapping[str, Job]
    gpus: Mapping[str, Gpu]


def node_is_live(node: Node, *, now: datetime, timeout_s: float) -> bool:
    """Healthy and heard from within ``timeout_s``: only such a node takes new work."""
    return (
        node.status == NodeStatus.HEALTHY
        and node.last_heartbeat_at is not None
        and node.last_heartbeat_at >= now - timedelta(seconds=timeout_s)
    )


def cluster_from_rows(nodes: Iterable[Node], *, now: datetime, timeout_s: float) -> core.Cluster:
    """Nodes (with ``gpus`` prefetched) as the core's cluster. Nodes without GPUs are left out;
    an unhealthy, draining or silent node is present but not schedulable. A GPU its node's
    agent registered without (``Gpu.missing_since``) is left out: the agent cannot run a
    job there, and a job still holding it is not kept on it (``round._keeps_gpus``)."""
    result = []
    for node in nodes:
        gpus = tuple(
            core.Gpu(gpu_id=g.uuid, node=node.name, index=g.index, model=g.model)
            for g in sorted(node.gpus.all(), key=lambda g: g.index)
            if g.missing_since is None
        )
        if gpus:
            result.append(
                core.Node(
                    name=node.name,
                    switch=node.switch_label,
                    gpus=gpus,
                    schedulable=node_is_live(node, now=now, timeout_s=timeout_s),
                )
            )
    return core.Cluster(nodes=tuple(result))


def _allocation_history(job_ids: list[int]) -> dict[int, list[tuple]]:
    """Per job: (started_at, ended_at, gpu ids frozenset) of every allocation, oldest first."""
    allocations = list(
        JobAllocation.objects.filter(job_id__in=job_ids)
        .order_by("job_id", "started_at", "id")
        .values_list("id", "job_id", "started_at", "ended_at")
    )
    # Their GPUs by the allocations' own ids: joined to the allocations by job, PostgreSQL
    # read the whole GPU link table (305,000 rows of a large cluster's history, 115 ms a
    # round) for the 350 allocations of the 2,350 active jobs (0.5 ms by ids).
    through = JobAllocation.gpus.through
    gpu_sets: dict[int, set[int]] = defaultdict(set)
    for alloc_id, gpu_id in through.objects.filter(
        joballocation_id__in=[a[0] for a in allocations]
    ).values_list("joballocation_id", "gpu_id"):
        gpu_sets[alloc_id].add(gpu_id)
    history: dict[int, list[tuple]] = defaultdict(list)
    for alloc_id, job_id, started, ended in allocations:
        history[job_id].append((started, ended, frozenset(gpu_sets[alloc_id])))
    return history


def _service_times(history: list[tuple], now: datetime) -> tuple[float, float | None, float | None]:
    """(attained GPU-seconds, started_s, last_change_s) from a job's allocation history.

    ``started_s`` is where the current unbroken stretch of allocations began (a resize or
    retune closes one allocation and opens the next at the same instant); ``last_change_s``
    is the last start or change of GPUs in it, or, for a job not running, when it stopped.
    Retunes (same GPUs) are not changes, as in the simulator.
    """
    attained = 0.0
    started = last_change = None
    prev_end = prev_gpus = None
    for alloc_started, ended, gpus in history:
        end = ended or now
        attained += len(gpus) * max((end - alloc_started).total_seconds(), 0.0)
        if prev_end is None or alloc_started != prev_end:
            started = last_change = alloc_started
        elif gpus != prev_gpus:
            last_change = alloc_started
        prev_end, prev_gpus = ended, gpus
    if history and history[-1][1] is not None:
        # Not running now: the last change is when it was stopped.
        return attained, None, _s(history[-1][1])
    return attained, _s(started), _s(last_change)


def job_from_row(
    job: Job,
    *,
    allocation: core.Allocation | None,
    attained_gpu_s: float = 0.0,
    started_s: float | None = None,
    last_change_s: float | None = None,
    iter_time_scale: float = 1.0,
    power_scale: float = 1.0,
    observed_slowdown: float | None = None,
    model_gpus: Mapping[str, int] | None = None,
) -> core.Job:
    """The job as the core sees it. ``model_gpus``: the cluster's GPUs in service per GPU
    model (schedulable or not), which caps the request a fixed-size policy honours
    (``fixed_size_request``); None: the top of the job's range, uncapped."""
    return core.Job(
        job_id=str(job.pk),
        workload=job.workload,
        team=job.team.slug,
        submit_time_s=job.submitted_at.timestamp(),
        total_iters=float(job.total_iterations),
        global_batch=job.global_batch_size,
        requested_gpus=fixed_size_request(job, model_gpus),
        min_gpus=job.min_gpus,
        max_gpus=job.max_gpus,
        min_batch=job.min_batch_size,
        max_batch=job.max_batch_size,
        done_iters=float(job.completed_iterations),
        priority=job.priority,
        gpu_model=job.gpu_model or None,
        per_gpu_batch=job.per_gpu_batch_size,
        base_lr=job.base_lr,
        max_lr=job.max_lr,
        slowdown_tolerance=job.slowdown_tolerance,
        allocation=allocation,
        started_s=started_s,
        last_change_s=last_change_s,
        attained_gpu_s=attained_gpu_s,
        iter_time_scale=iter_time_scale,
        power_scale=power_scale,
        observed_slowdown=observed_slowdown,
        # Reported gradient statistics (calibrated), else the workload's learned curve.
        noise_scale=job.noise_scale,
    )


def gpus_by_model(cluster: core.Cluster) -> Counter[str]:
    """The cluster's GPUs per GPU model, schedulable or not (``fixed_size_request``)."""
    return Counter(g.model for n in cluster.nodes for g in n.gpus)


def fixed_size_request(job: Job, model_gpus: Mapping[str, int] | None) -> int:
    """The GPU count a fixed-size policy (fifo, tiresias, zeus, ...) runs ``job`` at. The API
    asks for a range; its top is the request, or what the cluster has of the job's GPU
    model (any model: the largest) where the top is more and the bottom fits. Uncapped, a
    job of "1 to 256 GPUs", accepted on a 32-GPU cluster because its minimum fits, waited
    for good under every fixed-size policy as too big (a live probe). The cluster's GPUs
    in service, not only the schedulable ones: a drained node makes the job wait, not
    shrink."""
    if not model_gpus:
        return job.max_gpus
    have = model_gpus.get(job.gpu_model, 0) if job.gpu_model else max(model_gpus.values())
    return have if job.min_gpus <= have < job.max_gpus else job.max_gpus


def allocation_from_row(alloc: JobAllocation) -> core.Allocation:
    """An open allocation (``gpus`` prefetched with their nodes) as the core sees it; GPUs in
    (node, index) order, the order placement produces."""
    gpus = sorted(alloc.gpus.all(), key=lambda g: (g.node.name, g.index))
    return core.Allocation(
        gpu_ids=tuple(g.uuid for g in gpus),
        global_batch=alloc.batch_size,
        sm_clock_mhz=alloc.sm_clock_mhz,
        power_limit_w=None if alloc.power_limit_w is None else float(alloc.power_limit_w),
    )


def budgets_from_rows(budgets: Iterable[Budget]) -> tuple[core.Budget, ...]:
    """Budgets with what their ledgers say is spent and what to do once they are spent
    (the core's ``round.admit`` honours ``hard_limit_action``; every budget is paced)."""
    result = []
    budgets = list(budgets)
    for b, used in zip(budgets, budget_usages(budgets), strict=True):
        result.append(
            core.Budget(
                budget_id=str(b.pk),
                team=b.team.slug,
                period_start_s=b.period_start.timestamp(),
                period_end_s=b.period_end.timestamp(),
                energy_limit_j=None
                if b.energy_limit_kwh is None
                else core.decimal_product(b.energy_limit_kwh, core.J_PER_KWH),
                energy_used_j=used.energy_j,
                co2_limit_g=None
                if b.carbon_limit_kg is None
                else core.decimal_product(b.carbon_limit_kg, core.G_PER_KG),
                co2_used_g=used.co2_g,
                hard_limit_action=core.HardLimitAction(b.hard_limit_action),
            )
        )
    return tuple(result)


def build_snapshot(
    *,
    now: datetime,
    round_length_s: float,
    policy_state: Mapping[str, Any] | None = None,
    catalog: Catalog | None = None,
    node_timeout_s: float | None = None,
) -> SnapshotRows:
    """Read everything a round may look at into a frozen snapshot.

    Schedulable GPUs are those of healthy nodes heard from within ``node_timeout_s``; jobs are
    the running ones and the queued and paused ones submitted by ``now``, with their progress,
    service so far and their online models learned from telemetry (``job_perf``;
    ``workload_profiles``); budgets are those whose period contains ``now`` with their ledger
    totals; carbon is telemetry's signal for the zone.
    """
    timeout_s = settings.WATTFLOW_NODE_TIMEOUT_S if node_timeout_s is None else node_timeout_s
    nodes = list(Node.objects.prefetch_related(gpus_in_service()).order_by("switch_label", "name"))
    cluster = cluster_from_rows(nodes, now=now, timeout_s=timeout_s)
    gpus = {g.uuid: g for n in nodes for g in n.gpus.all()}

    rows = list(
        Job.objects.filter(state__in=ACTIVE_JOB_STATES)
        # A job submitted after ``now`` (committed while the round ran, between the clock and
        # this read) was not yet in the world the round plans: it waits for the next round,
        # or its start would be stamped before its submit (a negative wait). Running jobs
        # stay, whatever their stamps: they hold GPUs.
        .exclude(state__in=WAITING_JOB_STATES, submitted_at__gt=now)
        .select_related("team", "current_allocation")
        .prefetch_related("current_allocation__gpus__node")
        .order_by("submitted_at", "id")
    )
    history = _allocation_history([j.pk for j in rows])
    scales = {
        s.job_id: s
        for s in JobSchedulingState.objects.filter(job_id__in=[j.pk for j in rows]).only(
            "job_id",
            "iter_time_scale",
            "power_scale",
            "observations",
            "online_params",
            "exploration",
        )
    }
    perf = catalog or current_catalog()
    # Each job's online model, learned from its own telemetry, replaces the catalog's
    # model for it (and its scales: the model already holds what they would say).
    job_perf = workload_profiles.job_models(
        [s for s in scales.values() if s.online_params], {j.pk: j.workload for j in rows}
    )
    learned = {job_id for job_id, _ in job_perf}
    # Jobs without a model of their own start from their workload's profile, or from an
    # estimate where the catalog has no (workload, GPU model) pair (e.g. an A40 node).
    nvml = workload_profiles.nvml_gpus(gpus.values())
    job_perf.update(workload_profiles.prior_models(rows, nvml, catalog=perf, skip=list(job_perf)))
    # EaCO's early observation: co-located jobs' slowdowns as telemetry measured them.
    slowdowns = observations.observed_slowdowns(rows, catalog=perf, now=now)
    model_gpus = gpus_by_model(cluster)
    jobs = []
    for row in rows:
        alloc = None
        if row.state == JobState.RUNNING and row.current_allocation is not None:
            alloc = allocation_from_row(row.current_allocation)
        attained, started_s, last_change_s = _service_times(history.get(row.pk, []), now)
        state = scales.get(row.pk)
        if str(row.pk) in learned:
            state = None
        jobs.append(
            job_from_row(
                row,
                allocation=alloc,
                attained_gpu_s=attained,
                started_s=started_s if alloc is not None else None,
                last_change_s=last_change_s,
                iter_time_scale=state.iter_time_scale if state else 1.0,
                power_scale=state.power_scale if state else 1.0,
                observed_slowdown=slowdowns.get(row.pk),
                model_gpus=model_gpus,
            )
        )
    budget_rows = list(
        Budget.objects.filter(period_start__lte=now, period_end__gt=now)
        .select_related("team")
        .order_by("team__slug", "period_start", "id")
    )
    snapshot = core.Snapshot(
        cluster=cluster,
        jobs=tuple(jobs),
        perf=perf,
        job_perf=job_perf,
        round_length_s=round_length_s,
        budgets=budgets_from_rows(budget_rows),
        idle_power_w=workload_profiles.uncatalogued_idle_w(perf, gpus.values(), nvml, now=now),
        # (the GPUs a job may be given: those its node's agent registered)
        clock_steps=clock_steps_by_model(g for g in gpus.values() if g.missing_since is None),
        power_limits=power_limits_by_model(g for g in gpus.values() if g.missing_since is None),
        carbon=carbon_signal(settings.TELEMETRY_CARBON_ZONE, now),
        policy_state=dict(policy_state or {}),
        # Live, every model is an estimate, the catalog's included.
        exact_perf=False,
        exploration_budget_frac=settings.WATTFLOW_EXPLORATION_BUDGET or None,
        exploration_batch_probe=settings.WATTFLOW_EXPLORATION_BATCH_PROBE,
        exploration={str(pk): s.exploration for pk, s in scales.items() if s.exploration},
    )
    return SnapshotRows(
        snapshot=snapshot,
        jobs={str(j.pk): j for j in rows},
        gpus=gpus,
    )


# --- telemetry -> online model ----------------------------------------------------------------


@dataclass(frozen=True)
class Measurements:
    """What telemetry measured of a job's current allocation since it was last read: one
    observation per iteration interval and one per power-sample instant, in the
    allocation's configuration; ``until`` is the instant they cover (none: a stretch read
    that measured nothing of the job's own)."""

    gpu_model: str
    observations: list[online_model.Observation]
    until: datetime


def _sample_instants_of(
    items: list[tuple[list[Gpu], datetime]], *, until: datetime
) -> list[list[tuple[datetime, float]]]:
    """For each (GPUs, since) of ``items``, (instant, mean draw of the GPUs) for each
    sampling of all of them in (since, until], in at most two queries (the jobs on one node,
    averaged per instant in the database; those on several, each GPU's samples). One agent
    reads all its node's GPUs at one instant: those instants at which every GPU reported.
    The agents of a job's several nodes sample on their own clocks, so no instant has them
    all: their samples are matched in order (each GPU's k-th), at the latest of the k-th
    instants."""
    out: list[list[tuple[datetime, float]]] = [[] for _ in items]
    one_node = [k for k, (gpus, _) in enumerate(items) if len({g.node_id for g in gpus}) < 2]
    several = [k for k, (gpus, _) in enumerate(items) if len({g.node_id for g in gpus}) >= 2]
    table = GpuSample._meta.db_table

    def window(keys: list[int], select: str, rest: str) -> list[tuple]:
        # Each GPU's own samples in its job's own window, a range of the primary key (GPU,
        # time) apiece. Joined on the GPU and time instead, the samples were read from the
        # earliest ``since`` of all the jobs, every GPU's (the BRIN index on time): one job
        # read from where it stalled made the round read the whole cluster's samples since
        # (the scale database: 443,868 rows for one job's 9 minutes, 60,252 without it),
        # while ``READ_SPAN_GPU_S`` prices a read by the job's own GPUs.
        ks = [k for k in keys for _ in items[k][0]]
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT w.k, {select} "
                "FROM unnest(%s::int[], %s::bigint[], %s::timestamptz[]) AS w (k, gpu_id, since) "
                f"CROSS JOIN LATERAL (SELECT s.gpu_id, s.ts, s.power_w FROM {table} AS s "
                "WHERE s.gpu_id = w.gpu_id AND s.ts > w.since AND s.ts <= %s "
                f"ORDER BY s.gpu_id, s.ts) AS s {rest}",
                [
                    ks,
                    [g.pk for k in keys for g in items[k][0]],
                    [items[k][1] for k in ks],
                    until,
                ],
            )
            return cursor.fetchall()

    if one_node:
        for k, ts, p, n in window(
            one_node,
            "s.ts, AVG(s.power_w), COUNT(s.gpu_id)",
            "GROUP BY w.k, s.ts ORDER BY w.k, s.ts",
        ):
            if n == len(items[k][0]):
                out[k].append((ts, p))
    if several:
        per_gpu: dict[int, dict[int, list[tuple[datetime, float]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for k, gpu_id, ts, power_w in window(
            several, "s.gpu_id, s.ts, s.power_w", "ORDER BY w.k, s.ts"
        ):
            per_gpu[k][gpu_id].append((ts, power_w))
        for k in several:
            series = per_gpu.get(k, {})
            if len(series) < len(items[k][0]) or min(len(v) for v in series.values()) < 2:
                continue
            out[k] = _matched_samplings(list(series.values()))
    return out


def _matched_samplings(
    series: list[list[tuple[datetime, float]]],
) -> list[tuple[datetime, float]]:
    """Samplings of GPUs whose agents sample on their own clocks (each series in time
    order, at least two samples): for each sample of the sparsest GPU, every other GPU's
    latest sample at or before it, if that is within 1.5 of the slowest GPU's median
    sampling interval (so a GPU's gap is skipped, not filled with a sample from before it),
    at the sparsest GPU's instant, with the mean draw."""

    def median_gap_s(v: list[tuple[datetime, float]]) -> float:
        return statistics.median((b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(v))

    tolerance = timedelta(seconds=1.5 * max(median_gap_s(v) for v in series))
    reference = min(series, key=len)
    others = [(v, [ts for ts, _ in v]) for v in series if v is not reference]
    out = []
    for ts, power_w in reference:
        draws = [power_w]
        for v, stamps in others:
            i = bisect.bisect_right(stamps, ts) - 1
            if i < 0 or ts - stamps[i] > tolerance:
                break
            draws.append(v[i][1])
        else:
            out.append((ts, sum(draws) / len(draws)))
    return out


# How long a job's samples may lag its newest progress report (both in the agent's clock)
# before its progress is read without them (the agent posts samples every 5 s by default).
SAMPLE_LAG_S = 120.0


def observed_measurements_of(
    items: list[tuple[Job, JobSchedulingState, JobAllocation | None]], *, now: datetime
) -> Iterator[Measurements | None]:
    """For each (job, state, allocation) of ``items``, in their order, the telemetry of the
    allocation (the job's current one, or one that has ended) since ``state.observed_until``
    as observations for its online model; None when there is nothing new.

    Iteration times come from consecutive progress reports of this allocation; power from
    the mean draw of its GPUs per sample instant. Both are taken while the job trains at
    its steady pace: from its second progress report (``observations.warmed_up_at``) up to
    the latest one its GPUs' samples have reached (see ``SAMPLE_LAG_S``).
    Before that the job imports, initialises the GPU, loads its data and warms up: on a
    real H100 11.5 s at 72-121 W before about 440 W, then a first interval 35% slower than
    the next; counting the start-up read the job's draw as 193 W, the warm-up its time as
    8.2 ms against 7.1 ms (``tests/telemetry/test_device_recording.py``). A job that
    reports progress fewer than three times teaches nothing. No ``started`` report is
    needed: a job retuned in place (a new allocation, same process) and a job Slurm
    started (monitor mode) send none. Stretches in which another job shared the GPUs are
    left out (they are its observed slowdown). Values are passed on as measured;
    ``workload_profiles.record_observations`` refuses the absurd ones.

    Read in a few queries whatever their number: each read of all of them at once (reports,
    samples, the GPUs' other allocations; those spanning more than ``READ_SPAN_GPU_S`` in
    runs that do not) before the first of them is yielded, then each job's measurements
    apart as it is taken (what is logged of one is logged as the caller folds it, as
    before). Only a job not yet read past its warm-up and continuing another allocation
    looks up its history (``observations.training_since_of``)."""
    live = []  # (index, job, state, allocation, gpus)
    for k, (job, state, alloc) in enumerate(items):
        gpus = [] if alloc is None else list(alloc.gpus.all())
        if gpus:
            live.append((k, job, state, alloc, gpus))
    trainings = observations.training_since_of(
        [(job.pk, alloc, state.observed_until) for _, job, state, alloc, _ in live]
    )
    newest_of = observations.newest_progress_of(
        [(job.pk, alloc.pk) for _, job, _, alloc, _ in live], now=now
    )
    fresh = []  # (index, job, allocation, gpus, since, newest)
    for (k, job, state, alloc, gpus), training in zip(live, trainings, strict=True):
        if training is None:
            continue
        since = max(training, state.observed_until) if state.observed_until else training
        newest = newest_of.get((job.pk, alloc.pk))
        if newest is None or newest <= since:
            continue  # nothing new (a stalled job costs no sample scan)
        fresh.append((k, job, alloc, gpus, since, newest))
    # Read a bounded span of samples at a time (``READ_SPAN_GPU_S``): every job's minutes
    # since the last round at once, but after a long pause (each job unread for hours) a
    # few jobs at a time, as the per-job reads held one job's hours at a time.
    done = 0  # items yielded so far
    for chunk in _read_chunks(fresh, now=now):
        reports = _read_chunk(chunk, now=now)
        for k in range(done, chunk[-1][0] + 1):
            yield None if k not in reports else _measurements(*reports[k])
        done = chunk[-1][0] + 1
    for _ in range(done, len(items)):
        yield None


# The most GPU-seconds of samples (about as many rows at 1 Hz; a few times fewer progress
# reports) one read of ``observed_measurements_of`` spans: a round's jobs, each read since
# the round before, take one read; jobs unread for hours (after the scheduler was paused a
# day, 800 one-node jobs would be 800 x 86,400 = 69 million rows at 1 Hz) go a few at a time.
READ_SPAN_GPU_S = 2_000_000.0


def _read_chunks(fresh: list[tuple], *, now: datetime) -> Iterator[list[tuple]]:
    """``fresh`` (index, job, allocation, gpus, since, newest) in order, in runs whose
    GPU-seconds since their ``since`` sum to at most ``READ_SPAN_GPU_S`` (a job alone
    where it spans more)."""
    chunk: list[tuple] = []
    span = 0.0
    for entry in fresh:
        gpus, since = entry[3], entry[4]
        cost = len(gpus) * max((now - since).total_seconds(), 0.0)
        if chunk and span + cost > READ_SPAN_GPU_S:
            yield chunk
            chunk, span = [], 0.0
        chunk.append(entry)
        span += cost
    if chunk:
        yield chunk


def _read_chunk(chunk: list[tuple], *, now: datetime) -> dict[int, tuple]:
    """The reads of a run of ``_read_chunks``: by index, ``_measurements``'s arguments
    (none for a job whose samples it waits for)."""
    # While another job shares the GPUs, speed and power are the pair's: they feed the
    # observed slowdown, not the job's own model (see scheduling/observations.py).
    shared_of = observations.shared_periods_of(
        [(job.pk, [g.pk for g in gpus], since) for _, job, _, gpus, since, _ in chunk], now=now
    )
    # Up to now, not to the newest report: on several nodes the sampling that completes the
    # newest report's may be stamped just after it.
    instants_of = _sample_instants_of(
        [(gpus, since) for _, _, _, gpus, since, _ in chunk], until=now
    )
    read = []  # (index, job, allocation, gpus, since, horizon, shared, instants)
    for (k, job, alloc, gpus, since, newest), shared, instants in zip(
        chunk, shared_of, instants_of, strict=True
    ):
        # The agent posts progress at once and buffers samples for its post interval, so the
        # newest progress reports run ahead of the samples: read both only up to the newest
        # sampling of all the job's GPUs, and what is still on its way is read next round.
        # Samples that lag the progress by more than SAMPLE_LAG_S hold nothing back.
        if instants and (newest - instants[-1][0]).total_seconds() <= SAMPLE_LAG_S:
            horizon = instants[-1][0]
        elif not instants and (newest - since).total_seconds() <= SAMPLE_LAG_S:
            continue  # no sampling of all its GPUs yet: wait for them
        else:
            horizon = newest
        read.append((k, job, alloc, gpus, since, horizon, shared, instants))
    progress_of = observations.progress_reports_of(
        [(job.pk, alloc.pk, since, horizon) for _, job, alloc, _, since, horizon, _, _ in read]
    )
    reports = {
        k: (job, alloc, gpus, shared, instants, progress)
        for (k, job, alloc, gpus, _, _, shared, instants), progress in zip(
            read, progress_of, strict=True
        )
    }
    return reports


def _measurements(
    job: Job,
    alloc: JobAllocation,
    gpus: list[Gpu],
    shared: list[observations.Period],
    instants: list[tuple[datetime, float]],
    progress: list[observations.Report],
) -> Measurements | None:
    """One allocation's observations from its reports and samples read."""
    iter_times, last_progress = observations.iter_times_of(
        job.pk, alloc.pk, progress, exclude=shared,
        most=observations.most_iterations(job, alloc.batch_size),
    )  # fmt: skip
    if last_progress is None:
        return None
    powers = [
        p for ts, p in instants if ts <= last_progress and not observations.overlaps(ts, ts, shared)
    ]
    if not iter_times and not powers:
        # Read, but nothing of it is the job's own (every interval and sample shared with
        # another job, or refused): what is covered still ends at the last report read, so
        # that the next read starts there. (Left where it was, a job that shared its GPUs
        # for days had every round read the whole cluster's samples since it started: the
        # samples are read from the earliest point of the round's jobs, with no index on
        # the GPU.)
        return Measurements(gpu_model=gpus[0].model, observations=[], until=last_progress)
    config = {
        "n_gpus": len(gpus),
        "n_nodes": len({g.node_id for g in gpus}),
        "local_batch": alloc.batch_size / len(gpus),
        "sm_clock_mhz": alloc.sm_clock_mhz,
        "power_limit_w": None if alloc.power_limit_w is None else float(alloc.power_limit_w),
    }
    found = [online_model.Observation(iter_time_s=t, **config) for t in iter_times]
    found += [online_model.Observation(power_w=p, **config) for p in powers]
    # What is covered ends at the last progress report used.
    return Measurements(gpu_model=gpus[0].model, observations=found, until=last_progress)


# --- plan -> row changes --------------------------------------------------------------------


@dataclass(frozen=True)
class RowChange:
    """One change of a plan in row terms: the job, the kind, and the new configuration."""

    job: Job
    kind: core.ChangeKind
    gpus: tuple[Gpu, ...] = ()
    batch_size: int | None = None
    sm_clock_mhz: int | None = None
    power_limit_w: int | None = None
    reason: core.WaitReason | None = None


# Order in which changes are applied: freeing GPUs first lets the later ones take them.
_APPLY_ORDER = {
    core.ChangeKind.STOP: 0,
    core.ChangeKind.RESIZE: 1,
    core.ChangeKind.RETUNE: 2,
    core.ChangeKind.START: 3,
}


def clock_steps(gpus: Iterable[Gpu]) -> core.ClockSteps:
    """The clocks ``gpus`` run at when told one (``core.ClockSteps``): capped at the lowest
    registered maximum (or highest lockable clock), then a step every GPU that lists any
    lists; ``tops_differ`` where their own tops are not all one known top (a plan without
    a clock is then recorded as none: each GPU runs up to its own)."""
    gpus = list(gpus)
    tops = [g.max_sm_clock_mhz or max(g.supported_sm_clocks_mhz or [0]) for g in gpus]
    known = [t for t in tops if t]
    listed = [set(g.supported_sm_clocks_mhz) for g in gpus if g.supported_sm_clocks_mhz]
    common = sorted(set.intersection(*listed)) if listed else []
    return core.ClockSteps(
        steps=tuple(common),
        top_mhz=min(known) if known else None,
        tops_differ=len(set(tops)) > 1,
    )


def clock_steps_by_model(gpus: Iterable[Gpu]) -> dict[str, core.ClockSteps]:
    """GPU model -> the clocks all its GPUs in ``gpus`` take (``clock_steps``), where they
    bound a plan's clock at all (``Snapshot.clock_steps``). A job's GPUs are some of its
    model's, so a clock all of them take is taken as it is on any (a cap no higher, steps
    a subset). Where GPUs of one model list steps none of the others list, no common step
    is known: the plan's clock is then taken as the job's GPUs allow, as before."""
    by_model: dict[str, list[Gpu]] = defaultdict(list)
    for g in gpus:
        by_model[g.model].append(g)
    out = {}
    for model, group in by_model.items():
        steps = clock_steps(group)
        if steps.steps or steps.top_mhz is not None:
            out[model] = steps
    return out


def _top_w(gpu: Gpu) -> int:
    """The highest limit ``gpu``'s agent sets: its top, or the site's cap its agent
    reported below it (``Gpu.site_power_limit_w``; the agent sets none above it)."""
    cap = gpu.site_power_limit_w
    return gpu.max_power_limit_w if cap is None else min(cap, gpu.max_power_limit_w)


def _own_w(gpu: Gpu) -> int:
    """The limit ``gpu`` runs at when told none: the site's cap its agent reported (the
    limit it enforced before the agent changed anything, which the agent leaves or puts
    back), else its registered default."""
    cap = gpu.site_power_limit_w
    return gpu.default_power_limit_w if cap is None else min(cap, gpu.max_power_limit_w)


def power_limits(gpus: Iterable[Gpu]) -> core.PowerLimits | None:
    """The power limits ``gpus`` run at when told one (``core.PowerLimits``): within the
    highest bottom limit and the lowest top limit they registered, a site's cap their
    agents reported counting as their top (``_top_w``); None where no limit is within
    every GPU's range (a limit is then taken as each GPU allows)."""
    gpus = list(gpus)
    if not gpus:
        return None
    low = max(g.min_power_limit_w for g in gpus)
    high = min(_top_w(g) for g in gpus)
    if not low <= high:
        return None
    # The limit they run at when told none, where every GPU has the same one (each runs
    # at its own otherwise, and none is given): the site's cap, else the default.
    defaults = {_own_w(g) for g in gpus}
    default = float(defaults.pop()) if len(defaults) == 1 else None
    return core.PowerLimits(low_w=low, high_w=high, default_w=default)


def power_limits_by_model(gpus: Iterable[Gpu]) -> dict[str, core.PowerLimits]:
    """GPU model -> the power limits all its GPUs in ``gpus`` take (``power_limits``;
    ``Snapshot.power_limits``). A job's GPUs are some of its model's, so a limit all of
    them take is taken as it is on any (a range no narrower). Where no limit is within every
    GPU's range, none is given: the plan's limit is taken as the job's GPUs allow."""
    by_model: dict[str, list[Gpu]] = defaultdict(list)
    for g in gpus:
        by_model[g.model].append(g)
    out = {}
    for model, group in by_model.items():
        limits = power_limits(group)
        if limits is not None:
            out[model] = limits
    return out


def settings_the_gpus_take(
    gpus: Iterable[Gpu], *, sm_clock_mhz: int | None, power_limit_w: int | None
) -> tuple[int | None, int | None]:
    """The SM clock and power limit ``gpus`` run at when told ``sm_clock_mhz`` and
    ``power_limit_w``, as the agent applies them (``telemetry.agent.backends.
    capped_settings``): a clock no higher than the lowest registered maximum (or highest
    lockable clock) and one of the steps they all list, a limit within the range every GPU
    reported. The core plans from the catalog's GPU model (an A100's 1410 MHz, 100-400 W),
    and a GPU that reported less ran at what it can do while its allocation said the
    plan's: its job's time and draw were learned at settings it never ran at (a live probe)."""
    gpus = list(gpus)
    if sm_clock_mhz is not None:
        # A step every GPU lists (the highest at or below the plan's, else the lowest): the
        # core plans from its model's clocks (the catalog's A100 steps, fifo_lowclock's
        # 975 MHz), and NVML locks a range, so a GPU listing [1410, 1200, 810] ran at a
        # step of its own while its allocation said 975. GPUs that list none add no bound.
        # (The round plans only clocks its GPUs' model takes, ``clock_steps_by_model``, so
        # a plan's clock is normally taken as it is.)
        sm_clock_mhz = clock_steps(gpus).take(sm_clock_mhz)
    if power_limit_w is not None:
        # (The round plans only limits its GPUs' model takes, ``power_limits_by_model``,
        # so a plan's limit is normally taken as it is.)
        limits = power_limits(gpus)
        if limits is not None:
            power_limit_w = round(limits.take(power_limit_w))
    return sm_clock_mhz, power_limit_w


def allocation_changes(plan: core.Plan, rows: SnapshotRows) -> list[RowChange]:
    """The plan's changes as row changes, stops first, then resizes, retunes, starts.

    The database keeps power limits in whole watts; a retune whose only difference is the
    rounding of the limit is no change and is dropped (else every round would retune). A
    clock or limit the GPUs cannot take is recorded as what they will run at
    (``settings_the_gpus_take``), so a retune the GPUs cannot follow is no change either.
    """
    result = []
    for change in plan.changes:
        job = rows.jobs[change.job_id]
        after = change.after
        if after is None:
            result.append(
                RowChange(job=job, kind=change.kind, reason=plan.waiting.get(change.job_id))
            )
            continue
        gpus = tuple(rows.gpus[g] for g in after.gpu_ids)
        clock, limit = settings_the_gpus_take(
            gpus,
            sm_clock_mhz=after.sm_clock_mhz,
            power_limit_w=None if after.power_limit_w is None else round(after.power_limit_w),
        )
        if change.kind == core.ChangeKind.RETUNE and change.before is not None:
            before = change.before
            if (before.global_batch, before.sm_clock_mhz, before.power_limit_w) == (
                after.global_batch,
                clock,
                None if limit is None else float(limit),
            ):
                continue
        result.append(
            RowChange(
                job=job,
                kind=change.kind,
                gpus=gpus,
                batch_size=after.global_batch,
                sm_clock_mhz=clock,
                power_limit_w=limit,
            )
        )
    result.sort(key=lambda c: (_APPLY_ORDER[c.kind], c.job.pk))
    return result
