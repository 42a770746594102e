"""What the agent reports about a GPU lands on its ``Gpu`` row: the maximum and lockable SM
clocks at registration, the SM clock and power limit in force from its newest sample. Through
the agent API with a real agent token, read back through the admin's GPU API."""

import threading
import time
from datetime import timedelta

import pytest
from agent_samples import sample
from django.utils import timezone
from support.nodes import registered_gpu

from cluster.models import Gpu

REGISTER, SAMPLES = "/api/agent/register/", "/api/agent/samples/"


def _api_gpu(api_client, admin_user, uuid_):
    gpu = Gpu.objects.get(uuid=uuid_)
    response = api_client(admin_user).get(f"/api/gpus/{gpu.pk}/")
    assert response.status_code == 200
    return response.json()


def test_registration_records_the_maximum_and_the_lockable_clocks(
    make_node, agent_client, api_client, admin_user
):
    node = make_node("node-09", gpus=0)
    client = agent_client(node.issue_agent_token())
    clocks = [1410, 210, 1395, 1410, 405]  # NVML lists them per memory clock: repeats
    body = {"gpus": [registered_gpu("GPU-a", 0, supported_sm_clocks_mhz=clocks)]}
    assert client.post(REGISTER, body, format="json").status_code == 200
    shown = _api_gpu(api_client, admin_user, "GPU-a")
    assert shown["max_sm_clock_mhz"] == 1410
    assert shown["supported_sm_clocks_mhz"] == [1410, 1395, 405, 210]
    # an agent that cannot read them (or an older one that sends none) keeps what is known
    again = {
        "gpus": [registered_gpu("GPU-a", 0, max_sm_clock_mhz=None, supported_sm_clocks_mhz=[])]
    }
    assert client.post(REGISTER, again, format="json").status_code == 200
    gpu = Gpu.objects.get(uuid="GPU-a")
    assert (gpu.max_sm_clock_mhz, gpu.supported_sm_clocks_mhz) == (1410, [1410, 1395, 405, 210])
    # a new board reports new clocks
    faster = {
        "gpus": [registered_gpu("GPU-a", 0, max_sm_clock_mhz=1980, supported_sm_clocks_mhz=[1980])]
    }
    assert client.post(REGISTER, faster, format="json").status_code == 200
    gpu.refresh_from_db()
    assert (gpu.max_sm_clock_mhz, gpu.supported_sm_clocks_mhz) == (1980, [1980])


def test_a_clock_above_the_reported_maximum_is_refused(make_node, agent_client):
    node = make_node("node-09", gpus=0)
    body = {"gpus": [registered_gpu("GPU-a", 0, supported_sm_clocks_mhz=[1500, 1410])]}
    response = agent_client(node.issue_agent_token()).post(REGISTER, body, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "gpus": [
            {
                "supported_sm_clocks_mhz": [
                    "max_sm_clock_mhz 1410 MHz is below 1500 MHz, the highest of "
                    "supported_sm_clocks_mhz."
                ]
            }
        ]
    }
    assert not Gpu.objects.filter(uuid="GPU-a").exists()


def test_a_maximum_clock_below_the_registered_clocks_is_refused_naming_both(
    agent_node, agent_client
):
    # given GPUs registered with clocks up to 1410 MHz and no known maximum
    node, token = agent_node
    # when a registration reports a 1000 MHz maximum but no clock list (the list is kept)
    body = {
        "gpus": [
            registered_gpu("GPU-node-01-0", 0, max_sm_clock_mhz=1000),
            registered_gpu("GPU-node-01-1", 1),
        ]
    }
    response = agent_client(token).post(REGISTER, body, format="json")
    # then a 400 names both values, and nothing of either GPU changed: stored, the scheduler
    # assigned 1410 MHz and the agent capped it at 1000 (a run unlike the one predicted)
    assert response.status_code == 400
    assert response.json() == {
        "gpus": [
            {
                "max_sm_clock_mhz": [
                    "max_sm_clock_mhz 1000 MHz is below 1410 MHz, the highest of "
                    "supported_sm_clocks_mhz (registered)."
                ]
            },
            {},
        ]
    }
    assert list(Gpu.objects.filter(node=node).values_list("max_sm_clock_mhz", flat=True)) == [
        None, None,
    ]  # fmt: skip


def test_a_clock_above_the_registered_maximum_is_refused_naming_both(make_node, agent_client):
    node = make_node("node-09", gpus=0)
    client = agent_client(node.issue_agent_token())
    first = {"gpus": [registered_gpu("GPU-a", 0, supported_sm_clocks_mhz=[1410, 1200])]}
    assert client.post(REGISTER, first, format="json").status_code == 200
    # a list with a faster clock, and no maximum: the registered 1410 MHz would be kept
    body = {
        "gpus": [registered_gpu("GPU-a", 0, max_sm_clock_mhz=None, supported_sm_clocks_mhz=[1980])]
    }
    response = client.post(REGISTER, body, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "gpus": [
            {
                "supported_sm_clocks_mhz": [
                    "max_sm_clock_mhz 1410 MHz (registered) is below 1980 MHz, the highest of "
                    "supported_sm_clocks_mhz."
                ]
            }
        ]
    }
    gpu = Gpu.objects.get(uuid="GPU-a")
    assert (gpu.max_sm_clock_mhz, gpu.supported_sm_clocks_mhz) == (1410, [1410, 1200])


def test_the_newest_sample_sets_the_clock_and_power_limit(
    agent_node, agent_client, api_client, admin_user
):
    node, token = agent_node
    client = agent_client(token)
    now = timezone.now().replace(microsecond=0)
    t1, t2 = now - timedelta(seconds=20), now - timedelta(seconds=10)
    batch = [
        sample("GPU-node-01-0", t2, sm_clock_mhz=1200, power_limit_w=250.4),
        sample("GPU-node-01-0", t1, sm_clock_mhz=1005, power_limit_w=300.0),
        sample("GPU-node-01-1", t1, sm_clock_mhz=None, power_limit_w=None),
    ]
    assert client.post(SAMPLES, {"samples": batch}, format="json").status_code == 200
    shown = _api_gpu(api_client, admin_user, "GPU-node-01-0")
    assert (shown["sm_clock_mhz"], shown["power_limit_w"]) == (1200, 250)
    assert shown["reported_at"].startswith(t2.strftime("%Y-%m-%dT%H:%M:%S"))
    other = Gpu.objects.get(uuid="GPU-node-01-1")
    assert (other.sm_clock_mhz, other.power_limit_w, other.reported_at) == (None, None, t1)

    # a spooled batch replayed late is older than what is recorded: it changes nothing
    late = [sample("GPU-node-01-0", t1 - timedelta(seconds=1), sm_clock_mhz=1410)]
    assert client.post(SAMPLES, {"samples": late}, format="json").json()["inserted"] == 1
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    assert (gpu.sm_clock_mhz, gpu.power_limit_w, gpu.reported_at) == (1200, 250, t2)

    # a limit outside the range the GPU registered is unknown, not a database error
    odd = [sample("GPU-node-01-0", now, sm_clock_mhz=1410, power_limit_w=60.0)]
    assert client.post(SAMPLES, {"samples": odd}, format="json").status_code == 200
    gpu.refresh_from_db()
    assert (gpu.sm_clock_mhz, gpu.power_limit_w, gpu.reported_at) == (1410, None, now)


def test_unchanged_settings_rewrite_the_row_once_a_minute(agent_node, agent_client):
    node, token = agent_node
    client = agent_client(token)
    t0 = timezone.now().replace(microsecond=0) - timedelta(minutes=5)

    def post(at, **values):
        batch = [sample("GPU-node-01-0", at, **values)]
        assert client.post(SAMPLES, {"samples": batch}, format="json").status_code == 200
        gpu = Gpu.objects.get(uuid="GPU-node-01-0")
        return gpu.sm_clock_mhz, gpu.power_limit_w, gpu.reported_at

    assert post(t0, sm_clock_mhz=1200) == (1200, 400, t0)
    # the same values seconds later leave the row as it is
    assert post(t0 + timedelta(seconds=30), sm_clock_mhz=1200) == (1200, 400, t0)
    # a change is written at once
    t1 = t0 + timedelta(seconds=40)
    assert post(t1, sm_clock_mhz=1005) == (1005, 400, t1)
    # and the same values a minute on refresh the time
    t2 = t1 + timedelta(seconds=60)
    assert post(t2, sm_clock_mhz=1005) == (1005, 400, t2)


@pytest.mark.django_db(transaction=True)
def test_ingestion_does_not_wait_for_a_round_that_holds_the_gpu(agent_node, agent_client):
    # given a scheduling round's transaction holding GPU 0's row (as set_allocation locks it)
    node, token = agent_node
    held = Gpu.objects.get(uuid="GPU-node-01-0")
    locked, release, done = threading.Event(), threading.Event(), threading.Event()

    def round_holding_the_gpu():
        from django.db import connection as own
        from django.db import transaction

        try:
            with transaction.atomic():
                list(Gpu.objects.select_for_update(no_key=True).filter(pk=held.pk))
                locked.set()
                release.wait(30)
        finally:
            own.close()
            done.set()

    thread = threading.Thread(target=round_holding_the_gpu)
    thread.start()
    assert locked.wait(10)
    try:
        # when the agent posts samples of both GPUs meanwhile
        now = timezone.now().replace(microsecond=0)
        batch = [
            sample("GPU-node-01-0", now, sm_clock_mhz=1005),
            sample("GPU-node-01-1", now, sm_clock_mhz=1005),
        ]
        started = time.monotonic()
        response = agent_client(token).post(SAMPLES, {"samples": batch}, format="json")
        waited = time.monotonic() - started
    finally:
        release.set()
        thread.join(30)
    # then the samples are stored at once, the free GPU's row is written, the held one skipped
    assert response.status_code == 200 and response.json()["inserted"] == 2
    assert waited < 5, f"ingestion waited {waited:.1f} s for the round's lock"
    assert Gpu.objects.get(uuid="GPU-node-01-1").sm_clock_mhz == 1005
    assert Gpu.objects.get(uuid="GPU-node-01-0").sm_clock_mhz is None
    # and the next batch, after the round committed, writes it
    later = [sample("GPU-node-01-0", now + timedelta(seconds=1), sm_clock_mhz=1200)]
    assert agent_client(token).post(SAMPLES, {"samples": later}, format="json").status_code == 200
    assert Gpu.objects.get(uuid="GPU-node-01-0").sm_clock_mhz == 1200
