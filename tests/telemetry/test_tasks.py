"""The Celery tasks and their beat entries (intervals from settings, expires = interval)."""

from datetime import timedelta

from agent_samples import series
from django.conf import settings
from django.utils import timezone

from cluster.models import Gpu
from telemetry.ingest import ingest_batch
from telemetry.models import DirtyHour, GpuHour, GpuSample
from telemetry.tasks import delete_expired_samples_task, process_dirty_hours_task


def test_beat_runs_accounting_and_retention_with_expiry_equal_to_the_interval():
    schedule = settings.CELERY_BEAT_SCHEDULE
    accounting = schedule["telemetry-process-dirty-hours"]
    retention = schedule["telemetry-delete-expired-samples"]
    assert accounting == {
        "task": "telemetry.tasks.process_dirty_hours_task",
        "schedule": settings.TELEMETRY_ACCOUNTING_INTERVAL_S,
        "options": {"expires": settings.TELEMETRY_ACCOUNTING_INTERVAL_S},
    }
    assert retention == {
        "task": "telemetry.tasks.delete_expired_samples_task",
        "schedule": settings.TELEMETRY_RETENTION_INTERVAL_S,
        "options": {"expires": settings.TELEMETRY_RETENTION_INTERVAL_S},
    }


def test_the_tasks_account_and_clean_up(agent_node, settings):
    node, _ = agent_node
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    start = timezone.now().replace(minute=30, second=0, microsecond=0) - timedelta(hours=3)
    ingest_batch(node, {"samples": series(gpu.uuid, start, 5, power_w=100.0)})
    assert process_dirty_hours_task.apply().get() == 1
    assert not DirtyHour.objects.exists()
    assert GpuHour.objects.get(gpu=gpu).energy_j == 400.0
    settings.TELEMETRY_RETENTION_S = 2 * 3600
    assert delete_expired_samples_task.apply().get() == 5
    assert not GpuSample.objects.exists()
