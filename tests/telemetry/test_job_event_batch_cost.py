"""A batch of job events costs a few queries per job, not a dozen per event (eighth live
probe: 1,000 progress events of one job took 35-41 s, each event a transaction of its own
with about 11 queries; ``record_job_events`` now stores and applies each job's events in
one transaction). What is stored and applied is unchanged."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu
from telemetry import services
from telemetry.models import JobEvent


@pytest.fixture
def two_jobs(agent_node, make_job, member, team):
    node, _ = agent_node
    start = timezone.now() - timedelta(hours=1)
    jobs = []
    for gpu in Gpu.objects.filter(node=node).order_by("index"):
        job = make_job(owner=member, team=team, command="python train.py", max_gpus=1)
        cluster_services.start_job(job, gpus=[gpu], batch_size=256, at=start)
        job.refresh_from_db()
        jobs.append(job)
    return node, start, jobs


def _event(job, kind, ts, **extra):
    return {
        "event_id": uuid.uuid4(),
        "job_id": job.pk,
        "allocation_id": job.current_allocation_id,
        "kind": kind,
        "ts": ts,
        **extra,
    }


def test_a_full_batch_of_two_jobs_events_takes_a_bounded_number_of_queries(two_jobs):
    node, start, (a, b) = two_jobs
    events = []
    for i in range(400):
        ts = start + timedelta(seconds=i + 1)
        # job a: progress with gradient statistics every tenth report; job b: plain progress
        stats = {"grad_sqr": 2.0 + i, "grad_var": 1.0} if i % 10 == 0 else {}
        events.append(_event(a, "progress", ts, iterations=float(i + 1), **stats))
        events.append(_event(b, "progress", ts, iterations=float(2 * i + 1)))
    events.append(
        _event(a, "exited", start + timedelta(seconds=500), reason="failed", exit_status=3,
               iterations=405.0, log_tail="OOM\n")
    )  # fmt: skip
    with CaptureQueriesContext(connection) as queries:
        new = services.record_job_events(node, events, now=timezone.now())
    assert new == 801
    # 2 per statistics report (40), and a few per job and per batch; it was about 11 per
    # event (8,800)
    assert len(queries.captured_queries) < 120
    a.refresh_from_db()
    b.refresh_from_db()
    assert JobEvent.objects.filter(job__in=[a, b]).count() == 801
    assert (a.state, a.exit_status, a.log_tail, a.completed_iterations) == (
        JobState.FAILED, 3, "OOM\n", 405.0,
    )  # fmt: skip
    assert (a.grad_sqr, a.grad_var) == (392.0, 1.0)  # the latest statistics, report 390
    assert (b.state, b.completed_iterations) == (JobState.RUNNING, 799.0)


def test_an_event_stored_beside_the_batch_is_stored_once(two_jobs, monkeypatch):
    # given a report whose event another request stores between this batch's look for
    # stored events and its insert (the insert then meets the unique event id)
    node, start, (a, _) = two_jobs
    first = _event(a, "progress", start + timedelta(seconds=1), iterations=10.0)
    second = _event(a, "progress", start + timedelta(seconds=2), iterations=20.0)
    look = services._stored_event_ids

    def stored_beside(ids):
        there = look(ids)
        JobEvent.objects.create(
            event_id=first["event_id"], node=node, job=a, allocation_id=a.current_allocation_id,
            kind="progress", ts=first["ts"], iterations=10.0, received_at=timezone.now(),
        )  # fmt: skip
        return there

    monkeypatch.setattr(services, "_stored_event_ids", stored_beside)
    # then the batch is stored event by event: the other's event once, this one's second
    assert services.record_job_events(node, [first, second], now=timezone.now()) == 1
    assert JobEvent.objects.filter(job=a).count() == 2
    a.refresh_from_db()
    assert a.completed_iterations == 20.0
