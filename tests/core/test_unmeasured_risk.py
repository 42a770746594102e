"""A learned job's GPU counts beyond what its model has measured are priced at the worst
case of the round that would measure them (``budget_greedy._Round._measured_gpus``).

On philly_week's first 120 jobs with team budgets, ncf jobs measured on one T4 were
predicted to scale perfectly (their prior's shape): four GPUs looked four times faster at
the same energy, so under a budget with no slack every job moved there, paid a round at
twice the energy per iteration and the restarts there and back, and the team's last jobs
waited for the next period (docs/benchmarks.md, "A GPU count the job has not run at,
priced at its worst case")."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget
from tests.core.corekit import AnalyticModel, Catalog, job, make_cluster, running, snapshot


@dataclass(frozen=True)
class Learned(AnalyticModel):
    """A job's learned model that predicts perfect scaling and has measured the job on
    ``max_measured_gpus`` GPUs at most (``OnlinePerfModel.max_measured_gpus``)."""

    estimated: bool = False
    max_measured_gpus: int = 1


CATALOG = Catalog(AnalyticModel("w"))


def _gpus(model, limit_j: float, *, waiting: bool = False, **policy) -> int:
    """GPUs the plan gives job "a" (3,600 iterations, 1 to 4 GPUs, running on one or, with
    ``waiting``, stopped), paid by team t's ``limit_j`` over a day."""
    a = job("a", min_gpus=1, max_gpus=4)
    if not waiting:
        a = running(a, ("s0n0/0",), clock=1000)
    budget = Budget("b", "t", 0.0, 86_400.0, energy_limit_j=limit_j)
    snap = snapshot(
        make_cluster(1, 1, 8),
        [a],
        CATALOG,
        budgets=(budget,),
        job_perf={("a", "A100"): model},
    )
    plan = plan_round(snap, policy=get_policy("powerflow", **policy), now=0.0)
    return len(plan.allocations["a"].gpu_ids)


# At 1,000 MHz one iteration takes 1.5 s on one GPU at 100 W: 540 kJ for the job on one
# GPU and, predicted, on two or four. 560 kJ leaves no room for a round of even one more
# GPU that buys nothing (100 W x 300 s = 30 kJ; three more: 90 kJ).
TIGHT_J = 560_000.0


def test_a_tight_budget_does_not_move_a_job_to_a_gpu_count_its_model_has_not_measured():
    assert _gpus(Learned("w"), TIGHT_J) == 1


def test_without_the_risk_the_same_job_moves_to_the_count_its_prior_flatters():
    # the check above can fail: priced as predicted, four GPUs are faster at no cost
    assert _gpus(Learned("w"), TIGHT_J, unmeasured_risk=False) == 4


@pytest.mark.parametrize(
    "model",
    [Learned("w", max_measured_gpus=4), AnalyticModel("w")],
    ids=["measured-on-four", "catalog"],
)
def test_a_count_the_model_has_measured_or_a_catalog_model_is_priced_as_predicted(model):
    assert _gpus(model, TIGHT_J) == 4


def test_the_risk_is_paid_where_the_budget_has_room_for_it():
    # 600 kJ pays one more GPU's round (570 kJ) but not three more (630 kJ) under the
    # share the price leaves the present job (1.15 x 540 kJ: the period's reserve holds
    # the rest for later arrivals); a budget that could never bind grows it to four
    assert _gpus(Learned("w"), 600_000.0) == 2
    assert _gpus(Learned("w"), 1e9) == 4


def test_a_stopped_job_waiting_to_restart_pays_the_risk_as_a_running_one_does():
    # (a review: a paused or preempted job was priced on the shared hulls, as measured)
    assert _gpus(Learned("w"), TIGHT_J, waiting=True) == 1
    assert _gpus(Learned("w"), TIGHT_J, waiting=True, unmeasured_risk=False) == 4
    # one that never ran has measured nothing to price beyond: as predicted (a prior
    # alone, ``estimated``, is held to its smallest count by the prior box instead)
    assert _gpus(Learned("w", max_measured_gpus=0), TIGHT_J, waiting=True) == 4
