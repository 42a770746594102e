"""A budget edited while a round runs: the alert the round commits follows the budget as
committed, not as the round read it.

A round read its spent budgets, then wrote their alerts with the action it had read; an edit
committed meanwhile found no alert to follow (the round's was not committed yet), so the
round's alert kept the old hard-limit action (or, its limit raised, announced a budget that
was no longer spent). Two connections on the real PostgreSQL: the edit runs in a thread of
its own while the round is paused at a chosen stage."""

from datetime import UTC, datetime, timedelta

import pytest
from support.races import in_another_connection

from cluster import services as cluster_services
from cluster.choices import HardLimitAction, JobState, Role
from cluster.models import Budget, BudgetAlert, Gpu, Node
from scheduling import services
from telemetry.models import EnergyLedgerEntry

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spent(scheduler_settings, make_node, make_user, make_job, team, member):
    """A notify_only budget of 1 kWh with 1.2 kWh spent, a queued job of the team, a lead."""
    scheduler_settings("fifo")
    node = make_node("node-01", gpus=8)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0 + timedelta(days=3))
    lead = make_user("liam_lead", team=team, role=Role.LEAD, email="liam@example.org")
    budget = Budget.objects.create(
        team=team, period_start=T0 - timedelta(days=1), period_end=T0 + timedelta(days=1),
        hard_limit_action=HardLimitAction.NOTIFY_ONLY, energy_limit_kwh=1.0,
    )  # fmt: skip
    job = make_job(
        owner=member, team=team, min_gpus=2, max_gpus=2, global_batch_size=256,
        min_batch_size=256, max_batch_size=256, at=T0 - timedelta(minutes=5),
    )  # fmt: skip
    EnergyLedgerEntry.objects.create(
        gpu=Gpu.objects.first(), hour=T0 - timedelta(hours=2), job=job, team=team,
        energy_j=1.2 * 3.6e6, co2_g=0.0, ci_g_per_kwh=0.0, zone="ES",
    )  # fmt: skip
    return budget, lead, job


def _edit_in_another_connection(budget, lead, changes):
    """Start the edit in a thread with its own connection; return once it has committed or
    is waiting on a lock held by this connection's transaction (the round's)."""
    return in_another_connection(
        lambda: cluster_services.save_budget(budget, actor=lead, at=T0, changes=changes)
    )


def test_an_action_edited_after_the_round_read_the_budget_is_the_alerts_action(spent, monkeypatch):
    # given a spent notify_only budget, and a round that has read it and written its alert
    budget, lead, job = spent
    real_record_round = services._record_round
    edits = []

    def record_round(*args, **kwargs):
        # when a lead switches the budget to pause_jobs before the round commits
        edits.append(
            _edit_in_another_connection(
                budget, lead, {"hard_limit_action": HardLimitAction.PAUSE_JOBS}
            )
        )
        return real_record_round(*args, **kwargs)

    monkeypatch.setattr(services, "_record_round", record_round)
    result = services.run_scheduling_round(now=T0, force=True)
    ((thread, outcome),) = edits
    thread.join(timeout=30)

    # then the edit stands, and the alert says what the budget does now
    assert result.ran and outcome == ["saved"]
    budget.refresh_from_db()
    assert budget.hard_limit_action == HardLimitAction.PAUSE_JOBS
    alert = BudgetAlert.objects.get()
    assert (alert.budget_id, alert.action) == (budget.pk, HardLimitAction.PAUSE_JOBS)
    # (and the round that planned with notify_only let the job run, as it read it)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_a_limit_raised_after_the_round_read_the_budget_raises_no_alert(spent, monkeypatch):
    # given a spent budget (1.2 of 1 kWh), and a round that has planned with it spent
    budget, lead, _ = spent
    real_plan_round = services.plan_round
    edits = []

    def plan_round(snapshot, *, policy, now):
        plan = real_plan_round(snapshot, policy=policy, now=now)
        # when a lead raises its limit to 2 kWh before the round writes its alerts
        edits.append(_edit_in_another_connection(budget, lead, {"energy_limit_kwh": 2.0}))
        return plan

    monkeypatch.setattr(services, "plan_round", plan_round)
    result = services.run_scheduling_round(now=T0, force=True)
    ((thread, outcome),) = edits
    thread.join(timeout=30)

    # then the edit stands and no alert announces a budget that is not spent (1.2 of 2 kWh)
    assert result.ran and outcome == ["saved"]
    budget.refresh_from_db()
    assert budget.energy_limit_kwh == 2.0
    assert not BudgetAlert.objects.exists()


@pytest.mark.parametrize("stage", ["_record_round", "plan_round"])
def test_a_limit_raised_but_still_spent_during_a_round_is_the_alerts_limit(
    spent, monkeypatch, stage
):
    # given a spent budget (1.2 of 1 kWh), and a round past its read of the budget
    budget, lead, _ = spent
    real = getattr(services, stage)
    edits = []

    def hooked(*args, **kwargs):
        result = real(*args, **kwargs)
        # when a lead raises its limit to 1.1 kWh (still spent) before the round commits
        edits.append(_edit_in_another_connection(budget, lead, {"energy_limit_kwh": 1.1}))
        return result

    monkeypatch.setattr(services, stage, hooked)
    result = services.run_scheduling_round(now=T0, force=True)
    ((thread, outcome),) = edits
    thread.join(timeout=30)

    # then the budget's alert, now or after the next round, names the stored limit
    assert result.ran and outcome == ["saved"]
    monkeypatch.setattr(services, stage, real)
    assert services.run_scheduling_round(now=T0 + timedelta(minutes=1), force=True).ran
    alert = BudgetAlert.objects.get()
    assert (alert.energy_limit_kwh, alert.energy_used_kwh) == (1.1, pytest.approx(1.2))
