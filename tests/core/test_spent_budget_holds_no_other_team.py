"""A job its own team's spent budget refuses takes nothing from another team's job.

Only the jobs the GPUs could admit at their minimum get target configurations and count
towards a priced budget's allowance. A job at the head of the queue whose team budget was
spent still counted as one: it took the GPUs in that count and was then refused at
admission, and the job behind it, of another team with budget to spare, was left with no
allowance and waited on idle GPUs for as long as the first team's period lasted."""

from __future__ import annotations

import pytest

from scheduling.core.perf_models import load_catalog
from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget, CarbonSignal, WaitCode
from tests.core.corekit import job, make_cluster, snapshot

CATALOG = load_catalog()
CLUSTER = make_cluster(1, 1, 8)
DAY = 86400.0
# the shorter job first in the queue: 8 GPUs at least, team x
HEAD = job("head", iters=2e4, min_gpus=8, max_gpus=8, workload="resnet50", gpu_model="A100",
           global_batch=256, team="x")  # fmt: skip
# behind it, team y's elastic job
BEHIND = job("behind", iters=5e6, min_gpus=1, max_gpus=8, workload="resnet50",
             gpu_model="A100", global_batch=256, team="y")  # fmt: skip


def _plan(jobs, y_limit_j: float, policy: str = "powerflow"):
    # half-way through the day: team x has 1 kJ of 10 MJ left, team y all of its limit
    spent = Budget("bx", "x", 0.0, DAY, energy_limit_j=10e6, energy_used_j=10e6 - 1e3)
    fresh = Budget("by", "y", 0.0, DAY, energy_limit_j=y_limit_j)
    snap = snapshot(CLUSTER, jobs, catalog=CATALOG, budgets=(spent, fresh),
                    policy_state={"price_prev_now": DAY / 2 - 300.0})  # fmt: skip
    return plan_round(snap, policy=get_policy(policy), now=DAY / 2)


def _alone(y_limit_j: float):
    fresh = Budget("by", "y", 0.0, DAY, energy_limit_j=y_limit_j)
    snap = snapshot(CLUSTER, [BEHIND], catalog=CATALOG, budgets=(fresh,),
                    policy_state={"price_prev_now": DAY / 2 - 300.0})  # fmt: skip
    return plan_round(snap, policy=get_policy("powerflow"), now=DAY / 2)


@pytest.mark.parametrize("y_limit_j", [50e6, 500e6])
def test_the_job_behind_a_spent_teams_job_runs_as_it_would_alone(y_limit_j):
    plan = _plan([HEAD, BEHIND], y_limit_j)
    # the head job waits on its own team's budget
    assert "head" not in plan.allocations
    assert plan.waiting["head"].code == WaitCode.OVER_ROUND_ALLOWANCE
    # and the other team's job gets what it would get with the cluster to itself
    alone = _alone(y_limit_j).allocations["behind"]
    got = plan.allocations["behind"]
    assert (got.n_gpus, got.sm_clock_mhz) == (alone.n_gpus, alone.sm_clock_mhz)
    assert got.n_gpus >= 4


def test_a_spent_budget_still_holds_its_own_teams_job():
    plan = _plan([HEAD], 500e6)
    assert plan.allocations == {}
    assert plan.waiting["head"].code == WaitCode.OVER_ROUND_ALLOWANCE


def test_greenflow_likewise():
    spent = Budget("bx", "x", 0.0, DAY, co2_limit_g=1e6, co2_used_g=1e6 - 1.0)
    fresh = Budget("by", "y", 0.0, DAY, co2_limit_g=1e9)
    snap = snapshot(CLUSTER, [HEAD, BEHIND], catalog=CATALOG, budgets=(spent, fresh),
                    carbon=CarbonSignal(ci_g_per_kwh=200.0),
                    policy_state={"price_prev_now": DAY / 2 - 300.0})  # fmt: skip
    plan = plan_round(snap, policy=get_policy("greenflow"), now=DAY / 2)
    assert "head" not in plan.allocations
    assert plan.allocations["behind"].n_gpus >= 4
