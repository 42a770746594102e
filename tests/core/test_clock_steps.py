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
