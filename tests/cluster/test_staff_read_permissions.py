"""A staff user reads other teams' rows only where Django lets them view the model, as the
Django admin shows them (``queries.admin_sees``); without it they read as a user does, their
own teams' rows. Writes already needed the permission (``test_staff_permissions.py``); reads
were every staff user's: one granted nothing read every team's jobs, budgets, energy ledger,
alerts, nodes and reports through the API and the pages, while the admin showed them none.
Superusers read everything, as before."""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from cluster.choices import HardLimitAction, Role
from cluster.models import Budget, BudgetAlert
from frontend.broadcast import ADMIN_GROUP, team_group
from frontend.consumers import groups_for
from frontend.dashboard import dashboard_payload, scope_of
from scheduling.budget_alerts import visible_alerts
from telemetry.models import EnergyLedgerEntry

HOUR = datetime(2030, 1, 1, tzinfo=UTC)
EVERY_VIEW = [
    ("cluster", "view_job"), ("cluster", "view_team"), ("cluster", "view_budget"),
    ("cluster", "view_node"), ("cluster", "view_gpu"), ("cluster", "view_budgetalert"),
    ("cluster", "view_auditentry"), ("telemetry", "view_energyledgerentry"),
]  # fmt: skip


def _granted(user, perms):
    for app, codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app, codename=codename)
        )
    return type(user).objects.get(pk=user.pk)  # (the permission cache read afresh)


@pytest.fixture
def scene(make_node, make_job, make_user, member, outsider, team, other_team):
    gpu = make_node(gpus=1).gpus.get()
    now = timezone.now()
    rows = {}
    for t, owner in ((team, member), (other_team, outsider)):
        job = make_job(owner=owner, team=t, name=f"job of {t.slug}")
        budget = Budget.objects.create(
            team=t, energy_limit_kwh=5, period_start=now - timedelta(hours=1),
            period_end=now + timedelta(hours=1), hard_limit_action=HardLimitAction.HOLD_QUEUE,
        )  # fmt: skip
        BudgetAlert.objects.create(
            budget=budget, team=t, at=now, action=HardLimitAction.HOLD_QUEUE,
            energy_used_kwh=6, energy_limit_kwh=5, carbon_used_kg=0,
        )  # fmt: skip
        EnergyLedgerEntry.objects.create(
            gpu=gpu, hour=HOUR, job=job, team=t, energy_j=1, co2_g=1, ci_g_per_kwh=1, zone="ES"
        )
        rows[t.slug] = job
    EnergyLedgerEntry.objects.create(  # the idle row, no team's
        gpu=gpu, hour=HOUR, job=None, team=None, energy_j=1, co2_g=1, ci_g_per_kwh=1, zone="ES"
    )
    return rows


@pytest.fixture
def staff_in_team(make_user, team):
    """A staff user, a lead of ``team``, granted no permission."""
    return make_user("sid_staff", team=team, role=Role.LEAD, is_staff=True)


@pytest.fixture
def staff_who_views(make_user):
    return _granted(make_user("vic_viewer", is_staff=True), EVERY_VIEW)


def _api_reads(client) -> dict:
    def names(path, key):
        response = client.get(path)
        if response.status_code != 200:
            return response.status_code
        return sorted(str(row[key]) for row in response.json()["results"])

    return {
        "jobs": names("/api/jobs/", "team"),
        "budgets": names("/api/budgets/", "team"),
        "teams": names("/api/teams/", "slug"),
        "ledger": names("/api/telemetry/ledger/", "team"),
        "nodes": names("/api/nodes/", "name"),
        "gpus": names("/api/gpus/", "uuid"),
    }


def test_a_staff_user_granted_nothing_reads_the_api_as_a_user_of_their_team(
    api_client, staff_in_team, scene
):
    reads = _api_reads(api_client(staff_in_team))

    # (were: both teams' jobs, budgets and ledger rows, the idle row, every team, 200s)
    assert reads == {
        "jobs": ["vision"], "budgets": ["vision"], "teams": ["vision"],
        "ledger": ["vision"], "nodes": 403, "gpus": 403,
    }  # fmt: skip


@pytest.mark.parametrize("who", ["staff_who_views", "admin_user"])
def test_staff_who_may_view_and_superusers_read_every_teams_rows(api_client, scene, request, who):
    reads = _api_reads(api_client(request.getfixturevalue(who)))

    assert reads == {
        "jobs": ["language", "vision"], "budgets": ["language", "vision"],
        "teams": ["language", "vision"], "ledger": ["None", "language", "vision"],
        "nodes": ["node-01"], "gpus": ["GPU-node-01-0"],
    }  # fmt: skip


def test_a_staff_user_granted_nothing_reads_the_pages_as_a_user_of_their_team(
    client, staff_in_team, scene
):
    client.force_login(staff_in_team)

    jobs = client.get(reverse("frontend:job-list")).content.decode()
    assert "job of vision" in jobs and "job of language" not in jobs
    assert (
        client.get(reverse("frontend:job-detail", args=[scene["language"].pk])).status_code == 404
    )
    assert client.get(reverse("frontend:job-detail", args=[scene["vision"].pk])).status_code == 200
    for name in ("reports", "reports-csv", "nodes"):
        assert client.get(reverse(f"frontend:{name}")).status_code == 403, name
    # and the navigation offers neither page (it offered both to every staff user)
    assert reverse("frontend:reports") not in jobs and reverse("frontend:nodes") not in jobs
    assert scope_of(staff_in_team) == "your team Vision"
    # the lead's own team's alert only, and the live feed of their team only
    now = timezone.now()
    assert [a.team.slug for a in visible_alerts(staff_in_team, now=now)] == ["vision"]
    groups = groups_for.func(staff_in_team)
    assert (
        ADMIN_GROUP not in groups and team_group(staff_in_team.memberships.get().team_id) in groups
    )


@pytest.mark.parametrize("who", ["staff_who_views", "admin_user"])
def test_staff_who_may_view_and_superusers_read_every_teams_pages(client, scene, request, who):
    user = request.getfixturevalue(who)
    client.force_login(user)

    jobs = client.get(reverse("frontend:job-list")).content.decode()
    assert "job of vision" in jobs and "job of language" in jobs
    assert (
        client.get(reverse("frontend:job-detail", args=[scene["language"].pk])).status_code == 200
    )
    for name in ("reports", "reports-csv", "nodes"):
        assert client.get(reverse(f"frontend:{name}")).status_code == 200, name
    assert reverse("frontend:reports") in jobs and reverse("frontend:nodes") in jobs
    assert scope_of(user) == "all teams"
    now = timezone.now()
    assert sorted(a.team.slug for a in visible_alerts(user, now=now)) == ["language", "vision"]
    assert ADMIN_GROUP in groups_for.func(user)


def test_the_change_permission_lets_a_staff_user_read_as_the_admin_does(
    api_client, make_user, scene
):
    # (the Django admin shows a model to whoever may view or change it)
    user = _granted(make_user("cal_changer", is_staff=True), [("cluster", "change_job")])

    reads = _api_reads(api_client(user))

    assert reads["jobs"] == ["language", "vision"] and reads["budgets"] == []


@pytest.mark.parametrize(
    "perms",
    [[("cluster", "view_job")], [("cluster", "view_budget")]],
    ids=["jobs but not budgets", "budgets but not jobs"],
)
def test_a_staff_users_dashboard_counts_what_its_scope_names_and_its_feed_pushes(
    scene, staff_in_team, perms
):
    # (a staff lead of Vision who may view every team's jobs but not budgets was told "your
    # team Vision" over a queue of both teams' jobs (2), and was pushed only Vision's rounds
    # live; one who may view budgets but not jobs was shown Language's budget under the same
    # words, its pushes Vision's alone)
    user = _granted(staff_in_team, perms)
    assert ADMIN_GROUP not in groups_for.func(user)

    payload = dashboard_payload(user, now=timezone.now())

    assert payload["scope"] == "your team Vision"
    assert payload["queue_now"] == 1
    assert [b["team"] for b in payload["budgets"]] == ["Vision"]


def test_a_staff_user_who_may_view_the_ledger_but_not_jobs_filters_it_by_any_job_it_lists(
    api_client, scene, staff_in_team
):
    # (the ledger listed Language's job's row to them, but the job filter knew only the jobs
    # they may view: ?job=<that job> answered 400 "Select a valid choice")
    user = _granted(staff_in_team, [("telemetry", "view_energyledgerentry")])
    client = api_client(user)
    language_job = scene["language"]
    listed = {row["job"] for row in client.get("/api/telemetry/ledger/").json()["results"]}
    assert language_job.pk in listed

    response = client.get(f"/api/telemetry/ledger/?job={language_job.pk}")

    assert response.status_code == 200, response.content
    assert [row["team"] for row in response.json()["results"]] == ["language"]
