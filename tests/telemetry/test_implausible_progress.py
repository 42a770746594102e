"""A count past the job's whole work is no progress: it does not raise the job's completed
count (``telemetry.services._JobEvents``), by the rule that already keeps it out of the job's
fit (``most_iterations``: all the work at the report's batch, with 1% and a step to spare).

Found by probing the live service: one progress report of 1e18 iterations (a script that
once wrote its sample count as its iteration count) set a 2,000-iteration job that had done
150 to "2000 of 2000"; the next resize restarted it with WATTFLOW_COMPLETED_ITERATIONS at
its total, so the job client said it was finished and the job exited 0: completed with its
work undone."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, Job

URL = "/api/agent/job-events/"


@pytest.fixture
def started(agent_node, make_job, member, team):
    """A 1,000-iteration job at batch 256 running on node-01's two GPUs."""
    node, _ = agent_node
    job = make_job(
        owner=member, team=team, max_gpus=2, total_iterations=1000, global_batch_size=256,
        min_batch_size=256, max_batch_size=256,
    )  # fmt: skip
    cluster_services.start_job(
        job, gpus=list(Gpu.objects.filter(node=node)), batch_size=256,
        at=timezone.now() - timedelta(minutes=2),
    )  # fmt: skip
    job.refresh_from_db()
    return job


def _post(client, job, kind, seconds_ago, **extra):
    event = {
        "event_id": str(uuid.uuid4()),
        "job_id": job.pk,
        "allocation_id": job.current_allocation_id,
        "kind": kind,
        "ts": (timezone.now() - timedelta(seconds=seconds_ago)).isoformat(),
        **extra,
    }
    return client.post(URL, {"events": [event]}, format="json")


@pytest.mark.parametrize("absurd", [1e18, 9.2e18, 256_000.0, 1012.0])
def test_a_count_past_the_whole_work_leaves_the_completed_count_as_it_was(
    started, agent_node, agent_client, absurd
):
    # given a job that reported 150 of its 1,000 iterations
    client = agent_client(agent_node[1])
    assert _post(client, started, "progress", 60, iterations=150.0).status_code == 200

    # when a report counts more than all its work and the 1% and a step to spare
    response = _post(client, started, "progress", 30, iterations=absurd)

    # then the report is taken (the agent does not quarantine it) but counts nothing
    assert response.status_code == 200
    job = Job.objects.get(pk=started.pk)
    assert job.completed_iterations == 150.0
    assert job.state == JobState.RUNNING


def test_a_count_just_past_the_work_is_its_last_step_and_completes_the_count(
    started, agent_node, agent_client
):
    # given a job that counted a last partial step: 1,005 of 1,000 (within the 1% and a step)
    client = agent_client(agent_node[1])

    # when it reports it
    assert _post(client, started, "progress", 30, iterations=1005.0).status_code == 200

    # then the job did all its work, as before
    assert Job.objects.get(pk=started.pk).completed_iterations == 1000.0


def test_an_exit_with_an_absurd_count_still_ends_the_job(started, agent_node, agent_client):
    # given a job at 400 of 1,000 iterations
    client = agent_client(agent_node[1])
    assert _post(client, started, "progress", 60, iterations=400.0).status_code == 200

    # when its exit (a failure) carries a count past all its work
    response = _post(client, started, "exited", 10, iterations=1e18, reason="failed", exit_status=1)

    # then the exit is applied, and the count is what the job did
    assert response.status_code == 200
    job = Job.objects.get(pk=started.pk)
    assert job.state == JobState.FAILED
    assert job.completed_iterations == 400.0


def test_a_progress_report_reads_its_job_and_allocation_once(started, agent_node, agent_client):
    # given a job that reported 150 of its 1,000 iterations
    client = agent_client(agent_node[1])
    assert _post(client, started, "progress", 60, iterations=150.0).status_code == 200

    # when it reports 160
    with CaptureQueriesContext(connection) as queries:
        assert _post(client, started, "progress", 30, iterations=160.0).status_code == 200

    # then the count is applied, and the check of its plausibility read the job row and its
    # allocation row no second time (it read each again: 2 more queries for every report
    # of every running job)
    assert Job.objects.get(pk=started.pk).completed_iterations == 160.0
    sql = [q["sql"] for q in queries.captured_queries]
    # (the whole row of each, by its primary key: what ``_apply`` reads)
    job_row = 'SELECT "cluster_job"."id", "cluster_job"."owner_id"'
    alloc_row = 'SELECT "cluster_joballocation"."id", "cluster_joballocation"."job_id", '
    job_reads = [s for s in sql if s.startswith(job_row)]
    alloc_reads = [s for s in sql if s.startswith(alloc_row + '"cluster_joballocation"."batch')]
    assert (len(job_reads), len(alloc_reads)) == (1, 1)
