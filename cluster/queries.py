"""Who may see what. The API and the pages filter every queryset through these helpers.

Admins (``is_staff``) see everything; other users see the jobs and budgets of the teams they
belong to; nobody else sees anything.
"""

from datetime import datetime, timedelta

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


def average_jct_series(
    jobs: QuerySet[Job], *, start: datetime, end: datetime, step: timedelta
) -> list[tuple[datetime, float | None]]:
    """Average JCT (finished_at - submitted_at, seconds) of the completed ``jobs`` that
    finished in each ``step``-long bucket of [start, end); ``None`` for a bucket where none
    finished. Buckets are labelled by their start."""
    rows = jobs.filter(
        state=JobState.COMPLETED, finished_at__gte=start, finished_at__lt=end
    ).values_list("submitted_at", "finished_at")
    n_buckets = max(1, int((end - start) / step))
    sums = [0.0] * n_buckets
    counts = [0] * n_buckets
    for submitted_at, finished_at in rows:
        bucket = min(int((finished_at - start) / step), n_buckets - 1)
        sums[bucket] += (finished_at - submitted_at).total_seconds()
        counts[bucket] += 1
    return [
        (start + i * step, sums[i] / counts[i] if counts[i] else None) for i in range(n_buckets)
    ]


def queue_length_series(
    jobs: QuerySet[Job], *, start: datetime, end: datetime, step: timedelta
) -> list[tuple[datetime, int]]:
    """How many of ``jobs`` were waiting at each instant start, start + step, ..., end:
    submitted, not yet started, not finished (cancelled while queued). A job paused or
    re-queued after it first started is not counted: the job rows keep only its first start
    (the round records hold the exact history)."""
    rows = list(
        jobs.filter(submitted_at__lte=end)
        .filter(Q(started_at__isnull=True) | Q(started_at__gt=start))
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .values_list("submitted_at", "started_at", "finished_at")
    )
    points = []
    t = start
    while t <= end:
        waiting = sum(
            1
            for submitted_at, started_at, finished_at in rows
            if submitted_at <= t
            and (started_at is None or started_at > t)
            and (finished_at is None or finished_at > t)
        )
        points.append((t, waiting))
        t += step
    return points
