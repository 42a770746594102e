"""The slow budget price (``slow_price``, ``budget_price._slow_price``): a dual-ascent step
on the spending's lag behind its line, which only ever lowers the re-solved price, and only
as far as the budget is behind that line beyond the deadband (docs/benchmarks.md, "A slow
budget price (issue 13, point 1)")."""

from __future__ import annotations

import math

import pytest

from scheduling.core.policies.budget_price import _slow_price
from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget
from tests.core.corekit import job, make_cluster, snapshot

# test_pricing's hull of one job: (cost above idle, time) at its three clocks; slopes
# 200 s / 33,750 J (cheapest to middle) and 100 s / 41,250 J (middle to fastest).
HULL = [(45_000.0, 900.0, "1000"), (78_750.0, 700.0, "1500"), (120_000.0, 600.0, "2000")]
STEEP, FLAT = 200 / 33_750, 100 / 41_250
START = 2 * STEEP  # every job at its cheapest (the highest the slow price goes)
SPAN = 3000.0
TAU = 0.05  # the slow price moves by up to e every 150 s of this period
BUDGET = Budget("b", "t", 0.0, SPAN, energy_limit_j=100_000.0)


def _step(state, now, solved, lag, budget=BUDGET):
    return _slow_price(
        state.get(budget.budget_id), state, budget, now=now, solved=solved, hulls=[HULL],
        lag=lag, tau=TAU, deadband=0.03,
    )  # fmt: skip


def test_it_starts_at_the_re_solved_price():
    state: dict = {}
    assert _step(state, 0.0, STEEP, lag=0.5) == STEEP
    assert math.exp(state["b"][1]) == pytest.approx(STEEP)


def test_behind_its_line_the_price_falls_by_e_per_tau_of_the_period_down_to_0():
    state: dict = {}
    _step(state, 0.0, START, lag=0.5)
    # 150 s is TAU of the period: one factor e, whatever the re-solved price says now
    assert _step(state, 150.0, START, lag=0.5) == pytest.approx(START / math.e)
    # below the flattest step every job is at its fastest: the price is 0, and the
    # slow price stays at half that step (no wind-up beyond what changes a choice)
    assert START / math.e**2 < FLAT
    assert _step(state, 300.0, START, lag=0.5) == 0.0
    for now in range(450, 3000, 150):
        assert _step(state, float(now), START, lag=0.5) == 0.0
    assert math.exp(state["b"][1]) == pytest.approx(FLAT / 2)


def test_a_smaller_lag_moves_it_in_proportion_and_lowers_the_price_less():
    state: dict = {}
    _step(state, 0.0, START, lag=0.5)
    # half the deadband behind: half a step, and within the deadband the price stays
    assert _step(state, 150.0, START, lag=0.015) == START
    assert math.exp(state["b"][1]) == pytest.approx(START / math.sqrt(math.e))
    # one and a half deadbands behind: a whole step, and the log of the price half-way
    # between the re-solved price and the slow one
    got = _step(state, 300.0, START, lag=0.045)
    assert math.exp(state["b"][1]) == pytest.approx(START / math.e**1.5)
    assert got == pytest.approx(START / math.e**0.75)


def test_on_or_ahead_of_its_line_a_budget_keeps_the_re_solved_price():
    # A tight budget: a slow price that fell in a quiet spell must not spend early what
    # its later work needs.
    state: dict = {}
    _step(state, 0.0, START, lag=0.5)
    _step(state, 150.0, START, lag=0.5)  # fallen to START / e
    assert _step(state, 150.0, START, lag=0.0) == START
    assert _step(state, 150.0, START, lag=0.03) == START  # within the deadband
    assert _step(state, 150.0, START, lag=-0.2) == START
    assert _step(state, 150.0, START, lag=0.5) == pytest.approx(START / math.e)


def test_it_never_raises_the_re_solved_price():
    state: dict = {}
    _step(state, 0.0, FLAT, lag=-0.5)
    for now in range(150, 1500, 150):
        # ahead of its line the slow price rises (up to twice the steepest step) ...
        assert _step(state, float(now), FLAT, lag=-0.5) == FLAT
    assert math.exp(state["b"][1]) == pytest.approx(2 * STEEP)
    # ... and a lower re-solved price still wins, on or behind the line
    assert _step(state, 1500.0, FLAT, lag=0.5) == FLAT


def test_an_infinite_price_is_kept_and_the_slow_one_does_not_move():
    state: dict = {}
    _step(state, 0.0, START, lag=0.5)
    assert _step(state, 900.0, math.inf, lag=0.5) == math.inf
    assert math.exp(state["b"][1]) == pytest.approx(START)
    assert _step(state, 1050.0, START, lag=0.5) == pytest.approx(START / math.e)


def test_a_new_period_starts_again_at_the_re_solved_price():
    state: dict = {}
    _step(state, 0.0, STEEP, lag=0.5)
    _step(state, 600.0, STEEP, lag=0.5)
    nxt = Budget("b", "t", SPAN, 2 * SPAN, energy_limit_j=100_000.0)
    assert _step(state, SPAN, STEEP, lag=0.5, budget=nxt) == STEEP
    assert state["b"][0] == SPAN


def test_slow_price_must_be_a_positive_share():
    for bad in (0.0, -0.1, math.inf, True):
        with pytest.raises(ValueError):
            get_policy("powerflow", slow_price=bad)


def _plan(used_j: float, **params):
    # Half-way through the period; the slow price was set 300 s ago at 1e-6 s/J.
    budget = Budget("b", "t", 0.0, SPAN, energy_limit_j=150_000.0, energy_used_j=used_j)
    state = {"price_prev_now": 1200.0, "slow_price": {"b": [0.0, math.log(1e-6), 1200.0]}}
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,),
                    policy_state=state)  # fmt: skip
    policy = get_policy("powerflow", period_reserve=0.0, cost_above_idle=True, **params)
    return plan_round(snap, policy=policy, now=1500.0)


def test_a_budget_behind_its_line_runs_its_job_at_the_slow_price():
    # 150 kJ, 60 kJ of it spent half-way through (10% behind the line): the 90 kJ left
    # pays the job's middle point (78,750 J), not its fastest (120,000 J), so the
    # re-solved price runs it at 1500 MHz; the slow price, fallen below the flattest
    # step, at its fastest this round.
    solved = _plan(60_000.0, slow_price=None)
    assert solved.allocations["a"].sm_clock_mhz == 1500
    assert solved.policy_state["price"]["b"] == pytest.approx(FLAT)
    slow = _plan(60_000.0, slow_price=TAU)
    assert slow.allocations["a"].sm_clock_mhz == 2000
    assert slow.policy_state["price"]["b"] == 0.0
    assert slow.policy_state["slow_price"]["b"][2] == 1500.0


def test_a_budget_on_its_line_keeps_the_re_solved_price():
    on_line = _plan(100_000.0, slow_price=TAU)
    assert (
        on_line.policy_state["price"]["b"]
        == _plan(100_000.0, slow_price=None).policy_state["price"]["b"]
    )


def test_the_slow_price_of_a_budget_gone_from_the_round_is_dropped():
    # given the state of the round before: the present budget's slow price, and that of a
    # budget whose period has ended (a long-running service sees a new one every period)
    budget = Budget("b", "t", 0.0, SPAN, energy_limit_j=150_000.0, energy_used_j=60_000.0)
    present = {"b": [0.0, math.log(1e-6), 1200.0]}
    ended = {"ended": [-SPAN, math.log(1e-6), -600.0]}
    policy = get_policy("powerflow", period_reserve=0.0, cost_above_idle=True, slow_price=TAU)

    def plan(slow):
        state = {"price_prev_now": 1200.0, "slow_price": slow}
        snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,),
                        policy_state=state)  # fmt: skip
        return plan_round(snap, policy=policy, now=1500.0)

    # when a round plans with it
    both = plan({**present, **ended})

    # then only the present budget's slow price is carried, moved to this round
    assert set(both.policy_state["slow_price"]) == {"b"}
    assert both.policy_state["slow_price"]["b"][2] == 1500.0
    # and the round plans as it does without the ended budget's state
    alone = plan(present)
    assert both.policy_state == alone.policy_state
    assert both.allocations == alone.allocations


def test_the_arrivals_of_a_budget_gone_from_the_round_are_dropped():
    # given the state of the round before: the present budget's arrivals (their cheapest
    # cost since 0 s, and by octave of their time), and those of 40 budgets whose periods
    # have ended (a long-running service sees one a team a period)
    budget = Budget("b", "t", 0.0, SPAN, energy_limit_j=150_000.0, energy_used_j=60_000.0)
    present = {"b": [45_000.0, 0.0]}
    present_times = {"b": {"9": [45_000.0, 45_000.0 * 900.0, 45_000.0 / 900.0]}}
    ended = {f"ended-{k}": [90_000.0, -SPAN] for k in range(40)}
    ended_times = {f"ended-{k}": {"10": [90_000.0, 9e7, 90.0]} for k in range(40)}
    policy = get_policy("powerflow", period_reserve=0.0, cost_above_idle=True)

    def plan(arrivals, times):
        state = {"price_prev_now": 1200.0, "price_arrivals": arrivals,
                 "price_arrival_times": times}  # fmt: skip
        snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=600.0)], budgets=(budget,),
                        policy_state=state)  # fmt: skip
        return plan_round(snap, policy=policy, now=1500.0)

    # when a round plans with it
    both = plan({**present, **ended}, {**present_times, **ended_times})

    # then only the present budget's arrivals are carried (before: all 41, for ever)
    assert set(both.policy_state["price_arrivals"]) == {"b"}
    assert set(both.policy_state["price_arrival_times"]) == {"b"}
    assert both.policy_state["price_arrivals"]["b"] == [45_000.0, 0.0]
    # and the round plans as it does without the ended budgets' state
    alone = plan(present, present_times)
    assert both.policy_state == alone.policy_state
    assert both.allocations == alone.allocations
