"""Pacing budgets into round allowances, and the intensity curve ahead."""

from __future__ import annotations

import pytest

from scheduling.core.pacing import (
    IntensityCurve,
    committed_lag_share,
    dirtiest_day_ci,
    intensity_curve,
    intensity_drift,
    lag_share,
    paced_co2_allowance_g,
    paced_energy_allowance_j,
    upper_quantile,
)
from scheduling.core.types import Budget, CarbonSignal


def test_energy_allowance_spreads_what_remains_over_what_remains():
    b = Budget("b", "t", 0.0, 4000.0, energy_limit_j=5e6, energy_used_j=1.4e6)
    # 3.6 MJ left over 3600 s, a 300 s round gets a twelfth
    assert paced_energy_allowance_j(b, now=400.0, round_s=300.0) == pytest.approx(300_000.0)


def test_energy_allowance_in_the_last_round_is_all_that_remains():
    b = Budget("b", "t", 0.0, 1000.0, energy_limit_j=10.0, energy_used_j=4.0)
    assert paced_energy_allowance_j(b, now=900.0, round_s=300.0) == 6.0


def test_budget_without_energy_limit_has_no_energy_allowance():
    b = Budget("b", "t", 0.0, 1000.0, co2_limit_g=5.0)
    assert paced_energy_allowance_j(b, now=0.0, round_s=300.0) is None


def test_curve_integrates_the_forecast_steps_then_the_tail():
    curve = IntensityCurve(now=0.0, ci_now=100.0, points=((3600.0, 300.0),), tail_ci=200.0)
    assert curve.at(10.0) == 100.0
    assert curve.at(4000.0) == 300.0
    assert curve.at(8000.0) == 200.0
    # 1 h at 100, 1 h at 300, then 1000 s at the tail's 200
    assert curve.integral(8200.0) == pytest.approx(100 * 3600 + 300 * 3600 + 200 * 1000)
    # 1 kW for one hour at 100 g/kWh is 100 g
    assert curve.co2_g(1000.0, 3600.0) == pytest.approx(100.0)


def test_curve_tail_is_the_mean_of_the_recent_distribution():
    curve = intensity_curve(CarbonSignal(ci_g_per_kwh=50.0), now=0.0, history=[100.0, 300.0])
    assert curve.tail_ci == 200.0
    assert curve.at(0.0) == 50.0
    assert curve.at(3600.0) == 200.0


def test_carbon_allowance_with_no_clean_bias_follows_the_intensity():
    # given 1440 g left over two hours: 100 g/kWh now, 300 g/kWh in the second hour
    b = Budget("c", "t", 0.0, 7200.0, co2_limit_g=1440.0)
    curve = IntensityCurve(now=0.0, ci_now=100.0, points=((3600.0, 300.0),), tail_ci=300.0)
    # when energy is spread evenly (clean_bias 0), carbon follows the intensity
    got = paced_co2_allowance_g(b, now=0.0, round_s=300.0, curve=curve, history=[], clean_bias=0.0)
    # then the round gets 1440 * (100 * 300) / (100 * 3600 + 300 * 3600) = 30 g
    assert got == pytest.approx(30.0)


def test_carbon_allowance_with_clean_bias_one_spends_carbon_evenly():
    b = Budget("c", "t", 0.0, 7200.0, co2_limit_g=1440.0)
    curve = IntensityCurve(now=0.0, ci_now=100.0, points=((3600.0, 300.0),), tail_ci=300.0)
    got = paced_co2_allowance_g(b, now=0.0, round_s=300.0, curve=curve, history=[], clean_bias=1.0)
    assert got == pytest.approx(1440.0 * 300 / 7200)


def test_carbon_allowance_in_a_dirty_hour_is_smaller_with_a_stronger_bias():
    b = Budget("c", "t", 0.0, 7200.0, co2_limit_g=1440.0)
    curve = IntensityCurve(now=0.0, ci_now=300.0, points=((3600.0, 100.0),), tail_ci=100.0)
    kw = dict(now=0.0, round_s=300.0, curve=curve, history=[])
    even = paced_co2_allowance_g(b, clean_bias=1.0, **kw)
    biased = paced_co2_allowance_g(b, clean_bias=2.0, **kw)
    # bias 2: weights ci**-1: 300 s / 300 against 3600 / 300 + 3600 / 100
    assert biased == pytest.approx(1440.0 * (300 / 300) / (3600 / 300 + 3600 / 100))
    assert biased < even


def test_carbon_allowance_past_the_forecast_uses_the_history():
    b = Budget("c", "t", 0.0, 3600.0 * 3, co2_limit_g=900.0)
    curve = intensity_curve(CarbonSignal(ci_g_per_kwh=100.0), now=0.0, history=[100.0, 400.0])
    got = paced_co2_allowance_g(
        b, now=0.0, round_s=300.0, curve=curve, history=[100.0, 400.0], clean_bias=0.0
    )
    # now holds for an hour, then the history's mean weight 250 for two hours
    assert got == pytest.approx(900.0 * 100 * 300 / (100 * 3600 + 250 * 7200))


def test_idle_floor_is_reserved_to_the_period_end_and_only_the_rest_is_paced():
    # given 3.6 MJ left over 3600 s and a 500 W idle floor: 1.8 MJ are committed
    b = Budget("all", None, 0.0, 3600.0, energy_limit_j=3.6e6)
    got = paced_energy_allowance_j(b, now=0.0, round_s=300.0, floor_w=500.0)
    # then the round gets its own floor (150 kJ) plus a twelfth of the free 1.8 MJ
    assert got == pytest.approx(150_000.0 + 1.8e6 / 12)


def test_budget_below_the_idle_floor_allows_only_the_floor():
    b = Budget("all", None, 0.0, 3600.0, energy_limit_j=1e6)
    got = paced_energy_allowance_j(b, now=0.0, round_s=300.0, floor_w=500.0)
    assert got == pytest.approx(150_000.0)


def test_spend_ahead_front_loads_the_pace():
    b = Budget("b", "t", 0.0, 3600.0, energy_limit_j=3.6e6)
    assert paced_energy_allowance_j(b, now=0.0, round_s=300.0, spend_ahead=2.0) == (
        pytest.approx(600_000.0)
    )
    # never more than what remains
    assert paced_energy_allowance_j(b, now=3000.0, round_s=300.0, spend_ahead=4.0) == 3.6e6


def test_carbon_floor_is_priced_with_the_curve():
    # 1 kW floor; 100 g/kWh now for an hour, then 300 g/kWh: 400 g committed over 2 h
    b = Budget("all", None, 0.0, 7200.0, co2_limit_g=1000.0)
    curve = IntensityCurve(now=0.0, ci_now=100.0, points=((3600.0, 300.0),), tail_ci=300.0)
    got = paced_co2_allowance_g(
        b, now=0.0, round_s=300.0, curve=curve, history=[], clean_bias=1.0, floor_w=1000.0
    )
    # floor now: 1 kW x 300 s at 100 g/kWh = 8.33 g; the free 600 g paced evenly
    assert got == pytest.approx(1000.0 * 300 / 3.6e6 * 100 + 600.0 * 300 / 7200)


def test_catch_up_re_spends_what_lags_behind_a_straight_line():
    # halfway through, 0.8 of the 1.8 MJ a straight line would have spent is used
    b = Budget("b", "t", 0.0, 3600.0, energy_limit_j=3.6e6, energy_used_j=0.8e6)
    even = paced_energy_allowance_j(b, now=1800.0, round_s=300.0)
    caught = paced_energy_allowance_j(b, now=1800.0, round_s=300.0, catch_up_s=3000.0)
    assert even == pytest.approx(2.8e6 * 300 / 1800)
    # the 1.0 MJ lag comes back over 3000 s: a tenth of it this round
    assert caught == pytest.approx(even + 100_000.0)


def test_catch_up_never_cuts_an_overspent_budget_further():
    b = Budget("b", "t", 0.0, 3600.0, energy_limit_j=3.6e6, energy_used_j=3.0e6)
    even = paced_energy_allowance_j(b, now=1800.0, round_s=300.0)
    assert paced_energy_allowance_j(b, now=1800.0, round_s=300.0, catch_up_s=3000.0) == even


def test_lag_share_is_the_tighter_of_energy_and_carbon():
    from scheduling.core.pacing import lag_share

    b = Budget(
        "b",
        "t",
        0.0,
        1000.0,
        energy_limit_j=100.0,
        energy_used_j=10.0,
        co2_limit_g=10.0,
        co2_used_g=4.0,
    )
    # at t=500: energy 40% behind its line, carbon 10% behind: the tighter is 10%
    assert lag_share(b, 500.0) == pytest.approx(0.1)
    assert lag_share(Budget("x", None, 0.0, 1000.0), 500.0) == 0.0


def test_committed_lag_share_draws_the_line_through_the_committed_carbon():
    # Halfway through, 40 g spent of 100 g: on a straight line of the whole limit it
    # lags by 10 g. But 20 g of it paid the idle floor so far and the floor will take
    # 40 g more (a grid growing dirtier): the rest of the limit is 40 g for work, half
    # of it by now, so the line is 20 + 20 = 40 g and the budget is on it.
    b = Budget("b", None, 0.0, 1000.0, co2_limit_g=100.0, co2_used_g=40.0)
    assert lag_share(b, 500.0) == pytest.approx(0.1)
    lag = committed_lag_share(b, 500.0, committed_so_far_g=20.0, committed_rest_g=40.0)
    assert lag == pytest.approx(0.0)
    # With the floor as cheap ahead as so far (20 g), it lags by 10 g again.
    lag = committed_lag_share(b, 500.0, committed_so_far_g=20.0, committed_rest_g=20.0)
    assert lag == pytest.approx(0.1)


def test_dirtiest_day_is_the_highest_mean_of_24_consecutive_hours():
    history = [100.0] * 30 + [300.0] * 12 + [100.0] * 20
    forecast = ((0.0, 999.0), (3600.0, 300.0), (7200.0, 300.0))  # the hour now is left out
    signal = CarbonSignal(ci_g_per_kwh=100.0, forecast=forecast)
    # the window over the 12 hours at 300 in the history: (12 x 300 + 12 x 100) / 24
    assert dirtiest_day_ci(signal, now=0.0, history=history) == pytest.approx(200.0)
    # the last 20 hours of history and the 2 forecast hours: one mean of 22
    assert dirtiest_day_ci(signal, now=0.0, history=history[-20:]) == pytest.approx(
        (20 * 100 + 2 * 300) / 22
    )


def test_upper_co2_prices_the_hours_past_the_forecast_at_the_tail_given():
    curve = IntensityCurve(now=0.0, ci_now=100.0, points=((3600.0, 300.0),), tail_ci=200.0)
    # 1 kW: 1 h at 100, 1 h at 300, then 1 h at 400 instead of the mean's 200
    assert curve.co2_g_upper(1000.0, 3 * 3600.0, 400.0) == pytest.approx(100 + 300 + 400)
    assert curve.co2_g(1000.0, 3 * 3600.0) == pytest.approx(100 + 300 + 200)
    assert curve.co2_g_upper(1000.0, 1800.0, 400.0) == pytest.approx(50.0)


def test_the_hedged_tail_narrows_the_dirty_margin_with_the_span_past_the_forecast():
    curve = IntensityCurve(now=0.0, ci_now=100.0, points=((3600.0, 300.0),), tail_ci=200.0)
    day = 86_400.0
    # up to one window past the 2 h forecast: the dirty level itself, as co2_g_upper
    for beyond in (1800.0, day):
        assert curve.co2_g_hedged(1000.0, 7200.0 + beyond, 400.0, day) == pytest.approx(
            curve.co2_g_upper(1000.0, 7200.0 + beyond, 400.0)
        )
    # 16 windows: the mean plus a quarter of the dirty margin, 200 + 200 / 4 = 250
    assert curve.co2_g_hedged(1000.0, 7200.0 + 16 * day, 400.0, day) == pytest.approx(
        100 + 300 + 250 * 16 * 24
    )
    # a dirty level under the mean adds nothing; inside the forecast nothing changes
    assert curve.co2_g_hedged(1000.0, 7200.0 + 16 * day, 150.0, day) == pytest.approx(
        curve.co2_g(1000.0, 7200.0 + 16 * day)
    )
    assert curve.co2_g_hedged(1000.0, 1800.0, 400.0, day) == pytest.approx(50.0)


def test_the_tail_with_the_forecast_counts_the_forecast_hours_after_now():
    signal = CarbonSignal(ci_g_per_kwh=100.0, forecast=((0.0, 100.0), (3600.0, 400.0)))
    assert intensity_curve(signal, now=0.0, history=[100.0]).tail_ci == 100.0
    curve = intensity_curve(signal, now=0.0, history=[100.0], with_forecast=True)
    assert curve.tail_ci == pytest.approx(250.0)


def test_the_dirtiest_window_can_be_an_hour():
    history = [100.0] * 30 + [300.0] * 12 + [100.0] * 20
    signal = CarbonSignal(ci_g_per_kwh=100.0, forecast=((3600.0, 400.0),))
    assert dirtiest_day_ci(signal, now=0.0, history=history, hours=1) == 400.0


def test_the_drift_is_the_slope_of_the_past_days_means_from_its_level_today():
    # ten past days at 24 hours each, their means rising 2 g/kWh a day; today half seen
    days = [(d, 24 * (100.0 + 2 * d), 24) for d in range(10)] + [(10, 12 * 500.0, 12)]
    level, rate, span = intensity_drift(days, today=10, min_days=7)
    assert rate * 86_400.0 == pytest.approx(2.0)  # today's partial day left out
    assert level == pytest.approx(120.0)  # the line's value today, day 10
    assert span == pytest.approx(10 * 86_400.0)


def test_no_drift_from_too_few_days_a_falling_grid_or_days_mostly_unseen():
    rising = [(d, 24 * (100.0 + 2 * d), 24) for d in range(6)]
    assert intensity_drift(rising, today=6, min_days=7) == (0.0, 0.0, 0.0)
    falling = [(d, 24 * (100.0 - 2 * d), 24) for d in range(10)]
    assert intensity_drift(falling, today=10, min_days=7) == (0.0, 0.0, 0.0)
    sparse = [(d, 6 * (100.0 + 2 * d), 6) for d in range(10)]  # 6 hours of 24 seen
    assert intensity_drift(sparse, today=10, min_days=7) == (0.0, 0.0, 0.0)


def test_a_drifting_tail_rises_from_now_for_its_span_then_holds():
    # 1 h forecast at 100, then the tail at 200 rising 10 g/kWh an hour for 3 h from now
    curve = IntensityCurve(
        now=0.0, ci_now=100.0, points=(), tail_ci=200.0, drift=(10.0 / 3600.0, 3 * 3600.0)
    )
    assert curve.at(1800.0) == 100.0  # the forecast is not moved
    assert curve.at(2 * 3600.0) == pytest.approx(220.0)
    assert curve.at(10 * 3600.0) == pytest.approx(230.0)
    flat = IntensityCurve(now=0.0, ci_now=100.0, points=(), tail_ci=200.0)
    # past the forecast (1 h to 5 h from now): the ramp from 10 to 30, then 30 held
    extra = (10 + 30) / 2 * 2 * 3600.0 + 30 * 2 * 3600.0
    assert curve.integral(5 * 3600.0) == pytest.approx(flat.integral(5 * 3600.0) + extra)
    assert curve.integral(3600.0) == pytest.approx(flat.integral(3600.0))


def test_a_drift_its_days_scatter_explains_is_not_taken():
    # 14 days at 100 g/kWh but for one dirty day at 200 near their end: an upward slope
    # (about 2.0 g/kWh a day) about 1.1 times its standard error
    means = [100.0] * 14
    means[11] = 200.0
    days = [(d, 24 * m, 24) for d, m in enumerate(means)]
    level, rate, _ = intensity_drift(days, today=14, min_days=7, min_t=0.0)
    assert rate * 86_400.0 == pytest.approx(1.978, abs=1e-3)
    assert intensity_drift(days, today=14, min_days=7, min_t=3.0) == (0.0, 0.0, 0.0)
    # a steady rise with a little scatter is taken
    steady = [(d, 24 * (100.0 + 5 * d + (3 if d % 2 else -3)), 24) for d in range(14)]
    assert intensity_drift(steady, today=14, min_days=7, min_t=3.0)[1] > 0.0


def test_an_upper_quantile_is_the_value_that_share_of_the_hours_lies_below():
    hours = [float(h) for h in range(100, 0, -1)]  # 1..100, in any order
    assert upper_quantile(hours, 0.6) == 61.0
    assert upper_quantile(hours, 0.999) == 100.0
    assert upper_quantile([5.0], 0.75) == 5.0
