"""Concurrent writers on the real PostgreSQL: exactly one of two racing state changes or
allocations wins, and the loser leaves nothing behind."""

from datetime import UTC, datetime

import pytest

from cluster.choices import JobState
from cluster.models import Job, JobAllocation
from cluster.services import (
    AllocationError,
    InvalidTransition,
    set_allocation,
    transition_job,
)

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(2))
def test_two_racing_transitions_of_one_job_have_one_winner(race, make_job, member, team, attempt):
    # given two copies of a queued job, one about to start it and one about to cancel it
    job = make_job(owner=member, team=team)
    starter, canceller = Job.objects.get(pk=job.pk), Job.objects.get(pk=job.pk)

    results = race(
        lambda: transition_job(starter, to=JobState.RUNNING, at=AT),
        lambda: transition_job(canceller, to=JobState.CANCELLED, at=AT),
    )

    # then exactly one succeeded, and the row shows the winner's state only
    winners = [r for r in results if isinstance(r, Job)]
    losers = [r for r in results if isinstance(r, InvalidTransition)]
    assert (len(winners), len(losers)) == (1, 1)
    row = Job.objects.get(pk=job.pk)
    assert row.state == winners[0].state
    if row.state == JobState.RUNNING:
        assert (row.started_at, row.finished_at) == (AT, None)
    else:
        assert (row.started_at, row.finished_at) == (None, AT)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(2))
def test_two_jobs_racing_for_the_same_gpus_have_one_winner(
    race, make_job, make_node, member, team, attempt
):
    # given two running jobs and one node, both asking for GPUs 0 and 1
    gpus = list(make_node(gpus=2).gpus.order_by("index"))
    first, second = (make_job(owner=member, team=team, name=n) for n in ("first", "second"))
    for job in (first, second):
        transition_job(job, to=JobState.RUNNING, at=AT)

    results = race(
        lambda: set_allocation(first, gpus=gpus, batch_size=256, at=AT),
        lambda: set_allocation(second, gpus=gpus, batch_size=256, at=AT),
    )

    # then one holds both GPUs and the other got nothing
    assert sorted(type(r).__name__ for r in results) == ["AllocationError", "JobAllocation"]
    assert all(isinstance(r, JobAllocation | AllocationError) for r in results)
    open_allocations = JobAllocation.objects.filter(ended_at__isnull=True)
    assert open_allocations.count() == 1
    assert sorted(open_allocations.get().gpus.values_list("index", flat=True)) == [0, 1]
    holders = Job.objects.filter(current_allocation__isnull=False)
    assert holders.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("key", [None, "retry-1"])
def test_a_job_submitted_while_its_team_is_deleted_is_a_400_naming_the_team(
    api_client, member, team, key
):
    # A live probe raced POST /api/jobs/ with DELETE /api/teams/<slug>/ (a team with no
    # jobs yet): 15 of 15 submits were a 500, the insert's foreign key check waiting on the
    # delete's lock and then finding no team.
    from support.races import while_held

    from cluster.models import Team

    client = api_client(member)
    client.raise_request_exception = False

    # (the submit waits on the team's row, locked by its delete)
    response = while_held(
        lambda: Team.objects.select_for_update().get(pk=team.pk),
        lambda: client.post(
            "/api/jobs/",
            {"name": "late", "team": team.slug, "workload": "resnet50",
             "global_batch_size": 128, "total_iterations": 100},
            format="json",
            **({} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}),
        ),
        then=lambda: Team.objects.filter(pk=team.pk).delete(),
    )  # fmt: skip
    assert response.status_code == 400, response.content
    assert "no longer exists" in response.json()["team"][0]
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_submit_does_not_wait_on_a_round_holding_its_team_for_budget_alerts(
    api_client, member, team
):
    # The round's budget alerts hold a team's row FOR NO KEY UPDATE
    # (scheduling.budget_alerts) while they are sent; a submit needs only that the team
    # stays (what the job's foreign key takes, FOR KEY SHARE), so it must not queue behind
    # them. It locked the team FOR NO KEY UPDATE itself and waited out the round.
    import time

    from support.races import holding

    from cluster.models import Team

    alerts = holding(lambda: list(Team.objects.select_for_update(no_key=True).filter(pk=team.pk)))
    client = api_client(member)
    try:
        started = time.monotonic()
        response = client.post(
            "/api/jobs/",
            {"name": "during-a-round", "team": team.slug, "workload": "resnet50",
             "global_batch_size": 128, "total_iterations": 100},
            format="json",
        )  # fmt: skip
        waited = time.monotonic() - started
    finally:
        alerts.release()
    assert response.status_code == 201, response.content
    assert waited < 5.0, f"the submit waited {waited:.1f} s on the round's lock"
    assert Job.objects.filter(name="during-a-round", team=team).exists()
