"""``first_backlog``: on the first priced round, the jobs submitted no later than their
budget's period began are a backlog, not arrivals the price forecasts as a daily rate
for the rest of the period (docs/benchmarks.md, "Derived traces at HEAD, and a backlog
the price found")."""

from __future__ import annotations

import pytest

from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget
from tests.core.corekit import job, make_cluster, snapshot

DAY_S = 86_400.0
# corekit's analytic job of 600 iterations on 1 GPU: (cost above idle, time) at its
# three clocks, (45,000 J, 900 s), (78,750 J, 700 s), (120,000 J, 600 s) (test_pricing).
CHEAPEST = 45_000.0


def _round(jobs, *, now, state=None, **params):
    # a ten-day team budget (no idle floor) of 480 kJ: four such jobs at their fastest
    budget = Budget("b", "t", 0.0, 10 * DAY_S, energy_limit_j=480_000.0)
    snap = snapshot(make_cluster(1, 1, 8), jobs, budgets=(budget,), policy_state=state or {})
    policy = get_policy("powerflow", cost_above_idle=True, **params)
    return plan_round(snap, policy=policy, now=now)


def _jobs(*submits):
    return [job(f"j{i}", submit=s, iters=600.0) for i, s in enumerate(submits)]


def test_the_first_round_counts_only_the_jobs_submitted_after_the_period_began():
    # given three jobs present at the first priced round, two submitted when the period
    # began and one 100 s into it
    jobs = _jobs(0.0, 0.0, 100.0)

    # when the first round prices them, with and without the option
    plain = _round(jobs, now=300.0, first_backlog=False)
    backlog = _round(jobs, now=300.0, first_backlog=True)

    # then without it all three are the period's arrivals; with it only the third
    assert plain.policy_state["price_arrivals"]["b"] == [3 * CHEAPEST, 300.0]
    assert backlog.policy_state["price_arrivals"]["b"] == [CHEAPEST, 300.0]
    assert sum(cell[0] for cell in backlog.policy_state["price_arrival_times"]["b"].values()) == (
        pytest.approx(CHEAPEST)
    )


def test_a_backlog_forecast_as_no_arrivals_runs_faster():
    # given four jobs present when a ten-day budget is first priced, and no reserve for
    # bursts (so that the forecast alone holds funds for later)
    jobs = _jobs(0.0, 0.0, 0.0, 0.0)

    # when the first round plans them
    plain = _round(jobs, now=0.0, period_reserve=0.0, first_backlog=False)
    backlog = _round(jobs, now=0.0, period_reserve=0.0, first_backlog=True)

    # then counted as arrivals they are forecast as four such jobs a day for ten days,
    # and run at their cheapest clock; as a backlog the budget pays their fastest
    assert {a.sm_clock_mhz for a in plain.allocations.values()} == {1000}
    assert {a.sm_clock_mhz for a in backlog.allocations.values()} == {2000}
    assert backlog.policy_state["price"]["b"] == 0.0
    assert plain.policy_state["price"]["b"] > 0.0


def test_later_rounds_count_the_jobs_submitted_since_the_last_round_either_way():
    # given a round after the first (its state says when the last round was)
    state = {"price_prev_now": 300.0}
    jobs = _jobs(0.0, 200.0, 400.0)

    # when it prices, with and without the option
    plain = _round(jobs, now=600.0, state=state, first_backlog=False)
    backlog = _round(jobs, now=600.0, state=state, first_backlog=True)

    # then the job submitted since the last round is the only arrival, either way
    assert plain.policy_state == backlog.policy_state
    assert plain.policy_state["price_arrivals"]["b"] == [CHEAPEST, 600.0]


@pytest.mark.parametrize("bad", ["true", 1, None])
def test_first_backlog_must_be_a_boolean(bad):
    with pytest.raises(ValueError, match="first_backlog"):
        get_policy("powerflow", first_backlog=bad)
