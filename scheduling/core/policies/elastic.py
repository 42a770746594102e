"""An elastic, throughput-maximising baseline that ignores energy (Pollux / ElasticFlow
style; reconstructed: neither system's code is used).

Every admitted job first gets its smallest buddy GPU count (>= ``min_gpus``), running
jobs first, then waiting ones in submit order (a higher ``Job.priority`` first), always
at full clock and its submitted batch. The spare GPUs then go, one step at a time, to
the job whose next buddy size adds the most *normalised speedup per extra GPU*:
speedup(n) = T(n_min) / T(n), with T the predicted remaining time (plus ``restart_s``
when the count changes for a running job), as Pollux normalises throughput to a job's
minimal allocation. A max-heap serves the best step while GPUs last and the step still
gains more than ``min_gain``.

A job whose learned model is still its prior alone (``OnlinePerfModel.estimated``: no
iteration time of its own measured, and no profile of its workload that knows the compute
split) is not grown past its smallest size (or the size it runs on) until it is observed,
as Pollux starts a job it has not profiled on one GPU and lets it at most double what it
has run on: a prior borrowed from another workload can be wrong by orders of magnitude
where the job never ran. Learned, pollux_workload-1..8, this rule took `elastic`'s
average JCT from 1.049 to 1.011 of the oracle's (median; docs/benchmarks.md, "A job its
prior alone knows is not grown"). Pollux's doubling cap itself was tried too and left
out: a larger count is measured by ``gpu_probe``'s one probe, and the cap on top moved the
median by +0.4%.
"""

from __future__ import annotations

import heapq
from operator import attrgetter

from scheduling.core.context import RoundContext
from scheduling.core.placement import job_buddy_sizes
from scheduling.core.policies.base import FreeForecast, GpuLedger, prior_only, queue_order
from scheduling.core.registry import register_policy
from scheduling.core.types import Grant, PolicyDecision, WaitCode, WaitReason
from scheduling.core.waiting import QueueTail, WaitingReasons

_JOB_ID = attrgetter("job.job_id")
_MIN_GPUS = attrgetter("job.min_gpus")


@register_policy("elastic")
class Elastic:
    name = "elastic"
    probes_gpus = True  # a learned model's unmeasured larger count is tried once (gpu_probe)

    def __init__(
        self, *, restart_s: float = 30.0, min_gain: float = 1e-3, placement: str = "buddy"
    ) -> None:
        if not (restart_s >= 0 and min_gain >= 0):
            raise ValueError("restart_s and min_gain must be 0 or more")
        self.restart_s = restart_s
        self.min_gain = min_gain
        self.placement = placement

    def allocate(self, ctx: RoundContext) -> PolicyDecision:
        queue = queue_order(ctx.jobs, keep_running=True)
        ledger = GpuLedger(ctx)
        sizes_of: dict[str, tuple[int, ...]] = {}
        level: dict[str, int] = {}
        base_s: dict[str, float] = {}
        blocked = []

        def time_s(jv, n: int) -> float:
            t = ctx.estimate(jv, n).remaining_s
            if jv.job.allocation is not None and jv.job.allocation.n_gpus != n:
                t += self.restart_s
            return t

        # A job's buddy sizes depend on its GPU model and GPU range alone: worked out once
        # per such shape, as a long queue has few.
        shape_sizes: dict[tuple[str, int, int], tuple[int, ...]] = {}
        rest: list = []  # the queue past the point where no GPU is left (blocked, every one)
        rest_at = len(queue)
        look = True  # whether to look for that point still
        for pos, jv in enumerate(queue):
            if look and not any(ledger.free.values()):
                look = False
                if min(map(_MIN_GPUS, queue[pos:])) >= 1:
                    # No GPU of any model is free and every job left needs one at least:
                    # each is blocked, as the walk would find it one by one (a long
                    # queue's tail).
                    rest, rest_at = queue[pos:], pos
                    break
            job = jv.job
            shape = (jv.gpu_model, job.min_gpus, job.max_gpus)
            sizes = shape_sizes.get(shape)
            if sizes is None:
                sizes = shape_sizes[shape] = job_buddy_sizes(
                    job, ctx.node_gpus[jv.gpu_model], ctx.capacity[jv.gpu_model]
                )
            if not ledger.fits(jv, sizes[0]):
                blocked.append(jv)
                continue
            ledger.take(jv, sizes[0])
            if prior_only(jv):
                # its prior alone would say what more GPUs gain: no more than it runs on
                ran = job.allocation.n_gpus if job.allocation is not None else 0
                sizes = tuple(n for n in sizes if n <= max(sizes[0], ran))
            sizes_of[job.job_id] = sizes
            level[job.job_id] = 0
            base_s[job.job_id] = time_s(jv, sizes[0])

        views = dict(zip(map(_JOB_ID, queue), queue, strict=True))  # (in C)
        heap: list[tuple[float, int, str]] = []
        rank = {jid: i for i, jid in enumerate(sizes_of)}

        def push(jid: str) -> None:
            sizes, k = sizes_of[jid], level[jid]
            if k + 1 >= len(sizes) or base_s[jid] <= 0.0:
                return
            jv = views[jid]
            now_speed = base_s[jid] / time_s(jv, sizes[k])
            next_speed = base_s[jid] / time_s(jv, sizes[k + 1])
            per_gpu = (next_speed - now_speed) / (sizes[k + 1] - sizes[k])
            if per_gpu > self.min_gain:
                heapq.heappush(heap, (-per_gpu, rank[jid], jid))

        for jid in sizes_of:
            push(jid)
        while heap:
            _, _, jid = heapq.heappop(heap)
            sizes, k = sizes_of[jid], level[jid]
            extra = sizes[k + 1] - sizes[k]
            if not ledger.fits(views[jid], extra):
                continue  # free GPUs only shrink: this job is done growing
            ledger.take(views[jid], extra)
            level[jid] = k + 1
            push(jid)

        grants = tuple(
            Grant(jid, sizes_of[jid][level[jid]], views[jid].job.global_batch, views[jid].gpu_model)
            for jid in sizes_of
        )
        granted = [
            (views[g.job_id], g.n_gpus, ctx.estimate(views[g.job_id], g.n_gpus).remaining_s)
            for g in grants
        ]
        forecast = FreeForecast(ctx, granted)
        # The reason depends on the GPU model and least GPU count alone: one (frozen)
        # reason per such pair, shared by its blocked jobs (a long queue has few pairs).
        reasons: dict[tuple[str, int], WaitReason] = {}

        def blocked_reason(pos: int, jv, n: int) -> WaitReason:
            pair = (jv.gpu_model, jv.job.min_gpus)
            reason = reasons.get(pair)
            if reason is None:
                reason = reasons[pair] = WaitReason(
                    WaitCode.BEHIND_IN_QUEUE,
                    f"Waiting: every {jv.gpu_model} GPU already runs an earlier job at its "
                    f"smallest size; it needs {jv.job.min_gpus}.",
                    until_s=forecast.at(jv, jv.job.min_gpus),
                )
            return reason

        waiting: dict[str, WaitReason] = {}
        for jv in blocked:
            waiting[jv.job.job_id] = blocked_reason(0, jv, 0)
        if rest:
            # the tail's reasons made when read (``waiting.QueueTail``), the same ones
            tail = QueueTail(rest, rest_at, blocked_reason, WaitCode.BEHIND_IN_QUEUE, None)
            return PolicyDecision(grants=grants, waiting=WaitingReasons((waiting, tail)))
        return PolicyDecision(grants=grants, waiting=waiting)
