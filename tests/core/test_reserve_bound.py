"""``reserve_bound``: the period reserve is held to an upper bound of the work still to
arrive, from the arrivals seen (their costs' sum and spread), so a budget several times
its work is spent on the jobs present while a tight one keeps its forecast
(docs/benchmarks.md, "The period reserve bounded by the arrivals seen")."""

from __future__ import annotations

import math

import pytest

from scheduling.core.policies.budget_price import arrivals_bound
from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget
from tests.core.corekit import job, make_cluster, snapshot

DAY_S = 86_400.0
# corekit's analytic job of 600 iterations on 1 GPU: (cost above idle, time) at its
# three clocks, (45,000 J, 900 s), (78,750 J, 700 s), (120,000 J, 600 s) (test_pricing).
CHEAPEST = 45_000.0


def test_the_bound_is_the_forecast_plus_z_deviations_of_a_compound_poisson_stream():
    # twenty equal arrivals over a window as long as the time left: the forecast is their
    # sum, the variance (r + r^2) times the sum of squares
    total, squares = 20 * CHEAPEST, 20 * CHEAPEST**2
    got = arrivals_bound(total, squares, window_s=DAY_S, left_s=DAY_S, z=2.0)
    assert got == pytest.approx(total + 2.0 * math.sqrt(2.0 * squares))
    # z 0 is the forecast; no arrivals bound nothing
    assert arrivals_bound(total, squares, window_s=DAY_S, left_s=DAY_S, z=0.0) == total
    assert arrivals_bound(0.0, 0.0, window_s=DAY_S, left_s=DAY_S, z=2.0) == 0.0
    # one arrival of the same sum is more uncertain than twenty
    assert arrivals_bound(total, total**2, window_s=DAY_S, left_s=DAY_S, z=2.0) > got


def _round(free_j, *, reserve_bound=None, behind_j=0.0, **params):
    # a ten-day team budget (no idle floor) five days in, on its straight line with
    # ``free_j`` left, twenty jobs' cheapest cost seen arriving in those five days, one
    # job present
    budget = Budget(
        "b", "t", 0.0, 10 * DAY_S, energy_limit_j=2 * free_j, energy_used_j=free_j - behind_j
    )
    now = 5 * DAY_S
    state = {
        "price_prev_now": now - 300.0,
        "price_arrivals": {"b": [20 * CHEAPEST, 0.0]},
        "price_arrival_sq": {"b": 20 * CHEAPEST**2},
    }
    jobs = [job("j0", submit=now - 600.0, iters=600.0)]
    snap = snapshot(make_cluster(1, 1, 8), jobs, budgets=(budget,), policy_state=state)
    if reserve_bound is not None:
        params["reserve_bound"] = reserve_bound
    policy = get_policy("powerflow", cost_above_idle=True, **params)
    return plan_round(snap, policy=policy, now=now)


def test_a_generous_budget_spends_what_the_bound_frees_on_the_present_job():
    # given a budget of 10 MJ with half its period left: the reserve holds 5 MJ for the
    # future, the twenty arrivals bound it at 0.9 MJ + 2 sd (about 1.5 MJ)
    plain = _round(10e6)
    bound = _round(10e6, reserve_bound=2.0)

    # then held by the reserve the job gets about twice its cheapest cost and runs below
    # its top clock; with the reserve bounded it gets more than its fastest cost, price 0
    assert {a.sm_clock_mhz for a in plain.allocations.values()} == {1500}
    assert {a.sm_clock_mhz for a in bound.allocations.values()} == {2000}
    assert plain.policy_state["price"]["b"] > 0.0
    assert bound.policy_state["price"]["b"] == 0.0
    # and the spread of the arrivals is carried (nothing new arrived this round)
    assert bound.policy_state["price_arrival_sq"] == {"b": 20 * CHEAPEST**2}
    assert "price_arrival_sq" not in plain.policy_state


def test_a_tight_budget_keeps_its_forecast():
    # given a budget whose reserve (half its free remainder) is below the forecast of the
    # arrivals (0.9 MJ): the bound, above the forecast, changes nothing
    plain = _round(1.2e6)
    bound = _round(1.2e6, reserve_bound=2.0)

    # then the two rounds choose and price alike
    assert plain.allocations == bound.allocations
    assert plain.policy_state["price"] == bound.policy_state["price"]


def test_with_the_lag_the_bound_lowers_the_reserve_only_behind_the_line():
    # given the generous budget on its straight line, and 0.8 MJ (4% of its limit) behind
    lagged = {"reserve_bound": 2.0, "reserve_bound_lag": True}
    on_line = _round(10e6, **lagged)
    behind = _round(10e6, behind_j=0.8e6, **lagged)

    # then on its line the reserve holds as without the bound; behind it by more than the
    # deadband (3%) the bound frees it and the job runs at its top clock
    assert on_line.allocations == _round(10e6).allocations
    assert {a.sm_clock_mhz for a in on_line.allocations.values()} == {1500}
    assert {a.sm_clock_mhz for a in behind.allocations.values()} == {2000}
    # (behind by as much without the bound, the lag release alone frees less of it)
    assert {a.sm_clock_mhz for a in _round(10e6, behind_j=0.8e6).allocations.values()} == {1500}


def test_a_new_arrival_adds_its_square():
    budget = Budget("b", "t", 0.0, 10 * DAY_S, energy_limit_j=10e6)
    snap = snapshot(make_cluster(1, 1, 8), [job("j0", submit=0.0, iters=600.0)], budgets=(budget,))
    out = plan_round(
        snap, policy=get_policy("powerflow", cost_above_idle=True, reserve_bound=1.0), now=0.0
    )
    assert out.policy_state["price_arrival_sq"]["b"] == pytest.approx(CHEAPEST**2)


@pytest.mark.parametrize("bad", [1, "true", None])
def test_reserve_bound_lag_must_be_a_boolean(bad):
    with pytest.raises(ValueError, match="reserve_bound_lag"):
        get_policy("powerflow", reserve_bound_lag=bad)


@pytest.mark.parametrize("bad", [True, -1.0, math.inf, math.nan, "2"])
def test_reserve_bound_must_be_a_finite_number_at_least_0(bad):
    with pytest.raises(ValueError, match="reserve_bound"):
        get_policy("powerflow", reserve_bound=bad)


def test_with_spare_gpus_the_bound_lowers_the_reserve_by_the_share_of_the_gpus_left_free():
    # given four jobs that fill four of the eight GPUs at their cheapest to the period's
    # end (five days each at one GPU; 86.4 MJ in all), a budget on its line with 320 MJ
    # free (a reserve of half of it), and the twenty small arrivals seen, which bound
    # the future at about 1.5 MJ
    budget = Budget("b", "t", 0.0, 10 * DAY_S, energy_limit_j=640e6, energy_used_j=320e6)
    now = 5 * DAY_S
    state = {
        "price_prev_now": now - 300.0,
        "price_arrivals": {"b": [20 * CHEAPEST, 0.0]},
        "price_arrival_sq": {"b": 20 * CHEAPEST**2},
    }
    jobs = [job(f"j{i}", submit=now - 600.0, iters=600.0 * 480) for i in range(4)]
    snap = snapshot(make_cluster(1, 1, 8), jobs, budgets=(budget,), policy_state=state)

    def plan(**params):
        policy = get_policy("powerflow", cost_above_idle=True, **params)
        out = plan_round(snap, policy=policy, now=now)
        return out.policy_state["price"]["b"], {a.sm_clock_mhz for a in out.allocations.values()}

    # when the reserve is lowered to the bound all the way, or by the GPUs' spare half
    plain = plan()
    bound = plan(reserve_bound=2.0)
    spare = plan(reserve_bound=2.0, reserve_bound_spare=True)

    # then the spare share lowers the reserve half as far: a price between the two, the
    # jobs at the middle clock where the reserve holds them at the lowest and the bound
    # alone frees them to the top
    assert plain[0] > spare[0] > bound[0]
    assert (plain[1], spare[1], bound[1]) == ({1000}, {1500}, {2000})


def test_reserve_bound_spare_must_be_a_boolean():
    with pytest.raises(ValueError, match="reserve_bound_spare"):
        get_policy("powerflow", reserve_bound_spare=1)
