"""A budget short of its work (its funds cannot pay the present jobs' cheapest cost) spends
what it has on the jobs it can finish, instead of pacing it evenly over the rest of the
period: an even share smaller than any job's round at its minimum stopped every job, most
of them nearly done, for the rest of the period with the funds that would finish them
unspent (a team's cifar10 jobs on philly_week's first 120 jobs, 42 h)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.core.perf_models import load_catalog
from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget, CarbonSignal
from tests.core.corekit import job, make_cluster, running, snapshot

CATALOG = load_catalog()
CLUSTER = make_cluster(1, 1, 8)
DAY = 86400.0
# resnet50 on an A100 at its cheapest (one GPU, its lowest clock): about 147 J and 0.87 s
# an iteration, so about 50 kJ a 300 s round and 147 kJ a thousand iterations.
LEFT = (500, 1000, 1500, 10_000)  # iterations each running job has left
CI = 200.0  # g/kWh
LIMIT_J = 2.0e6


def _plan(used_j: float, *, policy="powerflow", co2_left_g=None):
    jobs = []
    for i, left in enumerate(LEFT):
        j = job(f"j{i}", iters=20_000.0, workload="resnet50", gpu_model="A100",
                global_batch=256, min_gpus=1, max_gpus=8)  # fmt: skip
        jobs.append(replace(running(j, (CLUSTER.gpus[i].gpu_id,)), done_iters=20_000.0 - left))
    # a day into a two-day period, 2 MJ a period: each job's whole cheapest cost (1.47 MJ
    # at most) fits a period, so the period is short of its work, and none is larger than
    # a period (those run in parts: test_run_in_parts.py)
    carbon = {}
    if co2_left_g is not None:  # 200 g a period (each job's whole cost, 82 g at most, fits)
        carbon = {"co2_limit_g": 200.0, "co2_used_g": 200.0 - co2_left_g}
    budget = Budget("b", "t", 0.0, 2 * DAY, energy_limit_j=LIMIT_J, energy_used_j=used_j,
                    **carbon)  # fmt: skip
    snap = snapshot(CLUSTER, jobs, catalog=CATALOG, budgets=(budget,),
                    policy_state={"price_prev_now": DAY - 300.0},
                    carbon=CarbonSignal(ci_g_per_kwh=CI))  # fmt: skip
    return plan_round(snap, policy=get_policy(policy), now=DAY)


def _cheapest_cost_j(left: float) -> float:
    from scheduling.core.online_model import config_of

    model = CATALOG.get("resnet50", "A100")
    return left * min(
        model.energy_per_iter_j(config_of(1, 1, 256, c, None)) for c in model.clocks_mhz
    )


def test_a_short_budget_finishes_the_jobs_its_funds_pay_for():
    # given 500 kJ left: the four jobs' cheapest cost is about 1.9 MJ, the three smallest
    # about 440 kJ, and the even share of what is left over the day is 2.2 kJ a round,
    # less than any job's round at its minimum
    free = 0.5e6
    assert sum(_cheapest_cost_j(x) for x in LEFT[:3]) < free < sum(map(_cheapest_cost_j, LEFT))
    plan = _plan(LIMIT_J - free)
    # then the three jobs it can finish run at their minimum, the fourth waits
    assert plan.policy_state.get("price", {}) == {}  # infinite: the budget is short
    assert {k: (a.n_gpus, a.sm_clock_mhz) for k, a in plan.allocations.items()} == {
        "j0": (1, 855),
        "j1": (1, 855),
        "j2": (1, 855),
    }
    assert plan.waiting["j3"].code == "over_round_allowance"
    assert "cannot pay for all of its jobs' work in this period" in plan.waiting["j3"].message
    # and the round's allowance is what they take, far above the even share
    allowance = plan.energy_allowance_by_budget_j["b"]
    assert plan.predicted_energy_by_budget_j["b"] == pytest.approx(allowance)
    assert allowance > 50 * free * 1.25 * 300.0 / DAY


def test_funds_that_finish_no_job_keep_the_even_share():
    # (the boundary: a raise that ignored what the funds can finish would fail here)
    # given less left than the smallest job's cheapest cost to finish (73 kJ)
    free = 60e3
    assert free < _cheapest_cost_j(LEFT[0])
    plan = _plan(LIMIT_J - free)
    # then nothing is raised: the even share stops every job, and each is told why
    assert plan.allocations == {}
    assert {w.message for w in plan.waiting.values()} == {
        "Waiting: team t's budget has too little left in this period to finish any of its "
        "jobs; what is left is paced over the period."
    }
    assert plan.energy_allowance_by_budget_j["b"] == pytest.approx(free * 1.25 * 300.0 / DAY)


def test_a_limit_of_the_other_kind_is_raised_with_it():
    # given the same short energy budget with a carbon limit that pays for more than the
    # three smallest jobs (about 24 g at 200 g/kWh; 100 g left), whose even share over the
    # day (0.4 g a round) is less than one job's round at its minimum (about 2.9 g)
    free = 0.5e6
    plan = _plan(LIMIT_J - free, co2_left_g=100.0)
    # then the carbon allowance is raised with the energy one, and the three jobs run
    assert set(plan.allocations) == {"j0", "j1", "j2"}
    allowance_g = plan.co2_allowance_by_budget_g["b"]
    assert allowance_g == pytest.approx(plan.energy_allowance_by_budget_j["b"] * CI / 3.6e6)
    assert allowance_g > 5 * 100.0 * 1.25 * 300.0 / DAY


def test_the_other_kinds_funds_choose_the_jobs_too():
    # given a carbon limit with 10 g left: it finishes the smallest job (about 4.1 g at
    # 200 g/kWh) and not the two smallest (about 12.3 g), where the energy pays for three
    free = 0.5e6
    plan = _plan(LIMIT_J - free, co2_left_g=10.0)
    # then only the job both kinds finish runs: raised on the energy's choice alone, the
    # carbon was spent on three jobs in two rounds, none of them finished
    assert set(plan.allocations) == {"j0"}
    assert plan.co2_allowance_by_budget_g["b"] < 4.1


def test_the_other_kind_is_raised_no_further_than_it_has_left():
    # (a boundary: a raise without the cap would fail here, as it would not before the
    # other kind was raised at all)
    # given a carbon limit with 2 g left: less than one job's round at its minimum
    plan = _plan(LIMIT_J - 0.5e6, co2_left_g=2.0)
    # then its allowance stops at what is left, and no job runs past it
    assert 0.0 < plan.co2_allowance_by_budget_g["b"] <= 2.0
    assert plan.allocations == {}
