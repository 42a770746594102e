"""A job's process that exits 0 on its own before its work is done (eighth live probe).

The agent reports ``completed`` for any exit with status 0 (``telemetry/agent/loop.py``);
the exit carries the iterations the job's progress file last said, or none when the job
never wrote one. Status 0 is the job's word that it is done (a script may stop early on
its own, at a target accuracy): it completes, but a job that reports progress and exits 0
short of its total gets a line in its log tail saying how far it got, so the early end is
not read as a plain success. A job that reports nothing (a script that does not use the job
client) cannot say how far it got and completes as before."""

import uuid

import pytest
from django.utils import timezone

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, Job


@pytest.fixture
def running_job(agent_node, make_job, member, team):
    node, _ = agent_node
    job = make_job(owner=member, team=team, command="python train.py", max_gpus=2)
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    cluster_services.start_job(job, gpus=gpus, batch_size=256, at=timezone.now())
    job.refresh_from_db()
    return job


def _event(job, kind, **extra):
    return {
        "event_id": str(uuid.uuid4()),
        "job_id": job.pk,
        "allocation_id": job.current_allocation_id,
        "kind": kind,
        "ts": timezone.now().isoformat(),
        **extra,
    }


def _post(client, *events):
    response = client.post("/api/agent/job-events/", {"events": list(events)}, format="json")
    assert response.status_code == 200, response.json()


def test_an_exit_0_at_a_ninth_of_the_work_completes_with_a_note(
    running_job, agent_node, agent_client
):
    _, token = agent_node
    exited = _event(
        running_job, "exited", reason="completed", exit_status=0, iterations=110.0,
        log_tail="loss 0.4\n",
    )  # fmt: skip
    _post(agent_client(token), exited)
    job = Job.objects.get(pk=running_job.pk)
    assert (job.state, job.exit_status, job.completed_iterations) == (JobState.COMPLETED, 0, 110.0)
    assert job.current_allocation_id is None
    # the job's own output first, then how far it got
    assert job.log_tail.startswith("loss 0.4\n")
    assert job.log_tail.endswith(
        "Exited with status 0 having reported 110 of its 1000 iterations: ended early on its own."
    )


def test_a_count_reached_by_earlier_progress_completes(running_job, agent_node, agent_client):
    _, token = agent_node
    client = agent_client(token)
    _post(client, _event(running_job, "progress", iterations=1000.0))
    # (the file read at the exit can lag the job's last write by a tick)
    exited = _event(running_job, "exited", reason="completed", exit_status=0, iterations=998.0)
    _post(client, exited)
    job = Job.objects.get(pk=running_job.pk)
    assert (job.state, job.completed_iterations) == (JobState.COMPLETED, 1000.0)


def test_a_job_that_reports_no_progress_completes(running_job, agent_node, agent_client):
    _, token = agent_node
    _post(
        agent_client(token),
        _event(running_job, "exited", reason="completed", exit_status=0, log_tail="done\n"),
    )
    job = Job.objects.get(pk=running_job.pk)
    assert (job.state, job.exit_status, job.log_tail) == (JobState.COMPLETED, 0, "done\n")


def test_a_count_past_the_total_is_not_read_as_short(running_job, agent_node, agent_client):
    # an implausible count is not applied (``_plausible_count``), nor is it a short one
    _, token = agent_node
    _post(
        agent_client(token),
        _event(running_job, "exited", reason="completed", exit_status=0, iterations=1e18),
    )
    assert Job.objects.get(pk=running_job.pk).state == JobState.COMPLETED


def test_a_nonzero_exit_keeps_its_output_as_it_was(running_job, agent_node, agent_client):
    _, token = agent_node
    _post(
        agent_client(token),
        _event(running_job, "exited", reason="failed", exit_status=1, iterations=5.0,
               log_tail="Traceback\n"),
    )  # fmt: skip
    job = Job.objects.get(pk=running_job.pk)
    assert (job.state, job.log_tail) == (JobState.FAILED, "Traceback\n")
