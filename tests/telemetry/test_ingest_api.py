"""The samples endpoint: stored once, all-or-nothing, only for the token's own node."""

from datetime import UTC, datetime, timedelta

import pytest
from agent_samples import sample, series
from django.utils import timezone

from telemetry.models import DirtyHour, GpuSample

URL = "/api/agent/samples/"
NO_OFFSET = "An ISO 8601 timestamp with a UTC offset is required."


@pytest.fixture
def now():
    return timezone.now().replace(microsecond=0)


def test_a_batch_is_stored_and_its_hours_marked_for_accounting(agent_node, agent_client, now):
    node, token = agent_node
    batch = {"samples": series("GPU-node-01-0", now - timedelta(seconds=10), 5, energy_j=10.0)}
    response = agent_client(token).post(URL, batch, format="json")
    assert response.status_code == 200, response.json()
    assert response.json() == {"received": 5, "inserted": 5, "duplicates": 0}
    stored = GpuSample.objects.filter(gpu__uuid="GPU-node-01-0").order_by("ts")
    assert [s.ts for s in stored] == [now - timedelta(seconds=10 - i) for i in range(5)]
    assert {(s.power_w, s.energy_j, s.sm_clock_mhz) for s in stored} == {(250.0, 10.0, 1410)}
    hour = (now - timedelta(seconds=10)).replace(minute=0, second=0)
    assert DirtyHour.objects.filter(gpu__uuid="GPU-node-01-0", hour=hour).exists()


def test_a_duplicate_batch_is_counted_once(agent_node, agent_client, now):
    node, token = agent_node
    batch = {"samples": series("GPU-node-01-1", now - timedelta(seconds=30), 10)}
    client = agent_client(token)
    assert client.post(URL, batch, format="json").json()["inserted"] == 10
    again = client.post(URL, batch, format="json")
    assert again.status_code == 200
    assert again.json() == {"received": 10, "inserted": 0, "duplicates": 10}
    assert GpuSample.objects.count() == 10


def test_a_partly_overlapping_batch_stores_only_the_new_samples(agent_node, agent_client, now):
    node, token = agent_node
    client = agent_client(token)
    start = now - timedelta(seconds=30)
    client.post(URL, {"samples": series("GPU-node-01-0", start, 6)}, format="json")
    second = client.post(
        URL, {"samples": series("GPU-node-01-0", start + timedelta(seconds=3), 6)}, format="json"
    )
    assert second.json() == {"received": 6, "inserted": 3, "duplicates": 3}
    assert GpuSample.objects.count() == 9


@pytest.mark.parametrize(
    ("bad", "field", "message"),
    [
        ({"power_w": -1.0}, "power_w", "Must be between 0 and 2000 W."),
        ({"power_w": 250000.0}, "power_w", "Must be between 0 and 2000 W."),
        ({"power_w": None}, "power_w", "This field is required."),
        ({"util_pct": 101}, "util_pct", "Must be between 0 and 100 %."),
        ({"power_w": "250"}, "power_w", "A number is required."),
        (
            {"ts": "2026-11-22T03:00:00"},
            "ts",
            "An ISO 8601 timestamp with a UTC offset is required.",
        ),
        ({"ts": "yesterday"}, "ts", "An ISO 8601 timestamp with a UTC offset is required."),
        ({"gpu_uuid": "GPU-nobody"}, "gpu_uuid", "Unknown GPU: register it first."),
    ],
)
def test_a_bad_sample_rejects_the_whole_batch(agent_node, agent_client, now, bad, field, message):
    node, token = agent_node
    samples = series("GPU-node-01-0", now - timedelta(seconds=10), 4)
    samples[2].update(bad)
    response = agent_client(token).post(URL, {"samples": samples}, format="json")
    assert response.status_code == 400
    assert response.json() == {"samples": {"2": {field: [message]}}}
    assert GpuSample.objects.count() == 0
    assert DirtyHour.objects.count() == 0


def test_timestamps_beyond_retention_or_in_the_future_are_refused(agent_node, agent_client, now):
    node, token = agent_node
    samples = [
        sample("GPU-node-01-0", now - timedelta(days=30)),
        sample("GPU-node-01-0", now + timedelta(hours=1)),
        sample("GPU-node-01-0", now),
    ]
    response = agent_client(token).post(URL, {"samples": samples}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "samples": {
            "0": {"ts": ["Older than the retention window."]},
            "1": {"ts": ["In the future."]},
        }
    }
    assert GpuSample.objects.count() == 0


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({}, "A list of samples is required."),
        ({"samples": "many"}, "A list of samples is required."),
        ({"samples": []}, "The batch is empty."),
    ],
)
def test_a_malformed_envelope_is_refused(agent_node, agent_client, payload, message):
    node, token = agent_node
    response = agent_client(token).post(URL, payload, format="json")
    assert response.status_code == 400
    assert response.json() == {"samples": [message]}


def test_an_oversized_batch_is_refused(agent_node, agent_client, now, settings):
    settings.TELEMETRY_MAX_BATCH_SAMPLES = 3
    node, token = agent_node
    samples = series("GPU-node-01-0", now - timedelta(seconds=10), 4)
    response = agent_client(token).post(URL, {"samples": samples}, format="json")
    assert response.status_code == 400
    assert response.json() == {"samples": ["At most 3 samples per batch, got 4."]}
    assert GpuSample.objects.count() == 0


def test_a_token_posting_for_another_nodes_gpu_is_refused(
    agent_node, other_node, agent_client, now
):
    node, token = agent_node
    samples = [
        sample("GPU-node-01-0", now - timedelta(seconds=2)),
        sample("GPU-node-02-0", now - timedelta(seconds=2)),
    ]
    response = agent_client(token).post(URL, {"samples": samples}, format="json")
    assert response.status_code == 403
    assert response.json() == {"samples": ["GPU(s) GPU-node-02-0 belong to another node."]}
    assert GpuSample.objects.count() == 0
    assert DirtyHour.objects.count() == 0


@pytest.mark.parametrize("header", ["Token not-a-token", "Bearer abc", ""])
def test_without_a_valid_agent_token_nothing_is_stored(agent_node, client, now, header):
    batch = {"samples": [sample("GPU-node-01-0", now)]}
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    response = client.post(URL, batch, content_type="application/json", **extra)
    assert response.status_code == 401
    assert GpuSample.objects.count() == 0


def test_a_user_api_token_is_not_an_agent_token(agent_node, api_client, member, now):
    batch = {"samples": [sample("GPU-node-01-0", now)]}
    response = api_client(member).post(URL, batch, format="json")
    assert response.status_code == 401
    assert GpuSample.objects.count() == 0


def test_samples_across_an_hour_boundary_mark_both_hours(agent_node, agent_client):
    node, token = agent_node
    boundary = timezone.now().replace(minute=0, second=0, microsecond=0)
    batch = {"samples": series("GPU-node-01-0", boundary - timedelta(seconds=2), 4)}
    agent_client(token).post(URL, batch, format="json")
    hours = set(DirtyHour.objects.values_list("hour", flat=True))
    assert hours == {boundary - timedelta(hours=1), boundary}


def test_the_fixed_now_helper_is_utc():
    # guards the helpers above: ISO strings they produce carry the UTC offset
    assert sample("x", datetime(2026, 1, 1, tzinfo=UTC))["ts"] == "2026-01-01T00:00:00+00:00"
