"""A GPU the node's agent leaves out of its registration is not planned on until the agent
reports it again.

Found by a probe of the live service: node-01's agent re-registered with 4 of its 8 GPUs (a
restart with ``--gpus 4``; NVML that no longer enumerates a board that fell off the bus), and
the next round still put jobs on the other four. The agent cannot run a job on a GPU it does
not have ("assigned to GPUs not on this node"), so those jobs stayed "running" on the server
for good, never started. The record stays (its history is the ledger's; an admin retires
it, ``retire_gpu``), but it is not capacity while its node says it is not there."""

from datetime import timedelta

import pytest
from django.utils import timezone

from cluster.choices import JobState
from cluster.models import Gpu, Job, Node
from scheduling import services

URL = "/api/agent/register/"


def _gpu(g: Gpu) -> dict:
    return {
        "uuid": g.uuid,
        "index": g.index,
        "model": g.model,
        "memory_mb": g.memory_mb,
        "default_power_limit_w": g.default_power_limit_w,
        "min_power_limit_w": g.min_power_limit_w,
        "max_power_limit_w": g.max_power_limit_w,
    }


@pytest.fixture
def node(make_node):
    node = make_node("node-01", gpus=4)
    raw = node.issue_agent_token()
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now())
    return node, raw


@pytest.fixture
def fifo(scheduler_settings):
    return scheduler_settings("fifo")


def _one_gpu_jobs(make_job, member, team, n):
    return [
        make_job(
            owner=member,
            team=team,
            name=f"j{k}",
            min_gpus=1,
            max_gpus=1,
            global_batch_size=256,
            min_batch_size=256,
            max_batch_size=256,
        )  # fmt: skip
        for k in range(n)
    ]


def _held() -> set[str]:
    return {
        g.uuid
        for job in Job.objects.filter(state=JobState.RUNNING).select_related("current_allocation")
        for g in job.current_allocation.gpus.all()
    }


def test_gpus_left_out_of_a_registration_are_not_planned_on(
    fifo, node, agent_client, make_job, member, team
):
    # given node-01's agent registers 2 of the node's 4 GPUs
    node, raw = node
    reported = list(Gpu.objects.filter(node=node).order_by("index"))[:2]
    response = agent_client(raw).post(URL, {"gpus": [_gpu(g) for g in reported]}, format="json")
    assert response.status_code == 200
    # when four one-GPU jobs are planned
    _one_gpu_jobs(make_job, member, team, 4)
    services.run_scheduling_round(now=timezone.now(), force=True)
    # then only the reported GPUs run jobs (before: all four, two on GPUs the agent lacks)
    assert _held() == {g.uuid for g in reported}
    assert Job.objects.filter(state=JobState.QUEUED).count() == 2

    # and once the agent reports all four again, the other two are planned on too
    everything = list(Gpu.objects.filter(node=node).order_by("index"))
    response = agent_client(raw).post(URL, {"gpus": [_gpu(g) for g in everything]}, format="json")
    assert response.status_code == 200
    services.run_scheduling_round(now=timezone.now() + timedelta(seconds=1), force=True)
    assert _held() == {g.uuid for g in everything}


def test_a_job_on_a_gpu_its_agent_stopped_reporting_is_taken_off_it(
    fifo, node, agent_client, make_job, member, team
):
    # given a job runs on GPU 3 of node-01
    node, raw = node
    job = _one_gpu_jobs(make_job, member, team, 1)[0]
    services.run_scheduling_round(now=timezone.now(), force=True)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    held = {g.uuid for g in job.current_allocation.gpus.all()}
    # when the agent registers again without that GPU
    left = [g for g in Gpu.objects.filter(node=node).order_by("index") if g.uuid not in held]
    response = agent_client(raw).post(URL, {"gpus": [_gpu(g) for g in left]}, format="json")
    assert response.status_code == 200
    services.run_scheduling_round(now=timezone.now() + timedelta(seconds=1), force=True)
    # then the next round moves the job off it (before: it stayed there, never started)
    job.refresh_from_db()
    alloc = job.current_allocation
    now_on = set() if alloc is None else {g.uuid for g in alloc.gpus.all()}
    assert not now_on & held
