"""The Celery tasks and their beat entries (intervals from settings, expires = interval)."""

from datetime import timedelta

from agent_samples import series
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.utils import timezone

from cluster.models import Gpu
from frontend.broadcast import EVERYONE_GROUP
from telemetry.ingest import ingest_batch
from telemetry.models import DirtyHour, GpuHour, GpuSample
from telemetry.tasks import (
    broadcast_telemetry_task,
    delete_expired_samples_task,
    process_dirty_hours_task,
)


def test_beat_runs_accounting_and_retention_with_expiry_equal_to_the_interval():
    schedule = settings.CELERY_BEAT_SCHEDULE
    accounting = schedule["telemetry-process-dirty-hours"]
    retention = schedule["telemetry-delete-expired-samples"]
    assert accounting == {
        "task": "telemetry.tasks.process_dirty_hours_task",
        "schedule": settings.TELEMETRY_ACCOUNTING_INTERVAL_S,
        "options": {"expires": settings.TELEMETRY_ACCOUNTING_INTERVAL_S},
    }
    assert schedule["telemetry-broadcast"] == {
        "task": "telemetry.tasks.broadcast_telemetry_task",
        "schedule": settings.TELEMETRY_BROADCAST_INTERVAL_S,
        "options": {"expires": settings.TELEMETRY_BROADCAST_INTERVAL_S},
    }
    assert retention == {
        "task": "telemetry.tasks.delete_expired_samples_task",
        "schedule": settings.TELEMETRY_RETENTION_INTERVAL_S,
        "options": {"expires": settings.TELEMETRY_RETENTION_INTERVAL_S},
    }


def test_the_tasks_account_and_clean_up(agent_node, settings):
    node, _ = agent_node
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    start = timezone.now().replace(minute=30, second=0, microsecond=0) - timedelta(hours=4)
    ingest_batch(node, {"samples": series(gpu.uuid, start, 5, power_w=100.0)})
    assert process_dirty_hours_task.apply().get() == 1
    assert not DirtyHour.objects.exists()
    assert GpuHour.objects.get(gpu=gpu).energy_j == 400.0
    # (retention drops whole hours, the hour before the window kept too: 4 h back, not 3)
    settings.TELEMETRY_RETENTION_S = 2 * 3600
    assert delete_expired_samples_task.apply().get() == 5
    assert not GpuSample.objects.exists()


def test_live_telemetry_reaches_a_dashboard_group_over_redis(agent_node, other_node):
    # given fresh readings from node-01 (two GPUs) and an old one from node-02
    node, _ = agent_node
    now = timezone.now().replace(microsecond=0)
    ingest_batch(node, {"samples": series("GPU-node-01-0", now - timedelta(seconds=3), 2)})
    ingest_batch(
        node, {"samples": series("GPU-node-01-1", now - timedelta(seconds=2), 1, power_w=100.0)}
    )
    ingest_batch(other_node[0], {"samples": series("GPU-node-02-0", now - timedelta(minutes=5), 1)})
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(EVERYONE_GROUP, channel)
    try:
        # when beat's task runs
        assert broadcast_telemetry_task.apply().get() == 1
        message = async_to_sync(layer.receive)(channel)
    finally:
        async_to_sync(layer.group_discard)(EVERYONE_GROUP, channel)
    # then the dashboards get the latest reading of each GPU heard from in the last 30 s
    payload = message["payload"]
    assert message["type"] == "telemetry.update"
    assert payload["cluster_power_w"] == 350.0
    assert payload["nodes"] == [{"node": "node-01", "power_w": 350.0}]
    assert payload["gpus"] == [
        {"node": "node-01", "index": 0, "util_pct": 90.0, "power_w": 250.0},
        {"node": "node-01", "index": 1, "util_pct": 90.0, "power_w": 100.0},
    ]
