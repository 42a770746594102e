"""A job longer than its budget's period spends in it only its draw to the period's end.
Priced on its whole remaining cost (more than any one period's budget), it got an infinite
price and ran at its minimum however large the budget: on pollux_workload-4 with 12 kWh
every 6 h, four ImageNet jobs ran on one T4 each for 130 hours with 60 GPUs off, spending
8% of each period's budget (a contract sweep's run)."""

from __future__ import annotations

import pytest

from scheduling.core.perf_models import load_catalog
from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget
from tests.core.corekit import job, make_cluster, snapshot

CATALOG = load_catalog()
CLUSTER = make_cluster(1, 1, 8)
DAY = 86400.0
# about 16 days on one A100 at its cheapest clock
LONG = job("long", iters=5e7, min_gpus=1, max_gpus=8, workload="resnet50", gpu_model="A100",
           global_batch=256)  # fmt: skip


def _plan(limit_j: float, **params):
    # half-way through a day-long period with nothing spent yet
    budget = Budget("b", "t", 0.0, DAY, energy_limit_j=limit_j)
    snap = snapshot(CLUSTER, [LONG], catalog=CATALOG, budgets=(budget,),
                    policy_state={"price_prev_now": DAY / 2 - 300.0})  # fmt: skip
    return plan_round(snap, policy=get_policy("powerflow", **params), now=DAY / 2)


@pytest.mark.parametrize("limit_j", [20e6, 50e6, 100e6])
def test_priced_on_its_whole_cost_a_job_longer_than_the_period_stays_at_its_minimum(limit_j):
    plan = _plan(limit_j, in_period_cost=False)
    a = plan.allocations["long"]
    assert (a.n_gpus, a.sm_clock_mhz) == (1, 990)
    assert plan.policy_state["price"] == {}  # infinite: not a price at all


def test_priced_on_what_the_period_pays_a_larger_budget_buys_a_faster_run():
    gpus = []
    for limit_j in (20e6, 50e6, 100e6):
        plan = _plan(limit_j)
        a = plan.allocations["long"]
        gpus.append(a.n_gpus)
        assert 0.0 <= plan.policy_state["price"]["b"] < float("inf")
        # and what it draws at that pace to the period's end fits what is left
        rounds_left = (DAY / 2) / 300.0
        assert plan.predicted_energy_by_budget_j["b"] * rounds_left <= limit_j
    assert gpus == sorted(gpus) and gpus[0] < gpus[-1] == 8


def test_a_job_paying_two_budgets_gets_no_more_than_each_ones_own_price_buys():
    # The team's period ends in 12 h (priced on in-period costs), the cluster's in 39.5
    # days; each budget's price is set on its own hull, and prices on different hulls do
    # not compare: chosen at the higher price on the team's hull, the job got 8 GPUs at
    # 1125 MHz, which the cluster's price buys on no hull (found in review).
    team = Budget("team", "t", 0.0, DAY, energy_limit_j=80e6)
    clus = Budget("clus", None, 0.0, 40 * DAY, energy_limit_j=3e9)

    def alloc(*budgets):
        snap = snapshot(CLUSTER, [LONG], catalog=CATALOG, budgets=budgets,
                        policy_state={"price_prev_now": DAY / 2 - 300.0})  # fmt: skip
        a = plan_round(snap, policy=get_policy("powerflow"), now=DAY / 2).allocations["long"]
        return a.n_gpus, a.sm_clock_mhz

    assert alloc(team) == (8, 1125)
    both = alloc(team, clus)
    assert both[0] == 1 and both != alloc(team)
