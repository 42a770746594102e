"""Pieces every policy shares: queue order, a GPU ledger, and waiting sentences."""

from __future__ import annotations

from collections.abc import Iterable

from scheduling.core.context import JobView, RoundContext
from scheduling.core.types import WaitCode, WaitReason


def submit_order(jobs: Iterable[JobView]) -> list[JobView]:
    """First come, first served; ties by job id so the order is total."""
    return sorted(jobs, key=lambda jv: (jv.job.submit_time_s, jv.job.job_id))


class GpuLedger:
    """Free GPUs per GPU model while a policy hands them out."""

    def __init__(self, ctx: RoundContext) -> None:
        self.free: dict[str, int] = dict(ctx.capacity)

    def fits(self, jv: JobView, n: int) -> bool:
        return self.free.get(jv.gpu_model, 0) >= n

    def take(self, jv: JobView, n: int) -> None:
        self.free[jv.gpu_model] -= n

    def give(self, jv: JobView, n: int) -> None:
        self.free[jv.gpu_model] += n


def expected_free_at(
    ctx: RoundContext, running: list[tuple[JobView, int, float]], jv: JobView, n: int
) -> float | None:
    """When ``n`` GPUs of ``jv``'s model are predicted free, given the free count now
    and the (job, GPUs, remaining seconds) of the jobs granted this round."""
    free = ctx.capacity.get(jv.gpu_model, 0) - sum(
        k for r, k, _ in running if r.gpu_model == jv.gpu_model
    )
    if free >= n:
        return ctx.now_s
    for r, k, remaining_s in sorted(running, key=lambda t: t[2]):
        if r.gpu_model != jv.gpu_model:
            continue
        free += k
        if free >= n:
            return ctx.now_s + remaining_s
    return None


def behind_in_queue(
    ahead: int, n: int, model: str, free: int, until_s: float | None = None
) -> WaitReason:
    return WaitReason(
        WaitCode.BEHIND_IN_QUEUE,
        f"Waiting: {ahead} job(s) ahead of it in the queue; "
        f"it needs {n} {model} GPU(s) and {free} are free.",
        until_s=until_s,
    )


def too_big(n: int, model: str, capacity: int) -> WaitReason:
    return WaitReason(
        WaitCode.NO_MATCHING_GPU,
        f"Waiting: it asks for {n} {model} GPU(s) but the cluster has only {capacity} schedulable.",
    )
