"""``rate_after_first_day`` (off by default): the arrival rate the price forecasts leaves
out what arrived in the budget's first priced day, over the time since that day. Read
just after a burst, a count over the time since the first arrival is high by the burst it
has just seen (docs/benchmarks.md, "An unkeepable budget period, GreenFlow's reserve bound
at 0.5 and 0.25, and the bursts miss instrumented": four bursts ten days apart, 20,105 MJ
forecast at day 1 against 1,731 MJ to come)."""

from __future__ import annotations

import pytest

from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget
from tests.core.corekit import job, make_cluster, snapshot

DAY_S = 86_400.0
# corekit's analytic job of 600 iterations on 1 GPU: cheapest cost above idle 45,000 J
# (test_first_backlog)
CHEAPEST = 45_000.0


def _round(jobs, *, now, state=None, **params):
    # a ten-day team budget (no idle floor) of 480 kJ: four such jobs at their fastest
    budget = Budget("b", "t", 0.0, 10 * DAY_S, energy_limit_j=480_000.0)
    snap = snapshot(make_cluster(1, 1, 8), jobs, budgets=(budget,), policy_state=state or {})
    policy = get_policy("powerflow", cost_above_idle=True, period_reserve=0.0, **params)
    return plan_round(snap, policy=policy, now=now)


def _jobs(*submits):
    return [job(f"j{i}", submit=s, iters=600.0) for i, s in enumerate(submits)]


def test_a_burst_in_the_first_day_is_not_forecast_as_a_daily_rate():
    # given four jobs that arrived 100 s into the budget's first priced round
    jobs = _jobs(100.0, 100.0, 100.0, 100.0)
    state = {"price_prev_now": 0.0, "price_arrivals": {"b": [0.0, 0.0]}}

    plain = _round(jobs, now=300.0, state=state)
    after = _round(jobs, now=300.0, state=state, rate_after_first_day=True)

    # then by default they are four such jobs a day for ten days: a price, the cheapest
    # clock; leaving the first day out, nothing is forecast and they run at the top
    assert plain.policy_state["price"]["b"] > 0.0
    assert {a.sm_clock_mhz for a in plain.allocations.values()} == {1000}
    assert after.policy_state["price"]["b"] == 0.0
    assert {a.sm_clock_mhz for a in after.allocations.values()} == {2000}
    # and what came in the first day is kept apart for later rounds
    assert after.policy_state["price_first_day"] == {"b": pytest.approx(4 * CHEAPEST)}
    assert after.policy_state["price_arrivals"]["b"] == [pytest.approx(4 * CHEAPEST), 0.0]


def test_what_arrives_after_the_first_day_is_the_rate():
    # given the first day's four jobs done, and two more arriving on day 3
    state = {
        "price_prev_now": 3 * DAY_S - 300.0,
        "price_arrivals": {"b": [4 * CHEAPEST, 0.0]},
        "price_first_day": {"b": 4 * CHEAPEST},
    }
    jobs = _jobs(3 * DAY_S - 100.0, 3 * DAY_S - 100.0)

    after = _round(jobs, now=3 * DAY_S, state=state, rate_after_first_day=True)

    # then the first day stays apart and the two later ones join the arrivals: the rate
    # is theirs (2 x 45 kJ) over the two days since the first day
    assert after.policy_state["price_first_day"] == {"b": pytest.approx(4 * CHEAPEST)}
    assert after.policy_state["price_arrivals"]["b"] == [pytest.approx(6 * CHEAPEST), 0.0]


def test_off_by_default_and_only_true_or_false():
    assert get_policy("powerflow").rate_after_first_day is False
    with pytest.raises(ValueError, match="rate_after_first_day"):
        get_policy("powerflow", rate_after_first_day=1)
