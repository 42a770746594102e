"""Just-in-time power-limit exploration: the model's best, then a measured local search,
within a bounded cost; and the round's hook that runs it for new jobs."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from scheduling.core.exploration import (
    COST_MARGIN,
    DONE,
    EXPLORING,
    best_limit,
    chosen_limit,
    estimate,
    fitted_energy_j,
    limit_grid,
    next_step,
    predicted_energy_j,
)
from scheduling.core.online_fit import fit_online
from scheduling.core.online_model import Observation, config_of
from scheduling.core.perf_models import load_catalog
from scheduling.core.round import plan_round
from scheduling.core.types import GpuConfig
from tests.core.corekit import job, make_cluster, snapshot

CATALOG = load_catalog()
MODEL = CATALOG.get("resnet50", "A100")
CFG = GpuConfig(n_gpus=1, global_batch=64)
LIMITS = limit_grid(100.0, 400.0)


def test_limit_grid_steps_25_w_from_the_top_and_keeps_both_ends():
    assert LIMITS == tuple(100.0 + 25.0 * k for k in range(13))
    assert limit_grid(110.0, 160.0) == (110.0, 135.0, 160.0)
    with pytest.raises(ValueError):
        limit_grid(300.0, 200.0)


def test_exploration_tries_the_predicted_best_then_its_neighbours_then_stops():
    best = best_limit(MODEL, CFG, LIMITS)
    assert all(predicted_energy_j(MODEL, CFG, best) <= predicted_energy_j(MODEL, CFG, w)
               for w in LIMITS)  # fmt: skip
    assert 100.0 < best < 400.0  # an inner optimum: there are two neighbours to measure
    kwargs = {"step_s": 100.0, "spent_s": 0.0, "predicted_jct_s": 1e9}

    first = next_step(MODEL, CFG, LIMITS, {400.0}, **kwargs)
    assert (first.limit_w, first.reason) == (best, "the model predicts it saves energy")
    second = next_step(MODEL, CFG, LIMITS, {400.0, best}, **kwargs)
    assert second.limit_w in (best - 25.0, best + 25.0)
    assert second.reason == "a neighbour of the least energy measured"
    done = next_step(MODEL, CFG, LIMITS, {400.0, best, best - 25.0, best + 25.0}, **kwargs)
    assert done.limit_w is None
    assert done.reason == "a measured minimum: its neighbours are measured"
    assert chosen_limit(MODEL, CFG, LIMITS, {400.0, best}) == best


def test_measurements_steer_the_search_away_from_a_wrong_prediction():
    # The model predicts 200 W best, but the job measured less energy at 250 W than at
    # 200 W: the search moves on to 250 W's neighbours, and the choice follows what was
    # measured, not the model.
    best = best_limit(MODEL, CFG, LIMITS)
    assert best == 200.0
    measured = {400.0: 52.0, 200.0: 37.4, 250.0: 30.0}
    kwargs = {"step_s": 100.0, "spent_s": 0.0, "predicted_jct_s": 1e9, "measured": measured}
    step = next_step(MODEL, CFG, LIMITS, set(measured), **kwargs)
    assert step.limit_w in (225.0, 275.0)
    assert step.reason == "a neighbour of the least energy measured"
    measured |= {225.0: 33.0, 275.0: 31.0}
    step = next_step(MODEL, CFG, LIMITS, set(measured), **kwargs)
    # 250 W is a measured minimum; the model's best (200 W) still has 175 W untried.
    assert (step.limit_w, step.reason) == (175.0, "a neighbour of the predicted best")
    measured |= {175.0: 40.0}
    assert next_step(MODEL, CFG, LIMITS, set(measured), **kwargs).limit_w is None
    assert chosen_limit(MODEL, CFG, LIMITS, set(measured), measured) == 250.0


def test_exploration_stops_where_its_cost_would_pass_the_budget():
    best = best_limit(MODEL, CFG, LIMITS)
    at_best = MODEL.iter_time_s(GpuConfig(1, 64, power_limit_w=best))
    at_top = MODEL.iter_time_s(GpuConfig(1, 64, power_limit_w=400.0))
    assert at_best > at_top  # the energy-optimal limit runs slower than the default
    cost_s = 1000.0 * (1.0 - at_top / at_best)  # a step of 1,000 s loses this much
    # a budget just below the step's cost and its margin (a step's cost is known only once
    # it ran) stops it, just above lets it run
    with_margin = (1.0 + COST_MARGIN) * cost_s
    tight = next_step(MODEL, CFG, LIMITS, {400.0}, step_s=1000.0, spent_s=0.0,
                      predicted_jct_s=0.99 * with_margin / 0.03)  # fmt: skip
    assert (tight.limit_w, tight.reason) == (None, "trying it would exceed the exploration budget")
    assert tight.step_cost_s == pytest.approx(cost_s, rel=1e-9)
    room = next_step(MODEL, CFG, LIMITS, {400.0}, step_s=1000.0, spent_s=0.0,
                     predicted_jct_s=1.01 * with_margin / 0.03)  # fmt: skip
    assert room.limit_w == best


def test_with_budget_left_it_goes_on_measuring_what_fits_then_stops():
    # given a measured minimum at the model's best (its neighbours measured)
    best = best_limit(MODEL, CFG, LIMITS)
    tried = {400.0, best, best - 25.0, best + 25.0}
    kwargs = {"step_s": 1000.0, "spent_s": 0.0}
    # without fill_budget that is the end; with it and room left, the untried limit the
    # model ranks best among those that fit comes next
    assert next_step(MODEL, CFG, LIMITS, tried, predicted_jct_s=1e9, **kwargs).limit_w is None
    more = next_step(MODEL, CFG, LIMITS, tried, predicted_jct_s=1e9, fill_budget=True, **kwargs)
    untried = [w for w in LIMITS if w not in tried]
    assert more.limit_w == min(untried, key=lambda w: (predicted_energy_j(MODEL, CFG, w), -w))
    assert more.reason == "the budget allows another limit"
    # with no room for any of them it stops and says so; with all measured, likewise
    none = next_step(MODEL, CFG, LIMITS, tried, predicted_jct_s=1.0, fill_budget=True, **kwargs)
    assert (none.limit_w, none.reason) == (None, "no other limit fits in the exploration budget")
    done = next_step(MODEL, CFG, LIMITS, set(LIMITS), predicted_jct_s=1e9, fill_budget=True,
                     **kwargs)  # fmt: skip
    assert (done.limit_w, done.reason) == (None, "every limit is measured")


# --- the round's hook -----------------------------------------------------------------

ROUND_S = 300.0
PRIOR = CATALOG.get("bert", "A100")  # what the job's model starts from: not its workload


def _rounds(
    j,
    *,
    n_rounds: int,
    policy: str = "zeus",
    frac: float | None = 0.03,
    noise: float = 0.0,
    seed: int = 0,
    cluster=None,
    clock_steps=None,
    models: list | None = None,
):
    """Plan ``n_rounds`` rounds of one job on an A100 node; after each, the job is observed
    in the configuration it ran (the truth: resnet50's catalog model, its time and draw
    each times seeded log-normal ``noise``) and its online model refitted from a bert
    prior. Returns the plans; ``models`` gets each round's model of the job."""
    rng = random.Random(seed)
    cluster = cluster or make_cluster(nodes_per_switch=1)
    node_of = {gpu.gpu_id: gpu.node for gpu in cluster.gpus}
    seen: list[Observation] = []
    records: dict = {}
    plans = []
    for k in range(n_rounds):
        now = k * ROUND_S
        model = fit_online(PRIOR, seen)
        if models is not None:
            models.append(model)
        snap = snapshot(cluster, [j], catalog=CATALOG, round_length_s=ROUND_S,
                        job_perf={(j.job_id, "A100"): model}, exploration=records,
                        exploration_budget_frac=frac,
                        **({"clock_steps": clock_steps} if clock_steps else {}))  # fmt: skip
        plan = plan_round(snap, policy=policy, now=now)
        plans.append(plan)
        records = dict(plan.exploration)
        a = plan.allocations[j.job_id]
        n_nodes = len({node_of[g] for g in a.gpu_ids})
        cfg = config_of(
            a.n_gpus, n_nodes, a.global_batch / a.n_gpus, a.sm_clock_mhz, a.power_limit_w
        )
        t = MODEL.iter_time_s(cfg)
        t_seen = t * math.exp(rng.gauss(0.0, noise)) if noise else t
        p_seen = MODEL.power_w(cfg) * (math.exp(rng.gauss(0.0, noise)) if noise else 1.0)
        seen.append(Observation(a.n_gpus, n_nodes, a.global_batch / a.n_gpus, t_seen, p_seen,
                                sm_clock_mhz=a.sm_clock_mhz,
                                power_limit_w=a.power_limit_w))  # fmt: skip
        j = replace(j, allocation=a, started_s=j.started_s if j.started_s is not None else now,
                    done_iters=j.done_iters + ROUND_S / t)  # fmt: skip
    return plans


def test_a_new_job_explores_limits_then_settles_within_its_budget():
    j = job("j1", workload="resnet50", iters=200_000.0, gpu_model="A100")
    plans = _rounds(j, n_rounds=18)
    limits = [p.allocations["j1"].power_limit_w for p in plans]
    records = [p.exploration["j1"] for p in plans]
    assert limits[0] == 400.0  # it starts at the default limit
    assert records[0]["status"] == EXPLORING
    settled = next(k for k, r in enumerate(records) if r["status"] == DONE)
    rec = records[settled]
    tried = [t["limit_w"] for t in rec["tried"]]
    assert tried[0] == 400.0 and len(tried) >= 3
    assert tried == limits[: len(tried)]  # each round ran the probe the round chose
    # the default limit twice more (the noise is estimated from repeats; the fastest limit
    # costs nothing), then the model's best (200 W, as the truth's), then its neighbours,
    # then what the bound still allows
    assert tried[:3] == [400.0, 400.0, 400.0]
    assert tried[3:6] == [200.0, 175.0, 225.0]
    assert 0.0 < rec["spent_s"] <= rec["budget_s"]
    # The bound is 3 % of a predicted completion time of about 8-9 hours.
    assert rec["budget_frac"] == 0.03
    assert 0.03 * 7 * 3600 < rec["budget_s"] < 0.03 * 10 * 3600
    # The energy-optimal limit of the truth is found within one 25 W step.
    truth_best = best_limit(MODEL, CFG, LIMITS)
    assert abs(rec["result_w"] - truth_best) <= 25.0
    # Afterwards the policy's own choice (from the learned model) stands, round after round.
    after = {p.allocations["j1"].power_limit_w for p in plans[settled + 1 :]}
    assert len(after) == 1
    assert all(p.exploration["j1"] == rec for p in plans[settled + 1 :])


def test_on_gpus_topping_out_below_the_models_clock_limits_are_explored_at_their_top():
    # given A100s whose top clock is 1200 MHz (the catalog A100's: 1410 MHz): a probe sets
    # no clock, so it runs at 1200 MHz and is recorded there (``round.place``)
    from scheduling.core.types import ClockSteps

    steps = {"A100": ClockSteps(steps=(810, 1200), top_mhz=1200)}
    j = job("j1", workload="resnet50", iters=200_000.0, gpu_model="A100")
    models: list = []
    plans = _rounds(j, n_rounds=10, noise=0.02, clock_steps=steps, models=models)
    assert {p.allocations["j1"].sm_clock_mhz for p in plans} == {1200}
    rec = plans[-1].exploration["j1"]
    assert len(rec["tried"]) >= 6 and rec["spent_s"] <= rec["budget_s"]
    # then each probe's energy is predicted at the clock it ran at, by the model of the
    # round that closed it (it was predicted at 1410 MHz, which the GPUs never run)
    for t in rec["tried"]:
        closed = int(t["since_s"] // ROUND_S) + 1
        at = GpuConfig(n_gpus=1, global_batch=64, sm_clock_mhz=1200)
        assert t["energy_j"] == pytest.approx(predicted_energy_j(models[closed], at, t["limit_w"]))
        at_top = GpuConfig(n_gpus=1, global_batch=64)
        assert t["energy_j"] != pytest.approx(
            predicted_energy_j(models[closed], at_top, t["limit_w"])
        )
    # and the measurements at 1200 MHz are the ones its choice reads (noise-aware)
    last = models[-1]
    at = GpuConfig(n_gpus=1, global_batch=64, sm_clock_mhz=1200)
    assert estimate(last, at, {t["limit_w"] for t in rec["tried"]}) is not None


def test_a_tight_budget_stops_exploration_early_and_says_why():
    j = job("j1", workload="resnet50", iters=20_000.0, gpu_model="A100")  # about an hour
    plans = _rounds(j, n_rounds=6, frac=0.003)
    rec = plans[-1].exploration["j1"]
    assert rec["status"] == DONE
    assert rec["spent_s"] <= rec["budget_s"]
    assert [t["limit_w"] for t in rec["tried"]] == [400.0]
    assert rec["reason"] == "trying it would exceed the exploration budget"


def test_an_elastic_job_tries_one_other_gpu_count_once():
    j = job("e1", workload="resnet50", n=4, iters=2_000_000.0, gpu_model="A100",
            min_gpus=1, max_gpus=8, global_batch=256)  # fmt: skip
    plans = _rounds(j, n_rounds=18)
    counts = [p.allocations["e1"].n_gpus for p in plans]
    assert counts[0] == 4
    assert sorted(set(counts)) == [2, 4]  # half its count, once, then back
    assert counts.count(2) == 1
    rec = plans[-1].exploration["e1"]
    assert rec["status"] == DONE and rec["other_gpus"] == 2
    assert [t["n_gpus"] for t in rec["tried"]].count(2) == 1
    assert rec["spent_s"] <= rec["budget_s"]


def test_off_without_the_snapshot_setting_or_for_policies_that_do_not_explore():
    j = job("j1", workload="resnet50", iters=200_000.0, gpu_model="A100")
    off = _rounds(j, n_rounds=4, frac=None)
    assert all(p.exploration == {} for p in off)
    assert {p.allocations["j1"].power_limit_w for p in off} == {
        off[0].allocations["j1"].power_limit_w
    }
    fifo = _rounds(j, n_rounds=3, policy="fifo")
    assert all(p.exploration == {} for p in fifo)
    assert all(p.allocations["j1"].power_limit_w is None for p in fifo)


def test_a_policy_that_resizes_an_exploring_job_keeps_its_grant_and_ends_exploration():
    from scheduling.core.exploration import explore_round, new_record
    from scheduling.core.round import admit
    from scheduling.core.types import Allocation, Grant, PolicyDecision

    # given a job that explored 400 W on one GPU and is probing 200 W
    cluster = make_cluster(nodes_per_switch=1)
    rec = new_record(gpu_model="A100", n_gpus=1, now_s=0.0, budget_frac=0.03)
    rec["tried"] = [{"limit_w": 400.0, "n_gpus": 1, "since_s": 0.0, "seconds": 300.0,
                     "cost_s": 0.0, "energy_j": 50.0}]  # fmt: skip
    rec["probe"] = {"limit_w": 200.0, "n_gpus": 1, "since_s": 300.0}
    j = replace(
        job("j1", workload="resnet50", iters=200_000.0, gpu_model="A100", max_gpus=4),
        allocation=Allocation((cluster.gpus[0].gpu_id,), 64, power_limit_w=200.0),
        started_s=0.0,
        done_iters=3000.0,
    )
    snap = snapshot(cluster, [j], catalog=CATALOG, exploration={"j1": rec},
                    exploration_budget_frac=0.03)  # fmt: skip
    ctx, _ = admit(snap, now=600.0)
    # when the policy grants it two GPUs
    grant = Grant("j1", 2, 64, "A100", power_limit_w=300.0)
    decision, records = explore_round(ctx, PolicyDecision((grant,), {}), explores=True)
    # then the grant stands, the probe it ran is counted, and exploration ends there
    assert decision.grants == (grant,)
    out = records["j1"]
    assert out["status"] == DONE and out["reason"] == "the policy resized the job"
    assert [t["limit_w"] for t in out["tried"]] == [400.0, 200.0]
    assert out["result_w"] in (200.0, 400.0)


def test_with_noisy_measurements_the_chosen_limit_is_within_25_w_of_the_truths_optimum():
    # given ten seeded streams of observations with 5 % log-normal noise on each iteration
    # time and draw (about 7 % on an energy; the truth's neighbouring 25 W steps differ by
    # 1-4 % near its optimum, 200 W)
    j = job("j1", workload="resnet50", iters=200_000.0, gpu_model="A100")
    truth_best = best_limit(MODEL, CFG, LIMITS)
    hits = 0
    for seed in range(10):
        plans = _rounds(j, n_rounds=24, noise=0.05, seed=seed)
        rec = plans[-1].exploration["j1"]
        assert rec["status"] == DONE
        assert rec["spent_s"] <= rec["budget_s"]
        hits += abs(rec["result_w"] - truth_best) <= 25.0
    # then at least 8 of the 10 settle within one 25 W step of the truth's optimum (taking
    # each tried limit's energy as the model saw it after its probe settles 5 of these 10)
    assert hits >= 8


def _obs(limit_w: float, t: float, p: float) -> Observation:
    return Observation(1, 1, 64.0, t, p, power_limit_w=limit_w)


def test_the_estimate_learns_the_noise_from_repeats_and_trusts_exact_measurements():
    # given exact measurements of the truth at four limits, the default one three times
    seen = [_obs(w, MODEL.iter_time_s(replace(CFG, power_limit_w=w)),
                 MODEL.power_w(replace(CFG, power_limit_w=w)))
            for w in (400.0, 400.0, 400.0, 200.0, 175.0, 300.0)]  # fmt: skip
    model = fit_online(PRIOR, seen)
    one = estimate(fit_online(PRIOR, seen[:1]), CFG, {400.0})
    # one measurement says nothing about the noise: the model's prediction stands
    assert one is not None and one.noise_var is None and one.log_var == {}
    est = estimate(model, CFG, {400.0, 200.0, 175.0, 300.0})
    # then repeated exact measurements show no noise, and each limit is known as measured
    assert est is not None and est.noise_var == 0.0
    for w in (400.0, 200.0, 175.0, 300.0):
        assert est.known_j[w] == pytest.approx(
            MODEL.energy_per_iter_j(replace(CFG, power_limit_w=w))
        )
        assert est.log_var[w] == 0.0
    assert est.counts[400.0] == 3 and est.counts[200.0] == 1


def _noisy_sweep(*, noise: float, seed: int) -> list[Observation]:
    """The truth measured once at every limit and thrice at the default (400 W), each
    iteration time and draw times seeded log-normal noise."""
    rng = random.Random(seed)
    seen = []
    for w in (400.0, 400.0, 400.0, *LIMITS[:-1]):
        at = replace(CFG, power_limit_w=w)
        seen.append(_obs(w, MODEL.iter_time_s(at) * math.exp(rng.gauss(0.0, noise)),
                         MODEL.power_w(at) * math.exp(rng.gauss(0.0, noise))))  # fmt: skip
    return seen


def test_with_noisy_repeats_the_estimate_leans_on_the_fitted_curve():
    # given a job measured at every limit, each time with 10 % noise, the default limit
    # three times: the noise is large against how far the truth (a catalog model: the
    # model's own equations) sits from the fitted curve
    model = fit_online(PRIOR, _noisy_sweep(noise=0.1, seed=3))
    est = estimate(model, CFG, set(LIMITS))
    assert est is not None and est.noise_var is not None
    assert 0.3 * 2 * 0.1**2 < est.noise_var < 3 * 2 * 0.1**2
    # then each limit's estimate is nearer the fitted curve than its own measurement is
    for w in LIMITS[:-1]:
        measured = model.measured(replace(CFG, power_limit_w=w))
        raw = math.exp(measured.log_t + measured.log_p)
        fitted = fitted_energy_j(model, CFG, w)
        assert abs(math.log(est.known_j[w] / fitted)) <= abs(math.log(raw / fitted)) + 1e-12
        assert est.log_var[w] < est.noise_var


def test_an_estimate_that_leans_on_the_curve_carries_the_curves_own_error(monkeypatch):
    import scheduling.core.exploration as exploration

    # given a job measured once at every limit and thrice at the default, with 5 % noise,
    # whose truth has the fitted curve's form (the deviations show no misfit, so every
    # estimate leans on the curve)
    model = fit_online(PRIOR, _noisy_sweep(noise=0.05, seed=1))
    est = estimate(model, CFG, set(LIMITS))
    assert est is not None and est.noise_var is not None and est.misfit_var == 0.0
    # then no estimate is taken as exact: the curve was fitted to the same noisy
    # measurements (each variance at least a tenth of one measurement's noise), and a
    # limit at the edge of those measured moves it more than one in the middle
    once = [w for w in LIMITS if w != 400.0]
    assert all(est.log_var[w] > 0.1 * est.noise_var for w in once)
    assert est.log_var[min(once)] > est.log_var[once[len(once) // 2]]
    # where without the curve's error (CURVE_PARAMS 0, as before) every one looked exact
    monkeypatch.setattr(exploration, "CURVE_PARAMS", 0)
    bare = estimate(model, CFG, set(LIMITS))
    assert bare is not None and all(bare.log_var[w] == 0.0 for w in once)


def test_a_job_spread_over_nodes_finds_its_measurements_under_its_node_count():
    # given a 4-GPU job on nodes of 2 GPUs (so it runs on two nodes and is observed so),
    # and the same job on one 8-GPU node
    j = job("j1", n=4, workload="resnet50", iters=800_000.0, gpu_model="A100")
    spread = _rounds(j, n_rounds=18, cluster=make_cluster(nodes_per_switch=4, gpus_per_node=2))
    packed = _rounds(j, n_rounds=18)
    # then both find their measurements: the default limit is measured thrice (its repeats
    # give the noise; a job whose measurements were looked up on one node found none and
    # never repeated), the optimum is decided from them within the bound, and it is the
    # truth's (200 W for both layouts)
    for plans in (spread, packed):
        rec = plans[-1].exploration["j1"]
        assert rec["status"] == DONE and 0.0 < rec["spent_s"] <= rec["budget_s"]
        assert [t["limit_w"] for t in rec["tried"]][:3] == [400.0, 400.0, 400.0]
        assert rec["reason"].endswith("the optimum is decided within 25 W")
        assert rec["result_w"] == 200.0
    assert spread[-1].exploration["j1"]["layout"] == [2, 2]
    assert packed[-1].exploration["j1"]["layout"] == [4]
