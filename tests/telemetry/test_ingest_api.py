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
    assert response.json() == {"received": 5, "inserted": 5, "duplicates": 0, "conflicts": 0}
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
    assert again.json() == {"received": 10, "inserted": 0, "duplicates": 10, "conflicts": 0}
    assert GpuSample.objects.count() == 10


def test_a_partly_overlapping_batch_stores_only_the_new_samples(agent_node, agent_client, now):
    node, token = agent_node
    client = agent_client(token)
    start = now - timedelta(seconds=30)
    client.post(URL, {"samples": series("GPU-node-01-0", start, 6)}, format="json")
    second = client.post(
        URL, {"samples": series("GPU-node-01-0", start + timedelta(seconds=3), 6)}, format="json"
    )
    assert second.json() == {"received": 6, "inserted": 3, "duplicates": 3, "conflicts": 0}
    assert GpuSample.objects.count() == 9


def test_two_samples_of_one_gpu_at_one_time_in_a_batch_are_refused_naming_the_time(
    agent_node, agent_client, now
):
    # given a batch with two readings of one GPU at one instant (the second written with
    # another UTC offset), and a third of another GPU at that instant
    node, token = agent_node
    at = now - timedelta(seconds=5)
    batch = {
        "samples": [
            sample("GPU-node-01-0", at, power_w=250.0),
            sample("GPU-node-01-1", at),
            sample("GPU-node-01-0", at.astimezone(timezone.get_fixed_timezone(120)), power_w=300.0),
        ]
    }
    response = agent_client(token).post(URL, batch, format="json")
    # then the batch is refused naming the time (which reading is true is unknowable), and
    # nothing is stored; before, the first was kept and the second dropped without a word
    assert response.status_code == 400
    sent = batch["samples"][2]["ts"]
    assert response.json() == {
        "samples": {
            "2": {
                "ts": [
                    f"Sample 0 of this batch has the same GPU and time ({sent}): which one "
                    "is true is unknowable."
                ]
            }
        }
    }
    assert not GpuSample.objects.exists()


def test_a_resent_sample_with_other_values_is_kept_as_stored_and_counted_as_a_conflict(
    agent_node, agent_client, now
):
    # given three samples stored
    node, token = agent_node
    client = agent_client(token)
    start = now - timedelta(seconds=10)
    first = series("GPU-node-01-0", start, 3)
    assert client.post(URL, {"samples": first}, format="json").status_code == 200
    # when a retry sends them again, one with another power reading, plus one new sample
    again = [*first, sample("GPU-node-01-0", start + timedelta(seconds=3))]
    again[1] = {**again[1], "power_w": 333.0}
    response = client.post(URL, {"samples": again}, format="json")
    # then the answer says one resent sample differed from what is stored, and the stored
    # one is kept: a retry stays idempotent, a contradiction is not silent
    assert response.status_code == 200
    assert response.json() == {"received": 4, "inserted": 1, "duplicates": 3, "conflicts": 1}
    stored = GpuSample.objects.order_by("ts").values_list("power_w", flat=True)
    assert list(stored) == [250.0, 250.0, 250.0, 250.0]


@pytest.mark.parametrize(
    ("bad", "field", "message"),
    [
        ({"power_w": -1.0}, "power_w", "Must be between 0 and 2000 W."),
        ({"power_w": 250000.0}, "power_w", "Must be between 0 and 2000 W."),
        # a JSON integer beyond any float (float() raises OverflowError: it was a 500)
        ({"power_w": 10**400}, "power_w", "Must be between 0 and 2000 W."),
        ({"power_w": None}, "power_w", "This field is required."),
        # a live probe's 1,900 W on a 350 W GPU were charged to its team's budget
        (
            {"power_w": 1900.0},
            "power_w",
            "1900 W is above 1.5 x this GPU's highest power limit (400 W): no GPU draws that.",
        ),
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


def test_a_sample_with_only_its_required_readings_is_stored_with_the_rest_null(
    agent_node, agent_client, now
):
    # what the schema says a sample needs (gpu_uuid, ts, power_w): the readings an agent
    # could not take may be left out, and are stored as unknown
    node, token = agent_node
    bare = {"gpu_uuid": "GPU-node-01-0", "ts": (now - timedelta(seconds=5)).isoformat(),
            "power_w": 120.0}  # fmt: skip
    response = agent_client(token).post(URL, {"samples": [bare]}, format="json")
    assert response.status_code == 200, response.json()
    stored = GpuSample.objects.get()
    assert (stored.power_w, stored.energy_j, stored.util_pct, stored.sm_clock_mhz) == (
        120.0, None, None, None,
    )  # fmt: skip


def _post_while_deleting(token, batch, delete):
    """``batch`` posted while ``delete`` (a delete in its own transaction) holds its locks;
    the delete commits a second later, while the batch's insert waits on it. The answer."""
    from rest_framework.test import APIClient
    from support.races import while_held

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    client.raise_request_exception = False
    # (the batch's insert reaches the deleted GPU's row and waits on it)
    return while_held(delete, lambda: client.post(URL, batch, format="json"))


@pytest.mark.django_db(transaction=True)
def test_a_batch_beside_its_nodes_delete_is_a_401_not_a_500(make_node, now):
    # A live probe raced a sample batch with DELETE /api/nodes/<id>/: 2 of 12 were a 500,
    # the dirty-hour marks' foreign key failing at the commit, the GPUs deleted meanwhile.
    # The node's token went with it: the agent hears what its next request would, a 401.
    from cluster.models import Node
    from cluster.services import delete_node

    node = make_node("node-09", gpus=2)
    token = node.issue_agent_token()
    batch = {"samples": series("GPU-node-09-0", now - timedelta(seconds=10), 5)}

    response = _post_while_deleting(token, batch, lambda: delete_node(node, actor=None))

    assert response.status_code == 401, response.content
    assert "deleted" in response.json()["detail"]
    assert not Node.objects.filter(pk=node.pk).exists()
    assert not GpuSample.objects.exists() and not DirtyHour.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_batch_beside_its_gpus_delete_refuses_only_that_gpus_samples(make_node, now):
    # The same race with DELETE /api/gpus/<id>/ of one of the batch's GPUs (one registered
    # by mistake): the samples of that GPU are refused by position, as an unknown GPU's are
    # (the agent quarantines them and posts the rest again), not a 500 for the batch.
    from cluster.services import delete_gpu

    node = make_node("node-09", gpus=2)
    token = node.issue_agent_token()
    kept, doomed = node.gpus.order_by("index")
    client = _client(token)
    # what was stored before stays as it was
    earlier = series(kept.uuid, now - timedelta(seconds=60), 3)
    assert client.post(URL, {"samples": earlier}, format="json").status_code == 200
    batch = {
        "samples": [
            *series(kept.uuid, now - timedelta(seconds=10), 2),
            *series(doomed.uuid, now - timedelta(seconds=10), 2),
        ]
    }

    response = _post_while_deleting(token, batch, lambda: delete_gpu(doomed, actor=None))

    assert response.status_code == 400, response.content
    unknown = {"gpu_uuid": ["Unknown GPU: register it first."]}
    assert response.json() == {"samples": {"2": unknown, "3": unknown}}
    assert list(GpuSample.objects.order_by("ts").values_list("gpu_id", "ts")) == [
        (kept.pk, now - timedelta(seconds=60 - i)) for i in range(3)
    ]
    # and the rest, posted again, is stored
    again = client.post(URL, {"samples": batch["samples"][:2]}, format="json")
    assert again.json() == {"received": 2, "inserted": 2, "duplicates": 0, "conflicts": 0}


def _client(token):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client
