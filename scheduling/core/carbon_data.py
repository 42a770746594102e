"""Carbon-intensity files: the Electricity Maps hourly CSV reader, one for every reader.

The simulator (``scheduling/simulator/carbon.py``, which integrates the series over
simulated time), the live service's carbon providers (``telemetry/carbon.py``) and
``manage.py import_carbon`` all read the vendored ``data/carbon/`` files through this
module, so they read them alike. Pure: no Django, no simulator.

Column choice: by default the *direct* intensity (operational emissions of the
generation mix, what a location-based scope-2 inventory counts for consumed
electricity). ``kind="lca"`` selects the life-cycle figure, which also counts the
construction and fuel chain of the plants.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from scheduling.core.csv_rows import rows_of

DATETIME_COLUMN = "Datetime (UTC)"
CI_COLUMNS = {
    "direct": "Carbon Intensity gCO₂eq/kWh (direct)",
    "lca": "Carbon Intensity gCO₂eq/kWh (LCA)",
}
ESTIMATED_COLUMN = "Data Estimated"
ZONE_COLUMN = "Zone Id"
# Above any grid's intensity, direct or life-cycle (a lignite plant alone is about 1,100 to
# 1,200 gCO2eq/kWh): a larger value is no measurement (a row of 1e308 replaced a stored hour).
MAX_CI_G_PER_KWH = 2000.0
# Below any grid's hour: no grid is free of emissions (Electricity Maps' direct intensity
# counts every fossil plant running at all, even as reserve), and the cleanest hour in the
# four vendored zones is Norway's 1.75 direct (data/carbon/em_NO_2022_hourly.csv; the
# others' least: BR 26.97, ES 40.28, US-CAL-CISO 53.11; LCA values are 25 and up). A floor
# of 0.1, 17x under that, leaves room for cleaner grids (hydro- or geothermal-only hours),
# while 0 and 1e-320 are no measurement: they priced every hour's carbon as free, and a
# carbon-aware policy moved all its work there.
MIN_CI_G_PER_KWH = 0.1
# The years whose hours are taken, and a budget's period may fall in (``cluster.validators``).
YEARS = (2000, 2100)


class CarbonDataError(ValueError):
    """The carbon file is missing, malformed or does not cover the simulated time."""


@dataclass(frozen=True, slots=True)
class HourlyPoint:
    start: datetime  # aware, UTC, start of the hour
    ci_g_per_kwh: float
    estimated: bool


def read_electricity_maps_csv(
    path: str | Path, *, kind: str = "direct", zone: str | None = None
) -> tuple[HourlyPoint, ...]:
    """Read an Electricity Maps hourly export: one point per row, ascending in time.

    ``kind`` is ``"direct"`` or ``"lca"``; ``zone``, where given, is the zone the rows must
    name (their ``Zone Id``, where the file has one). Raises :class:`CarbonDataError` with
    one line naming the problem for a missing column, an empty or unparsable value, a time
    that is not the start of an hour, an intensity below ``MIN_CI_G_PER_KWH`` or beyond
    ``MAX_CI_G_PER_KWH``, an hour
    outside ``YEARS``, another zone's row, or rows that are not one hour apart.
    """
    if kind not in CI_COLUMNS:
        raise CarbonDataError(
            f"unknown intensity kind {kind!r}; expected one of {sorted(CI_COLUMNS)}"
        )
    column = CI_COLUMNS[kind]
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            return _read_points(path, csv.DictReader(handle), column, zone)
    except OSError as exc:
        raise CarbonDataError(f"cannot read carbon file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise CarbonDataError(f"{path.name}: not UTF-8 text ({exc.reason})") from exc


def _read_points(
    path: Path, reader: csv.DictReader, column: str, zone: str | None
) -> tuple[HourlyPoint, ...]:
    points: list[HourlyPoint] = []
    missing = {DATETIME_COLUMN, column} - set(reader.fieldnames or ())
    if missing:
        raise CarbonDataError(f"{path.name}: missing column(s) {sorted(missing)}")
    # (a longer row's tail would be dropped, the row imported as if whole)
    for line_no, row in rows_of(reader, path.name, CarbonDataError):
        try:
            start = datetime.strptime(row[DATETIME_COLUMN], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
            ci = float(row[column])
        except (TypeError, ValueError) as exc:
            raise CarbonDataError(f"{path.name}:{line_no}: bad value ({exc})") from exc
        if start.minute or start.second:
            # Rows are hours (every reader prices an instant by its hour's start): a row on
            # a half hour was imported as an hour that accounting never found, while the
            # round's forecast read it as an hour of its own, 30 minutes off.
            raise CarbonDataError(
                f"{path.name}:{line_no}: {row[DATETIME_COLUMN]} is not the start of an hour"
            )
        if not math.isfinite(ci) or ci < 0:
            raise CarbonDataError(
                f"{path.name}:{line_no}: intensity {ci} is not a non-negative number"
            )
        if ci < MIN_CI_G_PER_KWH:
            raise CarbonDataError(
                f"{path.name}:{line_no}: intensity {row[column].strip()} gCO2eq/kWh is below "
                "any grid's "
                f"({MIN_CI_G_PER_KWH:g}; the cleanest vendored hour is 1.75)"
            )
        if ci > MAX_CI_G_PER_KWH:
            raise CarbonDataError(
                f"{path.name}:{line_no}: intensity {ci:g} gCO2eq/kWh is above any grid's "
                f"({MAX_CI_G_PER_KWH:g})"
            )
        if not YEARS[0] <= start.year < YEARS[1]:
            raise CarbonDataError(
                f"{path.name}:{line_no}: hour {start.year:04d}-{start:%m-%d %H:%M} is outside "
                f"{YEARS[0]}..{YEARS[1] - 1}"
            )
        said = (row.get(ZONE_COLUMN) or "").strip()
        if zone is not None and said and said != zone:
            raise CarbonDataError(f"{path.name}:{line_no}: a row of zone {said}, not {zone}")
        estimated = (row.get(ESTIMATED_COLUMN) or "").strip().lower() == "true"
        if points and start - points[-1].start != timedelta(hours=1):
            raise CarbonDataError(f"{path.name}:{line_no}: rows are not consecutive hours")
        points.append(HourlyPoint(start=start, ci_g_per_kwh=ci, estimated=estimated))
    if not points:
        raise CarbonDataError(f"{path.name}: no rows")
    return tuple(points)


def carbon_file(data_dir: str | Path, zone: str, year: int = 2022) -> Path:
    """Where the vendored file of a zone lives, e.g. ``data/carbon/em_ES_2022_hourly.csv``."""
    return Path(data_dir) / "carbon" / f"em_{zone}_{year}_hourly.csv"
