"""Grid carbon intensity behind one interface, with a fallback that never fails.

Providers answer "what was (or is) the intensity of ``zone`` in the hour starting at
``hour``":

- :class:`StoredProvider` reads the ``CarbonIntensity`` rows that ``manage.py import_carbon``
  loaded from an Electricity Maps CSV export (the vendored ``data/carbon/`` files);
- :class:`HttpProvider` asks an Electricity-Maps-style HTTP API
  (``TELEMETRY_CARBON_HTTP_URL``, token in ``TELEMETRY_CARBON_HTTP_TOKEN``) and stores what it
  gets, so each hour is fetched once;
- :class:`StaticProvider` is the fallback: the yearly mean of the zone's vendored 2022 file,
  computed from that file (``data/carbon/em_<zone>_2022_hourly.csv``, Electricity Maps, ODbL),
  always marked *estimated*. No figure here is typed in by hand.

:func:`intensity_for_hour` tries the configured provider and falls back to the static one
when it fails or has no value; accounting and the scheduler never stop for a missing
intensity. Values are the *direct* (operational) intensity, as the simulator uses.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import requests
from django.conf import settings

from scheduling.core.carbon_data import (
    MAX_CI_G_PER_KWH,
    MIN_CI_G_PER_KWH,
    CarbonDataError,
    carbon_file,
    read_electricity_maps_csv,
)
from scheduling.core.types import CarbonSignal
from telemetry.choices import CarbonSource
from telemetry.models import CarbonIntensity

log = logging.getLogger(__name__)


class CarbonUnavailable(Exception):
    """A provider has no value for this zone and hour (or could not be reached)."""


@dataclass(frozen=True, slots=True)
class Intensity:
    ci_g_per_kwh: float
    estimated: bool
    source: str


def hour_floor(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


class CarbonProvider(Protocol):
    def intensity(self, zone: str, hour: datetime) -> Intensity: ...


class StoredProvider:
    """Imported (or previously fetched) rows in the database."""

    def intensity(self, zone: str, hour: datetime) -> Intensity:
        row = (
            CarbonIntensity.objects.filter(zone=zone, hour=hour_floor(hour))
            .values_list("ci_g_per_kwh", "estimated", "source")
            .first()
        )
        if row is None:
            raise CarbonUnavailable(f"no stored intensity for {zone} at {hour.isoformat()}")
        return Intensity(ci_g_per_kwh=row[0], estimated=row[1], source=row[2])


class HttpProvider:
    """An HTTP API in the shape of Electricity Maps' ``/carbon-intensity/past`` endpoint:
    ``GET <url>?zone=<zone>&datetime=<ISO hour>`` with an ``auth-token`` header, answering JSON
    with ``carbonIntensity`` (gCO2e/kWh) and ``isEstimated``. Answers are stored, so the
    database is asked first."""

    # After a failure the API is not asked again for this long (per process), so a dead
    # provider costs one timeout per few minutes, not one per scheduling round.
    BACKOFF_S = 300.0
    _down_until: dict[str, float] = {}

    def __init__(self, url: str, token: str, *, timeout_s: float = 5.0) -> None:
        self.url = url
        self.token = token
        self.timeout_s = timeout_s
        self.stored = StoredProvider()

    def intensity(self, zone: str, hour: datetime) -> Intensity:
        hour = hour_floor(hour)
        try:
            return self.stored.intensity(zone, hour)
        except CarbonUnavailable:
            pass
        if time.monotonic() < self._down_until.get(self.url, 0.0):
            raise CarbonUnavailable(f"{self.url} failed recently; not asked again yet")
        try:
            response = requests.get(
                self.url,
                params={"zone": zone, "datetime": hour.isoformat()},
                headers={"auth-token": self.token} if self.token else {},
                timeout=self.timeout_s,
            )
            response.raise_for_status()
            data = response.json()
            ci = float(data["carbonIntensity"])
            estimated = bool(data.get("isEstimated", False))
        except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
            self._down_until[self.url] = time.monotonic() + self.BACKOFF_S
            raise CarbonUnavailable(f"{self.url}: {exc.__class__.__name__}: {exc}") from exc
        # json.loads takes Infinity and NaN: neither is an intensity (nor is a negative one).
        if not (math.isfinite(ci) and MIN_CI_G_PER_KWH <= ci <= MAX_CI_G_PER_KWH):
            raise CarbonUnavailable(
                f"{self.url}: intensity {ci:g} is not a number between {MIN_CI_G_PER_KWH:g} and "
                f"{MAX_CI_G_PER_KWH:g} gCO2eq/kWh"
            )
        CarbonIntensity.objects.update_or_create(
            zone=zone,
            hour=hour,
            defaults={"ci_g_per_kwh": ci, "estimated": estimated, "source": CarbonSource.HTTP},
        )
        return Intensity(ci_g_per_kwh=ci, estimated=estimated, source=CarbonSource.HTTP)


@functools.cache
def static_mean_g_per_kwh(zone: str) -> float:
    """Yearly mean direct intensity of the zone's vendored file; CarbonUnavailable if none."""
    path = carbon_file(Path(settings.BASE_DIR) / "data", zone)
    try:
        points = read_electricity_maps_csv(path, zone=zone)
    except CarbonDataError as exc:
        raise CarbonUnavailable(f"no static figure for zone {zone}: {exc}") from exc
    return sum(p.ci_g_per_kwh for p in points) / len(points)


class StaticProvider:
    def intensity(self, zone: str, hour: datetime) -> Intensity:
        return Intensity(
            ci_g_per_kwh=static_mean_g_per_kwh(zone), estimated=True, source=CarbonSource.STATIC
        )


def configured_provider() -> CarbonProvider:
    if settings.TELEMETRY_CARBON_PROVIDER == "http":
        return HttpProvider(
            settings.TELEMETRY_CARBON_HTTP_URL, settings.TELEMETRY_CARBON_HTTP_TOKEN
        )
    return StoredProvider()


def intensity_for_hour(
    zone: str, hour: datetime, *, provider: CarbonProvider | None = None
) -> Intensity:
    """The intensity of ``zone`` in the hour containing ``hour``; falls back to the static mean
    (estimated) when the provider fails. Raises CarbonUnavailable only when the zone has no
    static figure either (a configuration error that system check telemetry.E001 reports)."""
    provider = provider or configured_provider()
    try:
        return provider.intensity(zone, hour)
    except CarbonUnavailable as exc:
        # Once per zone and hour per process: the answer cannot change within the hour, and a
        # warning every round (10 s) buried everything else in the worker's log.
        key = (zone, hour_floor(hour))
        if key not in _warned:
            _warned.add(key)
            log.warning("carbon provider failed, using the static yearly mean: %s", exc)
    return StaticProvider().intensity(zone, hour)


_warned: set[tuple[str, datetime]] = set()


def carbon_signal(
    zone: str, now: datetime, *, hours_ahead: int = 24, provider: CarbonProvider | None = None
) -> CarbonSignal:
    """The scheduler's view: intensity now plus stored hours ahead (a forecast where the stored
    series reaches that far). Never raises: with nothing at all it returns 0 marked estimated,
    so a round can still run (the policy sees ``estimated``)."""
    try:
        now_ci = intensity_for_hour(zone, now, provider=provider)
    except CarbonUnavailable as exc:
        log.error("no carbon intensity for %s at all, scheduling with 0 (estimated): %s", zone, exc)
        return CarbonSignal(ci_g_per_kwh=0.0, estimated=True)
    start = hour_floor(now)
    ahead = CarbonIntensity.objects.filter(
        zone=zone, hour__gte=start, hour__lt=start + timedelta(hours=hours_ahead)
    ).values_list("hour", "ci_g_per_kwh")
    forecast = tuple((hour.timestamp(), ci) for hour, ci in ahead.order_by("hour"))
    return CarbonSignal(
        ci_g_per_kwh=now_ci.ci_g_per_kwh, forecast=forecast, estimated=now_ci.estimated
    )
