"""Iteration times from progress reports: a report out of order is left out of the fit."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from cluster.models import JobAllocation
from scheduling.observations import progress_iter_times
from telemetry.choices import JobEventKind
from telemetry.models import JobEvent

T0 = datetime(2026, 12, 6, 8, 0, 0, tzinfo=UTC)


def _report(node, job, alloc, at_s: float, iterations: float) -> None:
    JobEvent.objects.create(
        event_id=uuid.uuid4(), kind=JobEventKind.PROGRESS, ts=T0 + timedelta(seconds=at_s),
        iterations=iterations, node=node, job=job, allocation_id=alloc.pk,
        received_at=T0 + timedelta(seconds=at_s),
    )  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize("stray", [400.0, 5.0])
def test_a_report_out_of_order_is_left_out(make_node, make_job, member, team, caplog, stray):
    # given reports of 10 iterations a second (0.1 s each), and one of 400 stamped 0.95 s
    # before the report of 70 (a live probe: both were accepted), or one of 5 there
    # (kept as the only one in order with what follows it, it threw away six good ones)
    node = make_node("node-01")
    job = make_job(owner=member, team=team)
    alloc = JobAllocation.objects.create(job=job, batch_size=32, started_at=T0)
    for k in range(1, 8):
        _report(node, job, alloc, float(k), 10.0 * k)
    _report(node, job, alloc, 6.05, stray)

    # when the round reads its iteration times
    with caplog.at_level(logging.WARNING, logger="scheduling.observations"):
        times, last = progress_iter_times(job.pk, alloc.pk, since=T0, now=T0 + timedelta(minutes=1))

    # then every interval is the job's 0.1 s (before: one of 0.05 s / 340 iterations
    # entered the fit, 2.5 times the job's speed), and the refusal is logged
    assert times == pytest.approx([0.1] * 6)
    assert last == T0 + timedelta(seconds=7)
    assert "1 progress report(s)" in caplog.text
    assert "out of order" in caplog.text
