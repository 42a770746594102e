"""Replay the grid's hourly intensity and score causal forecasts of a cluster budget's
idle-floor carbon to its period's end (docs/benchmarks.md, "The floor's forecast, replayed").

The idle floor draws constant watts, so its carbon from a day of the period to the
period's end is the sum of the hourly intensities over that rest. A forecaster sees the
hours from the period's start to now (what the policy collects in a run; nothing before
the start) and the next 24 hours (the simulator's forecast), and names the intensity of
every later hour. For each zone in ``data/carbon``, each start date and each period
length, at the start of every day from ``--from-day`` to the period's last, the forecast
sum is set against the real one; the table gives, per zone and forecaster, the mean
signed error, its mean absolute and worst values (both signs), over every start date and
day. No simulation::

    PYTHONPATH=. .venv/bin/python benchmarks/floor_forecast_replay.py [--lengths 92 46 23]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.core.carbon_data import carbon_file, read_electricity_maps_csv  # noqa: E402
from scheduling.core.pacing import DAY_S, upper_quantile  # noqa: E402

ZONES = ("US-CAL-CISO", "ES", "NO", "BR")

FLOOR_MODES = (
    "trend",
    "shrunk",
    "halves",
    "validated",
    "quantile",
    "window",
    "maxwin",
    "dayq",
)


def _fit(seen: Sequence[tuple[float, float]]) -> tuple[float, float, float, float]:
    """Least-squares line of ``(day, mean)``: (mean day, mean value, slope a day, the
    slope over its standard error; inf where the points lie on the line)."""
    n = len(seen)
    mx = sum(d for d, _ in seen) / n
    my = sum(m for _, m in seen) / n
    sxx = sum((d - mx) ** 2 for d, _ in seen)
    slope = sum((d - mx) * (m - my) for d, m in seen) / sxx
    resid = sum((m - my - slope * (d - mx)) ** 2 for d, m in seen)
    if n <= 2 or resid <= 0.0:
        return mx, my, slope, math.inf
    return mx, my, slope, slope / math.sqrt(resid / (n - 2) / sxx)


def floor_tail(
    days: Sequence[Sequence[float]],
    recent: Sequence[float],
    *,
    today: int,
    mode: str,
    days_back: int = 56,
    min_days: int = 7,
    min_t: float = 0.0,
    shrink_t: float = 3.0,
    quantile: float = 0.75,
) -> tuple[float, float, float]:
    """The intensity a cluster budget's idle floor is priced at past the forecast, as
    ``(level, rate, span)``: ``level`` g/kWh from the forecast's end, rising by ``rate``
    g/kWh a second from now for at most ``span`` seconds (``IntensityCurve``'s tail and
    drift). ``recent`` is the hours the default tail is the mean of (the last week and
    the forecast), ``days`` the daily sums kept as for ``intensity_drift`` (the last
    ``days_back`` count). Each mode but ``"window"`` is never below the recent mean;
    each an alternative to the flat recent mean. ``"trend"`` is the policy's
    ``floor_trend_days``, ``"quantile"`` its ``floor_quantile``; the others were run in
    the simulator from a scratch copy only (docs/benchmarks.md, "The floor's forecast,
    replayed"):

    - ``"trend"``: ``pacing.intensity_drift`` (``min_t`` its gate);
    - ``"shrunk"``: that trend's slope times ``t^2 / (t^2 + shrink_t^2)``, ``t`` the
      slope over its standard error: a slope that stands out from the days' scatter is
      taken almost whole, a noisy one mostly dropped;
    - ``"halves"``: the trend only where the slopes over the last 14, 28 and 56 days (as
      far as seen) are all upward, at the smallest of them;
    - ``"validated"``: the trend only where, fitted on the days before each of the last
      two weeks, it predicted that week's mean better than the week before it did;
    - ``"quantile"``: the ``quantile`` of ``recent``'s hours;
    - ``"dayq"``: the ``quantile`` of the daily means of the last ``days_back`` days;
    - ``"window"``: the mean of the last ``days_back`` days;
    - ``"maxwin"``: the higher of the recent mean and that.
    """
    if mode not in FLOOR_MODES:
        raise ValueError(f"mode must be one of {FLOOR_MODES}, not {mode!r}")
    mean = sum(recent) / len(recent)
    seen = [(float(d), s / n) for d, s, n in days if today - days_back <= d < today and n >= 12]
    if mode == "quantile":
        return max(mean, upper_quantile(recent, quantile)), 0.0, 0.0
    if mode == "dayq":
        if not seen:
            return mean, 0.0, 0.0
        return max(mean, upper_quantile([m for _, m in seen], quantile)), 0.0, 0.0
    if mode in ("window", "maxwin"):
        if not seen:
            return mean, 0.0, 0.0
        window = sum(m for _, m in seen) / len(seen)
        return (window if mode == "window" else max(mean, window)), 0.0, 0.0
    if len(seen) < max(min_days, 3):
        return mean, 0.0, 0.0
    mx, my, slope, t = _fit(seen)
    if not slope > 0.0:
        return mean, 0.0, 0.0
    if mode == "trend" and t < min_t:
        return mean, 0.0, 0.0
    if mode == "shrunk":
        slope *= t * t / (t * t + shrink_t * shrink_t) if math.isfinite(t) else 1.0
    if mode == "halves":
        for back in (14, 28):
            part = [x for x in seen if x[0] >= today - back]
            if len(part) >= min_days and len(part) < len(seen):
                slope = min(slope, _fit(part)[2])
        if not slope > 0.0:
            return mean, 0.0, 0.0
    if mode == "validated":
        for week in (1, 2):
            cut = today - 7 * week
            before = [x for x in seen if x[0] < cut]
            after = [m for d, m in seen if cut <= d < cut + 7]
            if len(before) < max(min_days, 3) or not after:
                return mean, 0.0, 0.0
            bx, by, bs, _ = _fit(before)
            last_week = [m for d, m in before if d >= cut - 7]
            flat = sum(last_week) / len(last_week)
            real = sum(after) / len(after)
            line = by + bs * (cut + (len(after) - 1) / 2.0 - bx)
            if not abs(line - real) < abs(flat - real):
                return mean, 0.0, 0.0
    span_days = seen[-1][0] - seen[0][0] + 1.0
    level = my + slope * (today - mx)
    return max(mean, level), slope / DAY_S, span_days * DAY_S


# A forecaster: (hours seen since the period's start, the next 24 h, hours past them)
# -> the summed intensity of the hours past the forecast.
Forecaster = Callable[[Sequence[float], Sequence[float], int], float]


def _days(seen: Sequence[float]) -> list[tuple[float, float, float]]:
    """The seen hours as ``(day, sum, n)``, as the policy keeps them."""
    out = []
    for i in range(0, len(seen), 24):
        part = seen[i : i + 24]
        out.append((float(i // 24), float(sum(part)), float(len(part))))
    return out


def _mean_tail(seen: Sequence[float], fc: Sequence[float], rest_h: int) -> float:
    sample = list(seen[-168:]) + list(fc)
    return rest_h * sum(sample) / len(sample)


def _with(**params) -> Forecaster:
    def fn(seen, fc, rest_h):
        today = len(seen) // 24
        level, rate_s, span_s = floor_tail(
            _days(seen[: today * 24]), list(seen[-168:]) + list(fc), today=today, **params
        )
        rate_h, span_h = rate_s * 3600.0, span_s / 3600.0
        # the tail from the end of the forecast (hour 25 on), the drift counted from now
        if not rate_h:
            return level * rest_h
        cap = int(min(max(span_h, 24), 24 + rest_h))  # hours 25..cap ramp, the rest hold
        ramp = (cap * (cap + 1) - 24 * 25) / 2.0
        return level * rest_h + rate_h * (ramp + span_h * (24 + rest_h - cap))

    return fn


def bias_ratio(
    seen: Sequence[float],
    *,
    lead_h: int = 25,
    half_life_h: float | None = None,
    prior_h: float = 168.0,
    upward: bool = False,
) -> float:
    """The forecaster's own error so far in the period, as the factor its tail is scaled
    by (a scratch option ``floor_bias`` of the policy, not merged; docs/benchmarks.md,
    "The floor's forecast corrected by its own error"). ``seen`` is the period's hours
    so far. The default tail made at
    hour ``t`` is the mean of the last week's hours and the next 24 (``_mean_tail``);
    every hour ``h`` that has passed was forecast, at a lead of at least ``lead_h``, by
    the tails made at hours ``0..h - lead_h``: their mean is what the forecaster said
    of ``h``. The ratio of the realized hours' sum to those forecasts' (the hours
    weighted by ``0.5 ** (age / half_life_h)``, or alike with None) is shrunk towards 1
    by the evidence, ``n / (n + prior_h)`` with ``n`` the weighted hours; ``upward``:
    never below 1."""
    m = len(seen)
    if m <= lead_h + 24:
        return 1.0
    cum = [0.0]
    for x in seen:
        cum.append(cum[-1] + x)
    # the tail made at hour t (of those whose next 24 h are all seen)
    tails = []
    for t in range(m - 24 + 1):
        lo = max(0, t - 168)
        tails.append((cum[t + 24] - cum[lo]) / (t + 24 - lo))
    tcum = [0.0]
    for x in tails:
        tcum.append(tcum[-1] + x)
    num = den = n = 0.0
    decay = 0.5 ** (1.0 / half_life_h) if half_life_h else 1.0
    for h in range(lead_h, m):
        k = h - lead_h + 1  # forecasts made at hours 0..h - lead_h
        k = min(k, len(tails))
        fbar = tcum[k] / k
        num = num * decay + seen[h]
        den = den * decay + fbar
        n = n * decay + 1.0
    if not den > 0.0:
        return 1.0
    r = 1.0 + (num / den - 1.0) * n / (n + prior_h)
    return max(1.0, r) if upward else r


def _bias(**params) -> Forecaster:
    def fn(seen, fc, rest_h):
        return bias_ratio(seen, **params) * _mean_tail(seen, fc, rest_h)

    return fn


FORECASTERS: dict[str, Forecaster] = {
    "mean of the last week (default)": _mean_tail,
    "trend 56 d (floor_trend_days=56)": _with(mode="trend", days_back=56),
    "trend 56 d, t >= 3": _with(mode="trend", days_back=56, min_t=3.0),
    "trend 56 d, shrunk t^2/(t^2+9)": _with(mode="shrunk", days_back=56, shrink_t=3.0),
    "trend 56 d, shrunk t^2/(t^2+25)": _with(mode="shrunk", days_back=56, shrink_t=5.0),
    "trend 56 d, halves agree": _with(mode="halves", days_back=56),
    "trend 56 d, validated": _with(mode="validated", days_back=56),
    "q0.6 of the last week": _with(mode="quantile", quantile=0.6),
    "q0.75 of the last week": _with(mode="quantile", quantile=0.75),
    "q0.7 of the daily means, 56 d": _with(mode="dayq", quantile=0.7),
    "q0.9 of the daily means, 56 d": _with(mode="dayq", quantile=0.9),
    "q0.7 of the last week": _with(mode="quantile", quantile=0.7),
    "mean of the last 28 d": _with(mode="window", days_back=28),
    "max(week, 28 d)": _with(mode="maxwin", days_back=28),
    "bias, all hours, prior 168 h": _bias(prior_h=168.0),
    "bias, all hours, prior 336 h": _bias(prior_h=336.0),
    "bias, all hours, prior 0": _bias(prior_h=0.0),
    "bias, half-life 7 d, prior 72 h": _bias(half_life_h=168.0, prior_h=72.0),
    "bias, half-life 14 d, prior 168 h": _bias(half_life_h=336.0, prior_h=168.0),
    "bias, lead >= 7 d, prior 168 h": _bias(lead_h=168, prior_h=168.0),
    "bias, all hours, prior 168 h, upward": _bias(prior_h=168.0, upward=True),
    "bias, lead >= 7 d, prior 168 h, upward": _bias(lead_h=168, prior_h=168.0, upward=True),
}


def _pct(e: list[float], absolute: bool) -> str:
    if not e:
        return "-"
    return f"{100 * sum(abs(x) if absolute else x for x in e) / len(e):+.1f}%"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--zones", nargs="+", default=list(ZONES))
    p.add_argument("--lengths", nargs="+", type=int, default=[92, 46, 23])
    p.add_argument("--step-days", type=int, default=14, help="between start dates")
    p.add_argument("--from-day", type=int, default=7, help="first day a forecast is scored")
    p.add_argument("--starts", nargs="*", default=None, help="YYYY-MM-DD (default: every step)")
    p.add_argument("--only", nargs="*", default=None, help="forecasters (substring)")
    args = p.parse_args(argv)
    names = [n for n in FORECASTERS if not args.only or any(o in n for o in args.only)]
    out = sys.stdout.write
    for length in args.lengths:
        for zone in args.zones:
            points = read_electricity_maps_csv(carbon_file(ROOT / "data", zone), zone=zone)
            series = [pt.ci_g_per_kwh for pt in points]
            t0 = points[0].start
            if args.starts:
                starts = [datetime.fromisoformat(s).replace(tzinfo=UTC) for s in args.starts]
            else:
                starts = []
                s = datetime(2022, 1, 1, tzinfo=UTC)
                while s + timedelta(days=length + 1) <= points[-1].start:
                    starts.append(s)
                    s += timedelta(days=args.step_days)
            errs: dict[str, list[float]] = {n: [] for n in names}
            early: dict[str, list[float]] = {n: [] for n in names}  # the first third
            for start in starts:
                h0 = int((start - t0).total_seconds() // 3600)
                end = h0 + length * 24
                for d in range(args.from_day, length - 1):
                    now = h0 + d * 24
                    seen, fc = series[h0:now], series[now : now + 24]
                    rest_h = end - now - 24
                    real = sum(series[now + 24 : end])
                    known = sum(fc)
                    for n in names:
                        guess = FORECASTERS[n](seen, fc, rest_h)
                        errs[n].append((known + guess) / (known + real) - 1.0)
                        if d < length // 3:
                            early[n].append(errs[n][-1])
            out(f"\n{zone}, {length}-day periods, {len(starts)} starts, from day {args.from_day}\n")
            out(
                f"{'forecaster':<36} {'bias':>7} {'|err|':>7} {'rms':>7} {'min':>7} {'max':>7} "
                f"{'bias1/3':>8} {'|err|1/3':>8}\n"
            )
            for n in names:
                e = errs[n]
                out(
                    f"{n:<36} {100 * sum(e) / len(e):+6.1f}% "
                    f"{100 * sum(map(abs, e)) / len(e):6.1f}% "
                    f"{100 * math.sqrt(sum(x * x for x in e) / len(e)):6.1f}% "
                    f"{100 * min(e):+6.1f}% {100 * max(e):+6.1f}% "
                    f"{_pct(early[n], False):>8} {_pct(early[n], True):>8}\n"
                )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
