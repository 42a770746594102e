"""Who may see what. The API and the pages filter every queryset through these helpers.

Admins (``is_staff``) see everything; other users see the jobs and budgets of the teams they
belong to; nobody else sees anything.
"""

from datetime import datetime

from django.db.models import Q, QuerySet

from cluster.choices import JobState, Role
from cluster.models import Budget, Job, Membership, Team


def _is_admin(user) -> bool:
    return bool(user and user.is_authenticated and user.is_staff)


def teams_of(user) -> QuerySet[Team]:
    """The teams ``user`` is a member (or lead) of."""
    if not (user and user.is_authenticated):
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user)


def teams_visible_to(user) -> QuerySet[Team]:
    if _is_admin(user):
        return Team.objects.all()
    return teams_of(user)


def teams_led_by(user) -> QuerySet[Team]:
    if not (user and user.is_authenticated):
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user, memberships__role=Role.LEAD)


def is_team_member(user, team: Team) -> bool:
    if not (user and user.is_authenticated):
        return False
    return Membership.objects.filter(user=user, team=team).exists()


def is_team_lead(user, team: Team) -> bool:
    if not (user and user.is_authenticated):
        return False
    return Membership.objects.filter(user=user, team=team, role=Role.LEAD).exists()


def can_manage_budgets_of(user, team: Team) -> bool:
    """Admins and the team's leads create and edit its budgets."""
    return _is_admin(user) or is_team_lead(user, team)


def can_cancel_job(user, job: Job) -> bool:
    """The owner, a lead of the job's team, or an admin may cancel it."""
    if _is_admin(user):
        return True
    if not (user and user.is_authenticated):
        return False
    return job.owner_id == user.pk or is_team_lead(user, job.team)


def jobs_visible_to(user) -> QuerySet[Job]:
    if _is_admin(user):
        return Job.objects.all()
    # A subquery, not a join, so a user in several teams never sees a job twice.
    return Job.objects.filter(team__in=teams_of(user).values("pk"))


def budgets_visible_to(user) -> QuerySet[Budget]:
    if _is_admin(user):
        return Budget.objects.all()
    return Budget.objects.filter(team__in=teams_of(user).values("pk"))


def completed_jcts(
    jobs: QuerySet[Job], *, start: datetime, end: datetime
) -> list[tuple[datetime, float]]:
    """(finished_at, JCT in seconds = finished_at - submitted_at) of the completed ``jobs``
    that finished in [start, end), by finish time."""
    rows = (
        jobs.filter(state=JobState.COMPLETED, finished_at__gte=start, finished_at__lt=end)
        .order_by("finished_at", "pk")
        .values_list("submitted_at", "finished_at")
    )
    return [(finished, (finished - submitted).total_seconds()) for submitted, finished in rows]


def queue_and_running_series(
    jobs: QuerySet[Job], *, start: datetime, end: datetime
) -> list[tuple[datetime, int, int]]:
    """(time, waiting, running) of ``jobs`` at ``start`` and at every submit, start and finish
    in (start, end], plus ``end``: exact steps, not samples. The series begins at the first
    submit if that is after ``start`` (no zeros for a time before any job existed); empty when
    no job was submitted by ``end``. Waiting is submitted and not yet started; running is
    started and not finished. A job paused or re-queued after its first start still counts as
    running: job rows keep only the first start (the round records hold the exact history)."""
    rows = list(
        jobs.filter(submitted_at__lte=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .values_list("submitted_at", "started_at", "finished_at")
    )
    if not rows:
        return []
    first = max(start, min(submitted for submitted, _, _ in rows))
    waiting = running = 0
    deltas: dict[datetime, list[int]] = {}

    def add(at: datetime, dw: int, dr: int) -> None:
        nonlocal waiting, running
        if at <= first:
            waiting += dw
            running += dr
        elif at <= end:
            slot = deltas.setdefault(at, [0, 0])
            slot[0] += dw
            slot[1] += dr

    for submitted, started, finished in rows:
        add(submitted, 1, 0)
        if started is not None and (finished is None or started < finished):
            add(started, -1, 1)
            if finished is not None:
                add(finished, 0, -1)
        elif finished is not None:
            add(finished, -1, 0)  # cancelled or failed before it ever started
    points = [(first, waiting, running)]
    for at in sorted(deltas):
        waiting += deltas[at][0]
        running += deltas[at][1]
        points.append((at, waiting, running))
    if points[-1][0] < end:
        points.append((end, waiting, running))
    return points
