"""A progress report whose time the server clamped onto its allocation's bounds (stamped
before it started, or after it ended, within the clock skew) keeps its count, but its time is
the server's, not when the job reached that count: the intervals it bounds are no
measurement of the job's speed. (One ahead of the server's clock, taken at its arrival, each
at its own time, still teaches.)

Found by a probe of the live service: an agent whose clock ran 30 s behind the server's
(within the 60 s ``TELEMETRY_MAX_CLOCK_SKEW_S``) had its first reports clamped onto the
allocation's start; the interval from the last of them to the next report read 2 s for 10 s
of work, and the job's learned iteration time came out 0.67 s where every report said 1 s."""

import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, JobAllocation
from scheduling.observations import progress_iter_times, warmed_up_at
from telemetry.models import JobEvent

URL = "/api/agent/job-events/"


@pytest.fixture
def started(agent_node, make_job, member, team):
    node, _ = agent_node
    job = make_job(owner=member, team=team)
    cluster_services.start_job(
        job,
        gpus=list(Gpu.objects.filter(node=node))[:1],
        batch_size=256,
        at=timezone.now() - timedelta(minutes=5),
    )
    job.refresh_from_db()
    return job


def _progress(job, at, iterations):
    return {
        "event_id": str(uuid.uuid4()),
        "job_id": job.pk,
        "allocation_id": job.current_allocation_id,
        "kind": "progress",
        "ts": at.isoformat(),
        "iterations": iterations,
    }


def test_reports_clamped_onto_the_start_teach_no_speed(started, agent_node, agent_client):
    # given an agent whose clock is 30 s behind the server's: the job reaches 10 iterations
    # every 10 s (1 s an iteration) from 12 s after its start, stamped 30 s early
    alloc = JobAllocation.objects.get(pk=started.current_allocation_id)
    start = alloc.started_at
    events = [
        _progress(started, start + timedelta(seconds=12 - 30 + 10 * k), 10.0 * (k + 1))
        for k in range(6)
    ]
    client = agent_client(agent_node[1])
    response = client.post(URL, {"events": events}, format="json")
    assert response.json() == {"received": 6, "new": 6}
    # (the first two are stored at the start, as documented, with their counts)
    stored = list(JobEvent.objects.order_by("iterations").values_list("ts", "iterations"))
    assert stored[:2] == [(start, 10.0), (start, 20.0)]

    # when the round reads the job's iteration times from its warm-up on
    since = warmed_up_at(started.pk, alloc.pk)
    times, _ = progress_iter_times(started.pk, alloc.pk, since=since, now=timezone.now())

    # then only the intervals between the agent's own times count: 1 s an iteration (before:
    # 0 s between the two clamped reports, and 0.2 s from the start to the first real time)
    assert times == pytest.approx([1.0, 1.0, 1.0])


def test_a_spooled_report_clamped_onto_the_end_teaches_no_speed(started, agent_node, agent_client):
    # given reports 10 s apart (1 s an iteration) and the allocation ended 20 s ago
    alloc = JobAllocation.objects.get(pk=started.current_allocation_id)
    end = timezone.now() - timedelta(seconds=20)
    client = agent_client(agent_node[1])
    early = [_progress(started, end - timedelta(seconds=35 - 10 * k), 10.0 * k) for k in range(4)]
    assert client.post(URL, {"events": early}, format="json").status_code == 200
    cluster_services.transition_job(started, to=JobState.PAUSED, at=end)
    # when a spooled report stamped 5 s after the end (an agent clock ahead, within the
    # skew) arrives: 10 iterations more, 10 s after the last report before the end
    late = _progress(started, end + timedelta(seconds=5), 40.0)
    late["allocation_id"] = alloc.pk
    assert client.post(URL, {"events": [late]}, format="json").status_code == 200
    assert JobEvent.objects.get(event_id=late["event_id"]).ts == end

    times, _ = progress_iter_times(
        started.pk, alloc.pk, since=end - timedelta(minutes=1), now=timezone.now()
    )

    # then the clamped report bounds no interval (before: 0.5 s an iteration, twice the
    # job's speed, from the 5 s left of its 10 s once clamped)
    assert times == pytest.approx([1.0, 1.0, 1.0])


def test_reports_of_an_agent_clock_slightly_ahead_still_teach(started, agent_node, agent_client):
    # given an agent whose clock is 2 s ahead of the server's: each report, stamped ahead
    # of the server's now, is taken at its arrival (each at its own time, in order)
    alloc = JobAllocation.objects.get(pk=started.current_allocation_id)
    client = agent_client(agent_node[1])
    for k in range(4):
        if k:
            time.sleep(0.3)
        event = _progress(started, timezone.now() + timedelta(seconds=2), 10.0 * (k + 1))
        assert client.post(URL, {"events": [event]}, format="json").status_code == 200
    # then their intervals are read (their arrival times are the server's best word on
    # when; only a clamp onto an allocation's bound, which puts several reports at one
    # instant, bounds none): ~0.03 s an iteration, three intervals
    times, _ = progress_iter_times(started.pk, alloc.pk, since=alloc.started_at, now=timezone.now())
    assert len(times) == 3
    assert all(0.02 < t < 0.2 for t in times)
