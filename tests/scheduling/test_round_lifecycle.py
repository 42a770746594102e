"""A job's life across rounds and agent reports (through the real agent API), online
refinement from telemetry rows, the admin's audited settings, the beat schedule, and the
broadcast a round sends over the real Redis channel layer after commit."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient
from support.jobs import submitted_before

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import AuditEntry, Gpu, Job, Node
from frontend.broadcast import ADMIN_GROUP
from scheduling import adapters, observations, services
from scheduling.choices import DecisionAction
from scheduling.core.perf_models import load_catalog
from scheduling.core.types import GpuConfig
from scheduling.models import JobSchedulingState, RoundDecision, SchedulerSettings, SchedulingRound
from scheduling.summaries import round_summary
from telemetry.models import GpuSample, JobEvent

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)


@pytest.fixture
def make_job(make_job):
    """Jobs submitted before ``T0`` unless told: the rounds here run at ``T0`` and after."""
    return submitted_before(make_job, T0)


@pytest.fixture
def node_with_token(make_node):
    node = make_node("node-01", gpus=4)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)
    node.refresh_from_db()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {node.issue_agent_token()}")
    return node, client


def _policy(name, interval_s=60):
    config = SchedulerSettings.load()
    config.policy, config.round_interval_s = name, interval_s
    config.save()


def _event(client, job, kind, ts, **fields):
    body = {"events": [{"event_id": str(uuid.uuid4()), "job_id": job.pk,
                        "allocation_id": job.current_allocation_id, "kind": kind,
                        "ts": ts.isoformat(), **fields}]}  # fmt: skip
    response = client.post("/api/agent/job-events/", body, format="json")
    assert response.status_code == 200, response.content


def test_failed_job_keeps_exit_status_and_log_tail_and_frees_its_gpus(
    node_with_token, make_job, member, team, api_client
):
    # given fifo, a 4-GPU job that a round started, and a 4-GPU job queued behind it
    _policy("fifo")
    _, agent = node_with_token
    first = make_job(owner=member, team=team, min_gpus=4, max_gpus=4, at=T0 - timedelta(minutes=2))
    second = make_job(owner=member, team=team, min_gpus=4, max_gpus=4, at=T0 - timedelta(minutes=1))
    services.run_scheduling_round(now=T0)
    first.refresh_from_db()
    assert first.state == JobState.RUNNING

    # when the agent reports that the job's process exited with status 3
    _event(agent, first, "started", T0 + timedelta(seconds=2))
    tail = "Traceback ...\nRuntimeError: CUDA error: out of memory\n"
    _event(agent, first, "exited", T0 + timedelta(seconds=30), reason="failed", exit_status=3,
           iterations=120.0, log_tail=tail)  # fmt: skip

    # then the job is failed with its status and log tail, shown by the API
    body = api_client(member).get(f"/api/jobs/{first.pk}/").json()
    assert (body["state"], body["exit_status"]) == ("failed", 3)
    assert body["log_tail"] == tail
    assert body["completed_iterations"] == 120.0
    assert body["current_allocation"] is None

    # and the next round gives its GPUs to the queued job and never restarts the failed one
    services.run_scheduling_round(now=T0 + timedelta(seconds=60))
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == JobState.FAILED
    assert first.allocations.count() == 1
    assert second.state == JobState.RUNNING
    assert sorted(g.uuid for g in second.current_allocation.gpus.all()) == [
        f"GPU-node-01-{i}" for i in range(4)
    ]


def test_completed_job_leaves_the_snapshot_and_its_allocation_is_closed(
    node_with_token, make_job, member, team
):
    _policy("fifo")
    _, agent = node_with_token
    job = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, total_iterations=50)
    services.run_scheduling_round(now=T0)
    job.refresh_from_db()

    _event(agent, job, "exited", T0 + timedelta(seconds=20), reason="completed", exit_status=0,
           iterations=50.0)  # fmt: skip

    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    assert job.finished_at == T0 + timedelta(seconds=20)
    assert job.allocations.get().ended_at == T0 + timedelta(seconds=20)
    rows = adapters.build_snapshot(now=T0 + timedelta(seconds=60), round_length_s=60.0)
    assert rows.snapshot.jobs == ()


def test_elastic_round_resizes_a_running_job_to_make_room(node_with_token, make_job, member, team):
    # given the elastic policy and one elastic job (1..4 GPUs) that a round gave all 4 GPUs
    _policy("elastic")
    big = make_job(owner=member, team=team, min_gpus=1, max_gpus=4, total_iterations=100000,
                   at=T0 - timedelta(minutes=5))  # fmt: skip
    services.run_scheduling_round(now=T0)
    big.refresh_from_db()
    assert big.current_allocation.gpus.count() == 4

    # when a second job arrives and the next round runs
    small = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, total_iterations=1000,
                     at=T0 + timedelta(seconds=10))  # fmt: skip
    result = services.run_scheduling_round(now=T0 + timedelta(seconds=60))

    # then the plan's changes are in the rows: the big job resized, the small one started
    big.refresh_from_db()
    small.refresh_from_db()
    changes = {(c.job_id, str(c.kind)) for c in result.plan.changes}
    assert (str(small.pk), "start") in changes
    assert (str(big.pk), "resize") in changes
    assert result.failed == 0
    assert big.state == small.state == JobState.RUNNING
    n_big = len(result.plan.allocations[str(big.pk)].gpu_ids)
    assert big.current_allocation.gpus.count() == n_big < 4
    held = {g.pk for g in big.current_allocation.gpus.all()}
    assert held.isdisjoint(g.pk for g in small.current_allocation.gpus.all())
    resize = RoundDecision.objects.get(job=big, action=DecisionAction.RESIZE)
    assert (resize.applied, len(resize.gpu_uuids)) == (True, n_big)
    assert big.allocations.count() == 2


def test_telemetry_teaches_a_running_jobs_online_model(
    node_with_token, make_job, member, team, caplog
):
    # given a running 2-GPU job whose agent reports half the predicted speed and half the
    # predicted power, and one sample instant of an absurd 5 kW per GPU
    agent, job = _job_running(node_with_token, make_job, member, team, gpus=2)
    model = load_catalog().get("resnet50", "A100")
    cfg = GpuConfig(n_gpus=2, global_batch=256, sm_clock_mhz=job.current_allocation.sm_clock_mhz)
    iter_s, power_w = model.iter_time_s(cfg), model.power_w(cfg)
    start = T0 + timedelta(seconds=1)
    _event(agent, job, "started", start)
    # its first interval is its warm-up: five times slower, at a tenth of the draw
    _event(agent, job, "progress", start + timedelta(seconds=5), iterations=0.0)
    _event(agent, job, "progress", start + timedelta(seconds=10), iterations=1.0 / iter_s)
    _event(agent, job, "progress", start + timedelta(seconds=20), iterations=6.0 / iter_s)
    # (samples up to the last progress report: a round reads progress only as far as the
    # samples have come)
    for k, watts in (
        (7, power_w / 10), (11, power_w / 2), (12, power_w / 2), (13, 5000.0), (20, power_w / 2)
    ):  # fmt: skip
        for gpu in job.current_allocation.gpus.all():
            GpuSample.objects.create(gpu=gpu, ts=start + timedelta(seconds=k), power_w=watts)

    # when the next round runs
    services.run_scheduling_round(now=T0 + timedelta(seconds=60))

    # then the job's pooled observations hold one iteration time of twice the prediction and
    # three power samples of half, the 5 kW one refused with its reason in the log, and
    # nothing of the warm-up
    state = JobSchedulingState.objects.get(job=job)
    stored = state.observations["A100"]
    times = [o for o in stored if o["iter_time_s"] is not None]
    powers = [o for o in stored if o["power_w"] is not None]
    assert [(o["n_gpus"], o["local_batch"], o["weight"]) for o in times] == [(2, 128.0, 1.0)]
    assert times[0]["iter_time_s"] == pytest.approx(2 * iter_s, rel=1e-9)
    assert [o["weight"] for o in powers] == [3.0]
    assert powers[0]["power_w"] == pytest.approx(power_w / 2, rel=1e-9)
    assert "observation refused (power 5000 W per GPU is above 600 W" in caplog.text
    assert state.observed_until == start + timedelta(seconds=20)
    # and the round's snapshot predicts the job from its learned model, scales left at 1
    snap = adapters.build_snapshot(now=T0, round_length_s=60.0).snapshot
    learned = snap.job_perf[(str(job.pk), "A100")]
    assert learned.iter_time_s(cfg) == pytest.approx(2 * iter_s, rel=1e-3)
    assert learned.power_w(cfg) == pytest.approx(power_w / 2, rel=1e-3)
    assert not learned.estimated
    assert (snap.jobs[0].iter_time_scale, snap.jobs[0].power_scale) == (1.0, 1.0)
    assert JobEvent.objects.filter(job=job).count() == 4


def _job_running(node_with_token, make_job, member, team, *, gpus=1):
    """(the node's agent client, a long fifo job on ``gpus`` GPUs a round has started at
    T0)."""
    _policy("fifo")
    _, agent = node_with_token
    job = make_job(owner=member, team=team, min_gpus=gpus, max_gpus=gpus, global_batch_size=256,
                   min_batch_size=256, max_batch_size=256, total_iterations=100000)  # fmt: skip
    services.run_scheduling_round(now=T0)
    job.refresh_from_db()
    return agent, job


def test_a_job_without_a_started_report_still_teaches_its_model(
    node_with_token, make_job, member, team
):
    # given a running job whose allocation the agent never reported "started" (a retune in
    # place changes the allocation without one; Slurm's monitor mode sends none), but whose
    # progress and power come in: 2 s of start-up at 40 W before its first report, then 2 s
    # of warm-up (0.2 s an iteration at 150 W) before its second
    agent, job = _job_running(node_with_token, make_job, member, team)
    start = T0 + timedelta(seconds=1)
    gpu = job.current_allocation.gpus.get()
    samples = [(1, 40.0), (2, 40.0), (4, 150.0), (5, 150.0)] + [(k, 300.0) for k in range(6, 16)]
    for k, watts in samples:
        GpuSample.objects.create(gpu=gpu, ts=start + timedelta(seconds=k), power_w=watts)
    _event(agent, job, "progress", start + timedelta(seconds=3), iterations=0.0)
    _event(agent, job, "progress", start + timedelta(seconds=5), iterations=10.0)
    _event(agent, job, "progress", start + timedelta(seconds=15), iterations=110.0)

    # when the next round runs
    services.run_scheduling_round(now=T0 + timedelta(seconds=60))

    # then it learned 0.1 s an iteration and 300 W: neither the start-up's 40 W nor the
    # warm-up's pace and draw are its steady state
    stored = JobSchedulingState.objects.get(job=job).observations["A100"]
    times = [(o["iter_time_s"], o["weight"]) for o in stored if o["iter_time_s"]]
    powers = [(o["power_w"], o["weight"]) for o in stored if o["power_w"]]
    assert times == [(pytest.approx(0.1, rel=1e-9), 1.0)]
    assert powers == [(pytest.approx(300.0, rel=1e-9), 10.0)]


def test_progress_beyond_the_jobs_whole_work_is_not_learned_as_speed(
    node_with_token, make_job, member, team, caplog
):
    # given a running job of 1,000 iterations at 0.1 s an iteration, whose count then jumps
    # to 50 times its whole work a second after its last report (a client counting
    # samples, a counter gone wrong)
    _policy("fifo")
    _, agent = node_with_token
    job = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, global_batch_size=256,
                   min_batch_size=256, max_batch_size=256, total_iterations=1000)  # fmt: skip
    services.run_scheduling_round(now=T0)
    job.refresh_from_db()
    start = T0 + timedelta(seconds=1)
    gpu = job.current_allocation.gpus.get()
    for k in range(3, 18):
        GpuSample.objects.create(gpu=gpu, ts=start + timedelta(seconds=k), power_w=300.0)
    for k, done in ((3, 0.0), (5, 20.0), (15, 120.0), (16, 50_000.0)):
        _event(agent, job, "progress", start + timedelta(seconds=k), iterations=done)

    # when the next round reads it
    services.run_scheduling_round(now=T0 + timedelta(seconds=60))

    # then its count stays at the last it could have done (capped at its work, 1,000, its
    # next start was told it had finished: tests/telemetry/test_implausible_progress.py),
    # its fit learned only the measured pace (it learned 0.00024 s before), and the
    # interval left out is logged
    assert Job.objects.get(pk=job.pk).completed_iterations == 120.0
    stored = JobSchedulingState.objects.get(job=job).observations["A100"]
    times = [o["iter_time_s"] for o in stored if o["iter_time_s"]]
    assert times == [pytest.approx(0.1, rel=1e-9)]
    assert "end above the job's whole work" in caplog.text


@pytest.mark.parametrize("grad_var", [None, 1e-3, 10.0])
def test_the_most_a_report_can_count_holds_whatever_the_noise_scale_became(
    make_job, member, team, grad_var
):
    # given a 1,000-iteration job submitted at batch 256, whose noise scale moves with each
    # report of its gradient statistics (the agent was told its count with the old one)
    job = make_job(owner=member, team=team, global_batch_size=256, total_iterations=1000)
    if grad_var is not None:
        Job.objects.filter(pk=job.pk).update(grad_sqr=1.0, grad_var=grad_var, grad_batch_size=256)
        job.refresh_from_db()
    # then the cap is the most any noise scale allows: at a larger batch the submitted count,
    # at a smaller one that count times the ratio (a cap from today's noise scale left out
    # the last 65% of a real job's intervals)
    assert observations.most_iterations(job, 512) == pytest.approx(1000 * 1.01 + 1)
    assert observations.most_iterations(job, 64) == pytest.approx(4000 * 1.01 + 1)


def test_a_job_that_ran_and_ended_between_two_rounds_teaches_its_model_and_profile(
    node_with_token, make_job, member, team
):
    # given a job a round started, whose whole training (reports every 10 s, 0.1 s an
    # iteration at 300 W) and exit fall before the next round: no round saw it running
    agent, job = _job_running(node_with_token, make_job, member, team)
    gpu = job.current_allocation.gpus.get()
    start = T0 + timedelta(seconds=1)
    for k in range(0, 41):
        GpuSample.objects.create(gpu=gpu, ts=start + timedelta(seconds=k), power_w=300.0)
    for k, done in ((0, 0.0), (10, 100.0), (20, 200.0), (30, 300.0), (40, 400.0)):
        _event(agent, job, "progress", start + timedelta(seconds=k), iterations=done)
    _event(agent, job, "exited", start + timedelta(seconds=41), reason="failed", exit_status=1,
           iterations=400.0)  # fmt: skip
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert not JobSchedulingState.objects.filter(job=job).exists()  # no round saw it run

    # when the next round runs
    services.run_scheduling_round(now=T0 + timedelta(seconds=60))

    # then it read the ended allocation: three intervals after the warm-up, and the samples
    # after the second report up to the last
    state = JobSchedulingState.objects.get(job=job)
    stored = state.observations["A100"]
    assert [(o["iter_time_s"], o["weight"]) for o in stored if o["iter_time_s"]] == [
        (pytest.approx(0.1, rel=1e-9), 3.0)
    ]
    assert [(o["power_w"], o["weight"]) for o in stored if o["power_w"]] == [
        (pytest.approx(300.0, rel=1e-9), 30.0)
    ]
    # (but samples may still be on their way: it is read again until they can have come,
    # and only then is the job folded into its workload's profile)
    assert state.observed_until < job.finished_at and state.profile_version is None

    # and a round once its last samples can have come ends the reading and folds the job
    services.run_scheduling_round(now=T0 + timedelta(seconds=200))
    state = JobSchedulingState.objects.get(job=job)
    assert state.observed_until == job.finished_at
    assert state.profile_version is not None
    assert state.observations["A100"] == stored  # nothing read twice


@pytest.mark.parametrize("same_shape", [True, False])
def test_a_retune_in_place_teaches_from_its_first_report_a_restart_from_its_second(
    node_with_token, make_job, member, team, same_shape
):
    # given a job warm on its GPU (reports at 1, 3, 13 s: 0.1 s an iteration after the
    # warm-up), given at 20 s a new allocation: the same GPU and batch at another clock (a
    # retune: the process runs on), or another GPU (a restart)
    agent, job = _job_running(node_with_token, make_job, member, team)
    gpu = job.current_allocation.gpus.get()
    start = T0 + timedelta(seconds=1)
    for k, done in ((0, 0.0), (2, 10.0), (12, 110.0)):
        _event(agent, job, "progress", start + timedelta(seconds=k), iterations=done)
    for k in range(0, 45):
        GpuSample.objects.create(gpu=gpu, ts=start + timedelta(seconds=k), power_w=300.0)
    other = Gpu.objects.filter(node=gpu.node).exclude(pk=gpu.pk).first()
    cluster_services.set_allocation(
        job, gpus=[gpu if same_shape else other], batch_size=256, sm_clock_mhz=1200,
        at=T0 + timedelta(seconds=20),
    )  # fmt: skip
    job.refresh_from_db()
    # and two reports under it, 0.125 s an iteration apart
    for k, done in ((24, 200.0), (34, 280.0)):
        _event(agent, job, "progress", start + timedelta(seconds=k), iterations=done)

    # when a round folds the telemetry
    rows = list(Job.objects.filter(pk=job.pk).select_related("current_allocation"))
    now = T0 + timedelta(minutes=1)
    services.refresh_online_models(rows, catalog=adapters.current_catalog(), now=now)

    # then the retune's one interval is learned at its clock; a restart's is its warm-up
    stored = JobSchedulingState.objects.get(job=job).observations.get("A100", [])
    at_1200 = [(o["iter_time_s"], o["weight"]) for o in stored if o["sm_clock_mhz"] == 1200]
    at_1200 = [x for x in at_1200 if x[0]]
    assert at_1200 == ([(pytest.approx(0.125, rel=1e-9), 1.0)] if same_shape else [])


def test_samples_that_arrive_after_the_progress_are_read_in_the_next_round(
    node_with_token, make_job, member, team
):
    # given a running job whose progress reached 23 s while its samples (posted in batches,
    # as the agent does) have come only up to 16 s when a round runs
    agent, job = _job_running(node_with_token, make_job, member, team)
    gpu = job.current_allocation.gpus.get()
    start = T0 + timedelta(seconds=1)
    # (after a warm-up interval from 1 s to 3 s, which is left out)
    for k, done in ((1, 0.0), (3, 10.0), (13, 110.0), (23, 210.0)):
        _event(agent, job, "progress", start + timedelta(seconds=k), iterations=done)

    def samples(first: int, last: int) -> None:
        for k in range(first, last + 1):
            GpuSample.objects.create(gpu=gpu, ts=start + timedelta(seconds=k), power_w=300.0)

    def fold(now):
        rows = list(Job.objects.filter(pk=job.pk).select_related("current_allocation"))
        return services.refresh_online_models(rows, catalog=adapters.current_catalog(), now=now)

    samples(4, 16)
    assert fold(T0 + timedelta(seconds=30)) == 1
    state = JobSchedulingState.objects.get(job=job)
    # then it read progress only as far as the samples: one interval, 10 samples
    assert state.observed_until == start + timedelta(seconds=13)

    # when the rest of the samples arrive and the next round folds telemetry
    samples(17, 23)
    assert fold(T0 + timedelta(seconds=40)) == 1

    # then both intervals and all 20 samples of them were read, none twice or lost
    stored = JobSchedulingState.objects.get(job=job).observations["A100"]
    assert [o["weight"] for o in stored if o["iter_time_s"]] == [2.0]
    assert [o["weight"] for o in stored if o["power_w"]] == [20.0]

    # and while its progress stalls (samples keep coming, no report) a round reads none of
    # its samples: the window since its last report would only grow
    samples(24, 200)
    with CaptureQueriesContext(connection) as queries:
        assert fold(T0 + timedelta(seconds=200)) == 0
    assert not [q for q in queries.captured_queries if GpuSample._meta.db_table in q["sql"]]


def test_a_job_across_two_nodes_learns_its_draw_from_samples_taken_at_other_instants(
    make_node, make_job, member, team
):
    # given a job on one GPU of each of two nodes, whose agents sample every second on
    # their own clocks (node-b 0.4 s after node-a): no instant has both GPUs' samples
    from cluster import services as cluster_services

    nodes = [make_node(name, gpus=1) for name in ("node-a", "node-b")]
    clients = []
    for node in nodes:
        clients.append(APIClient())
        clients[-1].credentials(HTTP_AUTHORIZATION=f"Token {node.issue_agent_token()}")
    job = make_job(owner=member, team=team, min_gpus=2, max_gpus=2, global_batch_size=256,
                   min_batch_size=256, max_batch_size=256, total_iterations=100000)  # fmt: skip
    gpus = [n.gpus.get() for n in nodes]
    cluster_services.start_job(job, gpus=gpus, batch_size=256, at=T0)
    job.refresh_from_db()
    start = T0 + timedelta(seconds=1)
    # each node's process reports its count (10 iterations a second from 0.5 s), which its
    # agent reads at its own tick: node-a's 0.5 s after the job wrote it, node-b's 0.1 s
    for k in range(11):
        at = start + timedelta(seconds=k)
        _event(clients[0], job, "progress", at, iterations=10.0 * k)
        _event(clients[1], job, "progress", at + timedelta(seconds=0.4), iterations=8.0 + 10 * k)
    for k in range(1, 11):
        at = start + timedelta(seconds=k)
        GpuSample.objects.create(gpu=gpus[0], ts=at, power_w=300.0)
        GpuSample.objects.create(gpu=gpus[1], ts=at + timedelta(seconds=0.4), power_w=200.0)

    # when a round folds the telemetry into its model
    rows = list(Job.objects.filter(pk=job.pk).select_related("current_allocation"))
    catalog = adapters.current_catalog()
    assert services.refresh_online_models(rows, catalog=catalog, now=T0 + timedelta(seconds=30))

    # then it learned the mean draw of its two GPUs from the matched samples (node-a's at 3
    # to 10 s, each with node-b's 0.6 s before it), and its speed from each node's reports
    # apart, after each node's warm-up (taken together, the two nodes' reports made
    # intervals of 0.05 s and 0.3 s an iteration, a geometric mean 22% slow)
    stored = JobSchedulingState.objects.get(job=job).observations["A100"]
    powers = [(o["power_w"], o["weight"], o["n_nodes"]) for o in stored if o["power_w"]]
    assert powers == [(pytest.approx(250.0, rel=1e-9), 8.0, 2)]
    times = [(o["iter_time_s"], o["weight"]) for o in stored if o["iter_time_s"]]
    assert times == [(pytest.approx(0.1, rel=1e-9), 16.0)]  # (read up to 10 s: the samples)


def test_a_gap_in_one_nodes_samples_is_skipped_not_filled_from_before_it():
    # node-a samples every second at 300 W, then 500 W from 10 s; node-b at 100 W, then
    # 300 W from 10 s, but sends nothing from 8 to 13 s (an outage)
    from scheduling.adapters import _matched_samplings

    t0 = T0
    a = [(t0 + timedelta(seconds=k), 300.0 if k < 10 else 500.0) for k in range(1, 20)]
    b = [
        (t0 + timedelta(seconds=k + 0.4), 100.0 if k < 10 else 300.0)
        for k in range(1, 20)
        if not 8 <= k <= 13
    ]

    matched = _matched_samplings([a, b])

    # every matched sampling pairs draws of one moment, at node-b's instants: 200 W before
    # the step, 400 W after (matching each GPU's k-th sample paired node-a's 8 s with
    # node-b's 14.4 s after the gap: 300 W at instants that had 200 W or 400 W)
    assert sorted({round(p) for _, p in matched}) == [200, 400]
    assert [ts for ts, _ in matched] == [ts for ts, _ in b]


def test_admin_changes_policy_and_interval_with_an_audit_entry(admin_client, admin_user):
    # given the settings with a policy state
    SchedulerSettings.load()
    SchedulerSettings.objects.filter(pk=1).update(policy="fifo", policy_state={"timers": {"1": 3}})

    # when an admin switches to greenflow every 30 s in the admin
    response = admin_client.post(
        "/admin/scheduling/schedulersettings/1/change/",
        {"policy": "greenflow", "round_interval_s": 30},
    )

    # then it is stored, the old policy's state dropped, and the change audited
    assert response.status_code == 302
    config = SchedulerSettings.load()
    assert (config.policy, config.round_interval_s, config.policy_state) == ("greenflow", 30, {})
    entry = AuditEntry.objects.get()
    assert (entry.object_type, entry.action, entry.actor_id) == (
        "scheduling_policy",
        "updated",
        admin_user.pk,
    )
    default_s = settings.WATTFLOW_ROUND_INTERVAL_S
    assert entry.before == {"policy": "fifo", "round_interval_s": default_s, "paused": False}
    assert entry.after == {"policy": "greenflow", "round_interval_s": 30, "paused": False}


def test_admin_refuses_an_unknown_policy_and_stores_nothing(admin_client):
    SchedulerSettings.load()

    response = admin_client.post(
        "/admin/scheduling/schedulersettings/1/change/",
        {"policy": "fastest", "round_interval_s": 30},
    )

    assert response.status_code == 200
    assert "Unknown policy &#x27;fastest&#x27;" in response.content.decode()
    assert SchedulerSettings.load().policy == settings.WATTFLOW_DEFAULT_POLICY
    assert AuditEntry.objects.count() == 0


def test_beat_runs_rounds_and_liveness_with_expires_equal_to_the_interval():
    schedule = settings.CELERY_BEAT_SCHEDULE
    round_entry = schedule["scheduling-round"]
    liveness = schedule["scheduling-node-liveness"]
    assert round_entry["task"] == "scheduling.tasks.run_scheduling_round_task"
    assert round_entry["schedule"] == round_entry["options"]["expires"]
    assert round_entry["schedule"] == settings.WATTFLOW_ROUND_INTERVAL_S
    assert liveness["task"] == "scheduling.tasks.mark_silent_nodes_task"
    assert liveness["schedule"] == liveness["options"]["expires"]


def test_round_broadcasts_its_result_to_dashboards_after_commit(
    node_with_token, make_job, member, team, django_capture_on_commit_callbacks
):
    # given a dashboard listening in the admin group of the real Redis channel layer
    _policy("fifo")
    job = make_job(owner=member, team=team, min_gpus=1, max_gpus=1)
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(ADMIN_GROUP, channel)
    try:
        # when a round runs and its transaction commits
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            result = services.run_scheduling_round(now=T0)
        message = async_to_sync(layer.receive)(channel)
    finally:
        async_to_sync(layer.group_discard)(ADMIN_GROUP, channel)

    # then the dashboard got the round with the job's start
    assert len(callbacks) == 1
    payload = message["payload"]
    assert message["type"] == "round.update"
    assert (payload["round_id"], payload["policy"], payload["running"]) == (
        result.round_id,
        "fifo",
        1,
    )
    assert payload["decisions"] == [
        {"job_id": job.pk, "team_id": team.pk, "job_name": job.name, "job_state": "running",
         "action": "start", "gpus": 1, "nodes": ["node-01"], "placement": "node-01: 0",
         "batch_size": 256, "sm_clock_mhz": None,
         "power_limit_w": None, "reason_code": "",
         "reason": "Started by fifo on the 1 GPU it asked for, at default clocks.", "until": None}
    ]  # fmt: skip
    # and it is the very summary a page builds for the same round
    assert payload == round_summary(SchedulingRound.objects.get(pk=result.round_id))
