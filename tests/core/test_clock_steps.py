"""A round plans only the clocks its GPUs take (``Snapshot.clock_steps``), so what it
predicts at a job's clock (its time, its energy, what the round and its budgets spend) is
what the GPUs run: planned at a model's clock the GPUs do not take, the service recorded
the step the GPUs took while the plan and the budget were predicted at the other."""

import pytest
from corekit import job, make_cluster, snapshot

from scheduling.core.perf_models import load_catalog
from scheduling.core.policies.fifo import Fifo
from scheduling.core.round import plan_round
from scheduling.core.types import ClockSteps

CATALOG = load_catalog()


@pytest.mark.parametrize(
    ("steps", "told", "taken"),
    [
        (ClockSteps(steps=(810, 1200, 1410)), 975, 810),  # the highest step at or below
        (ClockSteps(steps=(810, 1200, 1410)), 700, 810),  # below every step: the lowest
        (ClockSteps(steps=(810, 1200, 1410), top_mhz=1300), 1410, 1200),  # capped first
        (ClockSteps(top_mhz=600), 975, 600),  # no steps: the cap alone
        (ClockSteps(), 975, 975),  # nothing known: as told
    ],
)
def test_a_clock_is_taken_as_the_agent_applies_it(steps, told, taken):
    assert steps.take(told) == taken


def test_the_plannable_clocks_are_the_models_clocks_as_taken():
    assert ClockSteps(steps=(1200, 2000)).plannable((1000, 1500, 2000)) == (1200, 2000)
    assert ClockSteps(top_mhz=1500).plannable((1000, 1500, 2000)) == (1000, 1500)


def _plan(policy, **kw):
    cluster = make_cluster(nodes_per_switch=1, gpus_per_node=4)
    snap = snapshot(cluster, [job("j1", n=2, workload="bert", gpu_model="A100")], CATALOG, **kw)
    return plan_round(snap, policy=policy, now=0.0)


def test_a_round_plans_and_predicts_at_a_clock_the_gpus_take():
    # given A100s that take three of the catalog A100's clocks, and fifo_lowclock's 975 MHz
    # (a catalog step, not one of theirs)
    steps = {"A100": ClockSteps(steps=(900, 1200, 1410), top_mhz=1410)}
    assert 975 in CATALOG.get("bert", "A100").clocks_mhz

    # when a round plans
    plan = _plan(Fifo(sm_clock_mhz=975), clock_steps=steps)

    # then the job is planned at 900 MHz, the step its GPUs would run it at, and the
    # round's energy is predicted as for a plan made at 900 MHz in the first place
    assert plan.allocations["j1"].sm_clock_mhz == 900
    at_900 = _plan(Fifo(sm_clock_mhz=900))
    assert at_900.allocations["j1"].sm_clock_mhz == 900
    assert plan.predicted_energy_j == at_900.predicted_energy_j
    # (and not as for 975 MHz, the clock told)
    assert plan.predicted_energy_j != _plan(Fifo(sm_clock_mhz=975)).predicted_energy_j


def test_without_clock_steps_a_round_plans_at_the_models_clocks():
    # the simulator's GPUs take every clock of the model: nothing changes there
    plan = _plan(Fifo(sm_clock_mhz=975))
    assert plan.allocations["j1"].sm_clock_mhz == 975


# A plan with no clock on GPUs whose own top clock is below the model's: told none, the
# agent unlocks the clock and the GPUs run up to their own top (A100s registered with a
# 1200 MHz top against the catalog A100's 1410 MHz), which the model predicted at its
# 1410 MHz, while a plan of 1200 MHz (the top the round may plan there) was predicted at
# 1200 MHz.
LOW_TOP = {"A100": ClockSteps(steps=(810, 1200), top_mhz=1200)}


@pytest.mark.parametrize(
    ("steps", "model_top", "unset"),
    [
        (ClockSteps(steps=(810, 1200), top_mhz=1200), 1410, 1200),
        (ClockSteps(steps=(810, 1100), top_mhz=1200), 1410, 1100),  # the step they take
        (ClockSteps(top_mhz=1200), 1410, 1200),  # no steps: the top itself
        (ClockSteps(steps=(810, 1410), top_mhz=1410), 1410, None),  # the model's top
        (ClockSteps(top_mhz=1500), 1410, None),  # above the model's top
        (ClockSteps(steps=(810, 1200)), 1410, None),  # no top known
        (ClockSteps(top_mhz=1200), None, None),  # a model that says no top
    ],
)
def test_the_clock_a_plan_without_one_records_is_the_gpus_top_below_the_models(
    steps, model_top, unset
):
    assert steps.unset_for(model_top) == unset


@pytest.mark.parametrize("limit", [None, 400.0], ids=["no-limit", "the-top-limit"])
def test_a_plan_without_a_clock_on_gpus_topping_out_below_the_model_is_predicted_at_their_top(
    limit,
):
    # when fifo plans no clock on A100s whose top is 1200 MHz
    plan = _plan(Fifo(power_limit_w=limit), clock_steps=LOW_TOP)

    # then the allocation records the 1200 MHz they run at, and the round is predicted
    # there, as a plan of 1200 MHz is (not at the catalog's 1410 MHz)
    assert plan.allocations["j1"].sm_clock_mhz == 1200
    at_1200 = _plan(Fifo(sm_clock_mhz=1200, power_limit_w=limit), clock_steps=LOW_TOP)
    assert at_1200.allocations["j1"].sm_clock_mhz == 1200
    assert plan.predicted_energy_j == at_1200.predicted_energy_j
    assert plan.predicted_energy_j != _plan(Fifo(power_limit_w=limit)).predicted_energy_j


@pytest.mark.parametrize(
    "steps",
    [
        ClockSteps(steps=(810, 1410), top_mhz=1410),
        ClockSteps(top_mhz=1600),
        ClockSteps(steps=(810, 1200)),
    ],
    ids=["at-the-models-top", "above-it", "no-top-known"],
)
def test_gpus_whose_top_clock_is_not_below_the_models_are_planned_without_a_clock(steps):
    plan = _plan(Fifo(), clock_steps={"A100": steps})
    assert plan.allocations["j1"].sm_clock_mhz is None
    assert plan.predicted_energy_j == _plan(Fifo()).predicted_energy_j
