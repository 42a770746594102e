"""Tiresias: two-dimensional least attained service with discretised queues.

Gu et al., NSDI'19 (baseline; no paper text at hand, so this follows its published
design): a job's attained service is GPUs x time it has run (``Job.attained_gpu_s``).
Queue k holds jobs whose service lies between ``queue_thresholds_gpu_s[k-1]`` and
``queue_thresholds_gpu_s[k]``; lower queues go first, first come first served inside a
queue. It is preemptive (a job that drops to a lower-priority queue can be stopped for
one that has had less service) and work-conserving (a later job that fits runs when an
earlier one does not). A job that has waited ``starvation_s`` since it last ran is
promoted to the first queue. Jobs run with the GPUs they asked for, at full clock.
A higher ``Job.priority`` goes ahead of every queue (``base.by_priority``).
"""

from __future__ import annotations

import bisect

from scheduling.core.context import JobView, RoundContext
from scheduling.core.policies.base import (
    FreeForecast,
    GpuLedger,
    by_priority,
    serve_queue,
    waiting_since_s,
)
from scheduling.core.registry import register_policy
from scheduling.core.types import Grant, PolicyDecision, WaitCode, WaitReason


@register_policy("tiresias")
class Tiresias:
    name = "tiresias"

    def __init__(
        self,
        *,
        queue_thresholds_gpu_s: tuple[float, ...] = (3600.0, 36_000.0),
        starvation_s: float | None = None,
        placement: str = "first_fit",
    ) -> None:
        if list(queue_thresholds_gpu_s) != sorted(queue_thresholds_gpu_s):
            raise ValueError("queue_thresholds_gpu_s must be ascending")
        if any(not t > 0 for t in queue_thresholds_gpu_s):
            raise ValueError("queue_thresholds_gpu_s must be positive")
        if starvation_s is not None and not starvation_s > 0:
            raise ValueError("starvation_s must be positive or None")
        self.thresholds = tuple(queue_thresholds_gpu_s)
        self.starvation_s = starvation_s
        self.placement = placement

    def queue_of(self, jv: JobView, now: float) -> int:
        job = jv.job
        if self.starvation_s is not None and not job.is_running:
            if now - waiting_since_s(job) >= self.starvation_s:
                return 0
        return bisect.bisect_right(self.thresholds, job.attained_gpu_s)

    def allocate(self, ctx: RoundContext) -> PolicyDecision:
        """Grant jobs by (queue, submit time) while GPUs last; others wait or are preempted."""
        # Preemptive: every job is reconsidered, a higher Job.priority first.
        ranked = by_priority(
            sorted(
                ctx.jobs,
                key=lambda jv: (self.queue_of(jv, ctx.now_s), jv.job.submit_time_s, jv.job.job_id),
            )
        )
        ledger = GpuLedger(ctx)
        grants: list[Grant] = []
        granted: list[tuple] = []
        left: list[tuple[int, JobView]] = []

        def start(pos: int, jv: JobView, n: int) -> WaitReason | None:
            if ledger.fits(jv, n):
                ledger.take(jv, n)
                grants.append(Grant(jv.job.job_id, n, jv.job.global_batch, jv.gpu_model))
                granted.append((jv, n, ctx.estimate(jv, n).remaining_s))
            else:
                left.append((pos, jv))  # its reason needs the forecast of all grants
            return None

        waiting = serve_queue(ctx, ranked, start)
        forecast = FreeForecast(ctx, granted)
        for pos, jv in left:
            job = jv.job
            q = self.queue_of(jv, ctx.now_s)
            code = WaitCode.PREEMPTED if job.is_running else WaitCode.BEHIND_IN_QUEUE
            what = "preempted, " if job.is_running else ""
            waiting[job.job_id] = WaitReason(
                code,
                f"Waiting: {what}in priority queue {q} with "
                f"{job.attained_gpu_s:.0f} GPU-s of service; {pos} job(s) with less service "
                f"or earlier arrival hold the GPUs it needs ({job.requested_gpus}).",
                until_s=forecast.at(jv, job.requested_gpus),
            )
        return PolicyDecision(grants=tuple(grants), waiting=waiting)
