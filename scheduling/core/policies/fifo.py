"""First in, first out: the simplest baseline, blind to energy.

Jobs run in submit order with exactly the GPUs they asked for, at the maximum clock
(or a fixed one, see ``fifo_lowclock``), at their submitted batch. By default it is
non-preemptive (a running job keeps running) and strict (the first job that does not
fit blocks everyone behind it); ``backfill=True`` lets later jobs that fit go ahead.
Among the jobs it may start, a higher ``Job.priority`` goes first (``base.queue_order``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scheduling.core.context import JobView, RoundContext
from scheduling.core.policies.base import (
    GpuLedger,
    behind_in_queue,
    expected_free_at,
    queue_order,
    serve_queue,
)
from scheduling.core.registry import register_policy
from scheduling.core.types import Grant, PolicyDecision, WaitCode, WaitReason


@register_policy("fifo")
class Fifo:
    name = "fifo"

    def __init__(
        self,
        *,
        backfill: bool = False,
        preemptive: bool = False,
        sm_clock_mhz: int | None = None,
        power_limit_w: float | None = None,
        placement: str = "first_fit",
    ) -> None:
        if sm_clock_mhz is not None and not sm_clock_mhz > 0:
            raise ValueError("sm_clock_mhz must be positive or None")
        if power_limit_w is not None and not (power_limit_w > 0 and math.isfinite(power_limit_w)):
            raise ValueError("power_limit_w must be a positive number of watts or None")
        self.backfill = backfill
        self.preemptive = preemptive
        self.sm_clock_mhz = sm_clock_mhz
        self.power_limit_w = power_limit_w
        self.placement = placement

    def _clock(self, clocks: tuple[int, ...]) -> int | None:
        """The configured clock, snapped down to a step the GPU supports."""
        if self.sm_clock_mhz is None or not clocks:
            return self.sm_clock_mhz
        below = [c for c in clocks if c <= self.sm_clock_mhz]
        return below[-1] if below else clocks[0]

    def _knobs(
        self, ctx: RoundContext, jv: JobView, n: int
    ) -> tuple[int, int | None, float | None]:
        """(global batch, SM clock, power limit) for a job granted ``n`` GPUs."""
        return jv.job.global_batch, self._clock(jv.perf.clocks_mhz), self.power_limit_w

    def allocate(self, ctx: RoundContext) -> PolicyDecision:
        """Grant jobs in submit order (running ones first unless ``preemptive``), a
        higher ``Job.priority`` first among the jobs it may start (``queue_order``)."""
        queue = queue_order(ctx.jobs, keep_running=not self.preemptive)
        ledger = GpuLedger(ctx)
        grants: list[Grant] = []
        running: list[tuple] = []
        blocked = False

        def start(pos: int, jv: JobView, n: int) -> WaitReason | None:
            nonlocal blocked
            if (blocked and not self.backfill) or not ledger.fits(jv, n):
                until = None if blocked else expected_free_at(ctx, running, jv, n)
                blocked = True
                return behind_in_queue(pos, n, jv.gpu_model, ledger.free[jv.gpu_model], until)
            ledger.take(jv, n)
            batch, clock, limit = self._knobs(ctx, jv, n)
            grants.append(Grant(jv.job.job_id, n, batch, jv.gpu_model, clock, limit))
            est = ctx.estimate(jv, n, batch, clock, limit)
            running.append((jv, n, est.remaining_s))
            return None

        def settled() -> tuple[WaitCode, Callable[[int, JobView, int], WaitReason]] | None:
            """Blocked and strict: no later job starts, and each waits behind the queue
            with the free counts of now (nothing is taken after the block)."""
            if not blocked or self.backfill:
                return None
            free = dict(ledger.free)

            def behind(pos: int, jv: JobView, n: int) -> WaitReason:
                return behind_in_queue(pos, n, jv.gpu_model, free[jv.gpu_model], None)

            return WaitCode.BEHIND_IN_QUEUE, behind

        waiting = serve_queue(ctx, queue, start, settled)
        return PolicyDecision(grants=tuple(grants), waiting=waiting)
