"""What the database holds about allocations, as only tests ask for it."""

from __future__ import annotations

from cluster.models import JobAllocation


def open_allocation_gpu_owners() -> dict[int, int]:
    """GPU id -> job id of every open allocation; raises AssertionError when a GPU is held by
    two jobs at once (nothing may be double-booked)."""
    through = JobAllocation.gpus.through
    owners: dict[int, int] = {}
    for gpu_id, job_id in through.objects.filter(joballocation__ended_at__isnull=True).values_list(
        "gpu_id", "joballocation__job_id"
    ):
        if gpu_id in owners and owners[gpu_id] != job_id:
            raise AssertionError(f"GPU {gpu_id} held by jobs {owners[gpu_id]} and {job_id}")
        owners[gpu_id] = job_id
    return owners
