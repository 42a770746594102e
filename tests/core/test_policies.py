"""Small hand-computed scenarios with exact expected allocations, one or more per policy.

The analytic model (corekit.AnalyticModel, defaults): one iteration at batch 64 takes
1 s on one GPU at 2000 MHz, scales as 1/n**scaling, and x(0.5 + 0.5 * 2000 / f) at a
lower clock; a busy GPU draws 50 + 200 * (f / 2000)**2 W: 100 W at 1000 MHz, 162.5 W at
1500 MHz, 250 W at 2000 MHz; an idle one 50 W. Rounds last 300 s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from corekit import (
    WORKLOADS,
    AnalyticModel,
    Catalog,
    PriorOnly,
    job,
    make_cluster,
    running,
    snapshot,
)

from scheduling.core.registry import get_policy, policy_names
from scheduling.core.round import plan_round
from scheduling.core.types import Budget, CarbonSignal, ChangeKind, WaitCode

# An even pace and no score floor keep the hand arithmetic simple; the defaults
# (front-load by 1.25, skip steps scoring below 0.5) have tests of their own.
# The paced-allowance mechanism (pricing=False); the price is tested on its own below.
PF = get_policy("powerflow", spend_ahead=1.0, min_score=0.0, pricing=False)
GF = get_policy("greenflow", spend_ahead=1.0, min_score=0.0, pricing=False)


def node_ids(node: str, positions) -> tuple[str, ...]:
    return tuple(f"{node}/{p}" for p in positions)


def test_all_policies_are_registered():
    assert policy_names() == (
        "eaco",
        "elastic",
        "fifo",
        "fifo_lowclock",
        "greenflow",
        "netdelay",
        "ones",
        "powerflow",
        "tiresias",
        "zeus",
    )


# --- powerflow -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("fifo", {"placement": "first-fit"}, "placement must be one of buddy, first_fit"),
        ("tiresias", {"placement": "nosuch"}, "placement must be one of"),
        ("powerflow", {"placement": "spread"}, "placement must be one of"),
        ("fifo", {"power_limit_w": 0.0}, "power_limit_w must be a positive"),
        ("fifo", {"sm_clock_mhz": -1}, "sm_clock_mhz must be positive"),
        ("tiresias", {"starvation_s": -1.0}, "starvation_s must be positive"),
        ("tiresias", {"queue_thresholds_gpu_s": (0.0, 10.0)}, "must be positive"),
        ("elastic", {"restart_s": -1000.0}, "restart_s and min_gain must be 0 or more"),
        ("elastic", {"min_gain": -1.0}, "restart_s and min_gain must be 0 or more"),
        ("ones", {"generations": 0}, "generations must be at least 1"),
        ("ones", {"cap_factor": 0}, "cap_factor must be at least 1"),
        ("ones", {"mutation_p": 1.5}, "must be probabilities"),
    ],
)
def test_a_policy_refuses_parameters_that_cannot_work(name, params, message):
    # An unknown placement failed in the first round (a KeyError deep in round.place);
    # the others were taken and ran as something else (every waiting job in queue 0, a
    # negative restart cost, a GA with no generation).
    with pytest.raises(ValueError, match=message):
        get_policy(name, **params)


def test_powerflow_without_budget_grows_a_job_to_the_whole_node_at_full_clock():
    # given one elastic job (1..8 GPUs, perfect scaling) and an 8-GPU node, no budget
    snap = snapshot(make_cluster(1, 1, 8), [job("a", min_gpus=1, max_gpus=8)])
    # when powerflow plans
    plan = plan_round(snap, policy=PF, now=0.0)
    # then doubling GPUs costs no energy (dominant) and every clock step still gains
    a = plan.allocations["a"]
    assert (a.gpu_ids, a.sm_clock_mhz, a.global_batch) == (node_ids("s0n0", range(8)), 2000, 64)
    assert plan.waiting == {}


def test_powerflow_stops_upgrading_where_the_round_allowance_ends():
    # given a team budget paced to 400 kJ per 300 s round (4 MJ over ten rounds)
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=4e6)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", min_gpus=1, max_gpus=8)], budgets=(budget,))
    plan = plan_round(snap, policy=PF, now=0.0)
    # then 8 GPUs at 1500 MHz (8 x 162.5 W x 300 s = 390 kJ) fit, 2000 MHz (600 kJ) does not
    a = plan.allocations["a"]
    assert (a.n_gpus, a.sm_clock_mhz) == (8, 1500)
    assert plan.energy_allowance_by_budget_j == {"b": pytest.approx(400_000.0)}
    assert plan.predicted_energy_by_budget_j == {"b": pytest.approx(390_000.0)}
    assert plan.energy_allowance_j == pytest.approx(400_000.0)


def test_powerflow_default_pace_front_loads_a_quarter():
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=4e6)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", min_gpus=1, max_gpus=8)], budgets=(budget,))
    plan = plan_round(snap, policy=get_policy("powerflow", min_score=0.0, pricing=False), now=0.0)
    # 1.25 x 400 kJ = 500 kJ: still short of 8 GPUs at 2000 MHz (600 kJ)
    assert plan.energy_allowance_by_budget_j == {"b": pytest.approx(500_000.0)}
    assert (plan.allocations["a"].n_gpus, plan.allocations["a"].sm_clock_mhz) == (8, 1500)


def test_powerflow_ranks_the_upgrade_with_the_best_gain_per_energy_first():
    # given two jobs on a 2-GPU node, rigid at 1 GPU each, and an allowance that
    # pays for exactly one clock step: lin (phi 0.5) gains more per joule than flat
    lin = AnalyticModel("lin")
    flat = AnalyticModel("flat", phi=0.9)
    jobs = [job("l", workload="lin"), job("f", workload="flat")]
    # min configs: 2 x 100 W x 300 s = 60 kJ; one step to 1500 MHz adds 18.75 kJ
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=10 * 80_000.0)
    snap = snapshot(make_cluster(1, 1, 2), jobs, catalog=Catalog(lin, flat), budgets=(budget,))
    plan = plan_round(snap, policy=PF, now=0.0)
    assert plan.allocations["l"].sm_clock_mhz == 1500
    assert plan.allocations["f"].sm_clock_mhz == 1000


def test_powerflow_admits_shortest_first_and_says_when_gpus_free_up():
    # given a 2-GPU node and three rigid 1-GPU jobs of 100, 5000 and 1000 iterations
    jobs = [job("mid", iters=1000.0), job("long", iters=5000.0), job("short", iters=100.0)]
    plan = plan_round(snapshot(make_cluster(1, 1, 2), jobs), policy=PF, now=50.0)
    assert set(plan.allocations) == {"short", "mid"}
    reason = plan.waiting["long"]
    assert reason.code == WaitCode.BEHIND_IN_QUEUE
    # short runs 100 iterations at 2000 MHz: 100 s from now
    assert reason.until_s == pytest.approx(150.0)


def test_powerflow_keeps_a_running_job_at_its_size_rather_than_pay_a_restart():
    # given a running 4-GPU job whose best alternative is a same-energy resize to 8,
    # but the remaining work is so small that 30 s of restart outweighs the gain
    r = running(job("r", n=4, iters=100.0, min_gpus=1, max_gpus=8), node_ids("s0n0", range(4)))
    plan = plan_round(snapshot(make_cluster(1, 1, 8), [r]), policy=PF, now=0.0)
    assert plan.allocations["r"].gpu_ids == node_ids("s0n0", range(4))
    assert [c.kind for c in plan.changes] == [ChangeKind.RETUNE]


def test_priced_powerflow_admits_what_the_remaining_budget_covers():
    # the budget of the test below: the round's even share (20 kJ) is below the
    # minimum's 30 kJ a round, but deferring the job saves nothing, and the budget
    # covers all its (shorter) work, so the price admits it and reports what it takes
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=200_000.0)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,))
    paced = plan_round(snap, policy=PF, now=0.0)
    assert paced.waiting["a"].code == WaitCode.OVER_ROUND_ALLOWANCE
    plan = plan_round(snap, policy=get_policy("powerflow"), now=0.0)
    assert "a" in plan.allocations
    assert plan.predicted_energy_by_budget_j["b"] <= plan.energy_allowance_by_budget_j["b"]
    assert plan.energy_allowance_by_budget_j["b"] <= 200_000.0
    assert plan.policy_state["price"]["b"] >= 0.0


def test_powerflow_waits_over_allowance_when_even_the_minimum_does_not_fit():
    # 1 GPU at 1000 MHz costs 30 kJ a round; the allowance is 20 kJ; the job's whole cost
    # there, 150 kJ, fits a period (a job larger than every period runs in parts:
    # test_run_in_parts.py)
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=200_000.0)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=1000.0)], budgets=(budget,))
    plan = plan_round(snap, policy=PF, now=0.0)
    assert plan.allocations == {}
    assert plan.waiting["a"].code == WaitCode.OVER_ROUND_ALLOWANCE
    assert plan.predicted_energy_by_budget_j == {"b": 0.0}
    # and it says so: no job ahead of it spent the round's share (it read "spent by jobs
    # ranked ahead of it" with nothing else there)
    assert plan.waiting["a"].message == (
        "Waiting: its smallest configuration costs more than team t's budget allows a "
        "round, as the budget is paced over its period."
    )


def test_cluster_budget_pays_idle_gpus_and_only_the_draw_above_idle_for_jobs():
    # given a cluster-wide budget of 150 kJ per round on 8 GPUs: idle floor 8 x 50 W x
    # 300 s = 120 kJ, so 30 kJ are left; a 1-GPU job at 1000 MHz adds (100 - 50) x 300
    budget = Budget("all", None, 0.0, 3000.0, energy_limit_j=1.5e6)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", min_gpus=1, max_gpus=8)], budgets=(budget,))
    plan = plan_round(snap, policy=PF, now=0.0)
    # then it can afford 2 GPUs at 1000 MHz (2 x 50 W x 300 = 30 kJ above idle), not 4
    assert (plan.allocations["a"].n_gpus, plan.allocations["a"].sm_clock_mhz) == (2, 1000)
    assert plan.predicted_energy_j == pytest.approx(150_000.0)
    assert plan.predicted_energy_by_budget_j == {"all": pytest.approx(150_000.0)}


# --- greenflow -----------------------------------------------------------------------------


def _carbon_case(ci_now: float, now: float, forecast=()):
    # 72 g over two hours; clean_bias 1 spends carbon evenly: 3 g per 300 s round
    budget = Budget("c", "t", 0.0, 7200.0, co2_limit_g=72.0)
    return snapshot(
        make_cluster(1, 1, 8),
        [job("a")],
        budgets=(budget,),
        carbon=CarbonSignal(ci_g_per_kwh=ci_now, forecast=tuple(forecast)),
    )


def test_greenflow_holds_a_job_for_a_forecast_clean_hour():
    # 1 GPU at 1000 MHz for 300 s is 30 kJ = 1/120 kWh: 3.33 g at 400 g/kWh > 3 g
    snap = _carbon_case(400.0, 0.0, forecast=((3600.0, 100.0),))
    plan = plan_round(snap, policy=GF, now=0.0)
    assert plan.allocations == {}
    reason = plan.waiting["a"]
    assert (reason.code, reason.until_s) == (WaitCode.WAITING_FOR_CLEAN_HOUR, 3600.0)
    assert plan.policy_state == {"ci_history": [400.0], "ci_hour": 0}


def test_greenflow_runs_the_job_in_the_clean_hour():
    # at 100 g/kWh the round's 72 g * 300 / 3600 = 6 g easily buy the rigid 1-GPU job
    # at 2000 MHz: 250 W x 300 s = 1/48 kWh = 2.08 g
    snap = _carbon_case(100.0, 3600.0)
    plan = plan_round(snap, policy=GF, now=3600.0)
    a = plan.allocations["a"]
    assert (a.n_gpus, a.sm_clock_mhz) == (1, 2000)
    assert plan.co2_allowance_by_budget_g == {"c": pytest.approx(6.0)}
    assert plan.predicted_co2_by_budget_g["c"] == pytest.approx(250 * 300 / 3.6e6 * 100)


def test_powerflow_with_a_carbon_budget_and_no_forecast_waits_over_allowance():
    snap = _carbon_case(400.0, 0.0)
    plan = plan_round(snap, policy=PF, now=0.0)
    assert plan.waiting["a"].code == WaitCode.OVER_ROUND_ALLOWANCE


# --- baselines -------------------------------------------------------------------------------


def test_tiresias_runs_least_attained_service_first_and_preempts():
    # given a running job with 40,000 GPU-s of service (queue 2) and two newer ones
    a = running(job("a", n=2, attained_gpu_s=40_000.0), node_ids("s0n0", (0, 1)))
    b = job("b", submit=10.0, n=4)
    c = job("c", submit=20.0, n=2, attained_gpu_s=5_000.0)
    plan = plan_round(snapshot(make_cluster(1, 1, 4), [a, b, c]), policy="tiresias", now=100.0)
    # then b (queue 0) takes all four GPUs; c (queue 1) waits; a is preempted
    assert plan.allocations["b"].gpu_ids == node_ids("s0n0", range(4))
    assert set(plan.allocations) == {"b"}
    assert plan.waiting["a"].code == WaitCode.PREEMPTED
    assert plan.waiting["c"].code == WaitCode.BEHIND_IN_QUEUE
    assert {(ch.job_id, ch.kind) for ch in plan.changes} == {
        ("a", ChangeKind.STOP),
        ("b", ChangeKind.START),
    }


def test_tiresias_promotes_a_starving_job_and_stays_work_conserving():
    a = running(job("a", n=2, attained_gpu_s=40_000.0), node_ids("s0n0", (0, 1)))
    b = job("b", submit=10.0, n=4)
    c = job("c", submit=5.0, n=2, attained_gpu_s=5_000.0)
    policy = get_policy("tiresias", starvation_s=100.0)
    plan = plan_round(snapshot(make_cluster(1, 1, 4), [a, b, c]), policy=policy, now=1000.0)
    # c waited 995 s: promoted to queue 0 ahead of b; b cannot fit; a fills the rest
    assert plan.allocations["a"].gpu_ids == node_ids("s0n0", (0, 1))
    assert plan.allocations["c"].gpu_ids == node_ids("s0n0", (2, 3))
    assert plan.waiting["b"].code == WaitCode.BEHIND_IN_QUEUE


def _lin_and_flat(**kw):
    """Two elastic jobs (1-8 GPUs) on one 8-GPU node: l scales perfectly, f hardly."""
    lin, flat = AnalyticModel("lin"), AnalyticModel("flat", scaling=0.2)
    jobs = [
        job("l", workload="lin", min_gpus=1, max_gpus=8),
        job("f", submit=1.0, workload="flat", min_gpus=1, max_gpus=8),
    ]
    snap = snapshot(make_cluster(1, 1, 8), jobs, catalog=Catalog(lin, flat), **kw)
    return plan_round(snap, policy="elastic", now=10.0)


def test_elastic_gives_spare_gpus_to_the_best_marginal_speedup():
    plan = _lin_and_flat()
    # lin doubles twice (1 per GPU) then 4 -> 8 no longer fits; flat gets the rest
    assert plan.allocations["l"].gpu_ids == node_ids("s0n0", range(4))
    assert plan.allocations["f"].gpu_ids == node_ids("s0n0", range(4, 8))
    assert plan.allocations["l"].sm_clock_mhz is None


def test_elastic_keeps_a_job_only_its_prior_knows_at_its_smallest_size():
    # The same two jobs, lin known only by a prior (a learned model with nothing measured,
    # ``estimated``): lin stays at one GPU until it is observed, flat takes what it gains on
    plan = _lin_and_flat(job_perf={("l", "A100"): PriorOnly("lin")})
    assert plan.allocations["l"].n_gpus == 1
    assert plan.allocations["f"].n_gpus > 1


def test_fifo_lowclock_runs_at_a_fraction_of_the_top_clock():
    plan = plan_round(
        snapshot(make_cluster(1, 1, 8), [job("a")]),
        policy=get_policy("fifo_lowclock", clock_fraction=0.75),
        now=0.0,
    )
    assert plan.allocations["a"].sm_clock_mhz == 1500
    # 1 x 162.5 W x 300 s busy + 7 idle GPUs x 50 W x 300 s
    assert plan.predicted_energy_j == pytest.approx(162.5 * 300 + 7 * 50 * 300)


@pytest.mark.parametrize(("eta", "clock"), [(0.0, 2000), (0.5, 1500), (1.0, 1000)])
def test_zeus_picks_the_clock_minimising_its_energy_time_cost(eta, clock):
    # cost per iteration = eta * P * T + (1 - eta) * 250 W * T:
    # 1000 MHz: 150 J, 1.5 s; 1500 MHz: 189.6 J, 1.17 s; 2000 MHz: 250 J, 1 s
    plan = plan_round(
        snapshot(make_cluster(1, 1, 8), [job("a")]), policy=get_policy("zeus", eta=eta), now=0.0
    )
    assert plan.allocations["a"].sm_clock_mhz == clock
    assert plan.allocations["a"].power_limit_w is None


def test_zeus_tunes_the_power_limit_of_a_fitted_model():
    from scheduling.core.perf_models import load_catalog

    catalog = load_catalog()
    a = job("a", workload="resnet50", global_batch=128)
    limits = {}
    for eta in (0.0, 1.0):
        plan = plan_round(
            snapshot(make_cluster(1, 1, 8), [a], catalog=catalog),
            policy=get_policy("zeus", eta=eta),
            now=0.0,
        )
        limits[eta] = plan.allocations["a"].power_limit_w
    lo, hi = catalog.get("resnet50", "A100").power_limits_w
    # time only: the highest limit; energy only: a lower one, on the 25 W grid
    assert limits[0.0] == hi
    assert lo <= limits[1.0] < hi
    assert (hi - limits[1.0]) % 25.0 == 0.0


def test_zeus_on_a_t4_can_lower_the_limit_to_the_range_floor_off_the_25_w_grid():
    # given the fitted T4 model of bert, whose limits span 60-70 W (narrower than a step)
    from scheduling.core.perf_models import load_catalog

    catalog = load_catalog()
    assert catalog.get("bert", "T4").power_limits_w == (60.0, 70.0)
    a = job("a", workload="bert", global_batch=12)
    cluster = make_cluster(1, 1, 4, model="T4")

    # when zeus (eta 0.5) and fifo plan the same job
    z = plan_round(snapshot(cluster, [a], catalog=catalog), policy="zeus", now=0.0)
    f = plan_round(snapshot(cluster, [a], catalog=catalog), policy="fifo", now=0.0)

    # then zeus caps it at 60 W (at 70 W: 62.6 W, 0.921 s an iteration; at 60 W:
    # 55.0 W, 0.948 s, so 0.5 E + 0.5 x 70 W x T falls), while fifo leaves the default
    assert z.allocations["a"].power_limit_w == 60.0
    assert f.allocations["a"].power_limit_w is None
    assert z.predicted_energy_j < f.predicted_energy_j


@pytest.mark.parametrize(
    ("params", "message"),
    [({"rank": "bogus"}, "rank must be"), ({"admission": "lifo"}, "admission must be")],
)
def test_powerflow_rejects_unknown_parameter_values(params, message):
    with pytest.raises(ValueError, match=message):
        get_policy("powerflow", **params)


@pytest.mark.parametrize(
    ("above_idle", "clocks"),
    # a team pays its GPUs' whole draw, so by default (None) its jobs rank as with False
    [(True, (1000, 1500)), (None, (2000, 1000)), (False, (2000, 1000))],
)
def test_powerflow_ranks_by_draw_above_idle_when_asked(above_idle, clocks):
    # given a frugal, clock-insensitive job a (phi 0.8, 100 W busy) and a clock-
    # sensitive one b (phi 0.5, 250 W), each at 1000 MHz, and 70 kJ for the round:
    # the minimum costs 48.75 kJ, a's step to 1500 MHz 4.69 kJ, b's 18.75 kJ.
    # Whole draw: a's step gains 11% for +11% energy (score 1.0) against b's 22% for
    # +26% (0.84): a goes first, then to 2000 MHz, and b no longer fits.
    # Above idle: a's step costs +100% (0.11), b's +75% (0.30): b goes first.
    a = AnalyticModel("a", phi=0.8, busy_power_w=100.0)
    b = AnalyticModel("b", phi=0.5, busy_power_w=250.0)
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=10 * 70_000.0)
    snap = snapshot(
        make_cluster(1, 1, 2),
        [job("a", workload="a"), job("b", workload="b")],
        catalog=Catalog(a, b),
        budgets=(budget,),
    )
    policy = get_policy(
        "powerflow",
        spend_ahead=1.0,
        cost_above_idle=above_idle,
        min_score=0.0,
        pricing=False,
        rank="relative",
    )
    plan = plan_round(snap, policy=policy, now=0.0)
    got = (plan.allocations["a"].sm_clock_mhz, plan.allocations["b"].sm_clock_mhz)
    assert got == clocks


def test_powerflow_skips_budgeted_steps_scoring_below_min_score():
    # the clock step 1000 -> 1500 MHz gains 22% for 75% more draw above idle (0.30):
    # under a budget with room for it, the default floor of 0.5 still skips it, while
    # the free GPU doublings (no extra energy) are taken (costs above idle, as a cluster
    # budget's job counts them)
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=4e7)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", min_gpus=1, max_gpus=8)], budgets=(budget,))
    relative = get_policy("powerflow", pricing=False, rank="relative", cost_above_idle=True)
    plan = plan_round(snap, policy=relative, now=0.0)
    assert (plan.allocations["a"].n_gpus, plan.allocations["a"].sm_clock_mhz) == (8, 1000)
    # without a budget there is nothing to save for: every improving step is taken
    free = plan_round(replace(snap, budgets=()), policy="powerflow", now=0.0)
    assert (free.allocations["a"].n_gpus, free.allocations["a"].sm_clock_mhz) == (8, 2000)


def test_score_floor_relaxes_when_the_budget_lags_its_straight_line():
    # halfway through the period nothing is spent: half the limit behind, more than
    # relax_lag (10%), so the floor is 0 and the clock steps are bought again
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=4e7)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", min_gpus=1, max_gpus=8)], budgets=(budget,))
    paced = get_policy("powerflow", pricing=False, rank="relative", cost_above_idle=True)
    plan = plan_round(snap, policy=paced, now=1500.0)
    assert (plan.allocations["a"].n_gpus, plan.allocations["a"].sm_clock_mhz) == (8, 2000)
    # at 4% behind the floor is 0.5 x (1 - 0.4) = 0.3: the 0.30 step just misses it
    ahead = replace(budget, energy_used_j=4e7 * (0.5 - 0.04))
    plan = plan_round(replace(snap, budgets=(ahead,)), policy=paced, now=1500.0)
    assert plan.allocations["a"].sm_clock_mhz == 1000


def test_powerflow_keep_running_returns_a_running_job_to_its_size_before_growing_others():
    # r runs on 4 GPUs and scales poorly; w1 and w2 (scale perfectly) arrive. Ranked
    # per GPU, their steps beat r's, so without hysteresis r is shrunk (a resize, a
    # restart); with keep_running r keeps its 4 GPUs once both have their minimum, and
    # they share the other 4.
    catalog = Catalog(*WORKLOADS)
    r = running(
        job("r", n=4, iters=100_000.0, min_gpus=1, max_gpus=8, workload="flat"),
        node_ids("s0n0", range(4)),
    )
    new = [
        job(f"w{i}", iters=100_000.0, min_gpus=1, max_gpus=8, workload="lin", submit=10.0)
        for i in (1, 2)
    ]
    snap = snapshot(make_cluster(1, 1, 8), [r, *new], catalog=catalog)
    plain = plan_round(snap, policy=get_policy("powerflow"), now=20.0)
    kept = plan_round(snap, policy=get_policy("powerflow", keep_running=True), now=20.0)
    assert len(plain.allocations["r"].gpu_ids) < 4
    assert len(kept.allocations["r"].gpu_ids) == 4
    assert sum(len(kept.allocations[w.job_id].gpu_ids) for w in new) == 4


def test_an_idle_draw_the_snapshot_gives_replaces_the_catalogs():
    # given a node of a GPU model the catalog has no model on (it would price its idle
    # GPUs at 0 W), and one of a catalog model, nothing to run
    h100 = make_cluster(1, 1, 4, model="H100").nodes[0]
    a100 = make_cluster(2, 1, 4).nodes[1]  # named s1n0, its GPUs s1n0/0-3
    cluster = replace(make_cluster(1, 1, 4), nodes=(h100, a100))
    unknown = plan_round(snapshot(cluster, []), policy=get_policy("fifo"), now=0.0)
    assert unknown.predicted_energy_j == pytest.approx(4 * 50 * 300)  # the A100s only

    # when the snapshot says what an H100 idles at
    plan = plan_round(
        snapshot(cluster, [], idle_power_w={"H100": 72.0}), policy=get_policy("fifo"), now=0.0
    )

    # then the round charges its idle GPUs that, and the catalog's GPUs as before
    assert plan.predicted_energy_j == pytest.approx(4 * 72 * 300 + 4 * 50 * 300)
