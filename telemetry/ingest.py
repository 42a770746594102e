"""Bulk ingestion of GPU samples: validate a batch as a whole, store it idempotently.

A batch is all-or-nothing: one bad sample rejects the batch with per-field messages
(``{"samples": {"3": {"power_w": [...]}}}``) and nothing is stored. A sample naming a GPU of
another node is a permission error (HTTP 403), not a validation one: the token speaks only for
its own node. A GPU that moved to another node (``Gpu.node_since``) is the exception: its old
node's spooled samples of it, stamped before it arrived there, are refused one by one (400), so
the agent keeps its other GPUs'; one stamped since (past a clock's allowed lead) is another
node's GPU's (403).

Validation is a plain loop over dicts rather than a DRF serializer per sample: at 20,000
samples per second a serializer's per-field machinery is most of the cost. The serializers in
``telemetry/api/serializers.py`` describe the same format for the OpenAPI schema.

Two samples of one GPU at one time in one batch refuse the batch (400 on the second's ``ts``,
naming the time): which reading is true is unknowable. Before, the first was stored and the
second dropped without a word.

Storage is one statement: ``INSERT ... SELECT FROM unnest(arrays) ON CONFLICT DO NOTHING`` on
the (GPU, timestamp) primary key (a replayed or duplicated batch inserts nothing new) with the
dirty-hour marks of the new rows upserted in the same statement. A resent sample (an agent's
retry) is a duplicate and the stored one is kept; when the batch had duplicates, one more
query counts those whose values differ from the stored sample (``conflicts`` in the answer):
a retry stays idempotent, and a contradiction is reported rather than dropped silently.
Another statement records each GPU's newest SM clock and power limit on its ``Gpu`` row
(``record_reported_settings``).
A GPU deleted between the batch's validation and its insert fails the marks' foreign key at
the statement's commit (a 500 in 2 of 12 live races): the batch is then answered as its
resend would be (``_refuse_vanished``), with no lock on this path to prevent the race.
The other methods it was chosen against (``copy`` through a temporary table, ``bulk_create``)
live in the benchmark that compared them (``benchmarks/bench_ingest.py``; numbers in
docs/benchmarks.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from django.utils import timezone

from cluster.models import Gpu, Node
from scheduling.core.online_model import MAX_POWER_FACTOR
from telemetry.models import DirtyHour, GpuSample
from telemetry.services import NodeGone

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
    # Of the duplicates, samples stored before with other values: ignored, the stored kept.
    conflicts: int = 0

    @property
    def duplicates(self) -> int:
        return self.received - self.inserted


def _number(value: Any, unit: str, low: float, high: float) -> tuple[float | None, str | None]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, "A number is required."
    try:
        value = float(value)
    except OverflowError:  # a JSON integer beyond any float
        value = math.inf
    if not math.isfinite(value) or not low <= value <= high:
        return None, f"Must be between {low:g} and {high:g} {unit}."
    return value, None


def gpus_of(node: Node) -> dict[str, int]:
    """UUID -> primary key of the node's GPUs."""
    return dict(Gpu.objects.filter(node=node).values_list("uuid", "pk"))


def _stamped_after(ts: Any, after: datetime) -> bool:
    """Whether ``ts`` (a sample's, as sent) is a time after ``after``; a bad stamp is not
    (the sample loop reports it)."""
    try:
        at = datetime.fromisoformat(ts) if isinstance(ts, str) else None
    except ValueError:
        return False
    return at is not None and at.tzinfo is not None and at > after


def validate_batch(
    node: Node,
    payload: Any,
    *,
    now: datetime,
    own_gpus: dict[str, int] | None = None,
    own_limits: dict[int, float] | None = None,
    own_since: dict[int, datetime] | None = None,
) -> list[tuple]:
    """Rows ready for :func:`store_and_mark`, or BatchRejected. Checks the envelope, every
    sample's fields, units and ranges, timestamps (not older than the retention window, not
    more than TELEMETRY_MAX_FUTURE_S ahead) and that each GPU is this node's, and was at
    the sample's time (``own_since``: pk -> ``Gpu.node_since`` of the GPUs that moved here;
    a sample from before is its old node's time, refused as that sample's fault, a 400)."""
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

    uuids = {
        s["gpu_uuid"] for s in samples if isinstance(s, dict) and isinstance(s.get("gpu_uuid"), str)
    }
    # The authentication query already fetched the node's own GPUs (one round trip fewer per
    # batch); only names outside that set are looked up, to tell "another node's" from unknown.
    own = own_gpus if own_gpus is not None else gpus_of(node)
    known = {u: (own[u], node.pk) for u in uuids if u in own}
    # Only a name that could be a stored UUID is looked up: PostgreSQL refuses NUL in a query
    # parameter (a 500), and the sample loop below reports every unknown name as such.
    strangers = [u for u in uuids if u not in own and u.isprintable() and len(u) <= 64]
    moved_away: dict[str, datetime] = {}
    if strangers:
        for uuid, pk, node_id, since in Gpu.objects.filter(uuid__in=strangers).values_list(
            "uuid", "pk", "node_id", "node_since"
        ):
            known[uuid] = (pk, node_id)
            if since is not None:
                moved_away[uuid] = since
    # A GPU of another node that moved there (``Gpu.node_since``) may have been this node's:
    # its agent's spool still holds samples of it from before the move. They are refused
    # one by one (a 400 naming them, so the agent posts its other GPUs' samples again);
    # refused as a batch (a 403), the agent quarantined every GPU's samples with them.
    # Nothing of another node's GPU is stored either way: the old node is not recorded, so
    # its word for the time before the move cannot be told from any other node's.
    moved_away = {u: t for u, t in moved_away.items() if known[u][1] != node.pk}
    # A sample of it stamped since it arrived there is no spool's of before the move: this
    # token speaks for another node's GPU, as of one that never moved. (Since it arrived
    # and the clock skew a stamp may carry ahead, ``TELEMETRY_MAX_FUTURE_S``: a GPU passed
    # between two virtual machines moves in seconds, and the old node's last samples of
    # it, stamped by a clock ahead, are still its spool's.)
    skew = timedelta(seconds=settings.TELEMETRY_MAX_FUTURE_S)
    since_arrival = {
        s["gpu_uuid"]
        for s in (samples if moved_away else ())
        if isinstance(s, dict)
        and isinstance(s.get("gpu_uuid"), str)
        and s["gpu_uuid"] in moved_away
        and _stamped_after(s.get("ts"), moved_away[s["gpu_uuid"]] + skew)
    }
    foreign = sorted(
        u
        for u, (_, node_id) in known.items()
        if node_id != node.pk and (u not in moved_away or u in since_arrival)
    )
    if foreign:
        raise BatchRejected(
            {"samples": [f"GPU(s) {', '.join(foreign)} belong to another node."]}, status=403
        )

    # What each GPU can draw at most: a reading far above it is no measurement (the
    # learned models refuse it, ``online_model.refusal_reason``), and the ledger must not
    # charge it either (a probe's 1,900 W on a 350 W L40S were charged to its team).
    if own_limits is None:
        own_limits = dict(Gpu.objects.filter(node=node).values_list("pk", "max_power_limit_w"))
    if own_since is None:
        own_since = dict(
            Gpu.objects.filter(node=node, node_since__isnull=False).values_list("pk", "node_since")
        )
    top_w = {pk: MAX_POWER_FACTOR * float(w) for pk, w in own_limits.items()}
    oldest = now - timedelta(seconds=settings.TELEMETRY_RETENTION_S)
    newest = now + timedelta(seconds=settings.TELEMETRY_MAX_FUTURE_S)
    rows: list[tuple] = []
    errors: dict[str, dict[str, list[str]]] = {}
    bad = 0
    first_at: dict[tuple[int, datetime], int] = {}  # (GPU, ts) -> the sample that had it first
    for i, sample in enumerate(samples):
        field_errors: dict[str, list[str]] = {}
        if not isinstance(sample, dict):
            field_errors["non_field_errors"] = ["A sample must be an object."]
        else:
            gpu_uuid = sample.get("gpu_uuid")
            gpu = known.get(gpu_uuid) if isinstance(gpu_uuid, str) else None
            if not isinstance(gpu_uuid, str):
                field_errors["gpu_uuid"] = ["A GPU UUID (text) is required."]
            elif gpu is None:
                field_errors["gpu_uuid"] = ["Unknown GPU: register it first."]
            elif gpu_uuid in moved_away:
                field_errors["gpu_uuid"] = [
                    f"GPU {gpu_uuid} moved to another node "
                    f"({moved_away[gpu_uuid].isoformat()}): this node no longer speaks for it."
                ]
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
            elif gpu is not None and gpu[0] in own_since and ts < own_since[gpu[0]]:
                # A GPU that moved here (a board retired on another node and registered by
                # this one's agent) is this node's from its arrival: a sample stamped before
                # is of the time it ran its old node's jobs, and was charged to them on this
                # node's word (a live probe: 9 kJ added to another team's job). Named per
                # sample: refused as a whole batch (a 403), an agent clock a second behind
                # the server's at the registration had the agent quarantine its other
                # GPUs' samples with the moved one's first.
                field_errors["ts"] = [
                    f"Stamped before GPU {gpu_uuid} came onto this node "
                    f"({own_since[gpu[0]].isoformat()}): that time is its old node's."
                ]
            elif gpu is not None:
                first = first_at.setdefault((gpu[0], ts), i)
                if first != i:
                    field_errors["ts"] = [
                        f"Sample {first} of this batch has the same GPU and time "
                        f"({sample['ts']}): which one is true is unknowable."
                    ]
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
                elif name == "power_w" and gpu is not None and number > top_w.get(gpu[0], 1e9):
                    field_errors[name] = [
                        f"{number:g} W is above {MAX_POWER_FACTOR:g} x this GPU's highest "
                        f"power limit ({top_w.get(gpu[0], 0.0) / MAX_POWER_FACTOR:g} W): no GPU "
                        "draws that."
                    ]
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


_TABLE = GpuSample._meta.db_table
_COLS = ", ".join(COLUMNS)
_UNNEST = (
    "SELECT * FROM unnest(%(gpu_id)b::bigint[], %(ts)b::timestamptz[], %(power_w)b::float8[], "
    "%(energy_j)b::float8[], %(util_pct)b::float8[], %(mem_used_mib)b::float8[], "
    "%(temp_c)b::float8[], %(sm_clock_mhz)b::int[], %(power_limit_w)b::float8[])"
)
# One statement stores the rows and marks the (GPU, hour)s of the rows that were new, plus the
# neighbouring hour for rows within TELEMETRY_MAX_GAP_S of a boundary (their interval reaches
# into it). A single statement is atomic on its own, so no BEGIN/COMMIT round trips.
_STORE_AND_MARK_SQL = f"""
WITH new AS (
    INSERT INTO {_TABLE} ({_COLS}) {_UNNEST}
    ON CONFLICT DO NOTHING
    RETURNING gpu_id, ts
), marks AS (
    SELECT DISTINCT new.gpu_id, v.hour
    FROM new, LATERAL (VALUES
        (date_trunc('hour', new.ts)),
        (CASE WHEN new.ts - date_trunc('hour', new.ts) < %(gap)s
              THEN date_trunc('hour', new.ts) - interval '1 hour' END),
        (CASE WHEN date_trunc('hour', new.ts) + interval '1 hour' - new.ts <= %(gap)s
              THEN date_trunc('hour', new.ts) + interval '1 hour' END)
    ) AS v(hour)
    WHERE v.hour IS NOT NULL
    ORDER BY 1, 2
), dirty AS (
    INSERT INTO {DirtyHour._meta.db_table} (gpu_id, hour, marked_at)
    SELECT gpu_id, hour, %(now)s FROM marks
    ON CONFLICT (gpu_id, hour) DO UPDATE SET marked_at = EXCLUDED.marked_at
)
SELECT count(*) FROM new
"""


def _columns(rows: list[tuple]) -> dict[str, list]:
    arrays = dict(zip(COLUMNS, (list(c) for c in zip(*rows, strict=True)), strict=True))
    arrays["sm_clock_mhz"] = [None if v is None else int(v) for v in arrays["sm_clock_mhz"]]
    return arrays


def _binding_cursor() -> psycopg.Cursor:
    """A server-side-binding cursor on Django's connection (same transaction). Django's own
    cursors bind client-side, which spends milliseconds quoting nine arrays per batch."""
    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)


def store_and_mark(rows: list[tuple], *, now: datetime) -> int:
    """Insert rows (COLUMNS order) skipping (GPU, ts) already stored, mark their hours dirty;
    returns how many rows were new."""
    params = _columns(rows)
    params["gap"] = timedelta(seconds=settings.TELEMETRY_MAX_GAP_S)
    params["now"] = now
    with _binding_cursor() as cursor:
        cursor.execute(_STORE_AND_MARK_SQL, params)
        return cursor.fetchone()[0]


# The rows of a batch whose (GPU, ts) is stored with other values (a row just inserted equals
# itself). Run only when the insert skipped rows, so a batch of new samples pays nothing.
_CONFLICTS_SQL = f"""
SELECT count(*) FROM ({_UNNEST}) AS u({_COLS})
JOIN {_TABLE} t ON t.gpu_id = u.gpu_id AND t.ts = u.ts
WHERE ({", ".join(f"t.{c}" for c in NUMERIC_FIELDS)})
    IS DISTINCT FROM ({", ".join(f"u.{c}" for c in NUMERIC_FIELDS)})
"""


def count_conflicts(rows: list[tuple]) -> int:
    """How many of ``rows`` (COLUMNS order) have their (GPU, ts) stored with other values."""
    with _binding_cursor() as cursor:
        cursor.execute(_CONFLICTS_SQL, _columns(rows))
        return cursor.fetchone()[0]


_GPU_TABLE = Gpu._meta.db_table
_CLOCK, _LIMIT = COLUMNS.index("sm_clock_mhz"), COLUMNS.index("power_limit_w")
# The GPU rows take their newest reported clock and power limit. Rows are locked in id order
# and a row a scheduling round holds (``set_allocation`` locks GPUs until the round commits) is
# skipped, not waited for: ingestion never queues behind a round, and the next batch writes it.
# A sample older than the one already recorded (a spooled batch replayed late) changes nothing;
# one that reports the same values rewrites the row only once its time is REPORT_REFRESH old
# (the settings change rarely; the row is not rewritten by every batch). A limit outside the
# GPU's registered range (the table's check) is recorded as unknown.
REPORT_REFRESH = timedelta(seconds=60)
_REPORTED_SQL = f"""
WITH v AS (
    SELECT u.gpu_id, u.ts, u.clock,
           CASE WHEN round(u.lim) BETWEEN g.min_power_limit_w AND g.max_power_limit_w
                THEN round(u.lim)::int END AS lim
    FROM unnest(%(gpu_id)b::bigint[], %(ts)b::timestamptz[], %(clock)b::int[],
                %(limit)b::float8[]) AS u(gpu_id, ts, clock, lim)
    JOIN {_GPU_TABLE} g ON g.id = u.gpu_id
), free AS (
    SELECT g.id FROM {_GPU_TABLE} g JOIN v ON v.gpu_id = g.id
    WHERE g.reported_at IS NULL OR (
        g.reported_at < v.ts AND (
            g.sm_clock_mhz IS DISTINCT FROM v.clock OR g.power_limit_w IS DISTINCT FROM v.lim
            OR g.reported_at <= v.ts - %(refresh)s
        )
    )
    ORDER BY g.id FOR NO KEY UPDATE OF g SKIP LOCKED
)
UPDATE {_GPU_TABLE} g SET reported_at = v.ts, sm_clock_mhz = v.clock, power_limit_w = v.lim
FROM v, free
WHERE g.id = v.gpu_id AND g.id = free.id AND (g.reported_at IS NULL OR g.reported_at < v.ts)
"""


def record_reported_settings(rows: list[tuple]) -> int:
    """Write each GPU's SM clock and power limit from its newest sample among ``rows``
    (COLUMNS order); returns how many GPU rows changed."""
    newest: dict[int, tuple] = {}
    for row in rows:
        held = newest.get(row[0])
        if held is None or row[1] > held[1]:
            newest[row[0]] = row
    if not newest:
        return 0
    latest = list(newest.values())
    params = {
        "gpu_id": [r[0] for r in latest],
        "ts": [r[1] for r in latest],
        "clock": [None if r[_CLOCK] is None else int(r[_CLOCK]) for r in latest],
        "limit": [r[_LIMIT] for r in latest],
        "refresh": REPORT_REFRESH,
    }
    with _binding_cursor() as cursor:
        cursor.execute(_REPORTED_SQL, params)
        return cursor.rowcount


def _refuse_vanished(node: Node, rows: list[tuple]) -> None:
    """After the insert failed its foreign key (a GPU of the batch deleted since it was
    validated: the dirty-hour marks name it, checked at the statement's commit, which
    waited on the delete's lock), answer as the agent's next request would be answered:
    its node gone (its token with it), ``NodeGone``; else the samples of the GPUs gone
    refused by position as an unknown GPU's, ``BatchRejected`` (400). Nothing of the batch
    was stored (the statement is rolled back whole); what was stored before is untouched.
    Returns if every GPU is still there (the caller raises the error)."""
    if not Node.objects.filter(pk=node.pk).exists():
        raise NodeGone(f"Node {node.name} was deleted: its token no longer speaks for it.")
    named = {row[0] for row in rows}
    gone = named - set(Gpu.objects.filter(pk__in=named).values_list("pk", flat=True))
    if not gone:
        return
    refused = [str(i) for i, row in enumerate(rows) if row[0] in gone]
    body: dict[str, Any] = {
        "samples": {
            i: {"gpu_uuid": ["Unknown GPU: register it first."]} for i in refused[:_MAX_REPORTED]
        }
    }
    if len(refused) > _MAX_REPORTED:
        body["non_field_errors"] = [
            f"{len(refused)} samples are invalid; the first {_MAX_REPORTED} shown."
        ]
    raise BatchRejected(body)


def ingest_batch(
    node: Node,
    payload: Any,
    *,
    now: datetime | None = None,
    own_gpus: dict[str, int] | None = None,
    own_limits: dict[int, float] | None = None,
    own_since: dict[int, datetime] | None = None,
) -> IngestResult:
    """Validate and store one agent batch; BatchRejected leaves the database untouched.
    ``own_gpus`` (UUID -> pk of the node's GPUs) and ``own_limits`` (pk -> highest power
    limit) save a query each when the caller has them.
    Samples already stored are skipped (duplicates); those among them whose values differ
    from the stored sample are counted as ``conflicts`` (the stored one is kept).
    A GPU of the batch deleted while it is stored (``_refuse_vanished``): BatchRejected
    naming its samples, or NodeGone when the node went with it; no lock is taken for it."""
    now = now or timezone.now()
    rows = validate_batch(
        node, payload, now=now, own_gpus=own_gpus, own_limits=own_limits, own_since=own_since
    )
    try:
        inserted = store_and_mark(rows, now=now)
    except psycopg.errors.ForeignKeyViolation:
        if connection.in_atomic_block:  # (the caller's transaction is aborted: its to answer)
            raise
        _refuse_vanished(node, rows)
        raise
    conflicts = count_conflicts(rows) if inserted < len(rows) else 0
    record_reported_settings(rows)
    return IngestResult(received=len(rows), inserted=inserted, conflicts=conflicts)
