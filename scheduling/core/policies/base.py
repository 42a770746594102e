"""Pieces every policy shares: the queue order (with ``Job.priority``) and the queue
loop, a GPU ledger (the count side of ``placement.FreeGpus``), per-job helpers, and
waiting sentences.

**Priority.** ``Job.priority`` (an int, default 0) orders the jobs a policy considers
for starting: a higher priority goes first, and jobs of equal priority keep the order
the policy gives them (submit order, Tiresias' service queues, shortest remaining
first, ...). Policies that keep running jobs ahead of waiting ones (non-preemptive
FIFO, EaCO, ElasticFlow, the budget greedy) order only the waiting jobs by priority, so
a high-priority job never stops a running one there; preemptive ones (Tiresias,
``fifo(preemptive=True)``) order every job, so it may. ``by_priority`` defines it
(the budget greedy folds the same key into its own sort, ``_Round.order``: queues are
long); with all priorities equal it changes nothing. See docs/scheduling.md.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import filterfalse
from operator import attrgetter
from typing import TypeVar

from scheduling.core.context import JobView, RoundContext
from scheduling.core.placement import FreeGpus
from scheduling.core.types import Job, WaitCode, WaitReason
from scheduling.core.waiting import QueueTail, WaitingReasons

T = TypeVar("T")


# (submit time, job id) of a job view, read in C: every round sorts the whole queue.
_SUBMIT_KEY = attrgetter("job.submit_time_s", "job.job_id")
_ALLOCATION = attrgetter("job.allocation")
_PRIORITY = attrgetter("job.priority")


def submit_order(jobs: Iterable[JobView]) -> list[JobView]:
    """First come, first served; ties by job id so the order is total."""
    return sorted(jobs, key=_SUBMIT_KEY)


def running_first(queue: Sequence[JobView]) -> list[JobView]:
    """Running jobs ahead of waiting ones, each part in ``queue``'s order."""
    # (in C: an allocation is never false, so its truth is ``is not None``)
    return list(filter(_ALLOCATION, queue)) + list(filterfalse(_ALLOCATION, queue))


def _job_of_view(jv: JobView) -> Job:
    return jv.job


def by_priority(
    items: Iterable[T],
    job_of: Callable[[T], Job] = _job_of_view,  # type: ignore[assignment]
    *,
    keep_running_ahead: bool = False,
) -> list[T]:
    """``items`` (job views, or anything ``job_of`` maps to a ``Job``) with a higher
    ``Job.priority`` first; a stable sort, so equal priorities keep the given order.

    With ``keep_running_ahead`` the running jobs keep their places ahead of the rest
    (``items`` must already list them first) and only the others are reordered.

    Where no job has a priority (all 0, the usual case) the sort's keys are all equal
    (running jobs' apart), so the result is the given order (running jobs moved ahead)
    and is made without the sort's key call per job: queues are long."""
    items = list(items)
    if job_of is _job_of_view:
        if not any(map(_PRIORITY, items)):
            return running_first(items) if keep_running_ahead else items  # type: ignore[arg-type]
    elif not any(job_of(item).priority for item in items):
        if not keep_running_ahead:
            return items
        return [i for i in items if job_of(i).allocation is not None] + [
            i for i in items if job_of(i).allocation is None
        ]

    def key(item: T) -> tuple[int, int]:
        job = job_of(item)
        if keep_running_ahead and job.is_running:
            return (0, 0)
        return (1, -job.priority)

    return sorted(items, key=key)


def queue_order(jobs: Iterable[JobView], *, keep_running: bool) -> list[JobView]:
    """Submit order, by priority (see the module docstring); with ``keep_running`` the
    running jobs first."""
    queue = submit_order(jobs)
    if not any(map(_PRIORITY, queue)):
        # (by_priority's own shortcut, without its copies and second walk of the queue)
        return running_first(queue) if keep_running else queue
    if keep_running:
        return by_priority(running_first(queue), keep_running_ahead=True)
    return by_priority(queue)


def serve_queue(
    ctx: RoundContext,
    queue: Sequence[JobView],
    start: Callable[[int, JobView, int], WaitReason | None],
    settled: Callable[[], tuple[WaitCode, Callable[[int, JobView, int], WaitReason]] | None]
    | None = None,
) -> Mapping[str, WaitReason]:
    """The queue loop: walk ``queue`` in order; a job that asks for more GPUs than its
    model's capacity waits as too big, every other one is offered to ``start(position,
    job, requested GPUs)``, which starts it (returns None) or says why it waits. The
    reasons, by job.

    Policies extend the loop through ``start`` (FIFO's strict order or backfilling,
    EaCO's co-location, netdelay's delay timers and preemption, Tiresias' ranks).

    ``settled``, asked after each job, says when nothing later in the queue can start any
    more (FIFO blocked without backfilling): it returns the code and the rule ``start``
    would give every later job's reason by, and the loop stops there; those jobs' reasons
    are made only when read (``waiting.QueueTail``), and are the ones ``start`` would
    have made. A long queue of tiny jobs is then walked as far as its last start."""
    waiting: dict[str, WaitReason] = {}
    capacity = ctx.capacity
    for pos, jv in enumerate(queue):
        job = jv.job
        n = job.requested_gpus
        cap = capacity[jv.gpu_model]
        if n > cap:
            waiting[job.job_id] = too_big(n, jv.gpu_model, cap)
            continue
        reason = start(pos, jv, n)
        if reason is not None:
            waiting[job.job_id] = reason
        if settled is not None:
            rest = settled()
            if rest is not None and pos + 1 < len(queue):
                code, rule = rest
                tail = QueueTail(queue[pos + 1 :], pos + 1, rule, code, capacity)
                return WaitingReasons((waiting, tail))
    return waiting


def waiting_since_s(job: Job) -> float:
    """When a job last changed (stopped, started, resized), else when it was submitted."""
    return job.last_change_s if job.last_change_s is not None else job.submit_time_s


def prior_only(jv: JobView) -> bool:
    """True while job ``jv``'s model is its prior alone (an online model that has not
    measured the job's iteration time yet, ``OnlinePerfModel.estimated``); a catalog model
    (oracle knowledge) is not. Policies that grow jobs by their predicted speed-up give no
    such job more GPUs than its minimum (budget_greedy, "Probes"; elastic)."""
    return bool(getattr(jv.perf, "estimated", False))


def per_gpu_batch(job: Job) -> float:
    """A job's per-GPU batch: ``Job.per_gpu_batch``, else its submitted global batch
    over its requested GPUs."""
    return float(job.per_gpu_batch or job.global_batch / max(job.requested_gpus, 1))


class GpuLedger:
    """Free GPUs per GPU model while a policy hands them out by count (the placer names
    them afterwards): the count side of the round's ``placement.FreeGpus``, starting
    from ``ctx.capacity``. ``free`` is that count, by model."""

    def __init__(self, ctx: RoundContext) -> None:
        self.gpus = FreeGpus(ctx.free_cluster, counts=ctx.capacity)
        self.free: dict[str, int] = self.gpus.free

    def fits(self, jv: JobView, n: int) -> bool:
        return self.gpus.fits(jv.gpu_model, n)

    def take(self, jv: JobView, n: int) -> None:
        self.gpus.reserve(jv.gpu_model, n)

    def give(self, jv: JobView, n: int) -> None:
        self.gpus.release(jv.gpu_model, n)


class FreeForecast:
    """When GPUs free up, from the jobs granted this round and their predicted
    remaining times: built once, answered by bisection (waiting lists are long)."""

    def __init__(self, ctx: RoundContext, granted: list[tuple[JobView, int, float]]) -> None:
        self.now_s = ctx.now_s
        self._free: dict[str, int] = dict(ctx.capacity)
        ends: dict[str, list[tuple[float, int]]] = {}
        for jv, n, remaining_s in granted:
            self._free[jv.gpu_model] = self._free.get(jv.gpu_model, 0) - n
            ends.setdefault(jv.gpu_model, []).append((remaining_s, n))
        self._times: dict[str, list[float]] = {}
        self._freed: dict[str, list[int]] = {}  # GPUs free after each end, cumulative
        for model, items in ends.items():
            items.sort()
            total = self._free.get(model, 0)
            self._times[model] = [t for t, _ in items]
            self._freed[model] = []
            for _, n in items:
                total += n
                self._freed[model].append(total)

    def at(self, jv: JobView, n: int) -> float | None:
        """When ``n`` GPUs of ``jv``'s model are predicted free; None if never."""
        model = jv.gpu_model
        if self._free.get(model, 0) >= n:
            return self.now_s
        freed = self._freed.get(model, [])
        i = bisect.bisect_left(freed, n)
        if i == len(freed):
            return None
        return self.now_s + self._times[model][i]


def expected_free_at(
    ctx: RoundContext, running: list[tuple[JobView, int, float]], jv: JobView, n: int
) -> float | None:
    """When ``n`` GPUs of ``jv``'s model are predicted free, given the free count now
    and the (job, GPUs, remaining seconds) of the jobs granted this round."""
    return FreeForecast(ctx, running).at(jv, n)


_BEHIND = WaitCode.BEHIND_IN_QUEUE  # (looked up once: a long queue makes one reason a job)


def behind_in_queue(
    ahead: int, n: int, model: str, free: int, until_s: float | None = None
) -> WaitReason:
    # positional: a reason a waiting job each round, and keywords cost a third more
    return WaitReason(
        _BEHIND,
        f"Waiting: {ahead} job(s) ahead of it in the queue; "
        f"it needs {n} {model} GPU(s) and {free} are free.",
        until_s,
    )


def too_big(n: int, model: str, capacity: int) -> WaitReason:
    return WaitReason(
        WaitCode.NO_MATCHING_GPU,
        f"Waiting: it asks for {n} {model} GPU(s) but the cluster has only {capacity} schedulable.",
    )
