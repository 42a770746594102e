"""Celery tasks of the telemetry app: thin wrappers, safe to run concurrently with themselves."""

from celery import shared_task

from telemetry import accounting


@shared_task
def process_dirty_hours_task(limit: int = 500) -> int:
    """Recompute rollups and ledgers of GPU-hours that received samples."""
    return accounting.process_dirty_hours(limit=limit)


@shared_task
def delete_expired_samples_task() -> int:
    """Drop raw samples older than TELEMETRY_RETENTION_S (never unaccounted ones)."""
    return accounting.delete_expired_samples()
