"""Celery tasks of the scheduling app: thin, safe to run concurrently with themselves (the
round takes an advisory lock; liveness uses conditional updates). Beat enqueues them with
``expires`` equal to their interval, so a stalled worker never works through a backlog."""

from celery import shared_task
from django.utils import timezone

from scheduling import services


@shared_task
def run_scheduling_round_task() -> dict:
    """One scheduling round at the current time (skipped if another holds the lock, if the
    configured interval has not passed yet, or while the scheduler is paused)."""
    result = services.run_scheduling_round(now=timezone.now())
    return {
        "ran": result.ran,
        "skipped": result.skipped,
        "round_id": result.round_id,
        "applied": result.applied,
        "failed": result.failed,
        "requeued": result.requeued,
        "reconciled": result.reconciled,
    }


@shared_task
def mark_silent_nodes_task() -> list[int] | None:
    """Mark nodes that stopped heart-beating unhealthy and re-queue their jobs (skipped, None,
    while a round runs: the round does the same under its lock)."""
    return services.check_liveness(now=timezone.now())
