"""Who may see what. The API and the pages filter every queryset through these helpers.

Admins (``is_staff``) see everything; other users see the jobs and budgets of the teams they
belong to; nobody else sees anything.
"""

from django.db.models import QuerySet

from cluster.choices import Role
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
