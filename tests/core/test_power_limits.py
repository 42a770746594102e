"""A round plans only the power limits its GPUs take (``Snapshot.power_limits``), as it
plans only the clocks they take (``test_clock_steps.py``): planned from the catalog A100's
100-400 W on A100s that registered a 150-250 W range, ``zeus`` planned and predicted a
job's time and energy (and its budget's spend) at limits the GPUs clamp to 250 W."""

import pytest
from corekit import job, make_cluster, snapshot

from scheduling.core.context import PerfCache
from scheduling.core.online_model import N_PARAMS, BlendedPerfModel, OnlinePerfModel
from scheduling.core.perf_models import load_catalog
from scheduling.core.policies.fifo import Fifo
from scheduling.core.policies.zeus import Zeus
from scheduling.core.round import plan_round
from scheduling.core.types import GpuConfig, PowerLimits

CATALOG = load_catalog()
NARROW = {"A100": PowerLimits(low_w=150, high_w=250)}


@pytest.mark.parametrize(
    ("limits", "told", "taken"),
    [
        (PowerLimits(150, 250), 400, 250),  # above the range: its top
        (PowerLimits(150, 250), 100, 150),  # below: its bottom
        (PowerLimits(150, 250), 225, 225),  # within: as told
    ],
)
def test_a_limit_is_taken_as_the_agent_applies_it(limits, told, taken):
    assert limits.take(told) == taken


def test_the_plannable_range_is_the_models_range_as_taken():
    assert PowerLimits(150, 250).plannable((100.0, 400.0)) == (150, 250)
    assert PowerLimits(50, 600).plannable((100.0, 400.0)) == (100.0, 400.0)
    # GPUs whose range lies above the model's take its every limit at their bottom
    assert PowerLimits(500, 600).plannable((100.0, 400.0)) == (500, 500)
    with pytest.raises(ValueError, match="low_w <= high_w"):
        PowerLimits(300, 200)


def _plan(policy, **kw):
    cluster = make_cluster(nodes_per_switch=1, gpus_per_node=4)
    snap = snapshot(cluster, [job("j1", n=2, workload="bert", gpu_model="A100")], CATALOG, **kw)
    return plan_round(snap, policy=policy, now=0.0)


def test_zeus_plans_only_limits_the_gpus_take():
    # given zeus, which at the catalog A100's range plans a limit above 250 W for bert
    wide = _plan(Zeus(tune_batch=False))
    assert wide.allocations["j1"].power_limit_w > 250

    # when the A100s take 150-250 W
    plan = _plan(Zeus(tune_batch=False), power_limits=NARROW)

    # then the limit planned is one they take, and the round is predicted as zeus would
    # predict it choosing from that range
    limit = plan.allocations["j1"].power_limit_w
    assert 150 <= limit <= 250
    assert limit in (150, 175, 200, 225, 250)  # zeus' 25 W steps down from 250 W
    at_limit = _plan(Fifo(power_limit_w=limit))
    assert plan.predicted_energy_j == at_limit.predicted_energy_j


def test_a_limit_a_policy_sets_itself_is_planned_and_predicted_as_taken():
    # given fifo told to run at 400 W on A100s that take 150-250 W
    plan = _plan(Fifo(power_limit_w=400.0), power_limits=NARROW)

    # then the plan says 250 W, as the allocation will, and predicts the round at it
    assert plan.allocations["j1"].power_limit_w == 250
    assert plan.predicted_energy_j == _plan(Fifo(power_limit_w=250.0)).predicted_energy_j
    assert plan.predicted_energy_j != _plan(Fifo(power_limit_w=400.0)).predicted_energy_j


def test_without_power_limits_a_round_plans_in_the_models_range():
    # the simulator's GPUs take the model's range: nothing changes there
    for policy in (Zeus, lambda: Fifo(power_limit_w=400.0)):
        bare = _plan(policy())
        covered = _plan(policy(), power_limits={"A100": PowerLimits(100, 400)})
        assert bare.allocations == covered.allocations
        assert bare.predicted_energy_j == covered.predicted_energy_j


def test_learned_models_offer_the_limits_the_gpus_take_and_predict_as_before():
    prior = CATALOG.get("bert", "A100")
    online = OnlinePerfModel(prior=prior, params=[0.0] * N_PARAMS)
    blended = BlendedPerfModel([online, OnlinePerfModel(prior=prior, params=[0.0] * N_PARAMS)])
    cache = PerfCache(
        CATALOG,
        job_perf={("j1", "A100"): online, ("j2", "A100"): blended},
        power_limits=NARROW,
    )
    cfg = GpuConfig(n_gpus=2, global_batch=64, power_limit_w=200.0)
    for job_id, learned in (("j1", online), ("j2", blended)):
        model = cache.model_for(job(job_id, workload="bert"), "A100")
        assert model.power_limits_w == (150, 250)
        assert learned.power_limits_w == (100.0, 400.0)  # the job's own, unchanged
        assert model.iter_time_s(cfg) == learned.iter_time_s(cfg)
        assert model.power_w(cfg) == learned.power_w(cfg)
    catalog_model = cache.model("bert", "A100")
    assert catalog_model.power_limits_w == (150, 250)
    assert prior.power_limits_w == (100.0, 400.0)


# GPUs that registered a default limit below their top run a plan that sets no limit at
# that default (the agent leaves the GPU at its own limit): A100s taking 150-250 W with a
# 200 W default ran fifo's and powerflow's jobs at 200 W, predicted unthrottled.


@pytest.mark.parametrize("clock", [None, 1410], ids=["no-clock", "top-clock"])
def test_a_plan_without_a_limit_is_recorded_and_predicted_at_the_default_that_runs(clock):
    # given a policy that plans no power limit (with or without a clock of its own)
    bare = _plan(Fifo(sm_clock_mhz=clock))
    assert bare.allocations["j1"].power_limit_w is None

    # when the A100s run at a 200 W default below their 250 W top
    below_top = {"A100": PowerLimits(low_w=150, high_w=250, default_w=200)}
    plan = _plan(Fifo(sm_clock_mhz=clock), power_limits=below_top)

    # then the plan records the 200 W they run at, and predicts the round there, as a
    # policy that set 200 W itself would
    assert plan.allocations["j1"].power_limit_w == 200
    assert plan.allocations["j1"].sm_clock_mhz == clock
    at_default = _plan(Fifo(sm_clock_mhz=clock, power_limit_w=200.0))
    assert plan.predicted_energy_j == at_default.predicted_energy_j
    assert plan.predicted_energy_j < bare.predicted_energy_j


@pytest.mark.parametrize(
    "limits",
    [
        PowerLimits(low_w=100, high_w=400, default_w=400),  # the catalog A100's top
        PowerLimits(low_w=500, high_w=600, default_w=600),  # above the model's top
        PowerLimits(low_w=150, high_w=250, default_w=None),  # defaults that differ
    ],
    ids=["default-at-both-tops", "default-above-the-models-top", "defaults-differ"],
)
def test_gpus_whose_default_is_their_top_and_the_models_or_unknown_are_planned_without_a_limit(
    limits,
):
    # a plan with no limit runs those GPUs at a top the model predicts no limit at (or at
    # defaults that differ, each GPU its own): nothing is recorded, as before
    plan = _plan(Fifo(), power_limits={"A100": limits})
    assert plan.allocations["j1"].power_limit_w is None
    assert plan.predicted_energy_j == _plan(Fifo()).predicted_energy_j


# GPUs whose default is their own top but below the catalog model's top: a PCIe A100
# registered 150-250 W with its 250 W default runs a plan without a limit at 250 W, which
# the catalog A100 (100-400 W) predicted unthrottled at 400 W, while a plan of 250 W was
# predicted throttled.
PCIE = {"A100": PowerLimits(low_w=150, high_w=250, default_w=250)}


@pytest.mark.parametrize("clock", [None, 1410], ids=["no-clock", "top-clock"])
def test_a_plan_without_a_limit_on_gpus_topping_out_below_the_model_is_predicted_at_their_top(
    clock,
):
    # when fifo plans no limit on the PCIe A100s
    plan = _plan(Fifo(sm_clock_mhz=clock), power_limits=PCIE)

    # then the allocation records the 250 W they run at, and the round is predicted there,
    # as a plan of 250 W is (not unthrottled at the catalog's 400 W)
    assert plan.allocations["j1"].power_limit_w == 250
    at_250 = _plan(Fifo(sm_clock_mhz=clock, power_limit_w=250.0), power_limits=PCIE)
    assert at_250.allocations["j1"].power_limit_w == 250
    assert plan.predicted_energy_j == at_250.predicted_energy_j
    assert plan.predicted_energy_j < _plan(Fifo(sm_clock_mhz=clock)).predicted_energy_j


def test_zeus_at_the_gpus_top_and_a_plan_without_a_limit_are_one_configuration():
    # zeus plans from the 150-250 W the PCIe A100s take; at 250 W its job is the one a
    # plan without a limit runs: both recorded, so both learned and predicted, at 250 W
    zeus = _plan(Zeus(tune_batch=False), power_limits=PCIE)
    fifo = _plan(Fifo(), power_limits=PCIE)
    if zeus.allocations["j1"].power_limit_w == 250:
        assert zeus.predicted_energy_j == fifo.predicted_energy_j
    assert fifo.allocations["j1"].power_limit_w == 250


def test_a_default_outside_the_range_is_refused():
    assert PowerLimits(150, 250, default_w=200).unset_w == 200
    assert PowerLimits(150, 250, default_w=250).unset_w is None
    with pytest.raises(ValueError, match="low_w <= default_w <= high_w"):
        PowerLimits(150, 250, default_w=260)


@pytest.mark.parametrize(
    ("limits", "model_top_w", "unset"),
    [
        (PowerLimits(150, 250, default_w=250), 400.0, 250),  # a PCIe A100 on the catalog's
        (PowerLimits(150, 250, default_w=250), 250.0, None),  # a model of its own top
        (PowerLimits(150, 250, default_w=250), None, None),  # a model that says no top
        (PowerLimits(150, 250, default_w=200), 250.0, 200),  # below their own top
        (PowerLimits(100, 400, default_w=400), 400.0, None),
        (PowerLimits(500, 600, default_w=600), 400.0, None),
        (PowerLimits(150, 250), 400.0, None),  # defaults that differ
    ],
)
def test_the_limit_a_plan_without_one_records_is_the_default_below_either_top(
    limits, model_top_w, unset
):
    assert limits.unset_for(model_top_w) == unset
