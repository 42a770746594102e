"""Budget periods in the simulator: every instant belongs to exactly one period, and the
next boundary is always ahead, also where floating-point division rounds."""

from __future__ import annotations

import math

from scheduling.core.round import active_budgets
from scheduling.simulator.budgets import BudgetLedger, BudgetPeriod, BudgetSpec, idle_floor_exceeds
from scheduling.simulator.carbon import ConstantIntensity


def test_a_period_end_belongs_to_the_next_period_and_the_next_boundary_is_ahead():
    # A period as long as a measured makespan (not a round number): before the fix, 61 of
    # the first 1,000 period ends fell back into the period they end, so the engine stood
    # still there, replanning forever (the learned team-budget run of test_simulate_command).
    for start in (0.0, 1234.5):
        spec = BudgetSpec(period_start_s=start, period_end_s=start + 24300.8185261097)
        for k in range(1, 1000):
            end = spec.bounds(k - 1)[1]
            assert spec.period_at(end) == k
            assert spec.next_boundary(end) > end
            inside = (spec.bounds(k)[0] + spec.bounds(k)[1]) / 2
            assert spec.period_at(inside) == k


def test_the_ledger_moves_past_every_boundary():
    specs = [
        BudgetSpec(period_end_s=24300.8185261097, energy_limit_j=1e9, team=team)
        for team in ("a", "b")
    ]
    ledger = BudgetLedger(specs)
    t, seen = 0.0, 0
    while t < 300 * 24300.8185261097:
        nxt = ledger.next_boundary(t)
        assert nxt > t
        t, seen = nxt, seen + 1
    assert seen == 300


def test_a_one_off_budget_ends_after_its_period():
    spec = BudgetSpec(period_end_s=24300.8185261097, renews=False)
    assert spec.period_at(0.0) == 0
    assert spec.period_at(spec.bounds(0)[1]) is None


def test_at_every_period_end_the_core_sees_the_next_period_in_force():
    # Before the fix a period's start was computed apart from its predecessor's end and
    # 24 of the first 1,000 starts fell a rounding step after that end: the ledger handed
    # the core a budget whose period had not started, ``active_budgets`` dropped it, and
    # that round was planned with no budget at all (the learned team-budget run of
    # test_simulate_command started ncf's 12 jobs on 64 GPUs there: 290% of a period).
    length = 24300.8185261097
    for start in (0.0, 1234.5):
        specs = [
            BudgetSpec(period_start_s=start, period_end_s=start + length, energy_limit_j=1e4),
            BudgetSpec(
                period_start_s=start, period_end_s=start + length, energy_limit_j=1e4, team="a"
            ),
        ]
        ledger = BudgetLedger(specs)
        for k in range(1, 1000):
            end = specs[0].bounds(k - 1)[1]
            assert specs[0].bounds(k)[0] == end
            for t in (end, math.nextafter(end, -math.inf)):
                in_force = active_budgets(ledger.at(t), t)
                assert len(in_force) == len(specs), (k, t)
                period = k if t == end else k - 1
                assert {b.budget_id for b in in_force} == {s.period_id(period) for s in specs}


def test_a_period_is_floored_only_where_the_cluster_idle_draw_alone_exceeds_its_limit():
    # 100 W idle over a 1,000 s period is 100 kJ; at a constant 360 g/kWh, 10 g.
    intensity = ConstantIntensity(360.0)

    def period(team=None, energy=None, co2=None):
        return BudgetPeriod("b", team, 1000.0, 2000.0, energy, co2, 0.0, 0.0)

    assert idle_floor_exceeds(period(energy=99_999.0), 100.0, intensity)
    assert not idle_floor_exceeds(period(energy=100_001.0), 100.0, intensity)
    assert idle_floor_exceeds(period(energy=1e9, co2=9.9), 100.0, intensity)
    assert not idle_floor_exceeds(period(co2=10.1), 100.0, intensity)
    # a team's budget pays its jobs' GPUs, and idle nodes powered off draw nothing
    assert not idle_floor_exceeds(period(team="a", energy=1.0), 100.0, intensity)
    assert not idle_floor_exceeds(period(energy=1.0), 0.0, intensity)
