"""Budgets and teams over REST: leads manage their team's budgets, members read, others see
nothing; teams are read by their members and written by admins."""

import re
from datetime import UTC, datetime, timedelta

import pytest

from cluster import services
from cluster.choices import HardLimitAction
from cluster.models import AuditEntry, Budget, BudgetAlert, Team

START = datetime(2026, 3, 1, tzinfo=UTC)
END = datetime(2026, 4, 1, tzinfo=UTC)
NEW_BUDGET = {
    "team": "vision",
    "period_start": "2026-04-01T00:00:00Z",
    "period_end": "2026-05-01T00:00:00Z",
    "energy_limit_kwh": 1200.0,
    "warn_fraction": 0.75,
    "hard_limit_action": "pause_jobs",
}


WARN_RANGE = "Must be between 0.01 and 1 (1% to 100% of the hard limit)."


@pytest.fixture
def budgets(team, other_team):
    return {
        "vision": Budget.objects.create(
            team=team, period_start=START, period_end=END, energy_limit_kwh=1000.0
        ),
        "language": Budget.objects.create(
            team=other_team, period_start=START, period_end=END, carbon_limit_kg=250.0
        ),
    }


def _rows() -> list[tuple]:
    return list(
        Budget.objects.order_by("pk").values_list(
            "team__slug", "period_start", "period_end", "energy_limit_kwh", "carbon_limit_kg"
        )
    )


@pytest.mark.parametrize(
    ("persona", "visible"),
    [
        ("member", {"vision"}),
        ("lead", {"vision"}),
        ("outsider", {"language"}),
        ("admin", {"vision", "language"}),
    ],
)
def test_budget_list_shows_only_the_users_teams(api_client, personas, budgets, persona, visible):
    response = api_client(personas[persona]).get("/api/budgets/")

    assert response.status_code == 200
    assert {row["id"] for row in response.json()["results"]} == {
        budgets[name].pk for name in visible
    }


@pytest.mark.parametrize(
    ("persona", "expected"),
    # the outsider names a team that, to them, does not exist (a 400 like any absent name)
    [("member", 403), ("lead", 201), ("outsider", 400), ("admin", 201)],
)
def test_only_leads_and_admins_create_budgets(api_client, personas, budgets, persona, expected):
    before = _rows()

    response = api_client(personas[persona]).post("/api/budgets/", NEW_BUDGET, format="json")

    assert response.status_code == expected
    if expected == 201:
        created = Budget.objects.get(pk=response.json()["id"])
        assert created.team.slug == "vision"
        assert created.energy_limit_kwh == 1200.0
        assert created.carbon_limit_kg is None
        assert created.warn_fraction == 0.75
        assert created.hard_limit_action == HardLimitAction.PAUSE_JOBS
        assert Budget.objects.count() == 3
    else:
        assert _rows() == before


def test_lead_cannot_create_a_budget_for_another_team(api_client, lead, budgets):
    before = _rows()

    response = api_client(lead).post(
        "/api/budgets/", {**NEW_BUDGET, "team": "language"}, format="json"
    )
    absent = api_client(lead).post("/api/budgets/", {**NEW_BUDGET, "team": "nope"}, format="json")

    # another team's name answers as a name nobody uses: teams cannot be told apart
    assert response.status_code == absent.status_code == 400
    assert response.json() == {"team": ["Object with slug=language does not exist."]}
    assert absent.json() == {"team": ["Object with slug=nope does not exist."]}
    assert _rows() == before


def test_a_member_who_is_not_a_lead_is_refused_for_their_own_team(api_client, member, budgets):
    response = api_client(member).post(
        "/api/budgets/", {**NEW_BUDGET, "team": "vision"}, format="json"
    )

    assert response.status_code == 403


@pytest.mark.parametrize(
    ("persona", "budget", "expected"),
    [
        ("member", "vision", 403),
        ("lead", "vision", 200),
        ("lead", "language", 404),
        ("outsider", "vision", 404),
        ("admin", "language", 200),
    ],
)
def test_only_the_teams_lead_or_admin_edits_a_budget(
    api_client, personas, budgets, persona, budget, expected
):
    target = budgets[budget]
    before = target.carbon_limit_kg

    response = api_client(personas[persona]).patch(
        f"/api/budgets/{target.pk}/", {"carbon_limit_kg": 99.5}, format="json"
    )

    assert response.status_code == expected
    target.refresh_from_db()
    assert target.carbon_limit_kg == (99.5 if expected == 200 else before)


@pytest.mark.parametrize(("persona", "expected"), [("member", 403), ("lead", 204)])
def test_budget_delete(api_client, personas, budgets, persona, expected):
    response = api_client(personas[persona]).delete(f"/api/budgets/{budgets['vision'].pk}/")

    assert response.status_code == expected
    assert Budget.objects.filter(pk=budgets["vision"].pk).exists() == (expected != 204)


def test_lead_cannot_move_a_budget_to_a_team_they_do_not_lead(api_client, lead, budgets):
    response = api_client(lead).patch(
        f"/api/budgets/{budgets['vision'].pk}/", {"team": "language"}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {"team": ["Object with slug=language does not exist."]}
    assert Budget.objects.get(pk=budgets["vision"].pk).team.slug == "vision"


@pytest.mark.parametrize(
    ("change", "errors"),
    [
        (
            {"energy_limit_kwh": None},
            {"energy_limit_kwh": ["Set an energy limit, a carbon limit, or both."]},
        ),
        ({"energy_limit_kwh": -3}, {"energy_limit_kwh": ["Must be positive."]}),
        ({"carbon_limit_kg": 0}, {"carbon_limit_kg": ["Must be positive."]}),
        ({"period_end": "2026-03-01T00:00:00Z"}, {"period_end": ["Must be after period_start."]}),
        ({"warn_fraction": 1.5}, {"warn_fraction": [WARN_RANGE]}),
        ({"warn_fraction": 0}, {"warn_fraction": [WARN_RANGE]}),
        (
            {"hard_limit_action": "explode"},
            {"hard_limit_action": ['"explode" is not a valid choice.']},
        ),
        (
            {"period_start": "yesterday"},
            {
                "period_start": [
                    "Datetime has wrong format. Use one of these formats instead: "
                    "YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z]."
                ]
            },
        ),
    ],
)
def test_bad_budget_gets_400_with_field_errors_and_stores_nothing(
    api_client, lead, team, change, errors
):
    response = api_client(lead).post("/api/budgets/", {**NEW_BUDGET, **change}, format="json")

    assert response.status_code == 400
    assert response.json() == errors
    assert Budget.objects.count() == 0


def test_partial_update_is_validated_against_the_stored_values(api_client, lead, budgets):
    # the budget has only an energy limit, so removing it leaves no limit at all
    response = api_client(lead).patch(
        f"/api/budgets/{budgets['vision'].pk}/", {"energy_limit_kwh": None}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["energy_limit_kwh"]
    assert Budget.objects.get(pk=budgets["vision"].pk).energy_limit_kwh == 1000.0


@pytest.mark.parametrize(
    ("persona", "visible"),
    [
        ("member", ["vision"]),
        ("lead", ["vision"]),
        ("outsider", ["language"]),
        ("admin", ["language", "vision"]),
    ],
)
def test_team_list_shows_the_users_teams(api_client, personas, persona, visible):
    response = api_client(personas[persona]).get("/api/teams/")

    assert response.status_code == 200
    assert [row["slug"] for row in response.json()["results"]] == visible


def test_team_detail_lists_members_with_roles(api_client, member, lead):
    response = api_client(member).get("/api/teams/vision/")

    assert response.status_code == 200
    assert response.json()["members"] == [
        {"username": "liam_lead", "role": "lead"},
        {"username": "vera_member", "role": "member"},
    ]


@pytest.mark.parametrize(("persona", "expected"), [("lead", 403), ("admin", 201)])
def test_only_admins_create_teams(api_client, personas, persona, expected):
    response = api_client(personas[persona]).post(
        "/api/teams/", {"name": "Speech", "slug": "speech"}, format="json"
    )

    assert response.status_code == expected
    assert Team.objects.filter(slug="speech").exists() == (expected == 201)


def test_two_edits_of_different_fields_both_hold_and_each_is_audited_as_sent(
    api_client, lead, admin_user, budgets
):
    # given the lead's and an admin's copies of the vision budget, read before either writes
    budget = budgets["vision"]
    stale = Budget.objects.get(pk=budget.pk)

    # when the lead raises the energy limit, and the admin's edit of the soft limit is
    # saved from its stale copy afterwards (what a racing PATCH did)
    assert (
        api_client(lead)
        .patch(f"/api/budgets/{budget.pk}/", {"energy_limit_kwh": 7.0}, format="json")
        .status_code
        == 200
    )
    services.save_budget(stale, actor=admin_user, changes={"warn_fraction": 0.5})

    # then both changes hold, and each audit entry names only what its writer changed
    budget.refresh_from_db()
    assert (budget.energy_limit_kwh, budget.warn_fraction) == (7.0, 0.5)
    entries = list(AuditEntry.objects.order_by("pk"))
    assert [(e.actor, e.changed_fields) for e in entries] == [
        (lead, ["energy_limit_kwh"]),
        (admin_user, ["warn_fraction"]),
    ]


def test_moving_a_budget_to_another_team_is_audited_and_an_empty_edit_is_not(
    api_client, admin_user, budgets, other_team
):
    budget = budgets["vision"]
    client = api_client(admin_user)
    assert client.patch(f"/api/budgets/{budget.pk}/", {}, format="json").status_code == 200
    assert not AuditEntry.objects.exists()

    # (the language team has a budget for the same period: move this one a year on too)
    moved = client.patch(
        f"/api/budgets/{budget.pk}/",
        {"team": "language", "period_start": "2027-03-01T00:00:00Z",
         "period_end": "2027-04-01T00:00:00Z"},
        format="json",
    )  # fmt: skip
    assert moved.status_code == 200, moved.json()
    (entry,) = AuditEntry.objects.all()
    assert (entry.before["team_id"], entry.after["team_id"]) == (budget.team_id, other_team.pk)
    assert "team_id" in entry.changed_fields


def test_a_budgets_alert_follows_its_edits_and_is_kept_in_the_audit_when_deleted(
    api_client, lead, budgets, team
):
    budget = budgets["vision"]
    client = api_client(lead)

    def alert():
        return BudgetAlert.objects.create(
            budget=budget, team=team, at=START, action=budget.hard_limit_action,
            energy_used_kwh=1200.0, energy_limit_kwh=1000.0, carbon_used_kg=0.0,
        )  # fmt: skip

    # when only the action changes, the alert says the new action
    alert()
    url = f"/api/budgets/{budget.pk}/"
    assert client.patch(url, {"hard_limit_action": "notify_only"}, format="json").status_code == 200
    assert BudgetAlert.objects.get().action == HardLimitAction.NOTIFY_ONLY

    # when the limit is raised, the alert (of a limit that no longer holds) goes
    assert client.patch(url, {"energy_limit_kwh": 5000.0}, format="json").status_code == 200
    assert not BudgetAlert.objects.exists()

    # when a budget with an alert is deleted, its audit entry keeps what the alert said
    alert()
    assert client.delete(url).status_code == 204
    entry = AuditEntry.objects.filter(action="deleted").get()
    assert entry.before["alert"]["energy_used_kwh"] == 1200.0
    assert entry.before["energy_limit_kwh"] == 5000.0


def test_an_edit_that_withdraws_or_changes_a_budgets_alert_says_so_in_its_audit_entry(
    api_client, lead, budgets, team
):
    # given a spent budget whose alert was e-mailed to its lead
    budget = budgets["vision"]
    BudgetAlert.objects.create(
        budget=budget, team=team, at=START, action=budget.hard_limit_action,
        energy_used_kwh=1200.0, energy_limit_kwh=1000.0, carbon_used_kg=0.0,
        emailed_to=["liam@example.com"], emailed_at=START,
    )  # fmt: skip
    url = f"/api/budgets/{budget.pk}/"
    client = api_client(lead)

    # when only its action changes, the entry says the alert's action changed with it
    assert client.patch(url, {"hard_limit_action": "pause_jobs"}, format="json").status_code == 200
    changed = AuditEntry.objects.get()
    assert (changed.before["alert"]["action"], changed.after["alert"]["action"]) == (
        budget.hard_limit_action,
        "pause_jobs",
    )

    # when a raised limit withdraws the alert, the entry keeps what the alert said and to whom
    # (it went without a trace: the audit showed a limit raised, not an alert withdrawn)
    assert client.patch(url, {"energy_limit_kwh": 5000.0}, format="json").status_code == 200
    assert not BudgetAlert.objects.exists()
    entry = AuditEntry.objects.order_by("pk").last()
    assert entry.before["alert"]["emailed_to"] == ["liam@example.com"]
    assert entry.after["alert"] is None
    assert entry.changed_fields == ["alert", "energy_limit_kwh"]


def test_a_spent_budget_whose_period_is_cut_short_keeps_its_alert(
    api_client, lead, budgets, team, make_node
):
    # given a budget spent by its ledger (1,200 of 1,000 kWh) and alerted in its period
    from telemetry.models import EnergyLedgerEntry

    budget = budgets["vision"]
    gpu = make_node(gpus=1).gpus.get()
    EnergyLedgerEntry.objects.create(
        gpu=gpu, hour=START, team=team, energy_j=1200.0 * 3.6e6, co2_g=0.0,
        ci_g_per_kwh=0.0, zone="ES",
    )  # fmt: skip
    found = START + timedelta(days=2)
    BudgetAlert.objects.create(
        budget=budget, team=team, at=found, action=budget.hard_limit_action,
        energy_used_kwh=1000.0, energy_limit_kwh=1000.0, carbon_used_kg=0.0,
    )  # fmt: skip

    # when its period is cut short (to before the round that found it), and its limit
    # lowered, it is still spent: the alert stays (deleted, a round found it again after
    # the period and told the leads, falsely, that no round could act on it: a live
    # probe), with the new limit and what is used now, raised within the period
    url = f"/api/budgets/{budget.pk}/"
    client = api_client(lead)
    cut = {"period_end": "2026-03-02T00:00:00Z", "energy_limit_kwh": 900.0}
    assert client.patch(url, cut, format="json").status_code == 200
    kept = BudgetAlert.objects.get()
    assert (kept.energy_used_kwh, kept.energy_limit_kwh) == (pytest.approx(1200.0), 900.0)
    assert kept.at < datetime(2026, 3, 2, tzinfo=UTC)
    assert not kept.after_period

    # and once an edit leaves it unspent, the alert goes
    assert client.patch(url, {"energy_limit_kwh": 5000.0}, format="json").status_code == 200
    assert not BudgetAlert.objects.exists()


def test_a_spent_budget_moved_to_another_team_leaves_its_alert_behind(
    api_client, admin_user, budgets, team
):
    # the new team's round announces it to the new team's leads (kept, it was never
    # e-mailed to them: a review)
    budget = budgets["vision"]
    BudgetAlert.objects.create(
        budget=budget, team=team, at=START, action=budget.hard_limit_action,
        energy_used_kwh=1200.0, energy_limit_kwh=1000.0, carbon_used_kg=0.0,
    )  # fmt: skip
    moved = {"team": "language", "period_start": "2027-03-01T00:00:00Z",
             "period_end": "2027-04-01T00:00:00Z"}  # fmt: skip
    response = api_client(admin_user).patch(f"/api/budgets/{budget.pk}/", moved, format="json")
    assert response.status_code == 200, response.json()
    assert not BudgetAlert.objects.exists()


def test_a_team_with_jobs_is_not_deleted_and_an_empty_one_is_with_its_budgets_audited(
    api_client, admin_user, budgets, team, other_team, make_job, member
):
    make_job(owner=member, team=team)
    client = api_client(admin_user)

    refused = client.delete("/api/teams/vision/")
    assert refused.status_code == 409
    assert "a team with jobs or energy use cannot be deleted" in refused.json()["detail"]
    assert Team.objects.filter(pk=team.pk).exists() and Budget.objects.filter(team=team)

    assert client.delete("/api/teams/language/").status_code == 204
    assert not Team.objects.filter(pk=other_team.pk).exists()
    assert sorted(AuditEntry.objects.values_list("object_type", "action")) == [
        ("budget", "deleted"),
        ("team", "deleted"),
    ]


@pytest.mark.parametrize("url", ["/api/budgets/", "/api/jobs/"])
def test_the_browsable_apis_form_offers_only_the_users_teams(
    api_client, member, other_team, admin_user, url
):
    # The HTML form a browser gets for the list (Accept: text/html) has a <select> of the
    # teams the field accepts: it listed every team's slug and name to a member of one team.
    Team.objects.create(name="Secret Project X", slug="secret-x")
    page = api_client(member).get(url, HTTP_ACCEPT="text/html")
    assert page.status_code == 200
    options = re.findall(r'<option value="([^"]*)"', page.content.decode())
    assert "vision" in options
    assert "language" not in options and "secret-x" not in options
    assert b"Secret Project X" not in page.content
    everything = api_client(admin_user).get(url, HTTP_ACCEPT="text/html").content.decode()
    assert {"vision", "language", "secret-x"} <= set(
        re.findall(r'<option value="([^"]*)"', everything)
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("other", ["rename", "delete"])
def test_a_team_edit_beside_another_writer_loses_nothing(
    api_client, admin_user, team, monkeypatch, other
):
    # A live probe raced two admins' PATCHes of one team, one its name and one its slug: in
    # most of 20 tries both answered 200 and one change was gone (each saved the whole row
    # it had read). Beside a delete, the edit's save inserted the team again.
    from support.races import Gate, beside_paused, in_thread

    from cluster.api.serializers import TeamSerializer

    read = Gate()
    validate = TeamSerializer.validate

    def validate_then_wait(self, attrs):
        if attrs.get("name") == "Renamed":
            read.pause()
        return validate(self, attrs)

    monkeypatch.setattr(TeamSerializer, "validate", validate_then_wait)

    client = api_client(admin_user)
    url = f"/api/teams/{team.slug}/"
    first = in_thread(lambda: client.patch(url, {"name": "Renamed"}, format="json"))
    if other == "rename":
        second_send = lambda: api_client(admin_user).patch(url, {"slug": "moved"}, format="json")  # noqa: E731
    else:
        second_send = lambda: api_client(admin_user).delete(url)  # noqa: E731
    # (the second writer commits meanwhile, or waits for the edit's lock)
    named, other_answer = beside_paused(read, first, second_send)
    outcome = {"name": named, "other": other_answer}

    assert outcome["name"].status_code == 200, outcome["name"].content
    if other == "rename":
        assert outcome["other"].status_code == 200, outcome["other"].content
        stored = Team.objects.get(pk=team.pk)
        assert (stored.name, stored.slug) == ("Renamed", "moved")
    else:
        assert outcome["other"].status_code == 204
        assert not Team.objects.filter(pk=team.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_team_deleted_twice_at_once_is_a_204_then_a_404(api_client, admin_user, team):
    # The second of two deletes of one team read it before the first committed, then its
    # lock (``services.delete_team``) found no row: Team.DoesNotExist, a 500.
    from support.races import while_held

    def second():
        client = api_client(admin_user)
        client.raise_request_exception = False
        return client.delete(f"/api/teams/{team.slug}/")

    # (the second delete waits on the team's lock)
    response = while_held(lambda: services.delete_team(team, actor=None), second)

    assert response.status_code == 404, response.content
    assert not Team.objects.filter(pk=team.pk).exists()
