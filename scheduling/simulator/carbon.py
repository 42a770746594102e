"""Hourly grid carbon intensity in simulated time: exact integration.

The files are read by ``scheduling/core/carbon_data.py`` (the one reader, shared with the
live service; its names are re-exported here for the simulator's callers). The simulator
wraps the series in :class:`HourlyIntensity`, which maps simulated seconds to the hour of
the year and integrates a constant power over any interval exactly, splitting at hour
boundaries through a cumulative integral of the intensity.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from scheduling.core.carbon_data import (  # noqa: F401 - re-exported for the simulator's callers
    CI_COLUMNS,
    DATETIME_COLUMN,
    ESTIMATED_COLUMN,
    CarbonDataError,
    HourlyPoint,
    carbon_file,
    read_electricity_maps_csv,
)
from scheduling.core.types import J_PER_KWH

HOUR_S = 3600.0


class HourlyIntensity:
    """An hourly intensity series anchored so that simulated time 0 is ``start``.

    ``start`` must be an aware datetime on the series' hour grid (whole hours). Times
    past the end of the series wrap around to its beginning (a simulation longer than
    the year replays it) -- stated here because a silent clamp would distort carbon.
    """

    def __init__(self, points: Sequence[HourlyPoint], *, start: datetime) -> None:
        if start.tzinfo is None:
            raise CarbonDataError("the carbon start datetime must be timezone-aware")
        if not points:
            raise CarbonDataError("no carbon intensity points")
        offset_s = (start - points[0].start).total_seconds()
        n = len(points)
        if offset_s < 0 or offset_s >= n * HOUR_S or offset_s % HOUR_S:
            raise CarbonDataError(
                f"start {start.isoformat()} is not a whole hour within "
                f"{points[0].start.isoformat()}..{points[-1].start.isoformat()}"
            )
        self.start = start
        self.epoch_s = start.timestamp()
        first = int(offset_s // HOUR_S)
        # Rotate so that index 0 is the hour of simulated time 0.
        self._ci = [p.ci_g_per_kwh for p in points[first:]] + [
            p.ci_g_per_kwh for p in points[:first]
        ]
        self._estimated = [p.estimated for p in points[first:]] + [
            p.estimated for p in points[:first]
        ]
        self._n = n
        # _cum[k] = integral of ci over hours 0..k-1, in (g/kWh)*s.
        cum = [0.0]
        for ci in self._ci:
            cum.append(cum[-1] + ci * HOUR_S)
        self._cum = cum

    def ci_at(self, t_s: float) -> float:
        return self._ci[int(t_s // HOUR_S) % self._n]

    def estimated_at(self, t_s: float) -> bool:
        return self._estimated[int(t_s // HOUR_S) % self._n]

    def _integral(self, t_s: float) -> float:
        """Integral of ci from simulated 0 to t_s, in (g/kWh) x s; wraps past the year."""
        year_s = self._n * HOUR_S
        laps, rest = divmod(t_s, year_s)
        hour = int(rest // HOUR_S)
        return laps * self._cum[-1] + self._cum[hour] + self._ci[hour] * (rest - hour * HOUR_S)

    def co2_g(self, power_w: float, t0_s: float, t1_s: float) -> float:
        """Grams CO2e of a constant ``power_w`` drawn over [t0_s, t1_s), exact per hour."""
        if t1_s <= t0_s or power_w == 0.0:
            return 0.0
        return power_w * (self._integral(t1_s) - self._integral(t0_s)) / J_PER_KWH

    def forecast(self, t_s: float, hours: int) -> tuple[tuple[float, float], ...]:
        """(start_s, ci) for the hour containing ``t_s`` and the ``hours - 1`` after it."""
        hour = int(t_s // HOUR_S)
        return tuple(((hour + k) * HOUR_S, self._ci[(hour + k) % self._n]) for k in range(hours))


class ConstantIntensity(HourlyIntensity):
    """A flat intensity (e.g. zero when no zone is given); same interface."""

    def __init__(self, ci_g_per_kwh: float = 0.0, *, start: datetime | None = None) -> None:
        start = start or datetime(2022, 1, 1, tzinfo=UTC)
        point = HourlyPoint(start=start, ci_g_per_kwh=ci_g_per_kwh, estimated=False)
        super().__init__([point], start=start)


def hour_index(points: Sequence[HourlyPoint], when: datetime) -> int:
    """Index of the point whose hour contains ``when`` (for callers outside the simulator)."""
    starts = [p.start for p in points]
    i = bisect_right(starts, when) - 1
    if i < 0 or when >= points[-1].start + timedelta(hours=1):
        raise CarbonDataError(f"{when.isoformat()} is outside the carbon series")
    return i
