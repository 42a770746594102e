"""Property-based tests (Hypothesis) of telemetry ingestion and accounting on the real
PostgreSQL: ``telemetry/ingest.py`` is idempotent, indifferent to the order and batching of
samples, and stores nothing of a batch it refuses; ``telemetry/accounting.py`` books every
joule of an hour to exactly one ledger row (job or idle), and prices carbon as energy x
intensity.

Each example runs inside a savepoint that is rolled back, so examples start from the same
database; examples are few (``max_examples``) and derandomized to keep the suite fast.
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from agent_samples import sample
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from telemetry_clock import T0

from cluster import services as cluster_services
from cluster.models import Gpu
from scheduling.core.types import J_PER_KWH
from telemetry.accounting import process_dirty_hours
from telemetry.choices import CarbonSource
from telemetry.energy import Point, attribute
from telemetry.ingest import BatchRejected, ingest_batch
from telemetry.models import CarbonIntensity, DirtyHour, EnergyLedgerEntry, GpuHour, GpuSample

NOW = T0 + timedelta(hours=2)
DB_PROPS = settings(
    max_examples=20,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class _Rollback(Exception):
    pass


def rolled_back(check):
    """Run ``check()`` in a savepoint and undo everything it wrote."""
    try:
        with transaction.atomic():
            check()
            raise _Rollback
    except _Rollback:
        pass


@st.composite
def batches(draw, *, uuids: tuple[str, ...] = ("GPU-node-01-0", "GPU-node-01-1")):
    """A valid batch: unique (GPU, ts) within the last two hours, plausible readings and a
    counter that follows power x time (or is missing), so that any check of counter steps
    against power accepts it."""
    count = draw(st.integers(min_value=1, max_value=30))
    offsets = draw(
        st.lists(
            st.tuples(st.sampled_from(uuids), st.integers(min_value=0, max_value=7199)),
            min_size=count,
            max_size=count,
            unique=True,
        )
    )
    # up to 1.5 x the GPUs' 400 W limit: the most ingestion takes as a GPU's draw
    power = draw(st.floats(min_value=0.0, max_value=600.0))
    counters = draw(st.booleans())
    samples = []
    for uuid, offset in offsets:
        extra = {
            "power_w": power,
            "energy_j": 1e6 + power * offset if counters else None,
            "util_pct": draw(st.one_of(st.none(), st.floats(min_value=0, max_value=100))),
            "temp_c": draw(st.one_of(st.none(), st.floats(min_value=-50, max_value=150))),
        }
        samples.append(sample(uuid, T0 + timedelta(seconds=offset), **extra))
    return samples


def _stored() -> set[tuple]:
    return set(GpuSample.objects.values_list("gpu__uuid", "ts", "power_w", "energy_j", "util_pct"))


def _as_stored(samples: list[dict]) -> set[tuple]:
    from datetime import datetime

    return {
        (s["gpu_uuid"], datetime.fromisoformat(s["ts"]), s["power_w"], s["energy_j"],
         s["util_pct"])
        for s in samples
    }  # fmt: skip


@pytest.fixture
def node(agent_node):
    return agent_node[0]


@DB_PROPS
@given(samples=batches())
def test_ingestion_is_idempotent(node, samples):
    def check():
        first = ingest_batch(node, {"samples": samples}, now=NOW)
        stored = _stored()
        again = ingest_batch(node, {"samples": samples}, now=NOW)
        assert first.inserted == first.received == len(samples)
        assert again.inserted == 0 and again.duplicates == len(samples)
        assert _stored() == stored == _as_stored(samples)

    rolled_back(check)


@DB_PROPS
@given(samples=batches(), data=st.data())
def test_order_and_batching_do_not_change_what_is_stored(node, samples, data):
    shuffled = data.draw(st.permutations(samples))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(samples)), max_size=3)))
    parts = [shuffled[a:b] for a, b in zip([0, *cuts], [*cuts, len(samples)], strict=True)]
    parts = [p for p in parts if p]
    reference: dict = {}

    def once():
        ingest_batch(node, {"samples": samples}, now=NOW)
        reference["rows"] = _stored()
        reference["dirty"] = set(DirtyHour.objects.values_list("gpu_id", "hour"))

    def in_parts():
        inserted = sum(ingest_batch(node, {"samples": p}, now=NOW).inserted for p in parts)
        assert inserted == len(samples)
        assert _stored() == reference["rows"]
        assert set(DirtyHour.objects.values_list("gpu_id", "hour")) == reference["dirty"]

    rolled_back(once)
    rolled_back(in_parts)


BAD_VALUES = st.sampled_from(
    [
        ("power_w", float("nan")),
        ("power_w", float("inf")),
        ("power_w", -1.0),
        ("power_w", 2001.0),
        ("power_w", None),
        ("power_w", "250"),
        ("energy_j", -5.0),
        ("util_pct", 100.5),
        ("temp_c", float("-inf")),
        ("sm_clock_mhz", 10**12),
        ("ts", "yesterday"),
        ("ts", "2026-11-22T03:00:00"),  # no UTC offset
        ("ts", (NOW + timedelta(days=1)).isoformat()),
        ("gpu_uuid", "GPU-nobody"),
        ("gpu_uuid", "GPU-node-02-0"),  # another node's GPU: 403
    ]
)


@DB_PROPS
@given(samples=batches(), bad=BAD_VALUES, data=st.data())
def test_a_refused_batch_stores_nothing(node, other_node, samples, bad, data):
    field, value = bad
    position = data.draw(st.integers(0, len(samples)))
    spoiled = dict(samples[min(position, len(samples) - 1)], **{field: value})
    batch = [*samples[:position], spoiled, *samples[position:]]

    def check():
        before = (GpuSample.objects.count(), DirtyHour.objects.count())
        with pytest.raises(BatchRejected) as refused:
            ingest_batch(node, {"samples": batch}, now=NOW)
        assert refused.value.status in (400, 403)
        assert (GpuSample.objects.count(), DirtyHour.objects.count()) == before

    rolled_back(check)


@DB_PROPS
@given(
    powers=st.lists(st.floats(min_value=0.0, max_value=600.0), min_size=2, max_size=12),
    step_s=st.integers(min_value=1, max_value=50),
    hold=st.integers(min_value=0, max_value=11),
    ci=st.floats(min_value=0.0, max_value=1500.0),
)
def test_accounting_books_every_joule_once_and_prices_it(
    node, make_job, member, team, powers, step_s, hold, ci
):
    """Samples of one GPU inside one hour, a job holding it from the ``hold``-th sample on:
    the ledger rows (job and idle) sum to the hour's rollup and to the pure arithmetic's
    total, the job's share is what was drawn while it held the GPU, and every row's carbon is
    its energy in kWh times the hour's intensity."""
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    hold = min(hold, len(powers) - 1)
    hour = T0.replace(minute=0, second=0, microsecond=0)
    times = [hour + timedelta(seconds=600 + i * step_s) for i in range(len(powers))]
    samples = [
        sample(gpu.uuid, t, power_w=p, energy_j=None) for t, p in zip(times, powers, strict=True)
    ]

    def check():
        CarbonIntensity.objects.create(
            zone="ES", hour=hour, ci_g_per_kwh=ci, source=CarbonSource.IMPORTED
        )
        job = make_job(owner=member, team=team, name="held")
        cluster_services.start_job(job, gpus=[gpu], batch_size=256, at=times[hold])
        ingest_batch(node, {"samples": samples}, now=NOW)
        process_dirty_hours()
        points = [Point(t.timestamp(), p) for t, p in zip(times, powers, strict=True)]
        expected = attribute(
            points, [], window_start_s=hour.timestamp(),
            window_end_s=(hour + timedelta(hours=1)).timestamp(), max_gap_s=1e9,
        ).total_j  # fmt: skip
        rows = list(EnergyLedgerEntry.objects.filter(gpu=gpu, hour=hour))
        booked = sum(r.energy_j for r in rows)
        if expected == 0:
            assert rows == []
            return
        assert booked == pytest.approx(expected, rel=1e-9, abs=1e-6)
        assert GpuHour.objects.get(gpu=gpu, hour=hour).energy_j == pytest.approx(booked)
        held = attribute(
            points[hold:], [], window_start_s=times[hold].timestamp(),
            window_end_s=times[-1].timestamp() + 1, max_gap_s=1e9,
        ).total_j  # fmt: skip
        by_job = {r.job_id: r for r in rows}
        charged = by_job[job.pk].energy_j if job.pk in by_job else 0.0
        assert charged == pytest.approx(held, rel=1e-9, abs=1e-6)
        for row in rows:
            assert row.team_id == (team.pk if row.job_id else None)
            assert row.ci_g_per_kwh == ci
            assert math.isclose(row.co2_g, row.energy_j / J_PER_KWH * ci, rel_tol=1e-9)

    rolled_back(check)
