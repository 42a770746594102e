"""The live round against the real PostgreSQL: snapshot from rows, plan, apply, record.

Time is passed in (``T0``); nodes heart-beat relative to it.
"""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections

from cluster import services as cluster_services
from cluster.choices import HardLimitAction, JobState, NodeStatus
from cluster.models import Budget, Gpu, Job, Node
from scheduling import liveness, services
from scheduling.choices import DecisionAction, RoundOutcome
from scheduling.models import RoundDecision, SchedulerSettings, SchedulingRound
from scheduling.summaries import round_summary

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)


@pytest.fixture
def live_node(make_node):
    def make(name="node-01", *, gpus=8, switch_label="switch-1", heartbeat=T0):
        node = make_node(name, gpus=gpus, switch_label=switch_label)
        Node.objects.filter(pk=node.pk).update(last_heartbeat_at=heartbeat)
        node.refresh_from_db()
        return node

    return make


@pytest.fixture
def fifo(scheduler_settings):
    return scheduler_settings("fifo")


def _job(make_job, member, team, **overrides):
    values = {"min_gpus": 2, "max_gpus": 2, "global_batch_size": 256, "min_batch_size": 256,
              "max_batch_size": 256, "at": T0 - timedelta(minutes=5)}  # fmt: skip
    values.update(overrides)
    return make_job(owner=member, team=team, **values)


def test_round_starts_a_queued_job_on_a_live_node_and_records_it(
    fifo, live_node, make_job, member, team
):
    # given a live node with 8 GPUs and a queued 2-GPU job
    node = live_node()
    job = _job(make_job, member, team)

    # when a round runs
    result = services.run_scheduling_round(now=T0)

    # then the job runs on 2 GPUs of that node, and the round and its decision are recorded
    job.refresh_from_db()
    assert result.ran and result.applied == 1 and result.failed == 0
    assert job.state == JobState.RUNNING
    assert job.started_at == T0
    alloc = job.current_allocation
    assert sorted(g.uuid for g in alloc.gpus.all()) == ["GPU-node-01-0", "GPU-node-01-1"]
    assert {g.node_id for g in alloc.gpus.all()} == {node.pk}
    assert alloc.batch_size == 256
    round_row = SchedulingRound.objects.get()
    assert (round_row.pk, round_row.policy, round_row.outcome) == (
        result.round_id,
        "fifo",
        RoundOutcome.APPLIED,
    )
    assert (round_row.schedulable_gpus, round_row.running_jobs, round_row.waiting_jobs) == (8, 1, 0)
    assert round_row.started_at == T0
    assert T0 <= round_row.finished_at < T0 + timedelta(seconds=10)
    decision = RoundDecision.objects.get()
    assert (decision.job_id, decision.action, decision.applied) == (
        job.pk,
        DecisionAction.START,
        True,
    )
    assert decision.gpu_uuids == ["GPU-node-01-0", "GPU-node-01-1"]
    # and the decision says why, for the round table (its GPUs are the ones it asked for)
    assert decision.reason == "Started by fifo on the 2 GPUs it asked for, at default clocks."


def test_round_leaves_a_running_job_alone_when_nothing_changes(
    fifo, live_node, make_job, member, team
):
    # given a job a first round started
    live_node()
    job = _job(make_job, member, team)
    services.run_scheduling_round(now=T0)
    job.refresh_from_db()
    first_alloc = job.current_allocation_id

    # when the next round runs a minute later
    result = services.run_scheduling_round(now=T0 + timedelta(seconds=60))

    # then nothing changes: same allocation, no decision recorded
    job.refresh_from_db()
    assert result.ran and result.applied == 0
    assert job.current_allocation_id == first_alloc
    assert RoundDecision.objects.count() == 1


def test_round_never_schedules_on_a_silent_node_and_says_why(
    fifo, live_node, make_job, member, team
):
    # given the only node last heard from 10 minutes ago (timeout 60 s)
    live_node(heartbeat=T0 - timedelta(minutes=10))
    job = _job(make_job, member, team)

    # when a round runs
    services.run_scheduling_round(now=T0)

    # then the node is unhealthy, the job still queued with a reason on the job and its state
    job.refresh_from_db()
    assert Node.objects.get().status == NodeStatus.UNHEALTHY
    assert job.state == JobState.QUEUED
    assert job.current_allocation is None
    assert job.pending_reason_code == "no_matching_gpu"
    assert (
        job.pending_reason
        == "Waiting: needs 2 GPU(s) of one model; no GPU model has that many schedulable."
    )
    assert job.pending_round_id == SchedulingRound.objects.get().pk


def test_pending_reason_and_estimated_start_are_in_the_jobs_api(
    fifo, live_node, make_job, member, team, api_client
):
    # given a full node (8 GPUs) running an 8-GPU job and a second job queued behind it
    live_node()
    first = _job(make_job, member, team, min_gpus=8, max_gpus=8, total_iterations=100)
    second = _job(make_job, member, team, at=T0 - timedelta(minutes=4))

    # when a round runs
    services.run_scheduling_round(now=T0)

    # then the API shows the second job's reason and when it is expected to start
    second.refresh_from_db()
    body = api_client(member).get(f"/api/jobs/{second.pk}/").json()
    assert Job.objects.get(pk=first.pk).state == JobState.RUNNING
    assert body["state"] == "queued"
    assert body["pending_reason_code"] == "behind_in_queue"
    assert body["pending_reason"] == second.pending_reason
    assert body["pending_reason"].startswith("Waiting: 1 job(s) ahead of it in the queue")
    assert second.pending_until is not None and second.pending_until > T0
    assert body["pending_until"] == second.pending_until.isoformat().replace("+00:00", "Z")
    assert body["pending_round"] == SchedulingRound.objects.get().pk
    # and a running job shows no pending fields
    running = api_client(member).get(f"/api/jobs/{first.pk}/").json()
    assert (running["pending_reason_code"], running["pending_until"], running["pending_round"]) == (
        "",
        None,
        None,
    )


def test_jobs_behind_a_blocked_fifo_queue_get_their_own_stored_reasons(
    fifo, live_node, make_job, member, team, api_client
):
    # given a full node running an 8-GPU job and four jobs queued behind it: the first
    # blocks the queue, the three after it are the tail whose reasons the round makes only
    # when read (core/waiting.py); the service stores each one
    live_node()
    _job(make_job, member, team, min_gpus=8, max_gpus=8, total_iterations=100)
    queued = [
        _job(make_job, member, team, at=T0 - timedelta(minutes=4, seconds=-k)) for k in range(4)
    ]

    # when a round runs
    result = services.run_scheduling_round(now=T0)

    # then each queued job carries its place in the queue, the first one also when it may
    # start, and the round counts four waiting (three of them a lazy tail)
    from scheduling.core.waiting import QueueTail, WaitingReasons

    assert isinstance(result.plan.waiting, WaitingReasons)
    assert [len(p) for p in result.plan.waiting.parts if isinstance(p, QueueTail)] == [3]
    assert len(result.plan.waiting) == 4
    assert SchedulingRound.objects.get().waiting_jobs == 4
    for k, job in enumerate(queued):
        job.refresh_from_db()
        assert job.pending_reason_code == "behind_in_queue"
        assert job.pending_reason.startswith(f"Waiting: {k + 1} job(s) ahead of it in the queue")
        assert (job.pending_until is not None) == (k == 0)
        body = api_client(member).get(f"/api/jobs/{job.pk}/").json()
        assert body["pending_reason"] == job.pending_reason


def test_a_second_round_exits_at_once_while_one_holds_the_lock(
    fifo, live_node, make_job, member, team
):
    # given another session holding the round lock in an open transaction
    live_node()
    job = _job(make_job, member, team)
    held, release = threading.Event(), threading.Event()

    def hold_lock():
        with connections["default"].cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [services.ROUND_LOCK_KEY])
            held.set()
            release.wait(10)
            cursor.execute("ROLLBACK")
        connections["default"].close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    assert held.wait(10)
    try:
        # when a round starts meanwhile
        result = services.run_scheduling_round(now=T0)
    finally:
        release.set()
        holder.join(10)

    # then it did nothing: no round row, the job still queued
    assert (result.ran, result.skipped) == (False, "locked")
    assert SchedulingRound.objects.count() == 0
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


def test_round_is_skipped_until_the_configured_interval_has_passed(
    fifo, live_node, make_job, member, team
):
    # given a round at T0 and an interval of 60 s (beat ticks every 10 s)
    live_node()
    services.run_scheduling_round(now=T0)
    _job(make_job, member, team)

    # when beat ticks 20 s later, and again 60 s later
    early = services.run_scheduling_round(now=T0 + timedelta(seconds=20))
    due = services.run_scheduling_round(now=T0 + timedelta(seconds=60))

    # then the early tick is skipped and the due one runs
    assert (early.ran, early.skipped) == (False, "not_due")
    assert due.ran
    assert SchedulingRound.objects.count() == 2


def test_paused_scheduler_runs_no_round(fifo, live_node, make_job, member, team):
    live_node()
    job = _job(make_job, member, team)
    SchedulerSettings.objects.filter(pk=1).update(paused=True)

    result = services.run_scheduling_round(now=T0)

    assert (result.ran, result.skipped) == (False, "paused")
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert SchedulingRound.objects.count() == 0


def test_silent_node_is_marked_unhealthy_and_its_jobs_requeued(
    fifo, live_node, make_job, member, team
):
    # given a job running on node-01 and a healthy node-02
    node1 = live_node("node-01")
    live_node("node-02")
    job = _job(make_job, member, team)
    services.run_scheduling_round(now=T0)
    job.refresh_from_db()
    assert {g.node_id for g in job.current_allocation.gpus.all()} == {node1.pk}

    # when node-01 falls silent for longer than the timeout and liveness runs
    later = T0 + timedelta(seconds=120)
    Node.objects.filter(name="node-02").update(last_heartbeat_at=later)
    requeued = liveness.mark_silent_nodes(now=later)

    # then node-01 is unhealthy, the job re-queued with its allocation closed
    job.refresh_from_db()
    assert requeued == [job.pk]
    assert Node.objects.get(name="node-01").status == NodeStatus.UNHEALTHY
    assert Node.objects.get(name="node-02").status == NodeStatus.HEALTHY
    assert job.state == JobState.QUEUED
    assert job.current_allocation is None
    assert job.allocations.get().ended_at == later
    assert job.pending_reason_code == "node_lost"

    # and when node-01 heart-beats again it is healthy again
    Node.objects.filter(name="node-01").update(last_heartbeat_at=later + timedelta(seconds=5))
    assert liveness.mark_silent_nodes(now=later + timedelta(seconds=6)) == []
    assert Node.objects.get(name="node-01").status == NodeStatus.HEALTHY


def test_exhausted_pause_jobs_budget_pauses_running_jobs(fifo, live_node, make_job, member, team):
    # given a running job of a team whose pause_jobs budget is then spent
    live_node()
    job = _job(make_job, member, team)
    services.run_scheduling_round(now=T0)
    budget = _day_budget(team, HardLimitAction.PAUSE_JOBS)
    _spend(budget, job, energy_j=3.6e6)

    # when the next round runs
    result = services.run_scheduling_round(now=T0 + timedelta(seconds=60))

    # then the job is paused with the budget as its reason
    job.refresh_from_db()
    assert result.applied == 1
    assert job.state == JobState.PAUSED
    assert job.current_allocation is None
    assert job.pending_reason_code == "budget_exhausted"
    decision = RoundDecision.objects.filter(action=DecisionAction.STOP).get()
    assert (decision.job_id, decision.reason_code) == (job.pk, "budget_exhausted")


def test_exhausted_hold_queue_budget_lets_running_jobs_finish_but_starts_none(
    fifo, live_node, make_job, member, team
):
    # given a running job of a team whose hold_queue budget is then spent, and a new job
    live_node()
    running = _job(make_job, member, team)
    services.run_scheduling_round(now=T0)
    budget = _day_budget(team, HardLimitAction.HOLD_QUEUE)
    _spend(budget, running, energy_j=3.6e6)
    queued = _job(make_job, member, team, at=T0)

    # when the next round runs
    result = services.run_scheduling_round(now=T0 + timedelta(seconds=60))

    # then the running job keeps running, the new one waits for the budget
    running.refresh_from_db()
    queued.refresh_from_db()
    assert running.state == JobState.RUNNING
    assert queued.state == JobState.QUEUED
    assert queued.pending_reason_code == "budget_exhausted"
    assert not RoundDecision.objects.filter(action=DecisionAction.STOP).exists()
    # and the round says so: the running job is kept where it runs, with why it would wait
    # (not listed as waiting with 0 GPUs); the counts are the cluster's after the round
    assert (running.pending_reason_code, running.pending_round_id) == (
        "budget_exhausted",
        result.round_id,
    )
    summary = round_summary(SchedulingRound.objects.get(pk=result.round_id))
    assert [
        (d["job_id"], d["action"], d["reason_code"], d["gpus"]) for d in summary["decisions"]
    ] == [
        (queued.pk, "wait", "budget_exhausted", 0),
        (running.pk, "keep", "budget_exhausted", running.current_allocation.gpus.count()),
    ]
    assert (summary["scope"], summary["queue_length"], summary["running"]) == ("cluster", 1, 1)


def test_a_job_held_by_a_spent_hold_queue_budget_keeps_its_gpus_from_other_teams_jobs(
    fifo, live_node, make_job, member, team, outsider, other_team
):
    # given team vision's job running on GPUs 0-1 of the node, its hold_queue budget
    # then spent, and team language's 2-GPU job queued behind it
    live_node()
    held = _job(make_job, member, team)
    services.run_scheduling_round(now=T0)
    budget = _day_budget(team, HardLimitAction.HOLD_QUEUE)
    _spend(budget, held, energy_j=3.6e6)
    other = _job(make_job, outsider, other_team, at=T0)

    # when two more rounds run (before, the held job's GPUs looked free: the other job
    # was placed on GPUs 0-1 and its start failed with AllocationError every round)
    results = [
        services.run_scheduling_round(now=T0 + timedelta(seconds=30 * k), force=True)
        for k in (1, 2)
    ]

    # then nothing fails: the held job keeps GPUs 0-1 and the other starts on 2-3
    held.refresh_from_db()
    other.refresh_from_db()
    assert [(r.applied, r.failed) for r in results] == [(1, 0), (0, 0)]
    assert held.state == JobState.RUNNING
    assert sorted(g.uuid for g in held.current_allocation.gpus.all()) == [
        "GPU-node-01-0",
        "GPU-node-01-1",
    ]
    assert other.state == JobState.RUNNING
    assert sorted(g.uuid for g in other.current_allocation.gpus.all()) == [
        "GPU-node-01-2",
        "GPU-node-01-3",
    ]
    # and the plan still accounts for the held job where it runs
    assert results[1].plan.allocations[str(held.pk)].gpu_ids == ("GPU-node-01-0", "GPU-node-01-1")
    assert not RoundDecision.objects.filter(action=DecisionAction.STOP).exists()
    assert not RoundDecision.objects.filter(applied=False).exists()


def test_a_spent_notify_only_budget_holds_nothing_back_but_is_paced_until_then(
    fifo, live_node, make_job, member, team
):
    # given a team with a notify_only budget, spent, and a queued job
    from scheduling import adapters

    live_node()
    budget = _day_budget(team, HardLimitAction.NOTIFY_ONLY)
    queued = _job(make_job, member, team)

    # then before it is spent the core sees it (it is paced like any budget)
    snap = adapters.build_snapshot(now=T0, round_length_s=60.0).snapshot
    assert [(b.budget_id, b.hard_limit_action) for b in snap.budgets] == [
        (str(budget.pk), "notify_only")
    ]

    # when it is spent and a round runs
    _spend(budget, queued, energy_j=3.6e6)
    result = services.run_scheduling_round(now=T0)

    # then the job starts all the same
    queued.refresh_from_db()
    assert (result.applied, result.failed) == (1, 0)
    assert queued.state == JobState.RUNNING


def test_change_that_loses_a_race_is_recorded_and_skipped(fifo, live_node, make_job, member, team):
    # given a round's snapshot that saw a queued job, cancelled before the plan is applied
    from scheduling import adapters
    from scheduling.core.round import plan_round

    live_node()
    job = _job(make_job, member, team)
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)
    plan = plan_round(rows.snapshot, policy="fifo", now=T0.timestamp())
    cluster_services.cancel_job(job, at=T0)
    round_row = services._record_round(rows, plan, now=T0, requeued=0)

    # when the plan is applied
    applied, failed, _ = services._apply(plan, rows, round_row, now=T0)

    # then the start is recorded as not applied and the job stays cancelled without GPUs
    job.refresh_from_db()
    assert (applied, failed) == (0, 1)
    assert job.state == JobState.CANCELLED
    assert job.allocations.count() == 0
    decision = RoundDecision.objects.get()
    assert decision.applied is False
    assert decision.error == (
        f"job {job.pk}: cannot go from cancelled to running: cancelled is a final state"
    )


def _day_budget(team, action):
    """A 1 kWh budget of ``team`` over the day around T0, with hard-limit ``action``."""
    return Budget.objects.create(
        team=team, period_start=T0 - timedelta(days=1), period_end=T0 + timedelta(days=1),
        energy_limit_kwh=1.0, hard_limit_action=action,
    )  # fmt: skip


def _spend(budget, job, *, energy_j):
    from telemetry.models import EnergyLedgerEntry

    gpu = Gpu.objects.first()
    EnergyLedgerEntry.objects.create(
        gpu=gpu, hour=T0.replace(minute=0), job=job, team=budget.team, energy_j=energy_j,
        co2_g=0.0, ci_g_per_kwh=0.0, zone="ES",
    )  # fmt: skip


def test_round_releases_its_lock_when_its_transaction_commits(transactional_db, fifo, live_node):
    # given a round that ran and committed (transactional_db: no enclosing test transaction)
    live_node()
    services.run_scheduling_round(now=T0)

    # then another session can take the lock at once
    taken = {}

    def other_session():
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [services.ROUND_LOCK_KEY])
            taken["lock"] = cursor.fetchone()[0]
            cursor.execute("SELECT pg_advisory_unlock(%s)", [services.ROUND_LOCK_KEY])
        connections["default"].close()

    thread = threading.Thread(target=other_session)
    thread.start()
    thread.join(10)
    assert taken == {"lock": True}


def _scheduling_check_ids() -> set[str]:
    from django.core.checks import run_checks

    return {m.id for m in run_checks() if m.id.startswith("scheduling.")}


def test_default_scheduling_settings_pass_the_checks():
    assert _scheduling_check_ids() == set()


def test_bad_scheduling_settings_are_reported_as_checks(settings):
    settings.WATTFLOW_DEFAULT_POLICY = "fastest"
    settings.WATTFLOW_ROUND_INTERVAL_S = 0
    settings.WATTFLOW_NODE_TIMEOUT_S = 20

    assert _scheduling_check_ids() == {"scheduling.E001", "scheduling.E002", "scheduling.W001"}


def test_liveness_check_skips_while_a_round_holds_the_lock(
    transactional_db, fifo, live_node, make_job, member, team
):
    # given a job running on node-01, which then falls silent, while a round holds the lock
    live_node()
    job = _job(make_job, member, team)
    services.run_scheduling_round(now=T0)
    later = T0 + timedelta(seconds=120)
    held, release = threading.Event(), threading.Event()

    def hold_lock():
        with connections["default"].cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [services.ROUND_LOCK_KEY])
            held.set()
            release.wait(10)
            cursor.execute("ROLLBACK")
        connections["default"].close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    assert held.wait(10)
    try:
        # when beat's liveness check runs meanwhile
        skipped = services.check_liveness(now=later)
    finally:
        release.set()
        holder.join(10)

    # then it left everything to the round; once the lock is free it re-queues the job
    assert skipped is None
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert services.check_liveness(now=later) == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


@pytest.fixture
def powerflow_5min(scheduler_settings):
    return scheduler_settings("powerflow", round_interval_s=300)


def test_a_probe_is_revisited_at_its_end_not_at_the_next_round_interval(
    powerflow_5min, live_node, make_job, member, team
):
    # given a job nobody profiled (known only by a prior) whose prior cost is far beyond its
    # team's paced allowance, but whose 60 s probe fits a quarter of the period's budget
    live_node()
    Budget.objects.create(
        team=team, period_start=T0 - timedelta(hours=1), period_end=T0 + timedelta(days=1),
        energy_limit_kwh=0.2,
    )  # fmt: skip
    job = _job(make_job, member, team, workload="my-unprofiled-model", min_gpus=1, max_gpus=1,
               total_iterations=10_000_000)  # fmt: skip

    # when rounds run at T0, and beat ticks 30 s and 60 s later (rounds every 300 s)
    probe = services.run_scheduling_round(now=T0)
    job.refresh_from_db()
    started = job.state
    tick = services.run_scheduling_round(now=T0 + timedelta(seconds=30))
    end = services.run_scheduling_round(now=T0 + timedelta(seconds=60))

    # then the probe starts, its end is recorded, the tick inside it is skipped and the
    # tick at its end runs a round, which (no progress report yet) lets it go on once
    assert started == JobState.RUNNING
    first = SchedulingRound.objects.get(pk=probe.round_id)
    assert first.replan_at == T0 + timedelta(seconds=60)
    assert (tick.ran, tick.skipped) == (False, "not_due")
    assert end.ran
    state = SchedulerSettings.load().policy_state["prior_probes"][str(job.pk)]
    assert state["extensions"] == 1
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert SchedulingRound.objects.get(pk=end.round_id).replan_at == T0 + timedelta(seconds=120)


@pytest.fixture
def fifo_5min(scheduler_settings):
    return scheduler_settings("fifo", round_interval_s=300)


@pytest.mark.parametrize(
    ("action", "paused"),
    [(HardLimitAction.PAUSE_JOBS, True), (HardLimitAction.HOLD_QUEUE, False)],
)
def test_a_spent_pause_jobs_budget_makes_the_round_due_at_the_next_tick(
    fifo_5min, live_node, make_job, member, team, action, paused
):
    # given a running job, rounds every 300 s, and its team's budget spent 20 s later
    live_node()
    job = _job(make_job, member, team)
    services.run_scheduling_round(now=T0)
    budget = _day_budget(team, action)
    _spend(budget, job, energy_j=3.6e6)

    # when beat ticks at 20 s, 280 s before the next round is due
    tick = services.run_scheduling_round(now=T0 + timedelta(seconds=20))

    # then a pause_jobs budget runs the round that pauses the job; hold_queue keeps it
    # running, so nothing is due
    job.refresh_from_db()
    if paused:
        assert tick.ran
        assert job.state == JobState.PAUSED
        assert job.pending_reason_code == "budget_exhausted"
    else:
        assert (tick.ran, tick.skipped) == (False, "not_due")
        assert job.state == JobState.RUNNING


def test_a_spent_budget_whose_team_runs_nothing_waits_for_the_interval(
    fifo_5min, live_node, make_job, member, team
):
    # given a pause_jobs budget already spent when its team's job was submitted
    live_node()
    budget = _day_budget(team, HardLimitAction.PAUSE_JOBS)
    job = _job(make_job, member, team)
    _spend(budget, job, energy_j=3.6e6)
    services.run_scheduling_round(now=T0)

    # when beat ticks 20 s later
    tick = services.run_scheduling_round(now=T0 + timedelta(seconds=20))

    # then the job waits (the first round held it), and no early round runs
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert (tick.ran, tick.skipped) == (False, "not_due")


def test_a_round_the_watch_runs_accounts_every_team_near_its_limit(
    fifo_5min, live_node, make_job, member, team, monkeypatch
):
    # The watch accounts its own teams first; the round it then runs plans every team,
    # so every team near its limit is accounted too, as before any round (a review).
    live_node()
    job = _job(make_job, member, team)
    services.run_scheduling_round(now=T0)
    budget = _day_budget(team, HardLimitAction.PAUSE_JOBS)
    _spend(budget, job, energy_j=3.6e6)
    calls = []
    real = services._account_budgets_near_their_limits

    def spy(now, **kwargs):
        calls.append(kwargs.get("team_ids"))
        return real(now, **kwargs)

    monkeypatch.setattr(services, "_account_budgets_near_their_limits", spy)
    assert services.run_scheduling_round(now=T0 + timedelta(seconds=20)).ran
    assert calls == [[team.pk], None]
