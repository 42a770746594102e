"""Job events are checked against the calling node's allocations and the allocation's time
span before anything is stored: forged, misdirected or skewed reports are a 400 or 403 with a
reason, never a 500, and a refused batch stores nothing."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, Job, JobAllocation
from telemetry.models import JobEvent

URL = "/api/agent/job-events/"


@pytest.fixture
def started(agent_node, make_job, member, team):
    """A job running on node-01's two GPUs since two minutes ago."""
    node, _ = agent_node
    job = make_job(owner=member, team=team, max_gpus=2)
    cluster_services.start_job(
        job,
        gpus=list(Gpu.objects.filter(node=node)),
        batch_size=256,
        at=timezone.now() - timedelta(minutes=2),
    )
    job.refresh_from_db()
    return job


def _event(job, kind, *, allocation_id=None, ts=None, **extra):
    return {
        "event_id": str(uuid.uuid4()),
        "job_id": job.pk,
        "allocation_id": job.current_allocation_id if allocation_id is None else allocation_id,
        "kind": kind,
        "ts": (ts or timezone.now()).isoformat(),
        **extra,
    }


def _completed(job, **kw):
    return _event(job, "exited", reason="completed", exit_status=0, iterations=1000.0, **kw)


def _post(client, *events):
    return client.post(URL, {"events": list(events)}, format="json")


def _nothing_stored(job):
    row = Job.objects.get(pk=job.pk)
    return (
        not JobEvent.objects.exists()
        and row.state == JobState.RUNNING
        and row.completed_iterations == 0.0
    )


def test_an_unknown_allocation_is_a_400_and_stores_nothing(started, agent_node, agent_client):
    response = _post(agent_client(agent_node[1]), _completed(started, allocation_id=999999))
    assert response.status_code == 400
    assert response.json() == {"events": [{"allocation_id": ["Unknown allocation 999999."]}]}
    assert _nothing_stored(started)


def test_an_event_without_its_allocation_is_a_400(started, agent_node, agent_client):
    event = _completed(started)
    del event["allocation_id"]
    response = _post(agent_client(agent_node[1]), event)
    assert response.status_code == 400
    assert "allocation_id" in response.json()["events"][0]
    assert _nothing_stored(started)


def test_another_jobs_allocation_is_a_400(
    started, agent_node, agent_client, make_job, member, team
):
    other = make_job(owner=member, team=team, name="other")
    event = _completed(other, allocation_id=started.current_allocation_id)
    response = _post(agent_client(agent_node[1]), event)
    assert response.status_code == 400
    assert response.json()["events"][0]["allocation_id"] == [
        f"Allocation {started.current_allocation_id} is not job {other.pk}'s "
        f"(it is job {started.pk}'s)."
    ]
    assert _nothing_stored(started)


def test_a_node_cannot_finish_a_job_that_moved_to_another_node(
    started, agent_node, other_node, agent_client
):
    # given the job moved from node-01 to node-02 (a new allocation there)
    first = started.current_allocation_id
    cluster_services.set_allocation(
        started, gpus=list(Gpu.objects.filter(node=other_node[0])), batch_size=256,
        at=timezone.now(),
    )  # fmt: skip
    started.refresh_from_db()
    client = agent_client(agent_node[1])
    # when node-01 names the new allocation (node-02's), it is refused outright
    forged = _event(started, "exited", reason="completed", exit_status=0, iterations=99999.0)
    response = _post(client, forged)
    assert response.status_code == 403
    assert "hold no GPU of this node" in response.json()["detail"]
    # and a "completed" for its own old allocation is recorded but completes nothing
    stale = _completed(started, allocation_id=first)
    assert _post(client, stale).json() == {"received": 1, "new": 1}
    job = Job.objects.get(pk=started.pk)
    current = started.current_allocation_id
    assert (job.state, job.current_allocation_id) == (JobState.RUNNING, current)


def test_an_exit_stamped_slightly_before_the_start_is_clamped_to_it(
    started, agent_node, agent_client
):
    # given an agent clock 30 s behind: the job died at once, its exit predates the start
    alloc = JobAllocation.objects.get(pk=started.current_allocation_id)
    event = _event(
        started, "exited", reason="failed", exit_status=1,
        ts=alloc.started_at - timedelta(seconds=30),
    )  # fmt: skip
    response = _post(agent_client(agent_node[1]), event)
    # then it is taken at the allocation's start, not a 500
    assert response.status_code == 200, response.content
    job = Job.objects.get(pk=started.pk)
    alloc.refresh_from_db()
    assert (job.state, job.finished_at) == (JobState.FAILED, alloc.started_at)
    assert alloc.ended_at == alloc.started_at
    assert JobEvent.objects.get().ts == alloc.started_at


def test_an_exit_stamped_long_before_the_start_is_a_400(started, agent_node, agent_client):
    alloc = JobAllocation.objects.get(pk=started.current_allocation_id)
    event = _completed(started, ts=alloc.started_at - timedelta(minutes=10))
    response = _post(agent_client(agent_node[1]), event)
    assert response.status_code == 400
    [message] = response.json()["events"][0]["ts"]
    assert "by more than the allowed clock skew of 60 s" in message
    assert _nothing_stored(started)


def test_an_event_far_in_the_future_is_a_400(started, agent_node, agent_client):
    event = _completed(started, ts=timezone.now() + timedelta(hours=2))
    response = _post(agent_client(agent_node[1]), event)
    assert response.status_code == 400
    assert "ahead of the server's clock" in response.json()["events"][0]["ts"][0]
    assert _nothing_stored(started)


def test_progress_after_the_allocation_ended_is_refused_but_earlier_progress_counts(
    started, agent_node, agent_client
):
    # given the scheduler paused the job a minute ago (its allocation ended then)
    ended = timezone.now() - timedelta(minutes=1)
    cluster_services.transition_job(started, to=JobState.PAUSED, at=ended)
    alloc_id = JobAllocation.objects.get(job=started).pk
    client = agent_client(agent_node[1])
    late = _event(started, "progress", allocation_id=alloc_id, iterations=900.0)
    response = _post(client, late)
    assert response.status_code == 400
    assert "stamped after its end is refused" in response.json()["events"][0]["ts"][0]
    # a report from before the end (it waited in the spool) still counts, as does the exit
    spooled = _event(
        started, "progress", allocation_id=alloc_id, iterations=400.0,
        ts=ended - timedelta(seconds=5),
    )  # fmt: skip
    stop = _event(
        started, "exited", allocation_id=alloc_id, reason="stopped", exit_status=0,
        iterations=450.0,
    )  # fmt: skip
    assert _post(client, spooled, stop).json() == {"received": 2, "new": 2}
    job = Job.objects.get(pk=started.pk)
    assert (job.state, job.completed_iterations) == (JobState.PAUSED, 450.0)


def test_a_cancelled_jobs_progress_reported_before_the_cancel_counts_and_it_stays_cancelled(
    started, agent_node, agent_client
):
    # given the job cancelled a minute ago while its agent's last reports waited in a spool
    ended = timezone.now() - timedelta(minutes=1)
    cluster_services.transition_job(started, to=JobState.CANCELLED, at=ended)
    alloc_id = JobAllocation.objects.get(job=started).pk
    spooled = _event(
        started, "progress", allocation_id=alloc_id, iterations=1000.0,
        ts=ended - timedelta(seconds=5),
    )  # fmt: skip
    done = _event(
        started, "exited", allocation_id=alloc_id, reason="completed", exit_status=0,
        iterations=1000.0, ts=ended - timedelta(seconds=2),
    )  # fmt: skip

    # when they arrive, stamped before the cancel
    assert _post(agent_client(agent_node[1]), spooled, done).json() == {"received": 2, "new": 2}

    # then the work they report counts (it was done), and the job stays cancelled
    job = Job.objects.get(pk=started.pk)
    assert (job.state, job.completed_iterations) == (JobState.CANCELLED, 1000.0)


def test_one_bad_event_refuses_the_whole_batch(started, agent_node, agent_client):
    good = _event(started, "progress", iterations=500.0)
    bad = _completed(started, allocation_id=999999)
    response = _post(agent_client(agent_node[1]), good, bad)
    assert response.status_code == 400
    assert response.json()["events"] == [{}, {"allocation_id": ["Unknown allocation 999999."]}]
    assert _nothing_stored(started)


def test_errors_name_the_events_position_in_the_request_when_replays_precede_it(
    started, agent_node, agent_client
):
    client = agent_client(agent_node[1])
    accepted = _event(started, "progress", iterations=10.0)
    assert _post(client, accepted).status_code == 200
    bad = _completed(started, allocation_id=999999)
    response = _post(client, accepted, accepted, bad)
    assert response.status_code == 400
    assert response.json()["events"] == [{}, {}, {"allocation_id": ["Unknown allocation 999999."]}]


def test_a_replay_of_an_accepted_event_is_accepted_after_the_allocation_closed(
    started, agent_node, agent_client
):
    client = agent_client(agent_node[1])
    progress = _event(started, "progress", iterations=300.0)
    exited = _completed(started)
    assert _post(client, progress, exited).json() == {"received": 2, "new": 2}
    # the acknowledgement was lost: the agent sends both again, and the same event twice
    again = _post(client, progress, exited, exited)
    assert again.status_code == 200
    assert again.json() == {"received": 3, "new": 0}
    assert JobEvent.objects.count() == 2
    assert Job.objects.get(pk=started.pk).state == JobState.COMPLETED


def test_an_event_id_sent_again_with_other_contents_is_a_400_and_changes_nothing(
    started, agent_node, agent_client
):
    # An event_id names one report. Sent again with other contents (here a "completed"
    # under a progress report's id), it was answered 200 "new: 0" and dropped: the agent
    # took it as delivered and the job never completed. Now a 400 the agent quarantines.
    client = agent_client(agent_node[1])
    progress = _event(started, "progress", iterations=300.0)
    assert _post(client, progress).json() == {"received": 1, "new": 1}
    reused = {**_completed(started), "event_id": progress["event_id"]}
    response = _post(client, reused)
    assert response.status_code == 400
    (error,) = response.json()["events"][0]["event_id"]
    assert "it was accepted" in error and "kind" in error and "iterations" in error
    job = Job.objects.get(pk=started.pk)
    assert (job.state, job.completed_iterations) == (JobState.RUNNING, 300.0)
    assert JobEvent.objects.count() == 1
    # the same event again, its time aside (a stored time may have been clamped), is a replay
    again = {**progress, "ts": (timezone.now() - timedelta(seconds=1)).isoformat()}
    assert _post(client, again).json() == {"received": 1, "new": 0}


def test_one_event_id_twice_in_a_batch_with_other_contents_is_a_400(
    started, agent_node, agent_client
):
    progress = _event(started, "progress", iterations=300.0)
    other = {**progress, "iterations": 900.0}
    response = _post(agent_client(agent_node[1]), progress, other)
    assert response.status_code == 400
    assert response.json()["events"][0] == {}
    (error,) = response.json()["events"][1]["event_id"]
    assert "event 0 of this batch" in error and "iterations" in error
    assert _nothing_stored(started)


def test_another_nodes_event_id_is_refused(started, agent_node, other_node, agent_client):
    event = _event(started, "progress", iterations=10.0)
    assert _post(agent_client(agent_node[1]), event).status_code == 200
    response = _post(agent_client(other_node[1]), event)
    assert response.status_code == 403
    assert JobEvent.objects.count() == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("iterations", "NaN"),
        ("iterations", "Infinity"),
        ("iterations", 1e300),
        ("iterations", 1e19),
        ("iterations", -1),
        ("exit_status", 2**40),
        ("job_id", 10**30),
        ("allocation_id", 2**63),
        ("allocation_id", 0),
        ("log_tail", "a\x00b"),
        ("log_tail", "x" * 20001),
        ("gpu_uuids", ["u" * 65]),
    ],
)
def test_out_of_range_values_are_a_400_per_field(started, agent_node, agent_client, field, value):
    event = _event(started, "progress", iterations=1.0)
    event[field] = value
    response = _post(agent_client(agent_node[1]), event)
    assert response.status_code == 400, response.content
    assert field in response.json()["events"][0]
    assert _nothing_stored(started)


# --- other agent inputs that used to end in a 500 ---------------------------------------------


@pytest.mark.parametrize("gpu_uuid", [["GPU-node-01-0"], {"a": 1}, 7, None])
def test_a_sample_whose_gpu_is_not_text_is_a_400(agent_node, agent_client, gpu_uuid):
    sample = {"gpu_uuid": gpu_uuid, "ts": timezone.now().isoformat(), "power_w": 100.0}
    response = agent_client(agent_node[1]).post(
        "/api/agent/samples/", {"samples": [sample]}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"samples": {"0": {"gpu_uuid": ["A GPU UUID (text) is required."]}}}


@pytest.mark.parametrize("gpu_uuid", ["GPU-\x00", "\x00", "GPU-" + "x" * 100])
def test_a_sample_whose_gpu_name_cannot_be_stored_is_an_unknown_gpu(
    agent_node, agent_client, gpu_uuid
):
    # NUL used to reach PostgreSQL as a query parameter and answer 500 (schemathesis found it)
    sample = {"gpu_uuid": gpu_uuid, "ts": timezone.now().isoformat(), "power_w": 100.0}
    response = agent_client(agent_node[1]).post(
        "/api/agent/samples/", {"samples": [sample]}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"samples": {"0": {"gpu_uuid": ["Unknown GPU: register it first."]}}}


def test_registering_a_narrower_power_range_forgets_a_limit_outside_it(agent_node, agent_client):
    # given GPU 0 recorded with a 350 W limit set, re-registered with a 300 W maximum
    node, token = agent_node
    Gpu.objects.filter(uuid="GPU-node-01-0").update(power_limit_w=350)
    gpus = [
        {
            "uuid": f"GPU-node-01-{i}",
            "index": i,
            "model": "A100",
            "memory_mb": 40960,
            "default_power_limit_w": 300.0,
            "min_power_limit_w": 100.0,
            "max_power_limit_w": 300.0,
        }  # fmt: skip
        for i in range(2)
    ]
    response = agent_client(token).post("/api/agent/register/", {"gpus": gpus}, format="json")
    # then it is a 200 (it was an IntegrityError) and the limit is unknown until set again
    assert response.status_code == 200, response.content
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    assert (gpu.max_power_limit_w, gpu.power_limit_w) == (300, None)


def test_an_exit_stamped_before_its_gpus_stopped_computing_ends_the_allocation_then(
    started, agent_node, agent_client
):
    # given samples of the job's GPUs busy until 10 s ago and an exit stamped 100 s ago
    # (an early stamp stopped charging the team for what its job still drew: a probe)
    from telemetry.models import GpuSample

    now = timezone.now()
    last_busy = now - timedelta(seconds=10)
    for gpu in Gpu.objects.filter(node=agent_node[0]):
        for ts, util in ((now - timedelta(seconds=60), 90.0), (last_busy, 85.0),
                         (now - timedelta(seconds=5), 0.0)):  # fmt: skip
            GpuSample.objects.create(gpu=gpu, ts=ts, power_w=300.0, util_pct=util)
    response = _post(
        agent_client(agent_node[1]), _completed(started, ts=now - timedelta(seconds=100))
    )
    assert response.status_code == 200, response.content
    # then the allocation ends at the last busy sample, not at the early stamp (and not
    # at the idle sample after it)
    alloc = JobAllocation.objects.get(pk=started.current_allocation_id)
    job = Job.objects.get(pk=started.pk)
    assert job.state == JobState.COMPLETED
    assert alloc.ended_at == job.finished_at == last_busy


def test_an_exit_is_never_before_the_allocations_last_progress_report(
    started, agent_node, agent_client
):
    now = timezone.now()
    progress = _event(started, "progress", iterations=500.0, ts=now - timedelta(seconds=20))
    assert _post(agent_client(agent_node[1]), progress).status_code == 200
    early = _completed(started, ts=now - timedelta(seconds=90))
    assert _post(agent_client(agent_node[1]), early).status_code == 200
    alloc = JobAllocation.objects.get(pk=started.current_allocation_id)
    assert alloc.ended_at == now - timedelta(seconds=20)


def test_an_event_time_without_a_utc_offset_is_a_400_as_a_samples_is(
    started, agent_node, agent_client
):
    naive = timezone.now().replace(tzinfo=None).isoformat()
    event = {**_event(started, "progress", iterations=10.0), "ts": naive}
    response = _post(agent_client(agent_node[1]), event)
    assert response.status_code == 400
    assert "UTC offset" in str(response.json())
    assert _nothing_stored(started)


def test_a_report_stamped_just_after_its_allocation_ended_is_stored_at_the_end(
    started, agent_node, agent_client
):
    ended = timezone.now() - timedelta(minutes=1)
    cluster_services.transition_job(started, to=JobState.PAUSED, at=ended)
    alloc = JobAllocation.objects.get(job=started)
    within_skew = _event(
        started, "progress", allocation_id=alloc.pk, iterations=300.0,
        ts=alloc.ended_at + timedelta(seconds=20),
    )  # fmt: skip
    response = _post(agent_client(agent_node[1]), within_skew)
    assert response.status_code == 200, response.content
    assert JobEvent.objects.get().ts == alloc.ended_at


def test_a_gpu_shared_with_a_job_still_computing_does_not_extend_the_exit(
    started, agent_node, agent_client, make_job, member, team
):
    # given another job co-located on the same GPUs, computing until now, and the first
    # job's exit stamped 100 s ago: the other job's busy samples say nothing of its end
    from telemetry.models import GpuSample

    other = make_job(owner=member, team=team, name="mate")
    alloc = JobAllocation.objects.get(pk=started.current_allocation_id)
    mate = JobAllocation.objects.create(job=other, batch_size=256, started_at=alloc.started_at)
    mate.gpus.set(alloc.gpus.all())
    now = timezone.now()
    for gpu in Gpu.objects.filter(node=agent_node[0]):
        GpuSample.objects.create(
            gpu=gpu, ts=now - timedelta(seconds=3), power_w=300.0, util_pct=90.0
        )
    stamp = now - timedelta(seconds=100)
    assert _post(agent_client(agent_node[1]), _completed(started, ts=stamp)).status_code == 200
    alloc.refresh_from_db()
    assert alloc.ended_at == stamp


@pytest.mark.parametrize(
    "ts", ["2026-02-30T00:00:00+00:00", "2026-13-01T00:00:00Z", "2026-01-01T25:00:00"]
)
def test_an_impossible_event_or_heartbeat_time_is_a_400(started, agent_node, agent_client, ts):
    client = agent_client(agent_node[1])
    event = {**_event(started, "progress", iterations=10.0), "ts": ts}
    assert _post(client, event).status_code == 400
    assert client.post("/api/agent/heartbeat/", {"ts": ts}, format="json").status_code == 400


def test_a_completed_exit_with_a_failing_status_is_a_400(started, agent_node, agent_client):
    event = _event(started, "exited", reason="completed", exit_status=137, iterations=10.0)
    response = _post(agent_client(agent_node[1]), event)
    assert response.status_code == 400
    assert "status 0" in str(response.json())
    assert _nothing_stored(started)


def test_progress_stamped_within_the_clock_skew_after_the_end_is_clamped_to_the_end(
    started, agent_node, agent_client
):
    # docs/telemetry.md: only progress stamped more than TELEMETRY_MAX_CLOCK_SKEW_S (60 s)
    # after its allocation ended is refused; an agent clock ahead of the server's within
    # that skew is taken at the end (it said "after the end is a 400").
    ended = timezone.now() - timedelta(seconds=30)
    cluster_services.transition_job(started, to=JobState.PAUSED, at=ended)
    alloc = JobAllocation.objects.get(job=started)
    late = _event(started, "progress", allocation_id=alloc.pk, iterations=300.0)
    assert _post(agent_client(agent_node[1]), late).json() == {"received": 1, "new": 1}
    assert JobEvent.objects.get().ts == alloc.ended_at
    assert Job.objects.get(pk=started.pk).completed_iterations == 300.0


@pytest.mark.parametrize("event_id", [0, 1, 2**63, True, 1.5, ["x"]])
def test_an_event_id_that_is_not_a_uuid_string_is_a_400(
    started, agent_node, agent_client, event_id
):
    # 0, 2**63 and true were taken as the UUIDs 00000000-...-0000 and so on (DRF reads an
    # int as a UUID's 128 bits), a fifth live probe: an agent counting its events 1, 2, 3
    # would have its reports dropped as replays of another node's.
    event = _event(started, "progress", iterations=10.0)
    event["event_id"] = event_id
    response = _post(agent_client(agent_node[1]), event)
    assert response.status_code == 400
    assert "event_id" in response.json()["events"][0]
    assert _nothing_stored(started)
    # the forms of a UUID string DRF reads stay readable
    uid = uuid.uuid4()
    for form in (str(uid), uid.hex, f"urn:uuid:{uid}"):
        ok = _post(agent_client(agent_node[1]), {**event, "event_id": form})
        assert ok.status_code == 200, ok.content
