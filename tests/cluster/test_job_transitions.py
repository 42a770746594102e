"""Every (from, to) pair of job states, allowed or refused, straight from JOB_TRANSITIONS."""

from datetime import UTC, datetime
from itertools import product

import pytest

from cluster.choices import JOB_TRANSITIONS, TERMINAL_JOB_STATES, JobState, WaitCode, can_transition
from cluster.models import Job, JobAllocation
from cluster.services import InvalidTransition, set_allocation, transition_job

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LATER = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)

ALLOWED = [(old, new) for old, targets in JOB_TRANSITIONS.items() for new in sorted(targets)]
REFUSED = [
    (old, new) for old, new in product(JobState, JobState) if new not in JOB_TRANSITIONS[old]
]


def _job_in_state(make_job, owner, team, state: JobState) -> Job:
    # Put the row in the state under test directly: reaching it through services is what the
    # other tests in this file check.
    job = make_job(owner=owner, team=team)
    Job.objects.filter(pk=job.pk).update(state=state)
    job.refresh_from_db()
    return job


def test_transition_table_covers_every_pair_exactly_once():
    assert len(ALLOWED) == 10
    assert len(ALLOWED) + len(REFUSED) == len(JobState) ** 2
    assert TERMINAL_JOB_STATES == {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}


@pytest.mark.parametrize(("old", "new"), ALLOWED, ids=[f"{o}->{n}" for o, n in ALLOWED])
def test_allowed_transition_updates_the_row(make_job, member, team, old, new):
    # given a job in state old
    job = _job_in_state(make_job, member, team, old)
    assert can_transition(old, new)

    # when it moves to new
    transition_job(job, to=new, at=AT, pending_reason_code=WaitCode.PREEMPTED)

    # then the row says so, with the right timestamps
    row = Job.objects.get(pk=job.pk)
    assert row.state == new
    assert job.state == new
    # a reason is kept only where the job waits; any other state clears it
    waits = new in (JobState.QUEUED, JobState.PAUSED)
    assert row.pending_reason_code == (WaitCode.PREEMPTED if waits else "")
    assert row.updated_at == AT
    assert row.started_at == (AT if new == JobState.RUNNING else None)
    assert row.finished_at == (AT if new in TERMINAL_JOB_STATES else None)


@pytest.mark.parametrize(("old", "new"), REFUSED, ids=[f"{o}->{n}" for o, n in REFUSED])
def test_refused_transition_raises_and_leaves_the_row_unchanged(make_job, member, team, old, new):
    # given a job in state old
    job = _job_in_state(make_job, member, team, old)
    before = Job.objects.filter(pk=job.pk).values().get()
    assert not can_transition(old, new)

    # when it is asked to move to new
    with pytest.raises(InvalidTransition) as excinfo:
        transition_job(job, to=new, at=AT, exit_status=3)

    # then the error names both states and nothing was written
    assert f"from {old} to {new}" in str(excinfo.value)
    assert excinfo.value.job_id == job.pk
    assert Job.objects.filter(pk=job.pk).values().get() == before


def test_stale_state_loses_the_race_and_writes_nothing(make_job, member, team):
    # given two copies of a queued job, one of which starts it
    job = make_job(owner=member, team=team)
    stale = Job.objects.get(pk=job.pk)
    transition_job(job, to=JobState.RUNNING, at=AT)
    before = Job.objects.filter(pk=job.pk).values().get()

    # when the stale copy tries to cancel from queued
    with pytest.raises(InvalidTransition) as excinfo:
        transition_job(stale, to=JobState.CANCELLED, at=LATER)

    # then it is refused with the real current state and the row is untouched
    assert "it is running now, not queued" in str(excinfo.value)
    assert Job.objects.filter(pk=job.pk).values().get() == before


def test_restart_after_pause_keeps_the_first_start_time(make_job, member, team):
    job = make_job(owner=member, team=team)
    transition_job(job, to=JobState.RUNNING, at=AT)
    transition_job(job, to=JobState.PAUSED, at=AT)

    transition_job(job, to=JobState.RUNNING, at=LATER)

    assert Job.objects.get(pk=job.pk).started_at == AT


@pytest.mark.parametrize(
    "new", sorted(JOB_TRANSITIONS[JobState.RUNNING]), ids=lambda s: f"running->{s}"
)
def test_leaving_running_closes_the_open_allocation(make_job, make_node, member, team, new):
    # given a running job on two GPUs
    node = make_node()
    job = make_job(owner=member, team=team)
    transition_job(job, to=JobState.RUNNING, at=AT)
    allocation = set_allocation(job, gpus=node.gpus.all()[:2], batch_size=256, at=AT)

    # when it leaves running
    transition_job(job, to=new, at=LATER)

    # then it holds no GPUs any more and the history keeps the stretch it ran
    allocation.refresh_from_db()
    assert allocation.ended_at == LATER
    assert Job.objects.get(pk=job.pk).current_allocation is None
    assert JobAllocation.objects.filter(job=job, ended_at__isnull=True).count() == 0
