"""A cluster budget whose powered idle GPUs alone draw more than its limit over its period
(issue 13, point 2; docs/benchmarks.md, "A sweep of traces and clusters never seen, third
pass"): no plan keeps that period. PowerFlow and GreenFlow set the floor aside to the
period's end, found nothing left for any job, and started nothing in it while ``fifo``
ran up to the limit. Now such a period sets no floor aside (as the simulator's watch
does), its jobs may spend what the limit has left, and once it is spent the budget's
``hard_limit_action`` applies as to any spent budget."""

from __future__ import annotations

import pytest

from scheduling.core.pacing import floor_over_limit, intensity_curve
from scheduling.core.round import plan_round
from scheduling.core.types import Budget, CarbonSignal, HardLimitAction, WaitCode
from tests.core.corekit import job, make_cluster, running, snapshot

# 8 GPUs idle at 50 W: 400 W, 1.2 MJ over a 3,000 s period
FLOOR_W, PERIOD_S = 400.0, 3000.0


def _energy(limit_j: float, used_j: float = 0.0, action=HardLimitAction.PAUSE_JOBS) -> Budget:
    return Budget(
        "all", None, 0.0, PERIOD_S, energy_limit_j=limit_j, energy_used_j=used_j,
        hard_limit_action=action,
    )  # fmt: skip


def test_the_floor_is_over_the_limit_counting_only_what_it_drew_and_will_draw():
    # the floor to the end alone (1.2 MJ) over 1 MJ
    assert floor_over_limit(_energy(1.0e6), now=0.0, floor_w=FLOOR_W)
    assert not floor_over_limit(_energy(1.3e6), now=0.0, floor_w=FLOOR_W)
    # half way with nothing spent (the run began there): the floor drew nothing before,
    # 0.6 MJ ahead is within 1 MJ
    assert not floor_over_limit(_energy(1.0e6), now=1500.0, floor_w=FLOOR_W)
    # half way with 0.6 MJ spent: the floor drew it, 1.2 MJ in all
    assert floor_over_limit(_energy(1.0e6, used_j=6e5), now=1500.0, floor_w=FLOOR_W)
    # a team budget pays no floor; idle nodes powered off draw none
    assert not floor_over_limit(_energy(1.0), now=0.0, floor_w=0.0)
    # carbon: 1.2 MJ at 200 g/kWh is 66.7 g
    carbon = CarbonSignal(ci_g_per_kwh=200.0)
    curve = intensity_curve(carbon, now=0.0, history=[200.0])
    b = Budget("all", None, 0.0, PERIOD_S, co2_limit_g=60.0)
    assert floor_over_limit(b, now=0.0, floor_w=FLOOR_W, floor_curve=curve)
    b = Budget("all", None, 0.0, PERIOD_S, co2_limit_g=70.0)
    assert not floor_over_limit(b, now=0.0, floor_w=FLOOR_W, floor_curve=curve)


@pytest.mark.parametrize("policy", ["powerflow", "greenflow"])
@pytest.mark.parametrize("action", list(HardLimitAction))
def test_a_period_its_floor_outspends_starts_its_job_whatever_the_action(policy, action):
    # given a cluster budget of 1 MJ (carbon: 60 g) over a period its idle GPUs alone
    # draw 1.2 MJ (66.7 g) in, nothing spent yet
    budget = Budget(
        "all", None, 0.0, PERIOD_S, energy_limit_j=1.0e6 if policy == "powerflow" else None,
        co2_limit_g=60.0 if policy == "greenflow" else None, hard_limit_action=action,
    )  # fmt: skip
    snap = snapshot(
        make_cluster(1, 1, 8),
        [job("a", min_gpus=1, max_gpus=8)],
        budgets=(budget,),
        carbon=CarbonSignal(ci_g_per_kwh=200.0),
    )

    plan = plan_round(snap, policy=policy, now=0.0)

    # then its job starts (before: it waited, "this round's share is spent", as every
    # job did until the stall limit), and the round may spend what the limit has left
    assert "a" in plan.allocations
    if policy == "powerflow":
        assert plan.energy_allowance_by_budget_j["all"] > FLOOR_W * 300.0


def test_a_blocked_job_in_such_a_period_is_told_the_budget_cannot_be_kept():
    # given the period nearly spent: 10 kJ left of 1 MJ, less than a round's floor
    # (120 kJ) plus the job; the floor drew the 0.99 MJ
    snap = snapshot(
        make_cluster(1, 1, 8),
        [job("a", min_gpus=1, max_gpus=8)],
        budgets=(_energy(1.0e6, used_j=0.99e6),),
    )

    plan = plan_round(snap, policy="powerflow", now=2500.0)

    assert plan.allocations == {}
    reason = plan.waiting["a"]
    assert reason.code == WaitCode.OVER_ROUND_ALLOWANCE
    assert reason.message.startswith(
        "Waiting: the cluster's budget cannot be kept in this period: its idle GPUs alone "
        "draw more than its limit"
    )


@pytest.mark.parametrize(
    ("action", "runs", "waits"),
    [
        # spent: pause_jobs stops the running job and starts nothing
        (HardLimitAction.PAUSE_JOBS, set(), {"a", "b"}),
        # hold_queue keeps the running job on its GPUs and starts nothing
        (HardLimitAction.HOLD_QUEUE, {"a"}, {"b"}),
        # notify_only holds nothing back
        (HardLimitAction.NOTIFY_ONLY, {"a", "b"}, set()),
    ],
)
def test_once_spent_such_a_period_applies_its_hard_limit_action(action, runs, waits):
    # (a guard: round.admit applies the action to any spent budget, before and after)
    cluster = make_cluster(1, 1, 8)
    a = running(job("a", n=2), ("s0n0/0", "s0n0/1"))
    snap = snapshot(
        cluster, [a, job("b", n=2)], budgets=(_energy(1.0e6, used_j=1.0e6, action=action),)
    )

    plan = plan_round(snap, policy="powerflow", now=2500.0)

    assert set(plan.allocations) == runs
    assert set(plan.waiting) == waits
    if action == HardLimitAction.PAUSE_JOBS:
        assert plan.waiting["b"].code == WaitCode.BUDGET_EXHAUSTED


def test_a_dirty_first_hour_with_a_cleaner_forecast_is_no_unkeepable_period():
    # given a ten-day cluster carbon budget of 20 kg, 400 W of idle GPUs (96 kWh over the
    # period), its first round in a dirty hour (400 g/kWh) and a forecast whose day is
    # 16 clean hours (60 g/kWh) and 8 dirty ones: at the forecast's own mean the floor
    # emits 16.6 kg in the period, within the limit; only at the one hour seen, carried
    # past the forecast for nine days, is it over (36.2 kg)
    hour = 3600.0
    dirty = (0, 1, 2, 3, 20, 21, 22, 23)
    forecast = tuple((h * hour, 400.0 if h in dirty else 60.0) for h in range(24))
    carbon = CarbonSignal(ci_g_per_kwh=400.0, forecast=forecast)
    budget = Budget("all", None, 0.0, 10 * 24 * hour, co2_limit_g=20_000.0)
    snap = snapshot(
        make_cluster(1, 1, 8), [job("a", min_gpus=1, max_gpus=8)], budgets=(budget,), carbon=carbon
    )

    # then PowerFlow does not take the period for one no plan keeps: it keeps the floor
    # aside and paces what is left, so the round's predicted spend is a share of the
    # period's, not the whole 20 kg limit (before: the test fired on the one hour seen,
    # nothing was set aside and the whole limit was the first round's allowance), as
    # GreenFlow, whose tail already counts the forecast's hours, does
    for policy in ("powerflow", "greenflow"):
        plan = plan_round(snap, policy=policy, now=0.0)
        assert plan.co2_allowance_by_budget_g["all"] < 0.01 * budget.co2_limit_g, policy
