"""A job whose least whole cost is more than one whole period of its ``pause_jobs`` budget
can pay runs in parts: at its minimum configuration on what the period has left, paused by
the hard-limit watch at the limit, resumed by the next period. Priced on its whole cost it
never started (an infinite price, a round cost above any allowance), while ``fifo`` or
``tiresias`` under the same budgets finish it over several periods (docs/benchmarks.md,
"The simulator on a reviewer's own inputs": team budgets by workload at
``--horizon-factor 0.3``, both jobs never started, stopped at the stall limit).

A job that a whole period can pay still waits for one (the rule is only for work no
period can pay), and a budget that does not pause its jobs at the limit never runs one.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.core.perf_models import load_catalog
from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget, CarbonSignal, HardLimitAction
from tests.core.corekit import job, make_cluster, snapshot

CATALOG = load_catalog()
CLUSTER = make_cluster(1, 1, 8)
DAY = 86400.0
CI = 200.0  # g/kWh
# resnet50 on an A100 at its cheapest (one GPU, its lowest clock, 855 MHz): about 147 J an
# iteration, so 10,000 iterations cost about 1.47 MJ and 500 about 73 kJ.
J_PER_ITER = 147.0


def _budget(kind: str, limit_j: float, used_j: float = 0.0, **kw) -> Budget:
    """A team budget of a day, ``limit_j`` a period, in energy or its carbon at ``CI``."""
    if kind == "energy":
        return Budget("b", "t", 0.0, DAY, energy_limit_j=limit_j, energy_used_j=used_j, **kw)
    to_g = CI / 3.6e6
    return Budget("b", "t", 0.0, DAY, co2_limit_g=limit_j * to_g, co2_used_g=used_j * to_g, **kw)


def _plan(policy: str, budget: Budget, *, iters: float, done: float = 0.0, **params):
    j = job("big", iters=iters, workload="resnet50", gpu_model="A100", global_batch=256,
            min_gpus=1, max_gpus=8, team="t")  # fmt: skip
    snap = snapshot(CLUSTER, [replace(j, done_iters=done)], catalog=CATALOG, budgets=(budget,),
                    carbon=CarbonSignal(ci_g_per_kwh=CI))  # fmt: skip
    return plan_round(snap, policy=get_policy(policy, **params), now=3600.0)


POLICIES = [("powerflow", "energy"), ("greenflow", "carbon")]


@pytest.mark.parametrize(("policy", "kind"), POLICIES)
def test_a_job_no_period_can_pay_runs_at_its_minimum_on_what_the_period_has(policy, kind):
    # given a team budget of 100 kJ a day and a job whose cheapest whole cost is 1.47 MJ
    plan = _plan(policy, _budget(kind, 1.0e5), iters=10_000.0)
    # then it runs at its minimum configuration (one GPU, the lowest clock), and the round
    # is predicted to spend no more than the period has
    assert {k: (a.n_gpus, a.sm_clock_mhz) for k, a in plan.allocations.items()} == {"big": (1, 855)}
    assert plan.waiting == {}
    if kind == "energy":
        assert 0.0 < plan.predicted_energy_by_budget_j["b"] <= 1.0e5
    else:
        assert 0.0 < plan.predicted_co2_by_budget_g["b"] <= 1.0e5 * CI / 3.6e6


@pytest.mark.parametrize(("policy", "kind"), POLICIES)
def test_without_parts_such_a_job_never_starts(policy, kind):
    # (the behaviour before: the same job and budget, ``run_in_parts`` off)
    plan = _plan(policy, _budget(kind, 1.0e5), iters=10_000.0, run_in_parts=False)
    assert plan.allocations == {}
    assert plan.waiting["big"].code == "over_round_allowance"


@pytest.mark.parametrize(("policy", "kind"), POLICIES)
def test_a_job_a_whole_period_can_pay_waits_for_it(policy, kind):
    # given a period of 1 MJ with 60 kJ left and a job whose whole cost is 73 kJ
    assert 500 * J_PER_ITER < 1.0e6
    plan = _plan(policy, _budget(kind, 1.0e6, used_j=1.0e6 - 6.0e4), iters=500.0)
    # then it is not started on the 60 kJ: the next period pays it whole
    assert plan.allocations == {}
    assert plan.waiting["big"].code == "over_round_allowance"


@pytest.mark.parametrize(
    "action", [HardLimitAction.HOLD_QUEUE, HardLimitAction.NOTIFY_ONLY], ids=lambda a: a.value
)
@pytest.mark.parametrize(("policy", "kind"), POLICIES)
def test_a_budget_that_does_not_pause_its_jobs_runs_no_part(policy, kind, action):
    # nothing would stop the part at the limit: the period would be overspent
    plan = _plan(policy, _budget(kind, 1.0e5, hard_limit_action=action), iters=10_000.0)
    assert plan.allocations == {}
    assert "big" in plan.waiting


@pytest.mark.parametrize(("policy", "kind"), POLICIES)
def test_a_resumed_job_whose_restart_the_period_cannot_pay_waits(policy, kind):
    # given a job half done (its next start loads a checkpoint: 30 s of an A100's idle
    # draw) and a budget of 1 kJ a period, less than that restart
    idle_w = CATALOG.get("resnet50", "A100").idle_power_w
    assert 30.0 * idle_w > 1.0e3
    plan = _plan(policy, _budget(kind, 1.0e3), iters=10_000.0, done=5_000.0)
    # then it is not started: a part would only pay the restart and make no progress
    assert plan.allocations == {}
    # while the same budget with five times the restart does start it
    plan = _plan(policy, _budget(kind, 5 * 30.0 * idle_w), iters=10_000.0, done=5_000.0)
    assert set(plan.allocations) == {"big"}


@pytest.mark.parametrize(("policy", "kind"), POLICIES)
def test_a_job_begun_in_parts_goes_on_once_what_is_left_of_it_fits_a_period(policy, kind):
    # given a running job with 1,000 iterations left (147 kJ), a period of 1 MJ with 60 kJ
    # left: a whole period pays what is left of it, but not this one
    from tests.core.corekit import running

    j = job("big", iters=10_000.0, workload="resnet50", gpu_model="A100", global_batch=256,
            min_gpus=1, max_gpus=8, team="t")  # fmt: skip
    j = replace(running(j, (CLUSTER.gpus[0].gpu_id,), clock=855), done_iters=9_000.0)
    budget = _budget(kind, 1.0e6, used_j=1.0e6 - 6.0e4)

    def plan(state):
        snap = snapshot(CLUSTER, [j], catalog=CATALOG, budgets=(budget,),
                        carbon=CarbonSignal(ci_g_per_kwh=CI), policy_state=state)  # fmt: skip
        return plan_round(snap, policy=get_policy(policy), now=3600.0)

    # when it was begun in parts, it keeps running on what the period has (a pause now
    # would cost a restart when it resumes), and stays in the state
    begun = plan({"run_in_parts": ["big", "gone"]})
    assert set(begun.allocations) == {"big"}
    assert begun.policy_state["run_in_parts"] == ["big"]  # (a job no longer active is dropped)
    # and a job not begun so is paused, as before, to wait for a period that pays it whole
    assert plan({}).allocations == {}


@pytest.mark.parametrize(("policy", "kind"), POLICIES)
def test_a_job_begun_in_parts_stays_so_through_a_round_its_budget_pays_in_full(policy, kind):
    # given a job begun in parts, running with 1,000 iterations left (147 kJ), in a fresh
    # period of 1 MJ: this round's allowance pays it, so no job is held back
    from tests.core.corekit import running

    j = job("big", iters=10_000.0, workload="resnet50", gpu_model="A100", global_batch=256,
            min_gpus=1, max_gpus=8, team="t")  # fmt: skip
    j = replace(running(j, (CLUSTER.gpus[0].gpu_id,), clock=855), done_iters=9_000.0)

    def plan(state, used_j):
        snap = snapshot(CLUSTER, [j], catalog=CATALOG, budgets=(_budget(kind, 1.0e6, used_j),),
                        carbon=CarbonSignal(ci_g_per_kwh=CI), policy_state=state)  # fmt: skip
        return plan_round(snap, policy=get_policy(policy), now=3600.0)

    paid = plan({"run_in_parts": ["big"]}, 0.0)
    assert set(paid.allocations) == {"big"}
    # then the state still names it, so that once the period's funds run short it goes on
    # in parts rather than being paused to wait for a period that pays the rest whole
    assert paid.policy_state.get("run_in_parts") == ["big"]
    short = plan(paid.policy_state, 1.0e6 - 6.0e4)
    assert set(short.allocations) == {"big"}


def test_a_part_leaves_the_idle_floor_priced_on_the_grids_drift():
    # given a cluster carbon budget of a day with 1,900 g left, eight idle A100s (400 W,
    # about 1,830 g to the period's end at the flat 200 g/kWh, about 2,340 g on the drift
    # of ten past days rising from 100 to 235 g/kWh) and a job no period can pay
    days = [[float(d), (250.0 + 15.0 * d) * 24, 24.0] for d in range(-10, 0)]
    state = {"ci_days": days, "ci_history": [CI] * 24, "ci_hour": 0}
    j = job("big", iters=1e6, workload="resnet50", gpu_model="A100", global_batch=256,
            min_gpus=1, max_gpus=8, team="t")  # fmt: skip

    def plan(**params):
        budget = Budget("b", None, 0.0, DAY, co2_limit_g=1900.0)
        snap = snapshot(CLUSTER, [j], catalog=CATALOG, budgets=(budget,),
                        carbon=CarbonSignal(ci_g_per_kwh=CI), policy_state=state)  # fmt: skip
        return plan_round(snap, policy=get_policy("greenflow", **params), now=3600.0)

    # then with the floor priced flat a part runs on the 70 g the flat floor leaves
    assert set(plan().allocations) == {"big"}
    # and with it priced on the drift (floor_trend_days) none does: the floor needs more
    # than the period has left, as the rest of the round prices it
    drifting = plan(floor_trend_days=14)
    assert drifting.allocations == {}
    assert "big" in drifting.waiting
