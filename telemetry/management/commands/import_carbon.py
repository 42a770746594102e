"""``manage.py import_carbon data/carbon/em_ES_2022_hourly.csv --zone ES [--onto-year 2026]``

Loads an Electricity Maps hourly CSV export into ``CarbonIntensity`` (re-importing replaces
the hours it covers). Parsing is the one shared reader (``scheduling.core.carbon_data``), so the
live service and the simulator read the files alike.

``--onto-year`` replays the file's year onto another one, hour for hour on the same calendar
date and hour of day (the demo runs today on the shipped 2022 measurements: the seasonal and
daily shape is real, the year is not). A 29 February the file lacks repeats the 28th; the
rows are marked *estimated*, because they are not that year's measurements. A replay never
replaces an hour stored as a measurement (``estimated`` false: an imported file of that year,
or what the HTTP provider fetched): it overwrote them with another year's values, and the
accounting of any hour re-booked later priced its energy with them.
"""

from datetime import datetime, timedelta

from django.core.management.base import CommandError
from django.db import connection, transaction
from tqdm import tqdm

from config.commands import OneLineCommand
from scheduling.core.carbon_data import (
    YEARS,
    CarbonDataError,
    HourlyPoint,
    read_electricity_maps_csv,
)
from telemetry.choices import CarbonSource
from telemetry.models import CarbonIntensity

_CHUNK = 1000


def replay_onto_year(points: tuple[HourlyPoint, ...], year: int) -> list[HourlyPoint]:
    """``points`` moved onto ``year`` keeping month, day and hour, marked estimated. A date
    the target year has and the source lacks (29 February) repeats the day before; a date the
    target lacks (29 February of a leap source) is dropped."""
    moved: dict[datetime, HourlyPoint] = {}
    for p in points:
        try:
            start = p.start.replace(year=year)
        except ValueError:  # 29 February onto a common year
            continue
        moved[start] = HourlyPoint(start=start, ci_g_per_kwh=p.ci_g_per_kwh, estimated=True)
    day = timedelta(days=1)
    for start, p in list(moved.items()):
        if start.month == 2 and start.day == 28:
            leap_day = start + day
            if leap_day.month == 2 and leap_day not in moved:
                moved[leap_day] = HourlyPoint(
                    start=leap_day, ci_g_per_kwh=p.ci_g_per_kwh, estimated=True
                )
    return [moved[start] for start in sorted(moved)]


class Command(OneLineCommand):
    help = "Import hourly grid carbon intensity from an Electricity Maps CSV file."

    def add_arguments(self, parser):
        parser.add_argument("path")
        parser.add_argument("--zone", required=True, help="e.g. ES, NO, BR, US-CAL-CISO")
        parser.add_argument("--kind", default="direct", choices=["direct", "lca"])
        parser.add_argument(
            "--onto-year",
            type=int,
            default=None,
            help="replay the file's hours onto this year (same date and hour; marked estimated)",
        )

    def handle(self, *args, path, zone, kind, onto_year=None, **options):
        zone = zone.strip()
        if not zone or len(zone) > 32 or not zone.isprintable():
            raise CommandError("--zone must be 1 to 32 printable characters")
        if onto_year is not None and not YEARS[0] <= onto_year < YEARS[1]:
            raise CommandError(f"--onto-year must be a year between {YEARS[0]} and {YEARS[1] - 1}")
        try:
            points = read_electricity_maps_csv(path, kind=kind, zone=zone)
        except CarbonDataError as exc:
            raise CommandError(str(exc)) from None
        if onto_year is not None:
            points = replay_onto_year(points, onto_year)
            if not points:  # (a file of 29 February only, onto a common year: an IndexError)
                raise CommandError(f"{path}: none of its hours falls on a date of {onto_year}")
        rows = [
            CarbonIntensity(
                zone=zone,
                hour=p.start,
                ci_g_per_kwh=p.ci_g_per_kwh,
                estimated=p.estimated,
                source=CarbonSource.IMPORTED,
            )
            for p in points
        ]
        # One transaction: a failure half-way leaves what was stored before untouched.
        stored = 0
        with transaction.atomic():
            for start in tqdm(
                range(0, len(rows), _CHUNK), desc=f"import {zone}", unit="chunk", disable=None
            ):
                chunk = rows[start : start + _CHUNK]
                if onto_year is None:
                    CarbonIntensity.objects.bulk_create(
                        chunk,
                        update_conflicts=True,
                        unique_fields=["zone", "hour"],
                        update_fields=["ci_g_per_kwh", "estimated", "source"],
                    )
                    stored += len(chunk)
                else:
                    stored += _upsert_estimates(zone, chunk)
        kept = len(rows) - stored
        self.stdout.write(
            f"imported {stored} hours for {zone}: "
            f"{points[0].start.isoformat()} .. {points[-1].start.isoformat()}"
            + (f"; kept {kept} measured hour(s) stored before" if kept else "")
        )


_TABLE = CarbonIntensity._meta.db_table
# Insert or replace, but replace only an estimate: the condition is checked on the row under
# its lock, so a measurement stored meanwhile (the HTTP provider) is kept too.
_UPSERT_ESTIMATES_SQL = f"""
INSERT INTO {_TABLE} (zone, hour, ci_g_per_kwh, estimated, source)
SELECT %s, u.hour, u.ci, true, %s FROM unnest(%s::timestamptz[], %s::float8[]) AS u(hour, ci)
ON CONFLICT (zone, hour) DO UPDATE
    SET ci_g_per_kwh = EXCLUDED.ci_g_per_kwh, estimated = true, source = EXCLUDED.source
    WHERE {_TABLE}.estimated
"""


def _upsert_estimates(zone: str, rows: list[CarbonIntensity]) -> int:
    """Store ``rows`` (estimates) except over a stored measurement; returns how many were."""
    with connection.cursor() as cursor:
        cursor.execute(
            _UPSERT_ESTIMATES_SQL,
            [
                zone,
                CarbonSource.IMPORTED,
                [r.hour for r in rows],
                [r.ci_g_per_kwh for r in rows],
            ],
        )
        return cursor.rowcount
