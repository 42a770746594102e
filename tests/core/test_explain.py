"""Every start, resize and retune a round makes carries a sentence saying why (the round
table's "why" column), built from the plan and the snapshot only."""

import pytest

from scheduling.core.explain import J_PER_KWH, explain_change
from scheduling.core.registry import policy_names
from scheduling.core.round import plan_round
from scheduling.core.types import (
    Allocation,
    Budget,
    Change,
    ChangeKind,
    HardLimitAction,
    Plan,
)
from tests.core.corekit import job, make_cluster, random_snapshot, running, snapshot


def test_a_start_says_which_policy_granted_what_it_asked_for():
    snap = snapshot(make_cluster(1, 1, 8), [job("a", n=4)])
    plan = plan_round(snap, policy="fifo", now=0.0)
    (change,) = plan.changes
    assert explain_change(change, snap, plan, now=0.0) == (
        "Started by fifo on the 4 GPUs it asked for, at default clocks."
    )


def test_a_start_under_a_budget_says_what_the_budget_allows_this_round_and_the_plan_spends():
    budget = Budget("b1", "t", 0.0, 86_400.0, energy_limit_j=5e7)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", n=2)], budgets=(budget,))
    plan = plan_round(snap, policy="powerflow", now=0.0)
    (change,) = plan.changes
    allowed = plan.energy_allowance_by_budget_j["b1"] / J_PER_KWH
    spent = plan.predicted_energy_by_budget_j["b1"] / J_PER_KWH
    text = explain_change(change, snap, plan, now=0.0)
    assert text.startswith("Started by powerflow on ")
    assert text.endswith(
        f"; team t's budget allows {allowed:.3g} kWh this round, the plan spends {spent:.3g} kWh."
    )


def test_a_spent_notify_only_budget_is_not_named_as_what_limits_a_start():
    # a live probe: a start was explained as "team t's budget allows 0 g CO2e this round"
    spent = Budget(
        "b1", "t", 0.0, 86_400.0, energy_limit_j=5e7, energy_used_j=6e7,
        hard_limit_action=HardLimitAction.NOTIFY_ONLY,
    )  # fmt: skip
    snap = snapshot(make_cluster(1, 1, 8), [job("a", n=2)], budgets=(spent,))
    plan = plan_round(snap, policy="powerflow", now=0.0)
    (change,) = plan.changes
    text = explain_change(change, snap, plan, now=0.0)
    assert text.startswith("Started by powerflow on ")
    assert "budget" not in text


def test_a_shrink_says_what_changed_and_a_grow_names_the_gpus_stops_freed():
    cluster = make_cluster(1, 1, 8)
    gpus = tuple(g.gpu_id for g in cluster.nodes[0].gpus)
    a = running(job("a", n=4, min_gpus=1, max_gpus=8), gpus[:4], clock=1200)
    b = running(job("b", n=2), gpus[4:6])
    snap = snapshot(cluster, [a, b])
    shrink = Change("a", ChangeKind.RESIZE, a.allocation, Allocation(gpus[:2], 64, 900))
    plan = Plan(allocations={}, waiting={}, changes=(shrink,), policy="powerflow")
    assert explain_change(shrink, snap, plan, now=0.0) == (
        "powerflow re-planned it: 4 GPUs → 2, 1200 MHz → 900 MHz."
    )
    grow = Change("a", ChangeKind.RESIZE, a.allocation, Allocation(gpus[:6], 128, 1200))
    stop = Change("b", ChangeKind.STOP, b.allocation, None)
    plan = Plan(allocations={}, waiting={}, changes=(stop, grow), policy="tiresias")
    assert explain_change(grow, snap, plan, now=0.0) == (
        "tiresias re-planned it: 4 GPUs → 6, batch 64 → 128; this round's stops freed 2 GPUs."
    )
    assert explain_change(stop, snap, plan, now=0.0) == ""


@pytest.mark.parametrize("policy", policy_names())
@pytest.mark.parametrize("seed", [1, 2])
def test_every_change_but_a_stop_is_explained_under_every_policy(policy, seed):
    snap = random_snapshot(seed, make_cluster(2, 2, 4), n_jobs=12)
    now = 10_000.0
    plan = plan_round(snap, policy=policy, now=now)
    assert plan.changes
    for change in plan.changes:
        text = explain_change(change, snap, plan, now=now)
        assert (text == "") == (change.kind == ChangeKind.STOP), (change, text)
