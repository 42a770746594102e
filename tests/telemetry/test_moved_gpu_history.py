"""A GPU that moved to another node (retired on one, registered by another's agent) is that
node's from when it arrived: its new node's token cannot write samples or job events into the
time it ran on its old node.

Found by a probe of the live service: node-01's GPU ran a job of team vision; an admin
retired it (allowed once the job had stopped) and node-02's agent registered it. node-02's
token then posted 60 samples of 599 W stamped during the job's run on node-01: all stored,
and the job's ledger went from 17,700 J to 26,745 J, charged to vision's budget by a node
that never ran it."""

import uuid
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone
from rest_framework.test import APIClient

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, JobAllocation
from telemetry.models import GpuSample, JobEvent


def _gpu(g: Gpu, index: int) -> dict:
    return {
        "uuid": g.uuid, "index": index, "model": g.model, "memory_mb": g.memory_mb,
        "default_power_limit_w": g.default_power_limit_w,
        "min_power_limit_w": g.min_power_limit_w, "max_power_limit_w": g.max_power_limit_w,
    }  # fmt: skip


@pytest.fixture
def moved(agent_node, other_node, agent_client, make_job, member, team, admin_user):
    """A job ran on node-01's GPU 0 from 10 to 5 minutes ago; the GPU was then retired and
    node-02's agent registered it (at index 2, beside its own two)."""
    node, _ = agent_node
    node2, raw2 = other_node
    board = Gpu.objects.get(node=node, index=0)
    job = make_job(owner=member, team=team)
    start = timezone.now() - timedelta(minutes=10)
    cluster_services.start_job(job, gpus=[board], batch_size=256, at=start)
    cluster_services.transition_job(job, to=JobState.PAUSED, at=start + timedelta(minutes=5))
    cluster_services.retire_gpu(board, actor=admin_user)
    own = list(Gpu.objects.filter(node=node2).order_by("index"))
    body = {"gpus": [_gpu(g, g.index) for g in own] + [_gpu(board, 2)]}
    assert agent_client(raw2).post("/api/agent/register/", body, format="json").status_code == 200
    return job, JobAllocation.objects.get(job=job), board, agent_client(raw2)


def test_the_new_node_cannot_post_samples_from_before_the_gpu_arrived(moved):
    job, alloc, board, client2 = moved
    during = [
        {"gpu_uuid": board.uuid, "ts": (alloc.started_at + timedelta(seconds=k)).isoformat(),
         "power_w": 599.0, "util_pct": 100.0}
        for k in range(60)
    ]  # fmt: skip
    response = client2.post("/api/agent/samples/", {"samples": during}, format="json")
    # before: 200, all 60 stored and charged to the job node-01 ran (each sample refused)
    assert response.status_code == 400
    assert board.uuid in str(response.json())
    assert not GpuSample.objects.filter(gpu=board).exists()

    # its samples from since it arrived are its own
    now = [{"gpu_uuid": board.uuid, "ts": timezone.now().isoformat(), "power_w": 80.0}]
    response = client2.post("/api/agent/samples/", {"samples": now}, format="json")
    assert response.status_code == 200
    assert GpuSample.objects.filter(gpu=board).aggregate(p=Sum("power_w"))["p"] == 80.0


def test_the_new_node_cannot_report_on_an_allocation_from_before_the_gpu_arrived(moved):
    job, alloc, board, client2 = moved
    event = {
        "event_id": str(uuid.uuid4()), "job_id": job.pk, "allocation_id": alloc.pk,
        "kind": "progress", "ts": (alloc.started_at + timedelta(minutes=1)).isoformat(),
        "iterations": 900.0,
    }  # fmt: skip
    response = client2.post("/api/agent/job-events/", {"events": [event]}, format="json")
    # before: 200, and the job's count rose to 900 of its 1,000 on node-02's word
    assert response.status_code == 403
    assert not JobEvent.objects.exists()
    job.refresh_from_db()
    assert job.completed_iterations == 0.0


def test_a_gpu_an_admin_moves_is_its_new_nodes_from_the_move(make_node, api_client, admin_user):
    # (a GPU without history: one that ran a job within the hour is not moved at all)
    old, new = make_node("node-01", gpus=1), make_node("node-02", gpus=1)
    board = Gpu.objects.get(node=old)
    before = timezone.now()
    response = api_client(admin_user).patch(
        f"/api/gpus/{board.pk}/", {"node": new.pk, "index": 5}, format="json"
    )
    assert response.status_code == 200
    board.refresh_from_db()
    assert board.node_id == new.pk
    assert board.node_since is not None and board.node_since >= before
    # an edit that leaves the node as it is keeps the time
    since = board.node_since
    api_client(admin_user).patch(f"/api/gpus/{board.pk}/", {"memory_mb": 1}, format="json")
    board.refresh_from_db()
    assert board.node_since == since


def test_a_clock_behind_costs_the_moved_gpus_early_samples_not_the_nodes_batch(moved, other_node):
    # given node-02's agent, its clock 2 s behind the server's, posting its first batch after
    # it registered the moved board: its own GPU's samples and the board's, stamped (by
    # the agent's clock) just before the server's time of the registration
    job, alloc, board, client2 = moved
    node2, _ = other_node
    own = Gpu.objects.get(node=node2, index=0)
    board.refresh_from_db()
    early = board.node_since - timedelta(seconds=2)
    batch = [
        {"gpu_uuid": own.uuid, "ts": early.isoformat(), "power_w": 90.0},
        {"gpu_uuid": board.uuid, "ts": early.isoformat(), "power_w": 80.0},
        {"gpu_uuid": own.uuid, "ts": (early + timedelta(seconds=1)).isoformat(), "power_w": 91.0},
    ]
    response = client2.post("/api/agent/samples/", {"samples": batch}, format="json")
    # then the refusal names the board's early sample alone (the agent quarantines the
    # samples a 400 names and posts the rest, ``AgentClient._send_samples``; a refusal of the
    # batch as a whole, the 403 before, quarantined the node's own GPU's samples with it)
    assert response.status_code == 400
    assert set(response.json()["samples"]) == {"1"}
    assert board.uuid in str(response.json())
    rest = [s for i, s in enumerate(batch) if i != 1]
    assert client2.post("/api/agent/samples/", {"samples": rest}, format="json").status_code == 200
    assert GpuSample.objects.filter(gpu=own).count() == 2
    assert not GpuSample.objects.filter(gpu=board).exists()


def test_the_old_nodes_spooled_batch_loses_only_the_moved_gpus_samples(moved, agent_node):
    # given node-01's agent posting, after the move, a spooled batch of its samples from
    # the job's run: its GPU 1's and the moved board's
    job, alloc, board, _ = moved
    node1, raw1 = agent_node
    client1 = APIClient()
    client1.credentials(HTTP_AUTHORIZATION=f"Token {raw1}")
    stayed = Gpu.objects.get(node=node1, index=1)
    at = [alloc.started_at + timedelta(seconds=k) for k in range(3)]
    batch = [
        {"gpu_uuid": stayed.uuid, "ts": at[0].isoformat(), "power_w": 90.0},
        {"gpu_uuid": board.uuid, "ts": at[0].isoformat(), "power_w": 300.0},
        {"gpu_uuid": stayed.uuid, "ts": at[1].isoformat(), "power_w": 91.0},
        {"gpu_uuid": board.uuid, "ts": at[2].isoformat(), "power_w": 301.0},
    ]

    response = client1.post("/api/agent/samples/", {"samples": batch}, format="json")

    # then the refusal names the board's samples alone, by position (before: a 403 for the
    # batch as a whole, and the agent quarantined its GPU 1's samples with them)
    assert response.status_code == 400, response.content
    assert set(response.json()["samples"]) == {"1", "3"}
    assert "moved to another node" in str(response.json()["samples"]["1"]["gpu_uuid"])
    assert not GpuSample.objects.exists()
    # and the rest, posted again as the agent does, is stored
    rest = [s for i, s in enumerate(batch) if i not in (1, 3)]
    assert client1.post("/api/agent/samples/", {"samples": rest}, format="json").status_code == 200
    assert GpuSample.objects.filter(gpu=stayed).count() == 2
    assert not GpuSample.objects.filter(gpu=board).exists()


def test_a_gpu_of_another_node_that_never_moved_still_refuses_the_batch(agent_node, other_node):
    # (the token speaks for its own node: naming a GPU that was never its own is a 403)
    _, raw1 = agent_node
    node2, _ = other_node
    client1 = APIClient()
    client1.credentials(HTTP_AUTHORIZATION=f"Token {raw1}")
    theirs = Gpu.objects.get(node=node2, index=0)
    sample = {"gpu_uuid": theirs.uuid, "ts": timezone.now().isoformat(), "power_w": 90.0}
    response = client1.post("/api/agent/samples/", {"samples": [sample]}, format="json")
    assert response.status_code == 403
    assert not GpuSample.objects.exists()


@pytest.mark.parametrize(
    ("stamped_after_arrival_s", "status"),
    [
        # 9 minutes after it arrived on node-02: no spool's of before the move
        (540, 403),
        # 2 minutes after: a clock ahead (by less than TELEMETRY_MAX_FUTURE_S, 300 s) may
        # have stamped the old node's last sample of it so; that sample alone is refused
        (120, 400),
    ],
)
def test_a_moved_gpus_sample_stamped_since_it_arrived_refuses_the_old_nodes_batch(
    moved, agent_node, stamped_after_arrival_s, status
):
    # given the board on node-02 since 10 minutes ago, and node-01's agent posting its
    # GPU 1's sample with one of the board stamped after that
    _, _, board, _ = moved
    arrived = timezone.now() - timedelta(minutes=10)
    Gpu.objects.filter(pk=board.pk).update(node_since=arrived)
    node1, raw1 = agent_node
    client1 = APIClient()
    client1.credentials(HTTP_AUTHORIZATION=f"Token {raw1}")
    stayed = Gpu.objects.get(node=node1, index=1)
    at = (arrived + timedelta(seconds=stamped_after_arrival_s)).isoformat()
    batch = [
        {"gpu_uuid": stayed.uuid, "ts": at, "power_w": 90.0},
        {"gpu_uuid": board.uuid, "ts": at, "power_w": 300.0},
    ]

    response = client1.post("/api/agent/samples/", {"samples": batch}, format="json")

    # then well after it arrived it speaks for another node's GPU, as for one that never
    # moved: a 403 for the batch (before: a 400 on that sample alone, the agent posting the
    # rest as if the board's were its spool's leftovers); nothing is stored either way
    assert response.status_code == status, response.content
    assert board.uuid in str(response.json())
    assert not GpuSample.objects.exists()
