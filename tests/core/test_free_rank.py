"""``free_rank``: in a round where energy is free (no budget limits it, or every priced
budget's price is 0), PowerFlow's steps are ranked by the speedup per spare GPU, as
``elastic`` ranks them, instead of by the heSRPT weight (docs/benchmarks.md,
"PowerFlow at price 0 is `elastic` less its energy").

The two jobs of test_admission_jct: both start on 1 GPU of a 3-GPU node, one GPU is
spare. ``elastic`` gives it to the long job (a doubling worth +1.0 speedup against the
short job's +0.866); heSRPT gives it to the short one (weight 1 against the long job's
1/2). With a generous budget the price is 0; with a tight one it is not.
"""

from __future__ import annotations

import pytest

from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget
from tests.core.corekit import AnalyticModel, Catalog, job, make_cluster, snapshot

DAY_S = 86_400.0
LONG = AnalyticModel("long_w", t1_s=1.0, scaling=1.0)
SHORT = AnalyticModel("short_w", t1_s=1.0, scaling=0.9)


def _plan(policy, budgets=()):
    jobs = [
        job("long", workload="long_w", iters=3200.0, min_gpus=1, max_gpus=2),
        job("short", workload="short_w", iters=800.0, min_gpus=1, max_gpus=2),
    ]
    snap = snapshot(
        make_cluster(1, 1, 3), jobs, catalog=Catalog(LONG, SHORT), budgets=tuple(budgets)
    )
    plan = plan_round(snap, policy=policy, now=0.0)
    return {k: a.n_gpus for k, a in plan.allocations.items()}, plan


def _budget(limit_j: float) -> Budget:
    # a team budget (no idle floor) over one day
    return Budget("b", "t", 0.0, DAY_S, energy_limit_j=limit_j)


def test_without_a_budget_free_rank_divides_the_gpus_as_elastic_does():
    elastic, _ = _plan(get_policy("elastic"))
    default, _ = _plan(get_policy("powerflow"))
    free, _ = _plan(get_policy("powerflow", free_rank="per_gpu"))
    assert elastic == {"long": 2, "short": 1}
    # heSRPT (the default rank) gives the spare GPU to the short job
    assert default == {"long": 1, "short": 2}
    # the option gives elastic's division
    assert free == elastic


def test_at_price_0_free_rank_divides_the_gpus_as_elastic_does():
    # given a budget of 1 GJ: both jobs at their fastest take a few MJ, so the price is 0
    budget = _budget(1e9)
    default, plan_d = _plan(get_policy("powerflow"), [budget])
    free, plan_f = _plan(get_policy("powerflow", free_rank="per_gpu"), [budget])
    assert plan_d.policy_state["price"]["b"] == 0.0
    assert plan_f.policy_state["price"]["b"] == 0.0
    assert default == {"long": 1, "short": 2}
    assert free == {"long": 2, "short": 1}


def test_a_priced_round_keeps_the_heSRPT_rank():
    # given a budget a little above what both jobs take at their cheapest (600 kJ): a
    # price above 0, at which the per-GPU rank would still grow the long job
    budget = _budget(700_000.0)
    default, plan_d = _plan(get_policy("powerflow"), [budget])
    free, plan_f = _plan(get_policy("powerflow", free_rank="per_gpu"), [budget])
    per_gpu, _ = _plan(get_policy("powerflow", rank="per_gpu"), [budget])
    assert 0.0 < plan_d.policy_state["price"]["b"] < float("inf")
    assert per_gpu == {"long": 2, "short": 1}
    # then the option changes nothing: heSRPT's plan, clocks included
    assert default == {"long": 1, "short": 2}
    assert plan_f.allocations == plan_d.allocations


def test_free_rank_rejects_other_ranks():
    with pytest.raises(ValueError, match="free_rank must be"):
        get_policy("powerflow", free_rank="relative")
