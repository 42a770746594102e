"""Bulk ingestion of GPU samples: validate a batch as a whole, store it idempotently.

A batch is all-or-nothing: one bad sample rejects the batch with per-field messages
(``{"samples": {"3": {"power_w": [...]}}}``) and nothing is stored. A sample naming a GPU of
another node is a permission error (HTTP 403), not a validation one: the token speaks only for
its own node.

Validation is a plain loop over dicts rather than a DRF serializer per sample: at 20,000
samples per second a serializer's per-field machinery is most of the cost. The serializers in
``telemetry/api/serializers.py`` describe the same format for the OpenAPI schema.

Storage is one ``INSERT ... SELECT FROM unnest(arrays) ON CONFLICT DO NOTHING`` on the
(GPU, timestamp) primary key: a replayed or duplicated batch inserts nothing new. The other
methods (``copy`` through a temporary table, ``bulk_create``) are kept for the benchmark that
chose this one (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from cluster.models import Gpu, Node
from telemetry.energy import HOUR_S
from telemetry.models import DirtyHour, GpuSample

# field: (unit for messages, low, high, nullable). Ranges are physical sanity bounds, wide
# enough for any current data-centre GPU, narrow enough to catch mW-for-W mistakes.
NUMERIC_FIELDS: dict[str, tuple[str, float, float, bool]] = {
    "power_w": ("W", 0.0, 2000.0, False),
    "energy_j": ("J", 0.0, 1e15, True),
    "util_pct": ("%", 0.0, 100.0, True),
    "mem_used_mib": ("MiB", 0.0, 1e7, True),
    "temp_c": ("°C", -50.0, 150.0, True),
    "sm_clock_mhz": ("MHz", 0.0, 10000.0, True),
    "power_limit_w": ("W", 0.0, 2000.0, True),
}
COLUMNS = ("gpu_id", "ts", *NUMERIC_FIELDS)
_MAX_REPORTED = 20  # per-sample errors listed; the rest are counted


class BatchRejected(Exception):
    """A batch that is stored not at all. ``status`` is 400 (invalid) or 403 (not yours)."""

    def __init__(self, errors: dict[str, Any], *, status: int = 400) -> None:
        self.errors = errors
        self.status = status
        super().__init__(str(errors))


@dataclass(frozen=True, slots=True)
class IngestResult:
    received: int
    inserted: int

    @property
    def duplicates(self) -> int:
        return self.received - self.inserted


def _number(value: Any, unit: str, low: float, high: float) -> tuple[float | None, str | None]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, "A number is required."
    value = float(value)
    if not math.isfinite(value) or not low <= value <= high:
        return None, f"Must be between {low:g} and {high:g} {unit}."
    return value, None


def validate_batch(node: Node, payload: Any, *, now: datetime) -> list[tuple]:
    """Rows ready for :func:`store_rows`, or BatchRejected. Checks the envelope, every
    sample's fields, units and ranges, timestamps (not older than the retention window, not
    more than TELEMETRY_MAX_FUTURE_S ahead) and that each GPU is this node's."""
    if not isinstance(payload, dict) or not isinstance(payload.get("samples"), list):
        raise BatchRejected({"samples": ["A list of samples is required."]})
    samples = payload["samples"]
    if not samples:
        raise BatchRejected({"samples": ["The batch is empty."]})
    limit = settings.TELEMETRY_MAX_BATCH_SAMPLES
    if len(samples) > limit:
        raise BatchRejected(
            {"samples": [f"At most {limit} samples per batch, got {len(samples)}."]}
        )

    uuids = {s.get("gpu_uuid") for s in samples if isinstance(s, dict)}
    known = {
        uuid: (pk, node_id)
        for uuid, pk, node_id in Gpu.objects.filter(
            uuid__in=[u for u in uuids if isinstance(u, str)]
        ).values_list("uuid", "pk", "node_id")
    }
    foreign = sorted(u for u, (_, node_id) in known.items() if node_id != node.pk)
    if foreign:
        raise BatchRejected(
            {"samples": [f"GPU(s) {', '.join(foreign)} belong to another node."]}, status=403
        )

    oldest = now - timedelta(seconds=settings.TELEMETRY_RETENTION_S)
    newest = now + timedelta(seconds=settings.TELEMETRY_MAX_FUTURE_S)
    rows: list[tuple] = []
    errors: dict[str, dict[str, list[str]]] = {}
    bad = 0
    for i, sample in enumerate(samples):
        field_errors: dict[str, list[str]] = {}
        if not isinstance(sample, dict):
            field_errors["non_field_errors"] = ["A sample must be an object."]
        else:
            gpu = known.get(sample.get("gpu_uuid"))
            if gpu is None:
                field_errors["gpu_uuid"] = ["Unknown GPU: register it first."]
            ts = sample.get("ts")
            try:
                ts = datetime.fromisoformat(ts) if isinstance(ts, str) else None
            except ValueError:
                ts = None
            if ts is None or ts.tzinfo is None:
                field_errors["ts"] = ["An ISO 8601 timestamp with a UTC offset is required."]
            elif ts < oldest:
                field_errors["ts"] = ["Older than the retention window."]
            elif ts > newest:
                field_errors["ts"] = ["In the future."]
            row = [gpu[0] if gpu else None, ts]
            for name, (unit, low, high, nullable) in NUMERIC_FIELDS.items():
                value = sample.get(name)
                if value is None:
                    if not nullable:
                        field_errors[name] = ["This field is required."]
                    row.append(None)
                    continue
                number, message = _number(value, unit, low, high)
                if message:
                    field_errors[name] = [message]
                row.append(number)
            rows.append(tuple(row))
        if field_errors:
            bad += 1
            if len(errors) < _MAX_REPORTED:
                errors[str(i)] = field_errors
    if errors:
        body: dict[str, Any] = {"samples": errors}
        if bad > len(errors):
            body["non_field_errors"] = [
                f"{bad} samples are invalid; the first {len(errors)} shown."
            ]
        raise BatchRejected(body)
    return rows


def _as_arrays(rows: list[tuple]) -> list[list]:
    return [list(column) for column in zip(*rows, strict=True)]


_TABLE = GpuSample._meta.db_table
_COLS = ", ".join(COLUMNS)
_UNNEST_SQL = (
    f"INSERT INTO {_TABLE} ({_COLS}) "
    "SELECT * FROM unnest(%s::bigint[], %s::timestamptz[], %s::float8[], %s::float8[], "
    "%s::float8[], %s::float8[], %s::float8[], %s::int[], %s::float8[]) "
    "ON CONFLICT DO NOTHING"
)


def store_rows(rows: list[tuple], *, method: str = "unnest") -> int:
    """Insert rows (in COLUMNS order), skipping (GPU, ts) already stored; returns how many
    were new. Must run inside a transaction (the COPY method's temp table lives in it)."""
    with connection.cursor() as cursor:
        if method == "unnest":
            arrays = _as_arrays(rows)
            arrays[7] = [None if v is None else int(v) for v in arrays[7]]
            cursor.execute(_UNNEST_SQL, arrays)
            return cursor.rowcount
        if method == "copy":
            cursor.execute(
                "CREATE TEMP TABLE IF NOT EXISTS ingest_stage "
                f"(LIKE {_TABLE}) ON COMMIT DELETE ROWS"
            )
            with cursor.copy(f"COPY ingest_stage ({_COLS}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(
                f"INSERT INTO {_TABLE} ({_COLS}) SELECT {_COLS} FROM ingest_stage "
                "ON CONFLICT DO NOTHING"
            )
            return cursor.rowcount
    if method == "bulk_create":
        before = GpuSample.objects.count()
        GpuSample.objects.bulk_create(
            [GpuSample(**dict(zip(COLUMNS, row, strict=True))) for row in rows],
            ignore_conflicts=True,
            batch_size=5000,
        )
        # bulk_create with ignore_conflicts cannot report inserted rows; counting is only
        # acceptable because this method exists for the benchmark, not for production.
        return GpuSample.objects.count() - before
    raise ValueError(f"unknown storage method {method!r}")


def dirty_hours(rows: Iterable[tuple]) -> set[tuple[int, datetime]]:
    """(GPU, hour) pairs whose accounting a batch changes: the hour of each sample and, for a
    sample close to an hour boundary, the neighbouring hour whose edge interval it bounds."""
    gap = settings.TELEMETRY_MAX_GAP_S
    marks: set[tuple[int, datetime]] = set()
    for row in rows:
        gpu_id, ts = row[0], row[1]
        hour = ts.replace(minute=0, second=0, microsecond=0)
        marks.add((gpu_id, hour))
        offset_s = (ts - hour).total_seconds()
        if offset_s < gap:
            marks.add((gpu_id, hour - timedelta(hours=1)))
        if HOUR_S - offset_s <= gap:
            marks.add((gpu_id, hour + timedelta(hours=1)))
    return marks


def mark_dirty(marks: set[tuple[int, datetime]], *, now: datetime) -> None:
    if not marks:
        return
    gpu_ids, hours = zip(*sorted(marks), strict=True)
    with connection.cursor() as cursor:
        # marked_at moves forward on conflict, so an accounting run that read the older mark
        # does not delete this one (it deletes only the marked_at it saw).
        cursor.execute(
            f"INSERT INTO {DirtyHour._meta.db_table} (gpu_id, hour, marked_at) "
            "SELECT g, h, %s FROM unnest(%s::bigint[], %s::timestamptz[]) AS t(g, h) "
            "ON CONFLICT (gpu_id, hour) DO UPDATE SET marked_at = EXCLUDED.marked_at",
            [now, list(gpu_ids), list(hours)],
        )


def ingest_batch(
    node: Node, payload: Any, *, now: datetime | None = None, method: str = "unnest"
) -> IngestResult:
    """Validate and store one agent batch; BatchRejected leaves the database untouched."""
    now = now or timezone.now()
    rows = validate_batch(node, payload, now=now)
    with transaction.atomic():
        inserted = store_rows(rows, method=method)
        if inserted:
            mark_dirty(dirty_hours(rows), now=now)
    return IngestResult(received=len(rows), inserted=inserted)
