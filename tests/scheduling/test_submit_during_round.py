"""A job submitted while a round runs does not start before it was submitted.

A round takes its clock (``now``) first and reads the queue later. A job committed in between
was read with the others and started at the round's ``now``: its allocation's and its own
``started_at`` came before its ``submitted_at`` (2.3 s seen on the live service), and the API
and the job page showed a negative wait. The round plans the world as of ``now``; a job
submitted after it waits for the next round. Two connections on the real PostgreSQL: the
submission commits in a thread of its own while the round is between its clock and its read.
"""

from datetime import timedelta

import pytest
from django.utils import timezone
from support.races import in_another_connection

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Job, JobAllocation, Node
from scheduling import services, workload_profiles

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_job_committed_after_the_round_took_its_clock_starts_no_earlier_than_its_submit(
    scheduler_settings, make_node, team, member, monkeypatch
):
    # given a free node heard from now, and a round that has taken its clock
    scheduler_settings("fifo")
    node = make_node("node-01", gpus=8)
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
    real_fold = workload_profiles.fold_finished_jobs
    submitted = []

    def submit_late():
        cluster_services.submit_job(
            owner=member, team=team, name="late", workload="resnet50", total_iterations=1000,
            global_batch_size=256, min_gpus=1, max_gpus=4, min_batch_size=128, max_batch_size=512,
        )  # fmt: skip

    def fold_finished_jobs(**kwargs):
        # when a user's job commits after the clock, before the round reads the queue
        submitted.append(in_another_connection(submit_late))
        return real_fold(**kwargs)

    monkeypatch.setattr(workload_profiles, "fold_finished_jobs", fold_finished_jobs)
    result = services.run_scheduling_round(now=now, force=True)
    ((thread, outcome),) = submitted
    thread.join(timeout=30)
    monkeypatch.setattr(workload_profiles, "fold_finished_jobs", real_fold)

    # then the round ran and the job, submitted after its clock, waits for the next round
    assert result.ran and outcome == ["saved"]
    job = Job.objects.get(name="late")
    assert job.submitted_at > now
    assert job.state == JobState.QUEUED and job.started_at is None
    assert not JobAllocation.objects.filter(job=job).exists()

    # and the next round starts it, no earlier than it was submitted
    later = job.submitted_at + timedelta(seconds=1)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=later)
    assert services.run_scheduling_round(now=later, force=True).ran
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert job.started_at == later >= job.submitted_at
    assert JobAllocation.objects.get(job=job).started_at == later
