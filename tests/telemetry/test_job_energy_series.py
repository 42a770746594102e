"""The job page's cumulative energy (``telemetry.queries.job_energy_series``) is the ledger's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cluster.models import Gpu
from telemetry.models import EnergyLedgerEntry
from telemetry.queries import job_energy_series

HOUR = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)


def _row(gpu, job, minutes_j, *, hour=HOUR):
    return EnergyLedgerEntry.objects.create(
        gpu=gpu, hour=hour, job=job, team=job.team if job else None,
        energy_j=sum(minutes_j) if minutes_j else 7_200.0, co2_g=0.0, ci_g_per_kwh=0.0,
        zone="ES", minutes_j=minutes_j,
    )  # fmt: skip


def test_the_series_is_the_jobs_ledger_minute_by_minute_and_ends_at_its_total(
    make_node, make_job, member, team
):
    # given a job charged on two GPUs in minutes 1 and 2 (a resize: both allocations touched
    # minute 1), another job sharing GPU 0 in minute 1, and an older row without minutes
    node = make_node("node-01", gpus=2)
    gpu0, gpu1 = Gpu.objects.filter(node=node).order_by("index")
    job, other = make_job(owner=member, team=team), make_job(owner=member, team=team)
    _row(gpu0, job, [0.0, 3_600.0, 0.0] + [0.0] * 57)
    _row(gpu1, job, [0.0, 1_800.0, 3_600.0] + [0.0] * 57)
    _row(gpu0, other, [0.0, 3_600.0] + [0.0] * 58)
    _row(gpu1, job, [], hour=HOUR - timedelta(hours=1))
    # then the series counts the job's own joules once, in the minutes they fell in
    series = job_energy_series(job.pk)
    assert series == [
        (HOUR, pytest.approx(7_200.0 / 3.6e6)),  # the old row at its hour's last minute
        (HOUR + timedelta(minutes=2), pytest.approx(12_600.0 / 3.6e6)),
        (HOUR + timedelta(minutes=3), pytest.approx(16_200.0 / 3.6e6)),
    ]
    total = sum(EnergyLedgerEntry.objects.filter(job=job).values_list("energy_j", flat=True))
    assert series[-1][1] == pytest.approx(total / 3.6e6)
