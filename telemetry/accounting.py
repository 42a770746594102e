"""Energy and carbon accounting: dirty (GPU, hour) marks -> rollups and ledger rows.

Each run takes the (GPU, hour) pairs ingestion marked, recomputes everything for that hour
from the raw samples (see ``telemetry/energy.py`` for the arithmetic), replaces the hour's
minute and hour rollups and its ledger rows, and removes the mark. Because an hour is always
recomputed whole, a late, replayed or duplicated batch changes the totals exactly once.

Ledger rows are per (GPU, hour, job); team totals are sums over them (:func:`team_totals`);
a budget's usage is ``telemetry.usage.budget_usage``, the one computation every reader uses.
Carbon of a row is its energy times the grid intensity of that hour in
``TELEMETRY_CARBON_ZONE`` (``telemetry/carbon.py``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, Sum
from django.utils import timezone

from cluster.models import Gpu, Job, JobAllocation, Team
from scheduling.core.types import J_PER_KWH
from telemetry.carbon import intensity_for_hour
from telemetry.energy import MINUTE_S, Holder, Point, attribute
from telemetry.models import (
    DirtyHour,
    EnergyLedgerEntry,
    GpuHour,
    GpuMinute,
    GpuSample,
    RefusedEnergyStep,
)
from telemetry.usage import publish_usage_of_teams

log = logging.getLogger(__name__)


def _ts(dt: datetime) -> float:
    return dt.timestamp()


def _dt(t_s: float) -> datetime:
    return datetime.fromtimestamp(t_s, tz=UTC)


def holders_for(gpu_id: int, start: datetime, end: datetime) -> tuple[list[Holder], dict]:
    """Allocations of this GPU overlapping [start, end), as holders, and job -> team."""
    allocations = (
        JobAllocation.objects.filter(gpus__id=gpu_id, started_at__lt=end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .values_list("job_id", "started_at", "ended_at", "job__team_id")
    )
    holders, teams = [], {}
    for job_id, started, ended, team_id in allocations:
        holders.append(Holder(job_id, _ts(started), None if ended is None else _ts(ended)))
        teams[job_id] = team_id
    return holders, teams


# The hour's samples plus the last one before it and the first one after it (within the gap
# limit), whose intervals reach into the hour; times as epoch floats, which is all the energy
# arithmetic needs (parsing 3,600 datetimes per GPU-hour was a fifth of the work).
_SAMPLE_COLUMNS = "extract(epoch FROM ts)::float8, power_w, energy_j, util_pct"
_POINTS_SQL = f"""
SELECT * FROM (
    (SELECT {_SAMPLE_COLUMNS} FROM {GpuSample._meta.db_table}
     WHERE gpu_id = %s AND ts < %s AND ts >= %s ORDER BY ts DESC LIMIT 1)
    UNION ALL
    (SELECT {_SAMPLE_COLUMNS} FROM {GpuSample._meta.db_table}
     WHERE gpu_id = %s AND ts >= %s AND ts < %s)
    UNION ALL
    (SELECT {_SAMPLE_COLUMNS} FROM {GpuSample._meta.db_table}
     WHERE gpu_id = %s AND ts >= %s AND ts <= %s ORDER BY ts LIMIT 1)
) AS points ORDER BY 1
"""


def account_hour(gpu_id: int, hour: datetime, *, intensities: dict | None = None) -> set[int]:
    """Recompute rollups and ledger of one GPU-hour from its raw samples. ``intensities``
    memoises the grid intensity per (zone, hour) across the GPU-hours of one run: every GPU
    of that hour is priced alike, and a fallback is looked up (and logged) once.

    Returns the ids of the teams whose energy or carbon in this GPU-hour changed (their
    budgets' usage moved; a replayed batch that changes nothing returns none)."""
    end = hour + timedelta(hours=1)
    gap = timedelta(seconds=settings.TELEMETRY_MAX_GAP_S)
    hour_s, end_s = _ts(hour), _ts(end)
    with connection.cursor() as cursor:
        cursor.execute(
            _POINTS_SQL, [gpu_id, hour, hour - gap, gpu_id, hour, end, gpu_id, end, end + gap]
        )
        rows = cursor.fetchall()
    points = [Point(t, power, energy) for t, power, energy, _ in rows]
    inside = [(t, power, util) for t, power, _, util in rows if hour_s <= t < end_s]
    holders, teams = holders_for(gpu_id, hour, end)
    max_power_w = Gpu.objects.filter(pk=gpu_id).values_list("max_power_limit_w", flat=True).first()
    result = attribute(
        points,
        holders,
        window_start_s=_ts(hour),
        window_end_s=_ts(end),
        max_gap_s=settings.TELEMETRY_MAX_GAP_S,
        max_power_w=max_power_w,
        tolerance=settings.TELEMETRY_COUNTER_TOLERANCE,
    )
    if result.gap_j:
        log.warning("gpu %s %s: %.0f J in data gaps left unattributed", gpu_id, hour, result.gap_j)

    # Per-minute statistics of the samples taken in the minute; energy of the intervals in it.
    minutes: dict[float, list] = {}
    for t, power, util in inside:
        minutes.setdefault(math.floor(t / MINUTE_S) * MINUTE_S, []).append((power, util))
    for minute_s in result.by_minute_j:
        minutes.setdefault(minute_s, [])
    minute_rows = [
        GpuMinute(
            gpu_id=gpu_id,
            minute=_dt(minute_s),
            energy_j=result.by_minute_j.get(minute_s, 0.0),
            **_stats(readings),
        )
        for minute_s, readings in sorted(minutes.items())
    ]

    zone = settings.TELEMETRY_CARBON_ZONE
    # Only price hours that drew energy: an empty hour must not query a (maybe remote) provider.
    intensity = None
    if result.total_j > 0:
        memo = intensities if intensities is not None else {}
        if (zone, hour) not in memo:
            memo[(zone, hour)] = intensity_for_hour(zone, hour)
        intensity = memo[(zone, hour)]
    ledger_rows = [
        EnergyLedgerEntry(
            gpu_id=gpu_id,
            hour=hour,
            job_id=job_id,
            team_id=teams.get(job_id),
            energy_j=energy_j,
            co2_g=energy_j / J_PER_KWH * intensity.ci_g_per_kwh,
            ci_g_per_kwh=intensity.ci_g_per_kwh,
            ci_estimated=intensity.estimated,
            zone=zone,
            minutes_j=[
                result.by_job_minute_j.get((job_id, hour_s + k * MINUTE_S), 0.0) for k in range(60)
            ],
        )
        for job_id, energy_j in sorted(result.by_job_j.items(), key=lambda kv: (kv[0] or 0))
        if energy_j > 0 and intensity is not None
    ]
    with transaction.atomic():
        before = _team_sums(EnergyLedgerEntry.objects.filter(gpu_id=gpu_id, hour=hour))
        GpuMinute.objects.filter(gpu_id=gpu_id, minute__gte=hour, minute__lt=end).delete()
        GpuMinute.objects.bulk_create(minute_rows)
        GpuHour.objects.filter(gpu_id=gpu_id, hour=hour).delete()
        if inside or result.total_j:
            GpuHour.objects.create(
                gpu_id=gpu_id,
                hour=hour,
                energy_j=result.total_j,
                **_stats([(power, util) for _, power, util in inside]),
            )
        EnergyLedgerEntry.objects.filter(gpu_id=gpu_id, hour=hour).delete()
        EnergyLedgerEntry.objects.bulk_create(ledger_rows)
        _record_refused(gpu_id, result.refused)
    after: dict[int, tuple[float, float]] = {}
    for row in ledger_rows:
        if row.team_id is not None:
            e, c = after.get(row.team_id, (0.0, 0.0))
            after[row.team_id] = (e + row.energy_j, c + row.co2_g)
    return {
        team_id
        for team_id in set(before) | set(after)
        if not all(
            math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-9)
            for x, y in zip(
                before.get(team_id, (0.0, 0.0)), after.get(team_id, (0.0, 0.0)), strict=False
            )
        )
    }


def _team_sums(rows) -> dict[int, tuple[float, float]]:
    """Team id -> (energy_j, co2_g) of ledger rows (rows without a team left out)."""
    return {
        row["team_id"]: (row["e"] or 0.0, row["c"] or 0.0)
        for row in rows.filter(team__isnull=False)
        .values("team_id")
        .annotate(e=Sum("energy_j"), c=Sum("co2_g"))
    }


def _record_refused(gpu_id: int, refused: list) -> None:
    """Keep the audit rows of refused counter steps (once each: an interval reaching into two
    hours, or an hour accounted again, finds its row already there) and log the new ones."""
    if not refused:
        return
    now = timezone.now()
    rows = [
        RefusedEnergyStep(
            gpu_id=gpu_id,
            ts=_dt(step.t_s),
            previous_ts=_dt(step.prev_t_s),
            previous_energy_j=step.prev_energy_j,
            energy_j=step.energy_j,
            allowed_j=step.allowed_j,
            charged_j=step.charged_j,
            detected_at=now,
        )
        for step in refused
    ]
    known = set(
        RefusedEnergyStep.objects.filter(gpu_id=gpu_id, ts__in=[r.ts for r in rows]).values_list(
            "ts", flat=True
        )
    )
    new = [r for r in rows if r.ts not in known]
    RefusedEnergyStep.objects.bulk_create(new, ignore_conflicts=True)
    for r in new:
        log.warning(
            "gpu %s: energy counter step of %.6g J from %s to %s refused (at most %.6g J "
            "believed); the interval was charged %.6g J of integrated power",
            gpu_id, r.energy_j - r.previous_energy_j, r.previous_ts.isoformat(),
            r.ts.isoformat(), r.allowed_j, r.charged_j,
        )  # fmt: skip


def _stats(readings: list[tuple[float, float | None]]) -> dict:
    powers = [p for p, _ in readings]
    utils = [u for _, u in readings if u is not None]
    return {
        "samples": len(readings),
        "power_avg_w": sum(powers) / len(powers) if powers else 0.0,
        "power_max_w": max(powers) if powers else 0.0,
        "util_avg_pct": sum(utils) / len(utils) if utils else None,
    }


def process_dirty_hours(
    *, limit: int = 500, since: datetime | None = None, gpu_ids: Iterable[int] | None = None
) -> int:
    """Account up to ``limit`` marked GPU-hours (of the hours from ``since`` on and of the
    GPUs ``gpu_ids``, where given); returns how many. Safe to run concurrently with itself
    (marks are claimed with SKIP LOCKED) and with ingestion (a mark re-set while we worked
    has a newer ``marked_at`` and survives).

    When it is done, the running budgets of the teams whose ledgers changed are published
    (``BUDGET_USAGE_CHANGED``), once per run, so open dashboards redraw their budget bars."""
    done = 0
    intensities: dict = {}
    touched: set[int] = set()
    try:
        while done < limit:
            with transaction.atomic():
                marks = DirtyHour.objects.select_for_update(skip_locked=True)
                if since is not None:
                    marks = marks.filter(hour__gte=since)
                if gpu_ids is not None:
                    marks = marks.filter(gpu_id__in=list(gpu_ids))
                mark = marks.order_by("hour", "gpu_id").first()
                if mark is None:
                    break
                touched |= account_hour(mark.gpu_id, mark.hour, intensities=intensities)
                DirtyHour.objects.filter(pk=mark.pk, marked_at=mark.marked_at).delete()
            done += 1
    finally:
        # Hours committed before a failure changed the ledger too.
        publish_usage_of_teams(touched, now=timezone.now())
    return done


def delete_expired_samples(*, now: datetime | None = None) -> int:
    """Drop raw samples older than the retention window (of the hours a sample ingestion
    still accepts could have recomputed, none), keeping any whose hour (or the next, whose
    first interval they bound) still waits for accounting."""
    now = now or timezone.now()
    # Whole hours only, and the hour before with the sample bounding its first interval: a
    # sample ingestion still accepts (not older than the retention window) marks its hour,
    # and the one before when it lies near its start, and each is recomputed whole from the
    # samples. Cut at the window itself, a late sample in an hour half deleted re-booked that
    # hour from its other half (360 kJ fell to 180 kJ in the ledger, the budgets and reports).
    oldest = now - timedelta(seconds=settings.TELEMETRY_RETENTION_S)
    cutoff = (
        oldest.replace(minute=0, second=0, microsecond=0)
        - timedelta(hours=1)
        - timedelta(seconds=settings.TELEMETRY_MAX_GAP_S)
    )
    pending = DirtyHour.objects.filter(hour__lt=cutoff + timedelta(hours=1)).order_by("hour")
    first_pending = pending.values_list("hour", flat=True).first()
    if first_pending is not None:
        cutoff = min(cutoff, first_pending - timedelta(hours=1))
    # A sample whose counter reading was refused is kept as long as its audit row is.
    flagged = RefusedEnergyStep.objects.filter(gpu_id=OuterRef("gpu_id"), ts=OuterRef("ts"))
    deleted, _ = GpuSample.objects.filter(ts__lt=cutoff).exclude(Exists(flagged)).delete()
    return deleted


# --- ledgers -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Totals:
    energy_j: float
    co2_g: float
    estimated: bool  # some of the carbon was priced with a fallback intensity

    @property
    def energy_kwh(self) -> float:
        return self.energy_j / J_PER_KWH


def _totals(rows) -> Totals:
    agg = rows.aggregate(e=Sum("energy_j"), c=Sum("co2_g"))
    return Totals(
        energy_j=agg["e"] or 0.0,
        co2_g=agg["c"] or 0.0,
        estimated=rows.filter(ci_estimated=True).exists(),
    )


def job_totals(job: Job) -> Totals:
    return _totals(EnergyLedgerEntry.objects.filter(job=job))


def team_totals(team: Team, start: datetime, end: datetime) -> Totals:
    """Energy and carbon of a team's jobs in the hours starting in [start, end)."""
    return _totals(EnergyLedgerEntry.objects.filter(team=team, hour__gte=start, hour__lt=end))
