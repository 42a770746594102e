"""What telemetry says about running jobs, read for the round: the iteration times of an
allocation from its agent's progress reports, and the slowdown of jobs that share GPUs.

Both the online model (``adapters.observed_measurements_of``, ``workload_profiles``) and
EaCO's early observation (``Job.observed_slowdown``) read iteration times through
``progress_iter_times``, so the two agree on what was measured.

Iteration times and power measured while another job shared the GPUs are left out of the
online model: the core already stretches a shared job's estimate by its co-location slowdown
(``round._shared_estimate``), and the simulator keeps ``iter_time_scale`` free of it, so
folding it into the scale too would count it twice. They go to ``observed_slowdown`` instead.

Units: the agent reports iterations at its allocation's batch (``docs/telemetry.md``), which
is the batch the perf model is asked about here, so no conversion is needed.
"""

from __future__ import annotations

import bisect
import logging
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime

from django.db import connection
from django.db.models import Q

from cluster.choices import JobState
from cluster.models import Gpu, Job, JobAllocation
from scheduling import perf_lookup
from scheduling.choices import PerfModelKind
from scheduling.core import types as core
from scheduling.core.perf_models import Catalog
from scheduling.workload_profiles import JobHints
from telemetry.choices import JobEventKind
from telemetry.models import JobEvent
from telemetry.services import most_iterations

log = logging.getLogger(__name__)


def _first_event_at(job_id: int, allocation_id: int, kind: str) -> datetime | None:
    return (
        JobEvent.objects.filter(job_id=job_id, allocation_id=allocation_id, kind=kind)
        .order_by("ts")
        .values_list("ts", flat=True)
        .first()
    )


def started_at(job_id: int, allocation_id: int) -> datetime | None:
    """When the agent reported the allocation's job up (None: not yet)."""
    return _first_event_at(job_id, allocation_id, JobEventKind.STARTED)


def warmed_up_at(job_id: int, allocation_id: int) -> datetime | None:
    """When the allocation's job had warmed up on every node that reports its progress: the
    latest of each such node's second progress report (None: no report yet, or a node that
    reported has not reported twice).

    Before its first report the job imports, initialises the GPU and loads its data: on a
    real H100 11.5 s at 72-121 W, against about 440 W once it iterated
    (``data/device/h100_2026-11-26``). The interval from the first report to the second
    holds the warm-up (there 9.7 ms an iteration against 7.0-7.4 ms in the next four):
    the client reports before its first step, and the first steps build kernels and fill
    caches. The performance model predicts the steady state (a restart's cost is its own
    parameter), so the first interval is left out; a first report that came mid-training
    loses one good interval, which nothing stored could tell apart. A job on several nodes
    runs a process on each, and each node's agent reports its own count."""
    return _first_two_reports(job_id, allocation_id)[1]


def _first_two_reports(job_id: int, allocation_id: int) -> tuple[datetime | None, datetime | None]:
    """The latest of each reporting node's first progress report of the allocation, and
    of their second (``warmed_up_at``; None where a node that reported has not reported
    twice), in one query."""
    return first_two_reports_of([(job_id, allocation_id)])[(job_id, allocation_id)]


AllocationKey = tuple[int, int]  # (job id, allocation id)


def first_two_reports_of(
    keys: Iterable[AllocationKey],
    *,
    gpu_nodes: Mapping[AllocationKey, Iterable[int]] | None = None,
) -> dict[AllocationKey, tuple[datetime | None, datetime | None]]:
    """``_first_two_reports`` of each (job, allocation), all in one query.

    Each node's first two reports are looked up on the index of progress reports by (job,
    allocation, node, time) (``jobevent_progress_node_ts_idx``), a few index entries
    each, however long the job has run (before: a window over every report of every
    allocation, 0.73-1.1 s a round for 200 allocations of 10,000 reports each). The nodes
    looked up are those of the allocation's GPUs, the only ones whose agents may report
    it (``telemetry.services``); that no other node did is checked in the same query
    (``_reporting_nodes``), and an allocation another node reported is read by a scan of
    its reporting nodes instead, as every one was: the same results either way.
    ``gpu_nodes``: each allocation's GPUs' nodes where the caller has them (its GPUs
    prefetched), else they are read with the reports (a join over the allocations' GPUs,
    10-20 ms for 800 allocations on the scale DB)."""
    keys = sorted(set(keys))
    if not keys:
        return {}
    params: list = [[j for j, _ in keys], [a for _, a in keys]]
    if gpu_nodes is None:
        through = JobAllocation.gpus.through._meta.db_table
        nodes = (
            "SELECT DISTINCT w.job_id, w.allocation_id, g.node_id FROM w "
            f"JOIN {through} AS ag ON ag.joballocation_id = w.allocation_id "
            f"JOIN {Gpu._meta.db_table} AS g ON g.id = ag.gpu_id"
        )
    else:
        triples = sorted({(*key, node) for key in keys for node in gpu_nodes.get(key, ())})
        nodes = "SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[])"
        params += [[j for j, _, _ in triples], [a for _, a, _ in triples], [n for *_, n in triples]]
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH w (job_id, allocation_id) AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[])), "
            f"n (job_id, allocation_id, node_id) AS ({nodes}) "
            # each GPU node's first two reports
            "SELECT n.job_id, n.allocation_id, n.node_id, e.ts FROM n CROSS JOIN LATERAL ("
            f"SELECT e.ts {_OF_NODE} AND e.node_id = n.node_id {_IN_ORDER} LIMIT 2) AS e "
            "UNION ALL "
            # the first reporting node, and the one after each GPU node: all GPU nodes, or
            # none, where no other node reported
            "SELECT n.job_id, n.allocation_id, e.node_id, NULL FROM w AS n CROSS JOIN LATERAL ("
            f"SELECT e.node_id {_OF_NODE} {_IN_ORDER} LIMIT 1) AS e "
            "UNION ALL "
            f"SELECT n.job_id, n.allocation_id, e.node_id, NULL FROM n CROSS JOIN LATERAL "
            f"({_NEXT_NODE}) AS e WHERE e.job_id = n.job_id AND e.allocation_id = n.allocation_id",
            params,
        )
        rows = cursor.fetchall()
    reports: dict[AllocationKey, dict[int, list[datetime]]] = {key: {} for key in keys}
    found: dict[AllocationKey, set[int]] = defaultdict(set)
    for job_id, allocation_id, node_id, ts in rows:
        if ts is None:
            found[job_id, allocation_id].add(node_id)
        else:
            reports[job_id, allocation_id].setdefault(node_id, []).append(ts)
    others = [key for key, nodes in found.items() if nodes - set(reports[key])]
    if others:
        reports.update(_reporting_nodes(others))
    out = {}
    for key, by_node in reports.items():
        if not by_node:
            out[key] = (None, None)
            continue
        firsts = [sorted(ts)[0] for ts in by_node.values()]
        seconds = [sorted(ts)[1] for ts in by_node.values() if len(ts) > 1]
        warm = max(seconds) if len(seconds) == len(firsts) else None
        out[key] = (max(firsts), warm)
    return out


# The lookups of one allocation's (``n``'s) progress reports on their index. A literal
# kind, not a parameter, so that the planner matches the partial index's condition
# whatever the binding; each ordered by the index's whole key, which no other index of the
# table serves: ordered by the node alone (``min(node_id)``, ``node_id > ...``) the
# planner took the node_id index where the table's statistics made it look selective, and
# read every report of the nodes after (9,015 rows for 9,000 reports in a test).
_OF_NODE = (
    f"FROM {JobEvent._meta.db_table} AS e WHERE e.job_id = n.job_id "
    f"AND e.allocation_id = n.allocation_id AND e.kind = '{JobEventKind.PROGRESS.value}'"
)
_IN_ORDER = "ORDER BY e.job_id, e.allocation_id, e.node_id, e.ts"
# The next index entry of another node than ``n``'s, whatever its allocation (the caller
# keeps it if it is ``n``'s): with the allocation's equalities beside it, the index scan
# started at the allocation's first entry and stepped over every report of the nodes up to
# ``n``'s (0.2-0.5 ms a node of 4,000-36,000 reports on the scale DB); on its own, the row
# comparison is where the scan starts.
_NEXT_NODE = (
    f"SELECT e.job_id, e.allocation_id, e.node_id FROM {JobEvent._meta.db_table} AS e "
    f"WHERE e.kind = '{JobEventKind.PROGRESS.value}' "
    "AND (e.job_id, e.allocation_id, e.node_id) > (n.job_id, n.allocation_id, n.node_id) "
    f"{_IN_ORDER} LIMIT 1"
)


def _reporting_nodes(keys: list[AllocationKey]) -> dict[AllocationKey, dict[int, list[datetime]]]:
    """The first two reports of each node that reported each (job, allocation) of ``keys``,
    whatever its GPUs: the nodes found one after another on the index (a recursive scan,
    whose row estimates are ten times the allocations' and would have the planner compile
    the query, 0.2-0.3 s for 800 allocations: only for allocations that need it)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE nodes (job_id, allocation_id, node_id) AS ("
            "SELECT n.job_id, n.allocation_id, "
            f"(SELECT e.node_id {_OF_NODE} {_IN_ORDER} LIMIT 1) "
            "FROM unnest(%s::bigint[], %s::bigint[]) AS n (job_id, allocation_id) "
            "UNION ALL "
            "SELECT n.job_id, n.allocation_id, "
            f"(SELECT e.node_id FROM ({_NEXT_NODE}) AS e "
            "WHERE e.job_id = n.job_id AND e.allocation_id = n.allocation_id) "
            "FROM nodes AS n WHERE n.node_id IS NOT NULL"
            ") "
            "SELECT n.job_id, n.allocation_id, n.node_id, e.ts FROM nodes AS n "
            "CROSS JOIN LATERAL ("
            f"SELECT e.ts {_OF_NODE} AND e.node_id = n.node_id {_IN_ORDER} LIMIT 2"
            ") AS e "
            "WHERE n.node_id IS NOT NULL",
            [[j for j, _ in keys], [a for _, a in keys]],
        )
        rows = cursor.fetchall()
    out: dict[AllocationKey, dict[int, list[datetime]]] = {key: {} for key in keys}
    for job_id, allocation_id, node_id, ts in rows:
        out[job_id, allocation_id].setdefault(node_id, []).append(ts)
    return out


def training_since_of(
    items: list[tuple[int, JobAllocation, datetime | None]],
) -> list[datetime | None]:
    """For each (job id, allocation, read_until) of ``items``, when the allocation's reports
    start to show the job's steady pace: its ``warmed_up_at``, or for a retune in place of a
    warm job, its first report on every node.

    A retune gives the job a new allocation of the same GPUs and batch, following the last
    without a gap: the agent changes the clock or power limit and the process runs on,
    warm. Left out as a warm-up, the first interval of each was lost, and under a pacing
    budget that retuned a job every round or two (a live probe: 26 allocations in 9.5
    minutes, 2 reports each) the job taught nothing at all. ``read_until``: how far its
    telemetry was read already; past the warm-up, which start it is changes nothing and
    the allocation's history is not looked up (every round, for every running job). The
    reports of all are read in one query."""
    reports = first_two_reports_of(
        [(job_id, alloc.pk) for job_id, alloc, _ in items],
        gpu_nodes={(job_id, a.pk): {g.node_id for g in a.gpus.all()} for job_id, a, _ in items},
    )
    out: list[datetime | None] = []
    unread = []  # (index, job id, allocation): not read past its warm-up
    for job_id, allocation, read_until in items:
        first, warm = reports[job_id, allocation.pk]
        if first is None:
            out.append(None)
        elif warm is not None and read_until is not None and read_until >= warm:
            out.append(warm)
        else:
            out.append(warm)
            unread.append((len(out) - 1, job_id, allocation))
    # A retune continues an allocation that ended as it started: only the allocations not
    # read past their warm-up look up their histories (not the round's running jobs).
    if unread:
        warm_of = warm_retunes([(job_id, allocation) for _, job_id, allocation in unread])
        for (k, job_id, allocation), warm in zip(unread, warm_of, strict=True):
            if warm:
                out[k] = reports[job_id, allocation.pk][0]
    return out


# How many allocations back a retune's history is walked (``warm_retunes``).
RETUNE_DEPTH = 20


def warm_retunes(
    items: list[tuple[int, JobAllocation]], *, depth: int = RETUNE_DEPTH
) -> list[bool]:
    """For each (job id, allocation) of ``items``, whether the allocation continues, without
    a gap and on the same GPUs and batch, a chain of allocations of which one had warmed up
    (``warmed_up_at``), looking ``depth`` allocations back at most. The allocations' GPUs
    must be prefetched (the callers' are).

    Read in three queries whatever the chains' lengths (before: three a step back, one job
    at a time): the chains (each allocation's predecessor, the one of the job that ended as
    it started, the earliest started where several did, until the batch changes), their
    GPUs, and their first two reports."""
    if not items:
        return []
    table = JobAllocation._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE chain (k, depth, job_id, id, started_at, batch_size, want) AS ("
            "SELECT w.k, 0, w.job_id, w.id, w.started_at, w.batch_size, w.batch_size "
            "FROM unnest(%s::int[], %s::bigint[], %s::bigint[], %s::timestamptz[], %s::int[]) "
            "AS w (k, job_id, id, started_at, batch_size) "
            "UNION ALL "
            "SELECT c.k, c.depth + 1, c.job_id, b.id, b.started_at, b.batch_size, c.want "
            "FROM chain AS c CROSS JOIN LATERAL ("
            f"SELECT a.id, a.started_at, a.batch_size FROM {table} AS a "
            "WHERE a.job_id = c.job_id AND a.ended_at = c.started_at AND a.id <> c.id "
            "ORDER BY a.started_at, a.id LIMIT 1"
            ") AS b "
            "WHERE c.depth < %s AND c.batch_size = c.want"
            ") "
            "SELECT k, depth, id, batch_size FROM chain WHERE depth > 0 ORDER BY k, depth",
            [
                list(range(len(items))),
                [job_id for job_id, _ in items],
                [alloc.pk for _, alloc in items],
                [alloc.started_at for _, alloc in items],
                [alloc.batch_size for _, alloc in items],
                depth,
            ],
        )
        chains: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for k, _, pk, batch_size in cursor.fetchall():
            chains[k].append((pk, batch_size))
    gpus_of: dict[int, set[int]] = defaultdict(set)
    nodes_of: dict[int, set[int]] = defaultdict(set)
    for pk, gpu_id, node_id in JobAllocation.gpus.through.objects.filter(
        joballocation_id__in={pk for chain in chains.values() for pk, _ in chain}
    ).values_list("joballocation_id", "gpu_id", "gpu__node_id"):
        gpus_of[pk].add(gpu_id)
        nodes_of[pk].add(node_id)
    # (more than the walks below may reach: each chain is read to its batch's end at most)
    chained = [(items[k][0], pk) for k, chain in chains.items() for pk, _ in chain]
    reports = first_two_reports_of(chained, gpu_nodes={key: nodes_of[key[1]] for key in chained})
    out = []
    for k, (job_id, allocation) in enumerate(items):
        gpus = {g.pk for g in allocation.gpus.all()}
        warm = False
        for pk, batch_size in chains.get(k, ()):
            if batch_size != allocation.batch_size or gpus_of[pk] != gpus:
                break
            if reports[job_id, pk][1] is not None:
                warm = True
                break
        out.append(warm)
    return out


def newest_progress_of(
    keys: Iterable[AllocationKey], *, now: datetime
) -> dict[AllocationKey, datetime]:
    """The latest progress report at or before ``now`` of each (job, allocation) that has
    one, in one query:
    each allocation's newest report is looked up on its own, one entry of
    ``jobevent_progress_alloc_ts_idx`` read backwards from ``now``, not found by a maximum
    over every report of every allocation (which read all of them each round: 0.28-0.34 s
    for 200 allocations of 10,000 reports each, against 0.12-0.13 s job by job). Ordered
    by that index's whole key, which no other index serves: the planner took the
    (job, allocation, node, time) index, read every report of each allocation and sorted
    them (the scale database: 6,440 reports an allocation, 0.45-1.2 s for 250)."""
    keys = sorted(set(keys))
    if not keys:
        return {}
    table = JobEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w.job_id, w.allocation_id, newest.ts "
            "FROM unnest(%s::bigint[], %s::bigint[]) AS w (job_id, allocation_id) "
            "CROSS JOIN LATERAL ("
            f"SELECT e.ts FROM {table} AS e "
            "WHERE e.job_id = w.job_id AND e.allocation_id = w.allocation_id "
            f"AND e.kind = '{JobEventKind.PROGRESS.value}' AND e.ts <= %s "
            "ORDER BY e.job_id DESC, e.allocation_id DESC, e.ts DESC LIMIT 1"
            ") AS newest",
            [
                [j for j, _ in keys],
                [a for _, a in keys],
                now,
            ],
        )
        return {(j, a): ts for j, a, ts in cursor.fetchall()}


Period = tuple[datetime, datetime]


def shared_periods_of(
    items: list[tuple[int, list[int], datetime]], *, now: datetime
) -> list[list[Period]]:
    """For each (job id, GPU ids, since) of ``items``, the stretches of [since, now] in which
    another job's allocation held one of the GPUs (from the allocations' scheduler times,
    which cover the agents' start-up too), all in one query."""
    if not items:
        return []
    rows = (
        JobAllocation.objects.filter(
            gpus__in={g for _, gpu_ids, _ in items for g in gpu_ids}, started_at__lt=now
        )
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=min(since for *_, since in items)))
        .values_list("gpus", "job_id", "started_at", "ended_at")
        .distinct()
    )
    by_gpu: dict[int, list[tuple[int, datetime, datetime | None]]] = defaultdict(list)
    for gpu_id, other, start, end in rows:
        by_gpu[gpu_id].append((other, start, end))
    out = []
    for job_id, gpu_ids, since in items:
        held = dict.fromkeys(
            (start, end)
            for g in gpu_ids
            for other, start, end in by_gpu.get(g, ())
            if other != job_id and (end is None or end > since)
        )
        out.append([(max(start, since), min(end or now, now)) for start, end in held])
    return out


def overlaps(t0: datetime, t1: datetime, periods: Iterable[Period]) -> bool:
    return any(t0 < end and t1 > start for start, end in periods)


def progress_iter_times(
    job_id: int,
    allocation_id: int,
    *,
    since: datetime,
    now: datetime,
    exclude: Iterable[Period] = (),
    most: float = math.inf,
) -> tuple[list[float], datetime | None]:
    """Seconds per iteration between consecutive progress reports of one allocation in
    [since, now], each node's reports apart, leaving out intervals that touch an
    ``exclude`` period, and the time of the last report read (None: no report).

    A job on several nodes runs a process on each, whose agent reports its count at its
    own ticks: taken together, two nodes' reports a moment apart would make intervals of a
    few iterations, whose times are mostly the nodes' offset.

    An interval that ends above ``most`` (``most_iterations``: more than the job's whole
    work) is no measurement and is left out: the job's count is capped there, but the
    interval's time over its iterations entered the fit as a speed (a report of 50,000
    iterations of a 1,000-iteration job, a second after 200, was learned as 70 times the
    speed measured)."""
    progress = progress_reports_of([(job_id, allocation_id, since, now)])[0]
    return iter_times_of(job_id, allocation_id, progress, exclude=exclude, most=most)


Report = tuple[int, datetime, float | None, bool]  # node id, time, count, time clamped


def progress_reports_of(
    items: list[tuple[int, int, datetime, datetime]],
) -> list[list[Report]]:
    """The progress reports (node id, time, count, whether the server clamped the time onto
    the allocation's bounds: ``JobEvent.clamped``) in time order of each (job id,
    allocation id, since, until) in [since, until], all in one query."""
    if not items:
        return []
    table = JobEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT w.k, e.node_id, e.ts, e.iterations, e.clamped FROM {table} AS e "
            "JOIN unnest(%s::int[], %s::bigint[], %s::bigint[], %s::timestamptz[], "
            "%s::timestamptz[]) AS w (k, job_id, allocation_id, since, until) "
            "ON e.job_id = w.job_id AND e.allocation_id = w.allocation_id "
            "AND e.ts >= w.since AND e.ts <= w.until "
            "WHERE e.kind = %s AND e.job_id = ANY(%s::bigint[]) "
            "AND e.ts >= %s AND e.ts <= %s "
            # (ties in time by node: the order of a node's first interval among the
            # others' must not depend on the plan, or the fits differ in the last digit)
            "ORDER BY w.k, e.ts, e.node_id, e.id",
            [
                list(range(len(items))),
                [job_id for job_id, *_ in items],
                [allocation_id for _, allocation_id, *_ in items],
                [since for *_, since, _ in items],
                [until for *_, until in items],
                str(JobEventKind.PROGRESS.value),
                sorted({job_id for job_id, *_ in items}),
                min(since for *_, since, _ in items),
                max(until for *_, until in items),
            ],
        )
        rows = cursor.fetchall()
    out: list[list[Report]] = [[] for _ in items]
    for k, node_id, ts, iterations, clamped in rows:
        out[k].append((node_id, ts, iterations, clamped))
    return out


def iter_times_of(
    job_id: int,
    allocation_id: int,
    progress: list[Report],
    *,
    exclude: Iterable[Period] = (),
    most: float = math.inf,
) -> tuple[list[float], datetime | None]:
    """``progress_iter_times`` of reports read already (``progress_reports_of``'s, in time
    order).

    A report whose time the server clamped onto its allocation's bounds
    (``JobEvent.clamped``: stamped before the start or after the end within the clock skew)
    keeps its place in the order of counts, but bounds no interval: its time is not when
    the job reached its count. Taken as one, an agent clock 30 s behind the server's put two
    reports on the allocation's start, and the interval from there to the next report read
    2 s for 10 s of work (a live probe: the job learned 0.67 s an iteration where its
    reports said 1 s)."""
    exclude = list(exclude)
    by_node: dict[int, list[tuple[datetime, float | None, bool]]] = defaultdict(list)
    for node_id, ts, iterations, clamped in progress:
        by_node[node_id].append((ts, iterations, clamped))
    iter_times = []
    beyond = dropped = 0
    for node_reports in by_node.values():
        runs = _in_order(node_reports)
        dropped += sum(i is not None for _, i, _ in node_reports) - sum(map(len, runs))
        pairs = (pair for run in runs for pair in zip(run, run[1:], strict=False))
        for (t0, i0, clamped0), (t1, i1, clamped1) in pairs:
            if clamped0 or clamped1:
                continue
            if i0 is None or i1 is None or i1 <= i0 or overlaps(t0, t1, exclude):
                continue
            if i1 > most:
                beyond += 1
                continue
            iter_times.append((t1 - t0).total_seconds() / (i1 - i0))
    if beyond:
        log.warning(
            "job %s: %d progress interval(s) of allocation %s end above the job's whole work "
            "(%.0f iterations at its batch): left out of its fit",
            job_id, beyond, allocation_id, most,
        )  # fmt: skip
    if dropped:
        log.warning(
            "job %s: %d progress report(s) of allocation %s out of order with the others' "
            "counts (an allocation's count never falls): left out of its fit",
            job_id, dropped, allocation_id,
        )  # fmt: skip
    return iter_times, (progress[-1][1] if progress else None)


def _in_order(
    reports: list[tuple[datetime, float | None, bool]],
) -> list[list[tuple[datetime, float, bool]]]:
    """One node's progress reports (in time order) as runs between reports without a count,
    each without the fewest reports that break its order: an allocation's count never
    falls, so a report above a later one, or below an earlier one, is out of order (stamped
    before it was counted, or counted wrong). Kept, one made an interval of a few
    hundredths of a second with its neighbour that the fit read as a speed 2.5 times the
    job's (a live probe). The runs' longest non-decreasing subsequences are kept."""
    runs: list[list[tuple[datetime, float, bool]]] = []
    current: list[tuple[datetime, float, bool]] = []
    for ts, iterations, clamped in reports:
        if iterations is None:
            runs.append(current)
            current = []
        else:
            current.append((ts, iterations, clamped))
    runs.append(current)
    return [_longest_rising(run) for run in runs if run]


def _longest_rising(run: list[tuple[datetime, float, bool]]) -> list[tuple[datetime, float, bool]]:
    """The longest subsequence of ``run`` whose counts never fall (the earliest such)."""
    tails: list[float] = []  # the least last count of a subsequence of each length
    tail_at: list[int] = []  # its index in ``run``
    before = [-1] * len(run)
    for k, (_, iterations, _) in enumerate(run):
        pos = bisect.bisect_right(tails, iterations)
        if pos == len(tails):
            tails.append(iterations)
            tail_at.append(k)
        else:
            tails[pos] = iterations
            tail_at[pos] = k
        before[k] = tail_at[pos - 1] if pos else -1
    kept = []
    k = tail_at[-1]
    while k >= 0:
        kept.append(run[k])
        k = before[k]
    kept.reverse()
    return kept


def observed_slowdowns(rows: Iterable[Job], *, catalog: Catalog, now: datetime) -> dict[int, float]:
    """Job pk -> observed slowdown of each running job that shares a GPU with another.

    The slowdown is the median iteration time measured while all its co-runners ran (from
    the latest of their agents' ``started`` reports, and from the job's own second progress
    report: its first interval is its warm-up) over the perf model's prediction for the
    job alone on its allocation, minus one: ``s = t_shared / t_solo - 1``, the quantity the
    simulator reports as ``1 / x - 1``. The solo prediction is ``perf_lookup.model_for``'s (the
    one lookup: a learned profile, else the catalog); jobs with no such interval yet, or whose
    model is only an estimate (its level is not known, so neither is a slowdown against it),
    are left out (EaCO treats them as not yet observed). ``rows`` need their current
    allocation with its GPUs prefetched.
    """
    running = [j for j in rows if j.state == JobState.RUNNING and j.current_allocation is not None]
    gpus_of = {j.pk: list(j.current_allocation.gpus.all()) for j in running}
    holders: dict[int, set[int]] = defaultdict(set)
    for job_pk, gpus in gpus_of.items():
        for gpu in gpus:
            holders[gpu.pk].add(job_pk)
    by_pk = {j.pk: j for j in running}
    result: dict[int, float] = {}
    for job in running:
        gpus = gpus_of[job.pk]
        group = set().union(*(holders[g.pk] for g in gpus)) if gpus else set()
        if len(group) < 2:
            continue
        starts = [started_at(pk, by_pk[pk].current_allocation_id) for pk in sorted(group)]
        alloc = job.current_allocation
        # from the job's own warm-up on too, as its online model reads it
        starts.append(warmed_up_at(job.pk, alloc.pk))
        if any(s is None for s in starts):
            continue
        iter_times, _ = progress_iter_times(
            job.pk, alloc.pk, since=max(starts), now=now,
            most=most_iterations(job, alloc.batch_size),
        )  # fmt: skip
        if not iter_times:
            continue
        found = perf_lookup.model_for(
            job.workload,
            gpus[0].model,
            catalog=catalog,
            hints=JobHints.of(job),
        )
        if found is None or found.kind == PerfModelKind.ESTIMATED:
            continue
        model = found.model
        solo_s = model.iter_time_s(
            core.GpuConfig(
                n_gpus=len(gpus),
                global_batch=alloc.batch_size,
                sm_clock_mhz=alloc.sm_clock_mhz,
                power_limit_w=None if alloc.power_limit_w is None else float(alloc.power_limit_w),
            )
        )
        if solo_s > 0:
            result[job.pk] = statistics.median(iter_times) / solo_s - 1.0
    return result
