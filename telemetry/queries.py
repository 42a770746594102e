"""Read-only queries over telemetry for pages and reports (added by the frontend; additive).

All times are aware UTC datetimes passed in by the caller; nothing here reads the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import QuerySet, Sum

from cluster.models import Gpu
from scheduling.core.types import J_PER_KWH
from telemetry.models import CarbonIntensity, EnergyLedgerEntry, GpuMinute, GpuSample


@dataclass(frozen=True, slots=True)
class GpuReading:
    """The latest sample of one GPU, or ``None`` fields when it has been silent."""

    gpu_id: int
    node: str
    index: int
    ts: datetime | None
    power_w: float | None
    util_pct: float | None
    temp_c: float | None
    sm_clock_mhz: int | None
    power_limit_w: float | None


def latest_gpu_readings(*, now: datetime, max_age_s: float = 120.0) -> list[GpuReading]:
    """Every GPU with its latest sample taken in (now - max_age_s, now]; a GPU without one is
    listed with ``None`` readings (silent agent), so pages still show it."""
    since = now - timedelta(seconds=max_age_s)
    latest = {
        row["gpu_id"]: row
        for row in GpuSample.objects.filter(ts__gt=since, ts__lte=now)
        .order_by("gpu_id", "-ts")
        .distinct("gpu_id")
        .values("gpu_id", "ts", "power_w", "util_pct", "temp_c", "sm_clock_mhz", "power_limit_w")
    }
    readings = []
    for gpu_id, node, index in (
        Gpu.objects.in_service()
        .order_by("node__name", "index")
        .values_list("pk", "node__name", "index")
    ):
        row = latest.get(gpu_id, {})
        readings.append(
            GpuReading(
                gpu_id=gpu_id,
                node=node,
                index=index,
                ts=row.get("ts"),
                power_w=row.get("power_w"),
                util_pct=row.get("util_pct"),
                temp_c=row.get("temp_c"),
                sm_clock_mhz=row.get("sm_clock_mhz"),
                power_limit_w=row.get("power_limit_w"),
            )
        )
    return readings


def usage_query(field: str, start: datetime, end: datetime, *, team_ids=None) -> QuerySet:
    """Ledger totals grouped by ``field`` (``team``, ``job`` or ``job__owner``) for hours in
    [start, end), unevaluated: rows of the key, ``energy_j`` and ``co2_g``, largest energy
    first (ties by key, so pages of it are stable). Idle energy (no job) is left out.
    ``team_ids`` restricts to those teams."""
    if field not in ("team", "job", "job__owner"):
        raise ValueError(f"cannot group usage by {field!r}")
    rows = EnergyLedgerEntry.objects.filter(hour__gte=start, hour__lt=end, job__isnull=False)
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    return (
        rows.values(field)
        .annotate(energy_j=Sum("energy_j"), co2_g=Sum("co2_g"))
        .order_by("-energy_j", field)
    )


def usage_by(field: str, start: datetime, end: datetime, *, team_ids=None) -> list[dict]:
    """``usage_query``'s rows, all of them."""
    return list(usage_query(field, start, end, team_ids=team_ids))


def intensity_series(zone: str, start: datetime, end: datetime) -> list[tuple[datetime, float]]:
    """Stored hourly intensities (g/kWh) of ``zone`` for hours starting in [start, end)."""
    return list(
        CarbonIntensity.objects.filter(zone=zone, hour__gte=start, hour__lt=end)
        .order_by("hour")
        .values_list("hour", "ci_g_per_kwh")
    )


def cluster_power_series(start: datetime, end: datetime) -> list[tuple[datetime, float]]:
    """Measured GPU power of the whole cluster (kW) per 5-minute bucket in [start, end): the
    mean over the bucket of the per-minute sums of every GPU's average power. Only buckets
    with data: the series starts where telemetry starts."""
    per_minute = (
        GpuMinute.objects.filter(minute__gte=start, minute__lt=end)
        .values("minute")
        .annotate(w=Sum("power_avg_w"))
        .order_by("minute")
        .values_list("minute", "w")
    )
    buckets: dict[datetime, list[float]] = {}
    for minute, watts in per_minute:
        key = minute.replace(minute=minute.minute - minute.minute % 5, second=0, microsecond=0)
        buckets.setdefault(key, []).append(watts)
    return [(at, sum(ws) / len(ws) / 1000.0) for at, ws in sorted(buckets.items())]


def job_energy_series(job_id: int) -> list[tuple[datetime, float]]:
    """Cumulative energy (kWh) charged to a job, minute by minute, from the ledger (what
    the job page's total and its team's budget count). The series was built from whole
    GPU-minutes per allocation: a minute that two allocations touched (a resize) counted
    twice, and a shared GPU's minutes in full, so the plot ended at 3.6 times the total.
    Rows accounted before minutes were kept count at their hour's last minute."""
    per_minute: dict[datetime, float] = {}
    rows = EnergyLedgerEntry.objects.filter(job_id=job_id).values_list(
        "hour", "energy_j", "minutes_j"
    )
    for hour, energy_j, minutes_j in rows:
        if minutes_j:
            for m, e in enumerate(minutes_j):
                if e:
                    at = hour + timedelta(minutes=m)
                    per_minute[at] = per_minute.get(at, 0.0) + e
        elif energy_j:
            at = hour + timedelta(minutes=59)
            per_minute[at] = per_minute.get(at, 0.0) + energy_j
    total = 0.0
    series = []
    for minute in sorted(per_minute):
        total += per_minute[minute] / J_PER_KWH
        series.append((minute + timedelta(minutes=1), total))
    return series
