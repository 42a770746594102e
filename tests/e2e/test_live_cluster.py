"""End to end: jobs submitted over REST are planned by Celery beat's rounds on a real worker,
run by a simulated agent process, complete, and have their energy and carbon accounted; an
exhausted budget holds its team's jobs back; a cancelled job is stopped on its agent; two
rounds started at once never both plan.

Real PostgreSQL (the test database, committed), real Redis, real daphne, Celery worker and
beat, and ``python -m telemetry.agent --simulate`` as processes. Bounded: every wait has a
deadline, and the fixture stops every process it started.
"""

import threading
from datetime import UTC, datetime, timedelta

import pytest
import requests
from django.db import connections, transaction
from django.utils import timezone
from e2e_helpers import JOB_GPUS, expected_busy_energy_j, iterations_for
from rest_framework.authtoken.models import Token
from support.allocations import open_allocation_gpu_owners
from support.polling import wait_for

from cluster.choices import HardLimitAction, JobState, NodeStatus
from cluster.models import Budget, Gpu, Job, JobAllocation, Node
from scheduling import services
from scheduling.core.perf_models import load_catalog
from scheduling.core.types import GpuConfig
from scheduling.models import JobSchedulingState, SchedulerSettings, SchedulingRound
from telemetry.accounting import job_totals
from telemetry.choices import ExitReason, JobEventKind
from telemetry.models import EnergyLedgerEntry, JobEvent
from telemetry.usage import budget_usage

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _node(name: str, gpus: int) -> tuple[Node, str]:
    node = Node.objects.create(name=name, switch_label="switch-1", gpu_model="A100")
    for index in range(gpus):
        Gpu.objects.create(
            node=node, index=index, uuid=f"GPU-sim-{name}-{index}", model="A100",
            memory_mb=40960, default_power_limit_w=400, min_power_limit_w=100,
            max_power_limit_w=400,
        )  # fmt: skip
    return node, node.issue_agent_token()


def _session(user) -> requests.Session:
    session = requests.Session()
    session.headers["Authorization"] = f"Token {Token.objects.get_or_create(user=user)[0].key}"
    return session


def _submit(session, server, **body) -> dict:
    response = session.post(f"{server}/api/jobs/", json=body, timeout=30)
    assert response.status_code == 201, response.text
    return response.json()


def test_jobs_submitted_over_rest_run_on_the_agent_and_finish_with_energy_recorded(
    processes, team, other_team, member, outsider
):
    # given a 4-GPU node, fifo every second, a generous budget for vision and an exhausted
    # one (spent yesterday) for language
    node, token = _node("node-01", 4)
    config = SchedulerSettings.load()
    config.policy, config.round_interval_s = "fifo", 1
    config.save()
    now = timezone.now()
    period = {"period_start": now - timedelta(days=2), "period_end": now + timedelta(days=2)}
    vision_budget = Budget.objects.create(
        team=team, energy_limit_kwh=10.0, hard_limit_action=HardLimitAction.PAUSE_JOBS, **period
    )
    spent = Budget.objects.create(
        team=other_team, energy_limit_kwh=0.001, hard_limit_action=HardLimitAction.PAUSE_JOBS,
        **period,
    )  # fmt: skip
    EnergyLedgerEntry.objects.create(
        gpu=Gpu.objects.first(), hour=(now - timedelta(days=1)).replace(minute=0, second=0,
        microsecond=0), team=other_team, energy_j=3600.0, co2_g=0.5, ci_g_per_kwh=500.0,
        zone="ES",
    )  # fmt: skip
    server = processes.web()
    processes.celery()
    processes.agent(server, token, node="node-01", gpus=4)

    # when members submit jobs over REST: three of vision's (about 4 s of work each, 1+1+2
    # GPUs) and one of language's
    vision, language = _session(member), _session(outsider)
    jobs = [
        _submit(vision, server, name=f"resnet-{n}", team="vision", workload="resnet50",
                global_batch_size=64, total_iterations=iterations_for(n, work_s=4.0),
                min_gpus=n, max_gpus=n)
        for n in JOB_GPUS
    ]  # fmt: skip
    held = _submit(language, server, name="held", team="language", workload="resnet50",
                   global_batch_size=64, total_iterations=10)  # fmt: skip

    # then every vision job completes on the agent
    ids = [j["id"] for j in jobs]
    wait_for(
        lambda: Job.objects.filter(pk__in=ids, state=JobState.COMPLETED).count() == len(ids),
        timeout_s=90, what="the three jobs to complete", every_s=0.5,
    )  # fmt: skip
    for job in Job.objects.filter(pk__in=ids):
        # it ran under the agent: started and exited events from node-01 for its allocation
        exits = JobEvent.objects.filter(job=job, kind=JobEventKind.EXITED)
        assert list(exits.values_list("reason", "node_id")) == [(ExitReason.COMPLETED, node.pk)]
        assert JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).count() == 1
        assert job.completed_iterations == job.total_iterations
        assert job.allocations.count() == 1
    # and its energy and carbon land in the ledger: at least 90 % of what its GPUs draw
    # busy for its work, at most all its GPUs at the 400 W limit for its allocation's span
    for job in Job.objects.filter(pk__in=ids):
        alloc = job.allocations.get()
        low = 0.9 * expected_busy_energy_j(job.max_gpus, job.total_iterations)
        wait_for(lambda job=job, low=low: job_totals(job).energy_j >= low, timeout_s=60,
                   what=f"job {job.pk}'s energy to be accounted", every_s=0.5)  # fmt: skip
        totals = job_totals(job)
        span_s = (alloc.ended_at - alloc.started_at).total_seconds()
        assert low <= totals.energy_j <= job.max_gpus * 400.0 * span_s
        assert totals.co2_g > 0
    # and the exhausted budget held language's job back: never allocated, reason over REST
    body = language.get(f"{server}/api/jobs/{held['id']}/", timeout=30).json()
    assert body["state"] == "queued"
    assert body["pending_reason_code"] == "budget_exhausted"
    assert body["pending_until"] == spent.period_end.isoformat().replace("+00:00", "Z")
    assert JobAllocation.objects.filter(job_id=held["id"]).count() == 0
    assert budget_usage(spent).energy_j == 3600.0
    assert 0 < budget_usage(vision_budget).energy_j < 10.0 * 3.6e6
    # and rounds ran on the worker, none of them double-booking a GPU
    assert SchedulingRound.objects.filter(policy="fifo").count() >= 3
    assert open_allocation_gpu_owners() == {}

    # when a long job starts and is then cancelled over REST
    long = _submit(vision, server, name="long", team="vision", workload="resnet50",
                   global_batch_size=64, total_iterations=100000)  # fmt: skip
    wait_for(
        lambda: JobEvent.objects.filter(job_id=long["id"], kind=JobEventKind.STARTED).exists(),
        timeout_s=60, what="the long job to start on the agent", every_s=0.5,
    )  # fmt: skip

    # and while it runs, the rounds learn its speed and draw from what the agent reports:
    # the simulated GPUs run and draw as the catalog says, so that is what is learned
    def learned():
        state = JobSchedulingState.objects.filter(job_id=long["id"]).first()
        cells = state.observations.get("A100", []) if state else []
        times = [c["iter_time_s"] for c in cells if c["iter_time_s"]]
        powers = [c["power_w"] for c in cells if c["power_w"]]
        return (times, powers) if times and powers else None

    times, powers = wait_for(
        learned, timeout_s=60, what="the long job's model to learn from telemetry", every_s=0.5
    )
    alloc = JobAllocation.objects.filter(job_id=long["id"]).order_by("-started_at").first()
    cfg = GpuConfig(alloc.gpus.count(), alloc.batch_size, sm_clock_mhz=alloc.sm_clock_mhz)
    truth = load_catalog().get("resnet50", "A100")
    assert powers == [pytest.approx(truth.power_w(cfg), rel=0.05)]
    assert times == [pytest.approx(truth.iter_time_s(cfg), rel=0.1)]
    response = vision.post(f"{server}/api/jobs/{long['id']}/cancel/", timeout=30)
    assert response.status_code == 200, response.text

    # then the agent stops it and says so
    stopped = wait_for(
        lambda: JobEvent.objects.filter(job_id=long["id"], kind=JobEventKind.EXITED).first(),
        timeout_s=30, what="the agent to stop the cancelled job", every_s=0.5,
    )  # fmt: skip
    assert stopped.reason == ExitReason.STOPPED
    assert stopped.node_id == node.pk
    long_job = Job.objects.get(pk=long["id"])
    assert long_job.state == JobState.CANCELLED
    assert 0 < long_job.completed_iterations < 100000


def test_two_rounds_started_at_once_never_both_plan(transactional_db, team, member, make_job):
    # given a live node and queued jobs that would fill it
    node, _ = _node("node-01", 8)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now())
    config = SchedulerSettings.load()
    config.policy = "fifo"
    config.save()
    jobs = [
        make_job(owner=member, team=team, min_gpus=n, max_gpus=n, global_batch_size=256,
                 min_batch_size=256, max_batch_size=256)
        for n in (4, 2, 2)
    ]  # fmt: skip
    now = datetime.now(UTC)
    results, inside, done = {}, threading.Event(), threading.Event()

    def first():
        # A round whose transaction stays open a moment after planning (as a slow apply
        # would): it holds the lock until it commits.
        try:
            with transaction.atomic():
                results["first"] = services.run_scheduling_round(now=now, force=True)
                inside.set()
                done.wait(10)
        finally:
            inside.set()
            connections.close_all()

    def second():
        try:
            inside.wait(10)
            results["second"] = services.run_scheduling_round(now=now, force=True)
        finally:
            done.set()
            connections.close_all()

    # when two rounds start at once, in two threads with their own connections
    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    # then one planned and applied, the other exited at once on the lock
    assert (results["first"].ran, results["first"].applied) == (True, 3)
    assert (results["second"].ran, results["second"].skipped) == (False, "locked")
    assert SchedulingRound.objects.count() == 1
    owners = open_allocation_gpu_owners()
    assert len(owners) == 8
    assert sorted(owners.values()) == sorted([jobs[0].pk] * 4 + [jobs[1].pk] * 2 + [jobs[2].pk] * 2)


def test_rounds_resize_and_pause_a_running_job_on_its_agent(processes, team, member):
    # given the elastic policy every second and an elastic job (1..4 GPUs) on a 4-GPU node
    node, token = _node("node-01", 4)
    config = SchedulerSettings.load()
    config.policy, config.round_interval_s = "elastic", 1
    config.save()
    server = processes.web()
    processes.celery()
    processes.agent(server, token, node="node-01", gpus=4)
    vision = _session(member)
    big = _submit(vision, server, name="big", team="vision", workload="resnet50",
                  global_batch_size=64, total_iterations=10**6, min_gpus=1, max_gpus=4)  # fmt: skip
    wait_for(
        lambda: JobEvent.objects.filter(job_id=big["id"], kind=JobEventKind.STARTED).exists(),
        timeout_s=60, what="the elastic job to start", every_s=0.5,
    )  # fmt: skip
    assert Job.objects.get(pk=big["id"]).current_allocation.gpus.count() == 4

    # when a second job arrives
    small = _submit(vision, server, name="small", team="vision", workload="resnet50",
                    global_batch_size=64, total_iterations=10**6)  # fmt: skip

    # then a round shrinks the big job: the agent stops it to resize and starts it again on
    # its new allocation, and starts the small one beside it
    def resized():
        events = JobEvent.objects.filter(job_id=big["id"]).order_by("ts")
        kinds = [(e.kind, e.reason) for e in events if e.kind != JobEventKind.PROGRESS]
        return kinds == [
            (JobEventKind.STARTED, ""),
            (JobEventKind.EXITED, ExitReason.RESIZED),
            (JobEventKind.STARTED, ""),
        ]

    wait_for(resized, timeout_s=60, what="the agent to restart the resized job", every_s=0.5)
    wait_for(
        lambda: JobEvent.objects.filter(job_id=small["id"], kind=JobEventKind.STARTED).exists(),
        timeout_s=30, what="the small job to start", every_s=0.5,
    )  # fmt: skip
    big_job = Job.objects.get(pk=big["id"])
    restarted = JobEvent.objects.filter(job=big_job, kind=JobEventKind.STARTED).order_by("ts")
    assert restarted.last().allocation_id == big_job.current_allocation_id
    assert big_job.current_allocation.gpus.count() < 4
    assert open_allocation_gpu_owners()  # no GPU held twice (raises if so)

    # when the team's pause_jobs budget turns out spent (its limit is below what the jobs
    # have already drawn, once accounted)
    now = timezone.now()
    budget = Budget.objects.create(
        team=team, period_start=now - timedelta(days=1), period_end=now + timedelta(days=1),
        energy_limit_kwh=1e-6, hard_limit_action=HardLimitAction.PAUSE_JOBS,
    )  # fmt: skip

    # then a round pauses both jobs and the agent stops them
    ids = [big["id"], small["id"]]
    wait_for(
        lambda: Job.objects.filter(pk__in=ids, state=JobState.PAUSED).count() == 2,
        timeout_s=60, what="both jobs to be paused for the budget", every_s=0.5,
    )  # fmt: skip
    for job_id in ids:
        stop = wait_for(
            lambda job_id=job_id: JobEvent.objects.filter(
                job_id=job_id, kind=JobEventKind.EXITED, reason=ExitReason.STOPPED
            ).first(),
            timeout_s=30, what=f"the agent to stop job {job_id}", every_s=0.5,
        )  # fmt: skip
        assert stop.node_id == node.pk
        body = vision.get(f"{server}/api/jobs/{job_id}/", timeout=30).json()
        assert (body["state"], body["pending_reason_code"]) == ("paused", "budget_exhausted")
        assert body["current_allocation"] is None
    assert budget_usage(budget).energy_j > 1e-6 * 3.6e6
    assert open_allocation_gpu_owners() == {}


def test_a_node_whose_agent_dies_is_marked_unhealthy_and_its_job_runs_elsewhere(
    processes, team, member
):
    # given two 2-GPU nodes with agents, fifo every second, a 5 s heartbeat timeout, and a
    # long job running on one of them
    config = SchedulerSettings.load()
    config.policy, config.round_interval_s = "fifo", 1
    config.save()
    (node1, token1), (node2, token2) = _node("node-01", 2), _node("node-02", 2)
    server = processes.web()
    processes.celery(node_timeout_s=5)
    processes.agent(server, token1, node="node-01", gpus=2)
    processes.agent(server, token2, node="node-02", gpus=2)
    vision = _session(member)
    job = _submit(vision, server, name="long", team="vision", workload="resnet50",
                  global_batch_size=64, total_iterations=10**6, min_gpus=2, max_gpus=2)  # fmt: skip
    first = wait_for(
        lambda: JobEvent.objects.filter(job_id=job["id"], kind=JobEventKind.STARTED).first(),
        timeout_s=60, what="the job to start", every_s=0.5,
    )  # fmt: skip
    lost, spare = (node1, node2) if first.node_id == node1.pk else (node2, node1)

    # when the agent of the job's node is killed (no goodbye, no more heartbeats)
    processes.kill(f"agent-{lost.name}")

    # then the node is marked unhealthy, the job re-queued and started on the other node
    wait_for(
        lambda: Node.objects.get(pk=lost.pk).status == NodeStatus.UNHEALTHY,
        timeout_s=40, what="the silent node to be marked unhealthy", every_s=0.5,
    )  # fmt: skip
    second = wait_for(
        lambda: JobEvent.objects.filter(
            job_id=job["id"], kind=JobEventKind.STARTED, node_id=spare.pk
        ).first(),
        timeout_s=40, what="the job to start on the other node", every_s=0.5,
    )  # fmt: skip
    allocations = list(JobAllocation.objects.filter(job_id=job["id"]).order_by("started_at"))
    assert len(allocations) == 2
    assert allocations[0].ended_at is not None
    assert {g.node_id for g in allocations[0].gpus.all()} == {lost.pk}
    assert {g.node_id for g in allocations[1].gpus.all()} == {spare.pk}
    assert second.allocation_id == allocations[1].pk
    running = Job.objects.get(pk=job["id"])
    assert running.state == JobState.RUNNING
    assert Node.objects.get(pk=spare.pk).status == NodeStatus.HEALTHY
