"""Pacing a period's budget into per-round allowances, and the carbon intensity ahead.

Energy (reconstructed from PowerFlow's abstract): what remains of the budget is spread
evenly over what remains of the period, so a round may spend
``remaining_j * round_s / (period_end - now)``. Underspending in one round raises later
allowances; overspending (the plan is a prediction) lowers them.

Carbon (reconstructed from GreenFlow's abstract): the remaining carbon is spread over
the remaining period in proportion to a spending profile ``ci(t) ** (1 - clean_bias)``:

- ``clean_bias = 0``: carbon follows the intensity, i.e. energy is spent evenly;
- ``clean_bias = 1``: carbon is spent evenly, so energy is spent in proportion to
  ``1 / ci``: twice the energy in an hour that is twice as clean;
- above 1, spending shifts even harder towards clean hours.

The intensity ahead comes from the forecast where it reaches, and past its end from
the recent distribution (the mean of the profile over the hours seen lately, kept in
the policy's state), or, with neither, from the intensity now.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from scheduling.core.types import J_PER_KWH, Budget, CarbonSignal

HOUR_S = 3600.0


def paced_energy_allowance_j(
    budget: Budget,
    *,
    now: float,
    round_s: float,
    spend_ahead: float = 1.0,
    floor_w: float = 0.0,
    catch_up_s: float | None = None,
) -> float | None:
    """This round's share of the budget's remaining energy; None without an energy limit.

    ``spend_ahead`` > 1 front-loads: each round may spend that many even shares of what
    remains, so if every round spends its allowance the budget left at a fraction x of
    the period is ``(1 - x) ** spend_ahead`` of the whole (1: a straight line). Work
    arrives early in a period and the tail is often idle, so an even pace leaves budget
    unspent at the end; the pace corrects itself either way because each round sees
    only what remains.

    ``floor_w`` is power the budget pays whatever the plan (a cluster budget's powered
    idle GPUs): its energy up to the period's end is committed, so only the rest is
    paced, and every round's allowance includes its own floor.

    ``catch_up_s`` (None: off) adds back, over that many seconds, what spending lags
    behind a straight line from nothing to the limit (see ``_catch_up``).
    """
    remaining = budget.energy_remaining_j
    if remaining is None:
        return None
    left_s = max(budget.period_end_s - now, round_s)
    free_j = max(remaining - floor_w * left_s, 0.0)
    paced = floor_w * round_s + free_j * min(1.0, spend_ahead * round_s / left_s)
    lag = _lag(budget.energy_limit_j, budget.energy_used_j, budget, now)
    return min(remaining, paced + _catch_up(lag, round_s, catch_up_s))


def floor_over_limit(
    budget: Budget,
    *,
    now: float,
    floor_w: float,
    floor_curve: IntensityCurve | None = None,
    floor_so_far_g: float | None = None,
) -> bool:
    """Whether a committed draw (``floor_w``, a cluster budget's powered idle GPUs) alone
    takes ``budget`` over one of its limits in its period: what it drew before ``now``
    (at most what the budget has spent, which includes it; carbon: ``floor_so_far_g``,
    else none) and what it will draw to the period's end (carbon on ``floor_curve``).
    Such a period no plan can keep: pacing it with the floor set aside gives its jobs
    nothing for the whole period, while the floor spends the limit anyway."""
    if floor_w <= 0.0:
        return False
    left_s = max(budget.period_end_s - now, 0.0)
    if budget.energy_limit_j is not None:
        past_j = min(floor_w * max(now - budget.period_start_s, 0.0), budget.energy_used_j)
        if past_j + floor_w * left_s > budget.energy_limit_j * (1.0 + 1e-9):
            return True
    if budget.co2_limit_g is not None and floor_curve is not None:
        past_g = min(floor_so_far_g or 0.0, budget.co2_used_g)
        if past_g + floor_curve.co2_g(floor_w, left_s) > budget.co2_limit_g * (1.0 + 1e-9):
            return True
    return False


def lag_share(budget: Budget, now: float) -> float:
    """How far the budget's spending lags a straight line from nothing to its limit, as
    a share of the limit (the larger of energy and carbon; negative when ahead)."""
    shares = []
    if budget.energy_limit_j:
        shares.append(
            _lag(budget.energy_limit_j, budget.energy_used_j, budget, now) / budget.energy_limit_j
        )
    if budget.co2_limit_g:
        shares.append(_lag(budget.co2_limit_g, budget.co2_used_g, budget, now) / budget.co2_limit_g)
    return min(shares) if shares else 0.0


def committed_lag_share(
    budget: Budget, now: float, *, committed_so_far_g: float, committed_rest_g: float
) -> float:
    """``lag_share`` of a carbon budget that pays a committed draw (a cluster budget's
    powered idle GPUs) whose carbon follows the grid's intensity, not the clock: its
    line is the committed carbon so far plus a straight line of the rest of the limit
    (the limit less the committed carbon so far and ahead, ``committed_rest_g``, as the
    intensity curve predicts it). Against a straight line of the whole limit, a period
    whose intensity rises would look behind (the idle draw was cheap early), and
    releasing its reserve then spends what the dirtier end will need."""
    limit = budget.co2_limit_g
    span = budget.period_end_s - budget.period_start_s
    if not limit or span <= 0:
        return lag_share(budget, now)
    x = min(max((now - budget.period_start_s) / span, 0.0), 1.0)
    work_limit = limit - committed_so_far_g - committed_rest_g
    line = committed_so_far_g + work_limit * x
    return (line - budget.co2_used_g) / limit


def _lag(limit: float | None, used: float, budget: Budget, now: float) -> float:
    """How far spending is behind a straight line from nothing to the limit."""
    if limit is None:
        return 0.0
    span = budget.period_end_s - budget.period_start_s
    if span <= 0:
        return 0.0
    return limit * min(max((now - budget.period_start_s) / span, 0.0), 1.0) - used


def _catch_up(lag: float, round_s: float, catch_up_s: float | None) -> float:
    """Extra allowance that re-spends savings within ``catch_up_s``: an even pace would
    spread what quiet hours saved over the whole rest of the period, and a budget
    underused early is then mostly left over at its end. Never negative (an overspent
    budget is already slowed by the even pace of what remains) and never ahead of the
    straight line, so no front-loading can starve the end of the period."""
    if catch_up_s is None or lag <= 0.0:
        return 0.0
    return lag * min(1.0, round_s / catch_up_s)


class IntensityCurve:
    """Piecewise-constant grid intensity from ``now`` on, with fast integrals.

    ``points`` are (start_s, ci_g_per_kwh), ascending; before the first point the
    intensity is the one now; after the forecast ends, ``tail_ci`` holds (the mean of
    the recent distribution). Integrals are exact over the steps.
    """

    def __init__(
        self,
        *,
        now: float,
        ci_now: float,
        points: Sequence[tuple[float, float]],
        tail_ci: float,
        drift: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        starts = [now]
        values = [ci_now]
        for start_s, ci in points:
            if start_s > now:  # the signal's intensity now wins over older steps
                starts.append(start_s)
                values.append(ci)
        # The last known step (the one now, without a forecast) lasts one hour; then
        # the tail of the recent distribution holds.
        horizon = starts[-1] + HOUR_S
        starts.append(horizon)
        values.append(tail_ci)
        self.now = now
        self.starts = starts
        self.values = values
        self.tail_ci = tail_ci
        cum = [0.0]
        for i in range(len(starts) - 1):
            cum.append(cum[-1] + values[i] * (starts[i + 1] - starts[i]))
        self.cum = cum  # integral of ci from now to starts[i], in g/kWh * s
        # Past the forecast the tail may drift (``intensity_drift``): by ``rate`` g/kWh a
        # second from now, for at most ``span`` seconds (then it holds).
        self.drift_rate, self.drift_span_s = drift

    def at(self, t: float) -> float:
        i = bisect.bisect_right(self.starts, t) - 1
        value = self.values[max(i, 0)]
        if self.drift_rate and t >= self.starts[-1]:
            value += self.drift_rate * min(t - self.now, self.drift_span_s)
        return value

    def integral(self, duration_s: float) -> float:
        """Integral of ci over [now, now + duration_s], in (g/kWh) * s."""
        t = self.now + duration_s
        i = bisect.bisect_right(self.starts, t) - 1
        i = max(i, 0)
        total = self.cum[i] + self.values[i] * (t - self.starts[i])
        if self.drift_rate and t > self.starts[-1]:
            # the drift's integral over the tail's part of [now, t]: of min(u, span) du,
            # u the time from now, from the forecast's end to t
            a, b, w = self.starts[-1] - self.now, duration_s, self.drift_span_s
            ramp = (min(b, w) ** 2 - min(a, w) ** 2) / 2.0 + w * (max(b, w) - max(a, w))
            total += self.drift_rate * ramp
        return total

    def co2_g(self, power_w: float, duration_s: float) -> float:
        """Carbon of drawing ``power_w`` from now for ``duration_s``."""
        return power_w * self.integral(duration_s) / J_PER_KWH

    def co2_g_upper(self, power_w: float, duration_s: float, tail_ci: float) -> float:
        """``co2_g`` with the hours past the forecast at ``tail_ci`` instead of the mean."""
        known_s = min(duration_s, self.starts[-1] - self.now)
        beyond_s = max(duration_s - known_s, 0.0)
        return power_w * (self.integral(known_s) + tail_ci * beyond_s) / J_PER_KWH

    def co2_g_hedged(
        self, power_w: float, duration_s: float, dirty_ci: float, window_s: float
    ) -> float:
        """``co2_g`` with the hours past the forecast priced above the mean by a margin
        that narrows with their span: ``dirty_ci`` (a dirty recent window of
        ``window_s``, e.g. the dirtiest day) for up to one window, and for a span of N
        windows the mean plus ``(dirty_ci - mean) / sqrt(N)``. A mean over many windows
        strays from the long-run mean by about 1/sqrt(N) of what one window does; the
        dirtiest window held for a whole period reserves far more than the draw will
        cost, and where a cluster budget is mostly its idle floor that reserve left no
        allowance for any job for months (docs/benchmarks.md, "The idle floor's
        reserve")."""
        known_s = min(duration_s, self.starts[-1] - self.now)
        beyond_s = max(duration_s - known_s, 0.0)
        if beyond_s <= 0.0:
            return power_w * self.integral(known_s) / J_PER_KWH
        margin = max(dirty_ci - self.tail_ci, 0.0) * min(1.0, math.sqrt(window_s / beyond_s))
        return power_w * (self.integral(known_s) + (self.tail_ci + margin) * beyond_s) / J_PER_KWH

    def next_cleaner(self, below_ci: float, *, within_s: float) -> float | None:
        """Start of the first forecast step at or below ``below_ci`` within ``within_s``."""
        for start, ci in zip(self.starts[1:-1], self.values[1:-1], strict=True):
            if start - self.now > within_s:
                break
            if ci <= below_ci:
                return start
        return None


def dirtiest_day_ci(
    carbon: CarbonSignal, *, now: float, history: Sequence[float], hours: int = 24
) -> float:
    """The highest mean of ``hours`` consecutive hourly intensities (default a day) in
    ``history`` (the hours seen lately, oldest first) followed by the forecast's hours
    after now (their mean when there are fewer): what a committed draw past the forecast
    is reserved at, so that a period whose coming days are as dirty as its dirtiest
    recent day still pays it."""
    seq = [float(c) for c in history] + [ci for start, ci in carbon.forecast if start > now]
    if not seq:
        return carbon.ci_g_per_kwh
    return dirtiest_mean(seq, hours)


def dirtiest_mean(seq: Sequence[float], hours: int) -> float:
    """The highest mean of ``hours`` consecutive values of ``seq`` (non-empty; the mean of
    all of them where there are fewer)."""
    hours = max(int(hours), 1)
    if len(seq) <= hours:
        return sum(seq) / len(seq)
    window = sum(seq[:hours])
    best = window
    for i in range(hours, len(seq)):
        window += seq[i] - seq[i - hours]
        best = max(best, window)
    return best / hours


def intensity_curve(
    carbon: CarbonSignal, *, now: float, history: Sequence[float], with_forecast: bool = False
) -> IntensityCurve:
    """The curve from the signal's forecast; past its end the mean of ``history`` (the
    hours seen lately), with ``with_forecast`` also of the forecast's hours after now: a
    history of a few hours (a service just started, a simulation's first day) holds
    only one part of the daily cycle, and its mean would price every later day by it."""
    if history and with_forecast:
        ahead = [ci for start, ci in carbon.forecast if start > now]
        tail = (sum(history) + sum(ahead)) / (len(history) + len(ahead))
    elif history:
        tail = sum(history) / len(history)
    elif carbon.forecast:
        tail = sum(ci for _, ci in carbon.forecast) / len(carbon.forecast)
    else:
        tail = carbon.ci_g_per_kwh
    return IntensityCurve(now=now, ci_now=carbon.ci_g_per_kwh, points=carbon.forecast, tail_ci=tail)


DAY_S = 24 * HOUR_S


def intensity_drift(
    days: Sequence[Sequence[float]], *, today: int, min_days: int = 7, min_t: float = 0.0
) -> tuple[float, float, float]:
    """The upward drift of the grid's daily mean intensity: (its level today in g/kWh,
    its rate in g/kWh a second, its span in seconds), the rate and span as
    ``IntensityCurve``'s ``drift``. ``days`` are ``(day, sum of the hourly intensities
    seen that day, how many)``, oldest first; the days before ``today`` with at least
    half their hours seen count (today is not over). The rate is the least-squares slope
    of their means against the day, the level that line's value today, the span as long
    as they span (no further ahead than they look back): (0, 0, 0) with fewer than
    ``min_days`` such days, or a slope that is not upward or less than ``min_t`` times
    its standard error (the scatter of the days about the line explains it as well:
    one dirty week among clean ones is not a season).

    A cluster budget's idle floor is drawn to its period's end whatever the plan, and
    past the 24 h forecast its carbon was priced at the mean of the last week: where the
    grid grows dirtier over a period of months (California from June to September, 133
    to 220 g/kWh by week), that underpriced the floor (45% of the limit against the 60%
    the grid made it at a fifth of the period), so the free remainder the price shares out
    looked half again as large as it was, the work bought cheap upgrades early, and the
    dirty, busy weeks found the budget short (docs/benchmarks.md, "A drifting grid's
    floor"). Only an upward drift counts: what the floor is underpriced by can overspend
    the period at its end, what it is overpriced by is released as the days come in."""
    seen = [(float(d), s / n) for d, s, n in days if d < today and n >= 12]
    if len(seen) < max(min_days, 2):
        return 0.0, 0.0, 0.0
    mx = sum(d for d, _ in seen) / len(seen)
    my = sum(m for _, m in seen) / len(seen)
    sxx = sum((d - mx) ** 2 for d, _ in seen)
    slope = sum((d - mx) * (m - my) for d, m in seen) / sxx  # g/kWh a day
    if not slope > 0.0:
        return 0.0, 0.0, 0.0
    if min_t > 0.0:
        scatter = sum((m - my - slope * (d - mx)) ** 2 for d, m in seen) / (len(seen) - 2)
        if slope * slope * sxx < min_t * min_t * scatter:  # slope / its error < min_t
            return 0.0, 0.0, 0.0
    span_days = seen[-1][0] - seen[0][0] + 1.0
    return my + slope * (today - mx), slope / DAY_S, span_days * DAY_S


def paced_co2_allowance_g(
    budget: Budget,
    *,
    now: float,
    round_s: float,
    curve: IntensityCurve,
    history: Sequence[float],
    clean_bias: float,
    spend_ahead: float = 1.0,
    floor_w: float = 0.0,
    catch_up_s: float | None = None,
    floor_curve: IntensityCurve | None = None,
) -> float | None:
    """This round's share of the budget's remaining carbon, weighted towards clean hours
    (``spend_ahead`` and ``floor_w`` as in ``paced_energy_allowance_j``; the floor's
    carbon ahead is priced with ``floor_curve``, by default the intensity curve)."""
    remaining = budget.co2_remaining_g
    if remaining is None:
        return None
    left_s = max(budget.period_end_s - now, round_s)
    floor_now_g = floor_w * round_s * curve.at(now) / J_PER_KWH
    committed_g = (floor_curve or curve).co2_g(floor_w, left_s) if floor_w else 0.0
    free_g = max(remaining - committed_g, 0.0)
    expo = 1.0 - clean_bias
    # Weight of the round now, against the expected weight of the whole rest.
    ci_now = max(curve.at(now), 1e-9)
    weight_now = ci_now**expo * round_s
    total = 0.0
    t = now
    end = now + left_s
    forecast_end = curve.starts[-1]
    while t < end and t < forecast_end:
        i = bisect.bisect_right(curve.starts, t) - 1
        step_end = min(curve.starts[i + 1], end)
        total += max(curve.values[i], 1e-9) ** expo * (step_end - t)
        t = step_end
    if t < end:
        sample = [max(c, 1e-9) for c in history] or [max(curve.tail_ci, 1e-9)]
        mean_weight = sum(c**expo for c in sample) / len(sample)
        total += mean_weight * (end - t)
    if total <= 0.0:
        return remaining
    paced = floor_now_g + free_g * min(1.0, spend_ahead * weight_now / total)
    lag = _lag(budget.co2_limit_g, budget.co2_used_g, budget, now)
    return min(remaining, paced + _catch_up(lag, round_s, catch_up_s))


def upper_quantile(seq: Sequence[float], q: float) -> float:
    """The value a share ``q`` of ``seq`` (non-empty) lies below: its ``int(q * n)``-th
    smallest (the largest for ``q`` near 1). A cluster budget's idle floor priced past
    the forecast at an upper quantile of the last week's hours rather than at their mean
    hedges a grid that grows dirtier (``BudgetGreedy``'s ``floor_quantile``)."""
    ranked = sorted(seq)
    return ranked[min(int(q * len(ranked)), len(ranked) - 1)]
