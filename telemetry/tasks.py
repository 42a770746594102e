"""Celery tasks of the telemetry app: thin wrappers, safe to run concurrently with themselves."""

from celery import shared_task
from django.utils import timezone

from config import events
from telemetry import accounting
from telemetry.live import live_summary


@shared_task
def process_dirty_hours_task(limit: int = 500) -> int:
    """Recompute rollups and ledgers of GPU-hours that received samples."""
    return accounting.process_dirty_hours(limit=limit)


@shared_task
def delete_expired_samples_task() -> int:
    """Drop raw samples older than TELEMETRY_RETENTION_S (never unaccounted ones)."""
    return accounting.delete_expired_samples()


@shared_task
def broadcast_telemetry_task() -> int:
    """Publish the latest power and utilisation (the frontend pushes it to open dashboards);
    returns what the subscribers reported (the frontend: dashboard groups reached)."""
    results = events.publish(events.TELEMETRY_UPDATED, live_summary(timezone.now()))
    return sum(int(r or 0) for r in results)
