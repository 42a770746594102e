"""Migrating to one store of "why a job waits" (cluster 0008-0009, scheduling 0005) loses
nothing: the expected start and round move from JobSchedulingState onto the job, and a code
outside the choices is cleared with its text kept."""

from datetime import UTC, datetime

import pytest
from support.migrations import stored_before

BEFORE = [("cluster", "0006_budget_periods_do_not_overlap"), ("scheduling", "0002_live_rounds")]
AT = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)


def _job(apps, team, user, name, state, code, reason):
    return apps.get_model("cluster", "Job").objects.create(
        owner=user, team=team, name=name, workload="bert", global_batch_size=8,
        min_batch_size=8, max_batch_size=8, total_iterations=10, state=state,
        pending_reason_code=code, pending_reason=reason,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_waits_move_onto_the_job_and_nothing_readable_is_lost():
    with stored_before(BEFORE) as (apps, user, team):
        round_row = apps.get_model("scheduling", "SchedulingRound").objects.create(
            started_at=AT, finished_at=AT, policy="fifo", round_length_s=60.0,
            schedulable_gpus=8, active_jobs=2, running_jobs=0, waiting_jobs=2, changes=0,
            predicted_energy_j=0.0, predicted_co2_g=0.0, ci_g_per_kwh=100.0,
            plan_duration_s=0.01,
        )  # fmt: skip
        queued = _job(apps, team, user, "q", "queued", "behind_in_queue", "Waiting: 1 ahead.")
        odd = _job(apps, team, user, "o", "paused", "no_capacity", "")
        State = apps.get_model("scheduling", "JobSchedulingState")
        State.objects.create(
            job_id=queued.pk, wait_code="behind_in_queue", wait_reason="Waiting: 1 ahead.",
            wait_until=AT.replace(hour=5), wait_round=round_row, iter_time_scale=1.2,
        )  # fmt: skip

    from cluster.models import Job
    from scheduling.models import JobSchedulingState

    queued = Job.objects.get(pk=queued.pk)
    assert (queued.pending_reason_code, queued.pending_reason) == (
        "behind_in_queue",
        "Waiting: 1 ahead.",
    )
    assert (queued.pending_until, queued.pending_round_id) == (AT.replace(hour=5), round_row.pk)
    assert JobSchedulingState.objects.get(job=queued).iter_time_scale == 1.2
    odd = Job.objects.get(pk=odd.pk)
    assert (odd.pending_reason_code, odd.pending_reason) == ("", "no_capacity")
