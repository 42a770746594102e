"""The budget price's arithmetic, by hand: hull, choice at a price, price for a share,
and a priced PowerFlow round whose target lies between two hull points."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.core.pricing import hull_choice, lower_hull, price_for_share
from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget, CarbonSignal
from tests.core.corekit import (
    AnalyticModel,
    Catalog,
    PriorOnly,
    job,
    make_cluster,
    random_snapshot,
    snapshot,
)

NOW_S = 10_000.0

# One job of corekit's analytic model on 1 GPU, 600 iterations, at its three clocks
# (r = 0.5, 0.75, 1): time 600 x (0.5 + 0.5 / r) s, draw above idle 200 r^2 W, so
# (cost above idle, time) = (45,000 J, 900 s), (78,750 J, 700 s), (120,000 J, 600 s).
# Hull slopes: 200 s / 33,750 J, then 100 s / 41,250 J.
CHEAP, MIDDLE, FAST = (
    (45_000.0, 900.0, "1000"),
    (78_750.0, 700.0, "1500"),
    (120_000.0, 600.0, "2000"),
)


def test_lower_hull_keeps_only_points_some_price_would_choose():
    dominated = (100_000.0, 650.0, "slower and dearer than FAST's line")
    above_line = (90_000.0, 690.0, "on no price's minimum")
    costlier_same_time = (130_000.0, 600.0, "as fast as FAST, dearer")
    hull = lower_hull([FAST, dominated, CHEAP, above_line, MIDDLE, costlier_same_time])
    assert hull == [CHEAP, MIDDLE, FAST]


def test_hull_choice_walks_from_the_cheapest_to_the_fastest_as_the_price_falls():
    hull = [CHEAP, MIDDLE, FAST]
    assert hull_choice(hull, 1.0) == "1000"  # a second is worth less than a joule
    assert hull_choice(hull, 200 / 33_750 + 1e-9) == "1000"
    assert hull_choice(hull, 200 / 33_750 - 1e-9) == "1500"
    assert hull_choice(hull, 100 / 41_250) == "1500"  # indifferent: the cheaper stays
    assert hull_choice(hull, 0.0) == "2000"


def test_price_for_share_is_the_slope_of_the_first_step_the_share_cannot_pay():
    hull = [CHEAP, MIDDLE, FAST]
    assert price_for_share([hull], 200_000.0) == 0.0
    assert price_for_share([hull], 96_000.0) == pytest.approx(100 / 41_250)
    assert price_for_share([hull], 50_000.0) == pytest.approx(200 / 33_750)
    # Two jobs: the steepest step of either is bought first.
    other = [(10_000.0, 500.0, "x"), (20_000.0, 100.0, "y")]  # 400 s per 10,000 J
    assert price_for_share([hull, other], 45_000.0 + 20_000.0) == pytest.approx(200 / 33_750)


@pytest.mark.parametrize("share", [60_000.0, 200_000.0, 300_000.0, 400_000.0])
def test_a_weighted_hull_prices_as_the_jobs_it_stands_for(share):
    # given two jobs of CHEAP/MIDDLE/FAST's shape, one with twice the other's work (its
    # costs and times doubled), when priced as one hull of one unit with weight 3
    hull = [CHEAP, MIDDLE, FAST]
    doubled = [(c * 2, t * 2, tag) for c, t, tag in hull]
    one_by_one = price_for_share([hull, doubled], share)
    # then the price is the same as job by job
    assert price_for_share([hull], share, [3.0]) == pytest.approx(one_by_one)
    # and the choice at it does not depend on the scale
    assert hull_choice(hull, one_by_one) == hull_choice(doubled, one_by_one)


def test_weights_must_match_the_hulls():
    with pytest.raises(ValueError):
        price_for_share([[CHEAP, MIDDLE, FAST]], 100_000.0, [1.0, 2.0])


# The price's arithmetic below is on costs above idle (what a configuration adds to a
# cluster budget); a team's job counts its whole draw by default (``test_team_cost``), so
# these tests ask for the draw above idle.
ABOVE_IDLE = {"cost_above_idle": True}


@pytest.mark.parametrize(
    ("limit_j", "clock", "price", "allowance_j", "planned_j"),
    [
        # The free budget 100 kJ, less the work expected to arrive (45 kJ a day over the
        # 3000 s left: 1,562.5 J, of which an arrival of 900 s at its cheapest spends
        # 1 - 900 / (2 x 3000) = 85% in the period: 1,328.125 J), leaves a share of
        # 100,000 x 45,000 / 46,328.125 = 97,133 J (above the floor, 1.15 x 45,000): the
        # 1500 MHz point (78,750 J) fits, the fastest (120,000 J) not, so the price is
        # the second slope and the job runs at 1500 MHz; the round's allowance is what
        # that takes, 162.5 W x 300 s.
        (100_000.0, 1500, 100 / 41_250, 48_750.0, 48_750.0),
        # With 200 kJ even the fastest point fits: price 0, and the round may spend what
        # the period has left (its energy buys nothing later); the job takes 250 W x 300 s.
        (200_000.0, 2000, 0.0, 200_000.0, 75_000.0),
    ],
)
def test_a_priced_round_runs_the_job_at_its_target_and_allows_what_that_takes(
    limit_j, clock, price, allowance_j, planned_j
):
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=limit_j)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,))
    # the forecast's arithmetic alone: the period's reserve (tested below) is off
    policy = get_policy("powerflow", period_reserve=0.0, **ABOVE_IDLE)
    plan = plan_round(snap, policy=policy, now=0.0)
    assert plan.allocations["a"].sm_clock_mhz == clock
    assert plan.policy_state["price"]["b"] == pytest.approx(price)
    assert plan.energy_allowance_by_budget_j["b"] == pytest.approx(allowance_j)
    assert plan.predicted_energy_by_budget_j["b"] == pytest.approx(planned_j)


@pytest.mark.parametrize(
    ("fixed", "clock"),
    [
        # The same budget as above, whose own price runs the job at 1500 MHz: a price of
        # 0 buys the fastest point, one above every slope of the hull the cheapest.
        (0.0, 2000),
        (1.0, 1000),
    ],
)
def test_a_fixed_price_replaces_the_budgets_own(fixed, clock):
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=100_000.0)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,))
    policy = get_policy("powerflow", period_reserve=0.0, fixed_price=fixed, **ABOVE_IDLE)
    plan = plan_round(snap, policy=policy, now=0.0)
    assert plan.allocations["a"].sm_clock_mhz == clock
    assert plan.policy_state["price"]["b"] == fixed


def test_a_fixed_price_does_not_price_a_budget_that_cannot_pay_the_work():
    # 10 kJ cannot pay the job's cheapest remaining 45 kJ: its price stays infinite (not
    # in the state), whatever the fixed price, and the even share gates the round.
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=10_000.0)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,))
    policy = get_policy("powerflow", fixed_price=0.0, **ABOVE_IDLE)
    plan = plan_round(snap, policy=policy, now=0.0)
    assert "b" not in plan.policy_state["price"]


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan"), True])
def test_a_fixed_price_must_be_a_finite_non_negative_number(bad):
    with pytest.raises(ValueError, match="fixed_price"):
        get_policy("greenflow", fixed_price=bad)


@pytest.mark.parametrize(
    ("now", "clock", "price"),
    [
        # At the period's start the reserve, the free 200 kJ x all the period left,
        # outweighs the forecast (1,562.5 J at most): the share is 200,000 x 45,000 /
        # 245,000 = 36,735 J, raised to the floor 1.15 x 45,000 = 51,750 J, which pays
        # the cheapest point only; without the reserve even the fastest fit (above).
        (0.0, 1000, 200 / 33_750),
        # With a tenth of the period left the reserve is 200 kJ x 0.1 = 20 kJ:
        # 200,000 x 45,000 / 65,000 = 138,462 J pays the fastest point, price 0.
        (2700.0, 2000, 0.0),
    ],
)
def test_the_period_reserve_keeps_free_budget_for_the_rest_of_the_period(now, clock, price):
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=200_000.0)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,))
    plan = plan_round(snap, policy=get_policy("powerflow", **ABOVE_IDLE), now=now)
    assert plan.allocations["a"].sm_clock_mhz == clock
    assert plan.policy_state["price"]["b"] == pytest.approx(price)


@pytest.mark.parametrize(
    ("limit_j", "clock", "price"),
    [
        # 1 MJ: the reserve, the free 1 MJ x all the period left, stands for less work
        # than the 8 GPUs could do in it (1.17 MJ, below), so it holds as above: the share
        # 1,000,000 x 45,000 / 1,045,000 = 43,062 J, raised to the floor 51,750 J, pays
        # the cheapest point only.
        (1e6, 1000, 200 / 33_750),
        # 100 MJ: a reserve of 100 MJ would stand for more work than the GPUs can do
        # before the period ends. At the job's cheapest cost per GPU-second (45,000 J /
        # 900 GPU-s = 50 W) the 8 GPUs, less the 600 GPU-s the job takes at least (at
        # its fastest point), can take 50 W x (8 x 3000 - 600) s = 1,170,000 J of work:
        # the share 100 MJ x 45,000 / 1,215,000 = 3.70 MJ pays the fastest point, price
        # 0. (Before the bound the
        # share was 100 MJ x 45,000 / (100 MJ + 45,000) = 45 kJ, the floor bound, and
        # the job ran at its cheapest point whatever the budget.)
        (1e8, 2000, 0.0),
    ],
)
def test_the_reserve_stands_for_no_more_work_than_the_gpus_can_do_in_the_period(
    limit_j, clock, price
):
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=limit_j)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,))
    plan = plan_round(snap, policy=get_policy("powerflow", **ABOVE_IDLE), now=0.0)
    assert plan.allocations["a"].sm_clock_mhz == clock
    assert plan.policy_state["price"]["b"] == pytest.approx(price)


def test_only_what_a_job_runs_before_the_period_ends_takes_gpus_from_later_arrivals():
    # One 1-GPU job of 300 times the work above (cheapest 13.5 MJ over 270,000 s) on 64
    # GPUs, a 3000 s period, 30 MJ. Before the period ends the job takes at most 1 GPU x
    # 3000 s, leaving 64 x 3000 - 3000 = 189,000 GPU-s: 50 W x 189,000 s = 9.45 MJ of
    # work to come, below the reserve (the free 30 MJ). The share 30 MJ x 13.5 /
    # (13.5 + 9.45) = 17.6 MJ pays the cheapest point only (the next costs 23.6 MJ).
    # Counting all 270,000 GPU-s of the job against the period would leave nothing for
    # later arrivals, and the whole 30 MJ would buy the 1500 MHz point.
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=30e6)
    snap = snapshot(make_cluster(1, 8, 8), [job("a", iters=180_000.0)], budgets=(budget,))
    plan = plan_round(snap, policy=get_policy("powerflow", **ABOVE_IDLE), now=0.0)
    assert plan.allocations["a"].sm_clock_mhz == 1000
    assert plan.policy_state["price"]["b"] == pytest.approx(200 / 33_750)


@pytest.mark.parametrize(
    ("used_j", "clock", "price"),
    [
        # Halfway through the period, spending on its straight line (100 of 200 kJ): the
        # reserve, the free 100 kJ x the half left, outweighs the forecast (under 1 kJ),
        # so the share is 100,000 x 45,000 / 95,000 = 47,368 J, raised to the floor
        # 51,750 J: the cheapest point only.
        (100_000.0, 1000, 200 / 33_750),
        # Nothing spent by then: the budget lags its line by half its limit, more than
        # lag_release (10%), so nothing is held for the future and the free 200 kJ pay
        # the fastest point, price 0.
        (0.0, 2000, 0.0),
    ],
)
def test_a_budget_behind_its_straight_line_releases_its_reserve(used_j, clock, price):
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=200_000.0, energy_used_j=used_j)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,))
    plan = plan_round(snap, policy=get_policy("powerflow", **ABOVE_IDLE), now=1500.0)
    assert plan.allocations["a"].sm_clock_mhz == clock
    assert plan.policy_state["price"]["b"] == pytest.approx(price)


@pytest.mark.parametrize("params", [{"lag_release": 0.0}, {"lag_deadband": 0.6}])
def test_no_release_when_it_is_off_or_the_lag_is_inside_the_dead_band(params):
    # nothing spent halfway (a lag of 50%), but the release is off, or its dead band is
    # wider than the lag: the reserve holds 200 kJ x 0.5 and the share, 200,000 x 45,000
    # / 145,000 = 62,069 J, pays the cheapest point only (the next costs 78,750 J)
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=200_000.0)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,))
    plan = plan_round(snap, policy=get_policy("powerflow", **params, **ABOVE_IDLE), now=1500.0)
    assert plan.allocations["a"].sm_clock_mhz == 1000
    assert plan.policy_state["price"]["b"] == pytest.approx(200 / 33_750)


@pytest.mark.parametrize(
    ("used_j", "params", "clock", "price"),
    [
        # Halfway through a 400 kJ period, 188 kJ spent: 3% of the limit behind the
        # straight line, inside the release's dead band, so the reserve is the free
        # 212 kJ x the half left = 106 kJ. Counted at the job's cheapest cost it stands
        # for 106 kJ of future work: the share 212,000 x 45,000 / 151,000 = 63,179 J
        # pays the cheapest point only.
        (188_000.0, {}, 1000, 200 / 33_750),
        # Counted at the fastest (``reserve_at_fast``; 3% behind is all of the dead
        # band), the 106 kJ pay the future work at 120,000 / 45,000 of its cheapest
        # cost: 39,750 J of it. The share 212,000 x 45,000 / 84,750 = 112,566 J pays the
        # 1500 MHz point (78,750 J), not the fastest (120,000 J).
        (188_000.0, {"reserve_at_fast": True}, 1500, 100 / 41_250),
        # On its straight line (200 kJ spent) the budget keeps the cheapest count: the
        # share 200,000 x 45,000 / 145,000 = 62,069 J pays the cheapest point only.
        (200_000.0, {"reserve_at_fast": True}, 1000, 200 / 33_750),
    ],
)
def test_a_budget_behind_its_line_counts_its_reserve_at_the_fastest_cost(
    used_j, params, clock, price
):
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=400_000.0, energy_used_j=used_j)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,))
    plan = plan_round(snap, policy=get_policy("powerflow", **params, **ABOVE_IDLE), now=1500.0)
    assert plan.allocations["a"].sm_clock_mhz == clock
    assert plan.policy_state["price"]["b"] == pytest.approx(price)


@pytest.mark.parametrize(("scaling", "bounds"), [(1.2, (2**0.2, 8**0.2)), (1.0, (1.0, 1.0))])
def test_the_markup_is_what_the_jobs_configurations_cost_over_their_targets(scaling, bounds):
    # On a model that scales better than linearly, an iteration on 8 GPUs costs 2**0.2
    # times less than on 4 and 8**0.2 times less than on 1: both jobs' price target is
    # all 8 GPUs at the lowest clock, and the cluster has 8. What they got (4 and 1 GPUs)
    # costs between 2**0.2 and 8**0.2 times their targets' cost for the same progress.
    # A model that scales linearly costs the same on any count: no markup.
    budget = Budget("b", "t", 0.0, 30_000.0, energy_limit_j=300_000.0)
    jobs = [job(name, iters=600.0, max_gpus=8) for name in ("a", "b")]
    catalog = Catalog(AnalyticModel("w", scaling=scaling))
    snap = snapshot(make_cluster(1, 1, 8), jobs, catalog=catalog, budgets=(budget,))
    policy = get_policy("powerflow", **ABOVE_IDLE)
    plan = plan_round(snap, policy=policy, now=1500.0)
    assert 0.0 < plan.policy_state["price"]["b"] < float("inf")
    got, planned = plan.policy_state["price_markup"]["b"]
    assert bounds[0] - 1e-9 <= got / planned <= bounds[1] + 1e-9
    # the next round decays the sums it carries, by 0.9 a round
    carried = replace(snap, policy_state={"price_markup": {"b": [10.0, 5.0]}})
    again = plan_round(carried, policy=policy, now=1500.0).policy_state["price_markup"]["b"]
    assert again == pytest.approx([got + 9.0, planned + 4.5])


@pytest.mark.parametrize(
    ("limit_j", "used_j", "params", "clock", "price"),
    [
        # 20 kJ of 120 kJ spent at the period's start: 17% ahead of its straight line,
        # past the dead band (3%) and the release's width (10%), so the share of the
        # test above, 97,133 J, is divided by the whole markup, 2: 48,566 J pays the
        # cheapest point only (45,000 J; the next costs 78,750 J).
        (120_000.0, 20_000.0, {}, 1000, 200 / 33_750),
        (120_000.0, 20_000.0, {"markup_decay": 0.0}, 1500, 100 / 41_250),
        # On its line the budget has room for the difference: the share stands.
        (100_000.0, 0.0, {}, 1500, 100 / 41_250),
    ],
)
def test_a_budget_ahead_of_its_line_divides_its_share_by_its_markup(
    limit_j, used_j, params, clock, price
):
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=limit_j, energy_used_j=used_j)
    markup = {"price_markup": {"b": [2.0, 1.0]}}  # the jobs got twice what was planned
    snap = snapshot(
        make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,), policy_state=markup
    )
    policy = get_policy("powerflow", period_reserve=0.0, **params, **ABOVE_IDLE)
    plan = plan_round(snap, policy=policy, now=0.0)
    assert plan.allocations["a"].sm_clock_mhz == clock
    assert plan.policy_state["price"]["b"] == pytest.approx(price)


def test_a_job_only_its_prior_knows_adds_nothing_to_the_markup():
    # The price gives job a the middle clock (the test above's share), and it runs there:
    # it costs what the price planned. Known only by its prior, its target is its prior
    # box, whose clock is the top one: compared with the box, the job's 78,750 J counted
    # as 0.66 of the 120,000 J "planned", lowering the budget's markup below what its
    # other jobs cost over their targets.
    budget = Budget("b", "t", 0.0, 3000.0, energy_limit_j=100_000.0)
    snap = snapshot(
        make_cluster(1, 1, 8),
        [job("a", iters=600.0)],
        budgets=(budget,),
        job_perf={("a", "A100"): PriorOnly("w")},
    )
    policy = get_policy("powerflow", period_reserve=0.0, **ABOVE_IDLE)
    plan = plan_round(snap, policy=policy, now=0.0)
    assert plan.allocations["a"].sm_clock_mhz == 1500
    assert plan.policy_state["price"]["b"] == pytest.approx(100 / 41_250)
    assert plan.policy_state["price_markup"]["b"] == [0.0, 0.0]


@pytest.mark.parametrize("bad", [-0.1, 1.0, True])
def test_the_markup_decay_is_a_share_below_one(bad):
    with pytest.raises(ValueError, match="markup_decay"):
        get_policy("powerflow", markup_decay=bad)


# A cluster budget pays the idle floor of corekit's 8 GPUs (50 W each: 400 W). The hours
# seen: a day at 300 g/kWh, then 23 at 100 (the hour now is the last seen, at 100), so
# the mean past the 1 h forecast is (24 x 300 + 23 x 100) / 47 = 202 g/kWh and the
# dirtiest day 300. Over the 35,700 s after this round the floor takes 400 W x (3600 s x
# 100 + 32,100 s x 202) = 761 g at the mean, 1,110 g at the dirtiest day.
_SEEN = [300.0] * 24 + [100.0] * 23
_FLOOR_ROUND_G = 400 * 300 * 100 / 3.6e6  # the idle floor of one 300 s round at 100 g/kWh


def _plan_with_idle_floor(limit_g: float, period_s: float, **params):
    """One job on corekit's 8 GPUs, a cluster carbon budget, the hours seen above."""
    budget = Budget("c", None, 0.0, period_s, co2_limit_g=limit_g)
    snap = snapshot(
        make_cluster(1, 1, 8),
        [job("a", iters=600.0)],
        budgets=(budget,),
        carbon=CarbonSignal(ci_g_per_kwh=100.0),
        policy_state={"ci_history": list(_SEEN), "ci_hour": 0},
    )
    policy = get_policy("greenflow", pricing=True, rank="per_gpu", **params)
    return plan_round(snap, policy=policy, now=0.0)


@pytest.mark.parametrize(("limit_g", "runs"), [(1_000.0, False), (1_200.0, True)])
def test_a_carbon_price_keeps_the_idle_floor_at_the_dirtiest_recent_day(limit_g, runs):
    plan = _plan_with_idle_floor(limit_g, 36_000.0)
    # 1,000 g: what remains after the dirtiest day's floor is below this round's own
    # floor (400 W x 300 s at 100 g/kWh = 3.33 g), so only the floor is allowed and the
    # job waits; 1,200 g leaves 90 g, and it runs.
    assert ("a" in plan.allocations) is runs
    if not runs:
        assert plan.co2_allowance_by_budget_g["c"] == pytest.approx(_FLOOR_ROUND_G)


@pytest.mark.parametrize(("hedge", "runs"), [(True, True), (False, False)])
def test_a_month_of_idle_floor_is_not_reserved_at_the_dirtiest_day(hedge, runs):
    # The hours seen as above, a 30-day period, 70 kg. After this round the idle floor
    # takes 400 W for 2,591,700 s: 58.2 kg at the mean, 86.3 kg at the dirtiest day held
    # for the whole month, 63.3 kg with the margin narrowed over the month's 30 days
    # (202 + 98 / sqrt(29.95) = 220 g/kWh past the 1 h forecast). Reserved at the
    # dirtiest day, nothing but the floor could run for the whole month although the
    # mean leaves 11.8 kg (the sweep's GreenFlow run, mostly idle floor, held 48 jobs).
    plan = _plan_with_idle_floor(70_000.0, 30 * 86_400.0, keep_hedge=hedge)
    assert ("a" in plan.allocations) is runs
    if runs:
        assert plan.co2_allowance_by_budget_g["c"] > _FLOOR_ROUND_G
    else:
        assert plan.co2_allowance_by_budget_g["c"] == pytest.approx(_FLOOR_ROUND_G)


def test_greenflow_spends_a_team_carbon_budget_that_covers_the_work_without_holding_jobs():
    # A team's carbon budget over a day covers its four jobs several times over, but a
    # round's straight-line share of it (300 s of a day) does not pay for all four at once.
    # The price (GreenFlow's default) starts them all; the even share (pricing=False)
    # holds some back although the budget would be left over (docs/benchmarks.md,
    # "GreenFlow's default: the carbon price": 0.25-0.93x fifo's average JCT on pollux).
    jobs = [job(f"j{i}", iters=600.0) for i in range(4)]
    need_g = 4 * 600.0 * 1.0 * 300.0 / 3.6e6 * 200.0  # 4 jobs, 1 s x 300 W per iteration
    budget = Budget("b", "t", 0.0, 86_400.0, co2_limit_g=3.0 * need_g)
    snap = snapshot(
        make_cluster(1, 1, 8),
        jobs,
        Catalog(AnalyticModel("w", t1_s=1.0, busy_power_w=300.0)),
        budgets=(budget,),
        carbon=CarbonSignal(ci_g_per_kwh=200.0),
    )
    priced = plan_round(snap, policy=get_policy("greenflow"), now=0.0)
    even = plan_round(snap, policy=get_policy("greenflow", pricing=False, rank="relative"), now=0.0)
    assert len(priced.allocations) == 4
    assert len(even.allocations) < 4
    assert {w.code for w in even.waiting.values()} <= {
        "over_round_allowance",
        "waiting_for_clean_hour",
    }


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("shape", "n_jobs"), [((2, 2, 4), 30), ((4, 2, 4), 14), ((2, 4, 8), 14)])
@pytest.mark.parametrize("policy_name", ["powerflow", "greenflow"])
def test_a_budget_that_cannot_bind_plans_as_no_budget_does(seed, shape, n_jobs, policy_name):
    # given a cluster and a mix of waiting and running jobs (four workloads, elastic sizes,
    # clocks and batches), and a cluster budget far beyond anything the period could spend
    free = random_snapshot(seed, make_cluster(*shape), n_jobs=n_jobs, now=NOW_S)
    limit = {"energy_limit_j": 1e15} if policy_name == "powerflow" else {"co2_limit_g": 1e12}
    rich = Budget("b", None, 0.0, NOW_S + 7 * 86_400.0, **limit)
    priced = replace(free, budgets=(rich,))
    # when both are planned
    policy = get_policy(policy_name)
    plan_free = plan_round(free, policy=policy, now=NOW_S)
    plan_priced = plan_round(priced, policy=policy, now=NOW_S)
    # then the budget is priced at 0 and changes nothing: its energy buys nothing later,
    # so no step is refused for it or ranked lower by it (held to what the jobs' targets
    # take, it refused some and ranked others by their share of that allowance)
    assert plan_priced.policy_state["price"] == {"b": 0.0}
    assert plan_priced.allocations == plan_free.allocations


@pytest.mark.parametrize(("b_limit_j", "a_allowance_j"), [(1e9, 1e9), (100_000.0, 75_000.0)])
def test_a_free_budget_rations_the_round_only_beside_a_priced_one(b_limit_j, a_allowance_j):
    # given two teams' budgets: team a's far beyond its one job's needs (price 0), and team
    # b's as generous, or tight enough that its job runs below its fastest clock
    budgets = (
        Budget("ba", "a", 0.0, 3000.0, energy_limit_j=1e9),
        Budget("bb", "b", 0.0, 3000.0, energy_limit_j=b_limit_j),
    )
    jobs = [job("ja", iters=600.0, team="a"), job("jb", iters=600.0, team="b")]
    snap = snapshot(make_cluster(1, 2, 8), jobs, budgets=budgets)
    policy = get_policy("powerflow", period_reserve=0.0, **ABOVE_IDLE)
    plan = plan_round(snap, policy=policy, now=0.0)
    # then where both prices are 0 the round may spend what each period has left; where
    # b's price is not, a's allowance stays what its job's target takes (250 W x 300 s),
    # so that a's free energy does not rank a's steps above b's by GPUs alone
    assert plan.policy_state["price"]["ba"] == 0.0
    assert (plan.policy_state["price"]["bb"] > 0.0) is (b_limit_j < 1e9)
    assert plan.energy_allowance_by_budget_j["ba"] == pytest.approx(a_allowance_j)
    assert plan.allocations["ja"].sm_clock_mhz == 2000


def _plan_on_days(limit_g: float, slope: float, **params):
    """One job on corekit's 8 GPUs (an idle floor of 400 W), a cluster carbon budget over
    30 days, two days seen at 100 g/kWh in the last hours and, before today, 14 days
    whose means moved by ``slope`` g/kWh a day to 100 + 13 x ``slope``."""
    days = [[float(d), 24 * (100.0 + slope * (d + 13)), 24.0] for d in range(-14, 0)]
    budget = Budget("c", None, 0.0, 30 * 86_400.0, co2_limit_g=limit_g)
    snap = snapshot(
        make_cluster(1, 1, 8),
        [job("a", iters=600.0)],
        budgets=(budget,),
        carbon=CarbonSignal(ci_g_per_kwh=100.0),
        policy_state={"ci_history": [100.0] * 47, "ci_hour": 0, "ci_days": days},
    )
    return plan_round(snap, policy=get_policy("greenflow", **params), now=0.0)


def test_a_rising_grid_prices_the_idle_floor_on_its_drift():
    # At the recent mean (100 g/kWh) the floor takes 400 W x 30 days = 28.8 kg of the
    # 50 kg. The days' means rose 10 g/kWh a day to 220: their line stands at 230 today
    # and, carried 14 days on (as far as they look back), at 370 from then; the floor's
    # carbon on it, 97.1 kg, is more than the budget, so nothing but the floor may run.
    # Without the drift the job runs.
    assert "a" in _plan_on_days(50_000.0, 10.0).allocations
    drifted = _plan_on_days(50_000.0, 10.0, floor_trend_days=14)
    assert "a" not in drifted.allocations
    assert drifted.co2_allowance_by_budget_g["c"] == pytest.approx(_FLOOR_ROUND_G)
    # the days are carried for the next round (no new hour has begun: none added)
    assert drifted.policy_state["ci_days"][-1] == [-1.0, 24 * 220.0, 24.0]
    assert len(drifted.policy_state["ci_days"]) == 14


def test_a_falling_grid_leaves_the_idle_floor_at_the_recent_mean():
    plain = _plan_on_days(50_000.0, -10.0)
    falling = _plan_on_days(50_000.0, -10.0, floor_trend_days=14)
    assert falling.allocations == plain.allocations
    assert falling.co2_allowance_by_budget_g == plain.co2_allowance_by_budget_g


@pytest.mark.parametrize("bad", [6, 7.5, True, 0])
def test_the_floor_trend_needs_a_week_of_days(bad):
    with pytest.raises(ValueError, match="floor_trend_days"):
        get_policy("greenflow", floor_trend_days=bad)


@pytest.mark.parametrize("bad", [-1.0, True])
def test_the_floor_trend_gate_is_0_or_more_standard_errors(bad):
    with pytest.raises(ValueError, match="floor_trend_t"):
        get_policy("greenflow", floor_trend_days=14, floor_trend_t=bad)


def _plan_on_hours(limit_g: float, hours: list[float], **params):
    """One job on corekit's 8 GPUs (an idle floor of 400 W), a cluster carbon budget over
    30 days, the hours seen lately ``hours`` and the intensity now 100 g/kWh."""
    budget = Budget("c", None, 0.0, 30 * 86_400.0, co2_limit_g=limit_g)
    snap = snapshot(
        make_cluster(1, 1, 8),
        [job("a", iters=600.0)],
        budgets=(budget,),
        carbon=CarbonSignal(ci_g_per_kwh=100.0),
        policy_state={"ci_history": hours, "ci_hour": 0},
    )
    return plan_round(snap, policy=get_policy("greenflow", **params), now=0.0)


def test_the_idle_floor_priced_at_an_upper_quantile_of_the_week():
    # A week of clean days (40 g/kWh, 12 h) and dirty nights (160, 12 h), the hour now at
    # 100: the tail's mean is 100 g/kWh and the floor takes 400 W x 30 days = 28.8 kg of
    # 35 kg. At the 0.6 quantile of those hours (160) it would take 46 kg, more than the
    # budget, so nothing but the floor may run.
    week = [40.0 if h % 24 < 12 else 160.0 for h in range(167)]
    assert "a" in _plan_on_hours(35_000.0, week).allocations
    hedged = _plan_on_hours(35_000.0, week, floor_quantile=0.6)
    assert "a" not in hedged.allocations
    assert hedged.co2_allowance_by_budget_g["c"] == pytest.approx(_FLOOR_ROUND_G)
    # below the mean (0.4 quantile: 40 g/kWh), the floor keeps the mean: as without it
    plain = _plan_on_hours(35_000.0, week)
    low = _plan_on_hours(35_000.0, week, floor_quantile=0.4)
    assert low.allocations == plain.allocations
    assert low.co2_allowance_by_budget_g == plain.co2_allowance_by_budget_g


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, True])
def test_the_floor_quantile_is_a_share_between_0_and_1(bad):
    with pytest.raises(ValueError, match="floor_quantile"):
        get_policy("greenflow", floor_quantile=bad)
