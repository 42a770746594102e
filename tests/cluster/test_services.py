"""Job submission, cancellation and allocations through cluster.services."""

from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError

from cluster.choices import JobState
from cluster.models import Job, JobAllocation
from cluster.services import (
    AllocationError,
    InvalidTransition,
    cancel_job,
    set_allocation,
    start_job,
    submit_job,
    transition_job,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T1 = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
T2 = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)


def test_submit_job_without_ranges_makes_a_fixed_size_job(member, team):
    job = submit_job(
        owner=member,
        team=team,
        name="bert",
        workload="bert",
        total_iterations=500,
        global_batch_size=32,
        min_gpus=2,
        at=T0,
    )

    row = Job.objects.get(pk=job.pk)
    assert (row.min_gpus, row.max_gpus) == (2, 2)
    assert (row.min_batch_size, row.global_batch_size, row.max_batch_size) == (32, 32, 32)
    assert row.state == JobState.QUEUED
    assert row.submitted_at == T0
    assert row.slowdown_tolerance == 0.10
    assert row.completed_iterations == 0.0


def test_submit_job_refuses_inverted_gpu_range_and_stores_nothing(member, team):
    with pytest.raises(ValidationError) as excinfo:
        submit_job(
            owner=member,
            team=team,
            name="bad",
            workload="bert",
            total_iterations=10,
            global_batch_size=32,
            min_gpus=4,
            max_gpus=2,
        )

    assert excinfo.value.message_dict == {"max_gpus": ["Must be at least min_gpus."]}
    assert Job.objects.count() == 0


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.RUNNING, JobState.PAUSED])
def test_cancel_job_cancels_from_any_live_state_even_with_a_stale_copy(
    make_job, member, team, state
):
    # given a job whose in-memory copy still says queued while the row says state
    job = make_job(owner=member, team=team)
    Job.objects.filter(pk=job.pk).update(state=state)

    cancel_job(job, at=T1)

    row = Job.objects.get(pk=job.pk)
    assert row.state == JobState.CANCELLED
    assert row.finished_at == T1


@pytest.mark.parametrize("state", [JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED])
def test_cancel_job_refuses_a_finished_job(make_job, member, team, state):
    job = make_job(owner=member, team=team)
    Job.objects.filter(pk=job.pk).update(state=state, finished_at=T0)

    with pytest.raises(InvalidTransition):
        cancel_job(job, at=T1)

    row = Job.objects.get(pk=job.pk)
    assert (row.state, row.finished_at) == (state, T0)


def test_set_allocation_closes_the_previous_one_and_keeps_history(
    make_job, make_node, member, team
):
    # given a job running on 2 GPUs
    gpus = list(make_node().gpus.order_by("index"))
    job = make_job(owner=member, team=team)
    first = start_job(job, gpus=gpus[:2], batch_size=256, sm_clock_mhz=1410, at=T0)

    # when the scheduler grows it to 4 GPUs at a lower clock
    second = set_allocation(
        job, gpus=gpus[:4], batch_size=512, sm_clock_mhz=1200, power_limit_w=300, at=T1
    )

    # then the first stretch is closed, the second is current
    first.refresh_from_db()
    assert first.ended_at == T1
    assert second.ended_at is None
    assert Job.objects.get(pk=job.pk).current_allocation_id == second.pk
    assert sorted(g.index for g in second.gpus.all()) == [0, 1, 2, 3]
    assert (second.batch_size, second.sm_clock_mhz, second.power_limit_w) == (512, 1200, 300)
    assert list(job.allocations.order_by("started_at").values_list("started_at", "ended_at")) == [
        (T0, T1),
        (T1, None),
    ]


def test_set_allocation_refuses_gpus_another_job_holds(make_job, make_node, member, team):
    gpus = list(make_node().gpus.order_by("index"))
    holder = make_job(owner=member, team=team, name="holder")
    start_job(holder, gpus=gpus[:2], batch_size=256, at=T0)
    other = make_job(owner=member, team=team, name="other")
    transition_job(other, to=JobState.RUNNING, at=T0)

    with pytest.raises(AllocationError, match=rf"held by job\(s\) \[{holder.pk}\]"):
        set_allocation(other, gpus=gpus[1:3], batch_size=256, at=T1)

    assert JobAllocation.objects.filter(job=other).count() == 0
    assert Job.objects.get(pk=other.pk).current_allocation_id is None


@pytest.mark.parametrize(
    ("gpu_count", "batch_size", "message"),
    [
        (5, 256, "takes 1..4 GPUs, not 5"),
        (2, 1024, "batch sizes 128..512, not 1024"),
        (2, 64, "batch sizes 128..512, not 64"),
    ],
)
def test_set_allocation_refuses_out_of_range_settings(
    make_job, make_node, member, team, gpu_count, batch_size, message
):
    gpus = list(make_node().gpus.order_by("index"))
    job = make_job(owner=member, team=team)
    transition_job(job, to=JobState.RUNNING, at=T0)

    with pytest.raises(AllocationError, match=message):
        set_allocation(job, gpus=gpus[:gpu_count], batch_size=batch_size, at=T1)

    assert JobAllocation.objects.filter(job=job).count() == 0


def test_start_job_that_cannot_be_placed_stays_queued(make_job, make_node, member, team):
    gpus = list(make_node().gpus.order_by("index"))
    job = make_job(owner=member, team=team)

    with pytest.raises(AllocationError):
        start_job(job, gpus=gpus[:8], batch_size=256, at=T0)

    row = Job.objects.get(pk=job.pk)
    assert (row.state, row.started_at, row.current_allocation_id) == (JobState.QUEUED, None, None)
    assert job.state == JobState.QUEUED


def test_set_allocation_refuses_a_job_that_is_not_running(make_job, make_node, member, team):
    gpus = list(make_node().gpus.all())
    job = make_job(owner=member, team=team)

    with pytest.raises(AllocationError, match="is queued; only running jobs hold GPUs"):
        set_allocation(job, gpus=gpus[:1], batch_size=256, at=T0)

    assert JobAllocation.objects.count() == 0
