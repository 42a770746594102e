"""Who may see what. The API and the pages filter every queryset through these helpers.

Admins (``is_staff``) read every team's rows of a model they may view in the Django admin
(``admin_sees``: ``cluster.view_job``, or its ``change_`` permission, as the admin's
``has_view_permission`` takes either); other users, and staff without that permission, see
the jobs and budgets of the teams they belong to; nobody else sees anything. What an admin
may *change* outside their own teams is what Django's permissions grant them
(``admin_may``), as in the Django admin: a staff user allowed only to view changes nothing
(a superuser holds every permission, and so reads and may change everything).
"""

from datetime import UTC, datetime

from django.db.models import F, FloatField, Func, Q, QuerySet

from cluster.choices import JobState, Role
from cluster.models import Budget, Job, JobAllocation, Membership, Team


class _Epoch(Func):
    """Seconds since 1970 of a timestamp (or the seconds of an interval), as a float: a
    week's 20,000 jobs read as timestamps took 0.6 s of parsing alone, as floats 0.03 s."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)::float8"
    output_field = FloatField()


def _at(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _is_admin(user) -> bool:
    return bool(user and user.is_authenticated and user.is_staff)


def admin_may(user, codename: str) -> bool:
    """Whether ``user`` acts as an admin for Django's permission ``cluster.<codename>``
    (``change_node``, ``add_budget``, ...): a staff user who holds it; a superuser holds them
    all. The API and the pages asked for ``is_staff`` alone, so a staff user the admin lets
    only view issued agent tokens, drained and deleted nodes, cancelled any team's jobs and
    made other teams' budgets through them (an eighth probe of the live service)."""
    return _is_admin(user) and user.has_perm(f"cluster.{codename}")


def admin_sees(user, permission: str) -> bool:
    """Whether ``user`` reads every team's rows of the model of Django permission
    ``permission`` (``cluster.view_job``, ``telemetry.view_energyledgerentry``): a staff user
    who may view or change that model (as the Django admin shows it to them); a superuser
    may. A staff user granted nothing read every team's jobs, budgets and ledger through the
    API and the pages, while the Django admin showed them none of it (a probe)."""
    if not _is_admin(user):
        return False
    app, _, codename = permission.partition(".")
    change = codename.replace("view_", "change_", 1)
    return user.has_perm(permission) or user.has_perm(f"{app}.{change}")


def teams_of(user) -> QuerySet[Team]:
    """The teams ``user`` is a member (or lead) of."""
    if not (user and user.is_authenticated):
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user)


def teams_visible_to(user) -> QuerySet[Team]:
    if admin_sees(user, "cluster.view_team"):
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


def can_manage_budgets_of(user, team: Team, verb: str = "change") -> bool:
    """The team's leads create, edit and delete its budgets; so do admins who hold the
    permission (``verb``: ``add``, ``change`` or ``delete``)."""
    return admin_may(user, f"{verb}_budget") or is_team_lead(user, team)


def managed_teams(user, verb: str = "change") -> QuerySet[Team]:
    """The teams whose budgets ``user`` may ``verb`` (``can_manage_budgets_of``)."""
    return Team.objects.all() if admin_may(user, f"{verb}_budget") else teams_led_by(user)


def submittable_teams(user) -> QuerySet[Team]:
    """Teams the user may submit jobs to: their own; admins who may add jobs, any."""
    return Team.objects.all() if admin_may(user, "add_job") else teams_of(user)


# Who may raise a job's priority. ``Job.priority`` orders the jobs of *every* team in
# each policy (``scheduling.core.policies.base``: a preemptive policy such as Tiresias
# stops another team's running jobs for a higher one), so raising it above the default
# pushes other teams' work aside. That is a decision for whoever answers for the team's
# use of the cluster, its leads (as for its budgets), and for admins; a member may still
# rank their own work *below* the default (a negative priority only yields), and a lead
# can raise a member's job on request. Checked at submit (API and form); there is no
# other edit path for a user (the job API has no PATCH; the admin is for admins).
PRIORITY_DEFAULT = 0


def can_raise_priority(user, team: Team) -> bool:
    """Admins who may change jobs, and the team's leads, may give its jobs a priority above
    the default."""
    return admin_may(user, "change_job") or is_team_lead(user, team)


def priority_refusal(user, team: Team, priority: int | None) -> str | None:
    """Why ``user`` may not submit a job of ``team`` at ``priority``; None if they may."""
    if priority is None or priority <= PRIORITY_DEFAULT or can_raise_priority(user, team):
        return None
    return (
        f"Only a lead of team {team.slug} or an admin may set a priority above "
        f"{PRIORITY_DEFAULT}: it orders every team's jobs, so a higher one can stop another "
        f"team's running jobs. Members may set {PRIORITY_DEFAULT} or lower."
    )


def can_cancel_job(user, job: Job) -> bool:
    """The owner, a lead of the job's team, or an admin who may change jobs may cancel it."""
    if admin_may(user, "change_job"):
        return True
    if not (user and user.is_authenticated):
        return False
    return job.owner_id == user.pk or is_team_lead(user, job.team)


def sees_every_team(user) -> bool:
    """Whether ``user``'s dashboard is every team's: it counts jobs and budgets, and its live
    feed (``frontend.broadcast.ADMIN_GROUP``) carries both."""
    return admin_sees(user, "cluster.view_job") and admin_sees(user, "cluster.view_budget")


def teams_with_jobs_visible_to(user) -> QuerySet[Team]:
    """The teams whose jobs ``user`` sees (``jobs_visible_to``): the job list's filter."""
    return Team.objects.all() if admin_sees(user, "cluster.view_job") else teams_of(user)


def jobs_visible_to(user) -> QuerySet[Job]:
    if admin_sees(user, "cluster.view_job"):
        return Job.objects.all()
    # A subquery, not a join, so a user in several teams never sees a job twice.
    mine = Q(team__in=teams_of(user).values("pk"))
    if _is_admin(user):
        # and the jobs they submitted to other teams (``add_job``, ``submittable_teams``):
        # a staff user allowed to add jobs but not to view them was sent to a 404 by the
        # page they submitted from, and could not read or cancel their own job
        mine |= Q(owner=user)
    return Job.objects.filter(mine)


def budgets_visible_to(user) -> QuerySet[Budget]:
    if admin_sees(user, "cluster.view_budget"):
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
        .values_list(_Epoch("finished_at"), _Epoch(F("finished_at") - F("submitted_at")))
    )
    return [(_at(finished), jct) for finished, jct in rows]


def queue_and_running_series(
    jobs: QuerySet[Job], *, start: datetime, end: datetime
) -> list[tuple[datetime, int, int]]:
    """(time, waiting, running) of ``jobs`` at ``start`` and at every submit, finish and
    allocation start or end in (start, end], plus ``end``: exact steps, not samples. The
    series begins at the first submit if that is after ``start`` (no zeros for a time
    before any job existed); empty when no job was submitted by ``end``. Running is
    holding an allocation (a job has at most one open); waiting is submitted, not
    finished and not running, so a job paused or re-queued waits again (counted by its
    first start alone, a live probe's paused team showed as running)."""
    rows = [
        (pk, _at(submitted), _at(finished))
        for pk, submitted, finished in jobs.filter(submitted_at__lte=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .values_list("pk", _Epoch("submitted_at"), _Epoch("finished_at"))
    ]
    if not rows:
        return []
    submitted_of = {pk: submitted for pk, submitted, _ in rows}
    # A round stamped what it started with its own clock, taken before it read the queue: a
    # job submitted while the round ran started seconds "before" its submit. Rounds now leave
    # such a job for the next one (``adapters.build_snapshot``), but rows written before stay:
    # counted from its submit, or it is running and not yet waiting, and the waiting count
    # goes below zero.
    spans = [
        (max(_at(started), submitted_of[job_id]), _at(ended))
        for job_id, started, ended in JobAllocation.objects.filter(
            job_id__in=list(submitted_of), started_at__lte=end
        )
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .values_list("job_id", _Epoch("started_at"), _Epoch("ended_at"))
    ]
    first = max(start, min(submitted for _, submitted, _ in rows))
    active = running = 0
    deltas: dict[datetime, list[int]] = {}

    def add(at: datetime, d_active: int, d_running: int) -> None:
        nonlocal active, running
        if at <= first:
            active += d_active
            running += d_running
        elif at <= end:
            slot = deltas.setdefault(at, [0, 0])
            slot[0] += d_active
            slot[1] += d_running

    for _, submitted, finished in rows:
        add(submitted, 1, 0)
        if finished is not None:
            add(finished, -1, 0)
    for started, ended in spans:
        if ended is None or started < ended:
            add(started, 0, 1)
            if ended is not None:
                add(ended, 0, -1)
    points = [(first, active - running, running)]
    for at in sorted(deltas):
        active += deltas[at][0]
        running += deltas[at][1]
        points.append((at, active - running, running))
    if points[-1][0] < end:
        points.append((end, active - running, running))
    return points
