"""``manage.py import_carbon data/carbon/em_ES_2022_hourly.csv --zone ES``

Loads an Electricity Maps hourly CSV export into ``CarbonIntensity`` (re-importing replaces
the hours it covers). Parsing is the simulator's reader, so both sides read the files alike.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from tqdm import tqdm

from scheduling.simulator.carbon import CarbonDataError, read_electricity_maps_csv
from telemetry.choices import CarbonSource
from telemetry.models import CarbonIntensity

_CHUNK = 1000


class Command(BaseCommand):
    help = "Import hourly grid carbon intensity from an Electricity Maps CSV file."

    def add_arguments(self, parser):
        parser.add_argument("path")
        parser.add_argument("--zone", required=True, help="e.g. ES, NO, BR, US-CAL-CISO")
        parser.add_argument("--kind", default="direct", choices=["direct", "lca"])

    def handle(self, *args, path, zone, kind, **options):
        zone = zone.strip()
        if not zone or len(zone) > 32:
            raise CommandError("--zone must be 1 to 32 characters")
        try:
            points = read_electricity_maps_csv(path, kind=kind)
        except CarbonDataError as exc:
            raise CommandError(str(exc)) from None
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
        with transaction.atomic():
            for start in tqdm(range(0, len(rows), _CHUNK), desc=f"import {zone}", unit="chunk"):
                CarbonIntensity.objects.bulk_create(
                    rows[start : start + _CHUNK],
                    update_conflicts=True,
                    unique_fields=["zone", "hour"],
                    update_fields=["ci_g_per_kwh", "estimated", "source"],
                )
        self.stdout.write(
            f"imported {len(rows)} hours for {zone}: "
            f"{points[0].start.isoformat()} .. {points[-1].start.isoformat()}"
        )
