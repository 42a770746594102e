"""Issue 16, point 2: one budget rules a team's period. Overlapping budgets are refused with
a message naming the one in the way, on the API, the page and under racing writers."""

from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError

from cluster import services
from cluster.models import Budget

APRIL = {
    "team": "vision",
    "period_start": "2030-04-01T00:00:00Z",
    "period_end": "2030-05-01T00:00:00Z",
    "energy_limit_kwh": 500.0,
}


def _budget(team, start, end, **limits):
    return Budget.objects.create(
        team=team, period_start=start, period_end=end, **(limits or {"energy_limit_kwh": 1.0})
    )


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("2030-04-15T00:00:00Z", "2030-05-15T00:00:00Z"),  # overlaps the end
        ("2030-03-15T00:00:00Z", "2030-04-02T00:00:00Z"),  # overlaps the start
        ("2030-04-10T00:00:00Z", "2030-04-11T00:00:00Z"),  # inside
        ("2030-01-01T00:00:00Z", "2031-01-01T00:00:00Z"),  # around
    ],
)
def test_an_overlapping_budget_is_a_400_naming_the_one_in_the_way(
    api_client, lead, team, start, end
):
    first = api_client(lead).post("/api/budgets/", APRIL, format="json")
    assert first.status_code == 201, first.content

    response = api_client(lead).post(
        "/api/budgets/",
        {**APRIL, "period_start": start, "period_end": end, "carbon_limit_kg": 5.0},
        format="json",
    )

    assert response.status_code == 400, response.content
    assert f"budget #{first.json()['id']}" in response.json()["period_start"][0]
    assert Budget.objects.count() == 1


def test_adjacent_periods_and_other_teams_do_not_overlap(api_client, lead, team, other_team):
    _budget(team, datetime(2030, 4, 1, tzinfo=UTC), datetime(2030, 5, 1, tzinfo=UTC))
    _budget(other_team, datetime(2030, 5, 1, tzinfo=UTC), datetime(2030, 6, 1, tzinfo=UTC))

    response = api_client(lead).post(
        "/api/budgets/",
        {**APRIL, "period_start": "2030-05-01T00:00:00Z", "period_end": "2030-06-01T00:00:00Z"},
        format="json",
    )

    assert response.status_code == 201, response.content


def test_editing_a_budget_does_not_overlap_itself_but_moving_it_onto_another_does(
    api_client, lead, team
):
    april = _budget(team, datetime(2030, 4, 1, tzinfo=UTC), datetime(2030, 5, 1, tzinfo=UTC))
    _budget(team, datetime(2030, 5, 1, tzinfo=UTC), datetime(2030, 6, 1, tzinfo=UTC))
    client = api_client(lead)

    widened = client.patch(f"/api/budgets/{april.pk}/", {"energy_limit_kwh": 700.0}, format="json")
    moved = client.patch(
        f"/api/budgets/{april.pk}/", {"period_end": "2030-05-10T00:00:00Z"}, format="json"
    )

    assert widened.status_code == 200, widened.content
    assert moved.status_code == 400
    assert "period_start" in moved.json()
    april.refresh_from_db()
    assert april.period_end == datetime(2030, 5, 1, tzinfo=UTC)
    assert april.energy_limit_kwh == 700.0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(2))
def test_two_racing_overlapping_budgets_have_one_winner(race, lead, team, attempt):
    def create(start_day):
        budget = Budget(
            team=team,
            period_start=datetime(2030, 4, start_day, tzinfo=UTC),
            period_end=datetime(2030, 5, start_day, tzinfo=UTC),
            energy_limit_kwh=10.0,
        )
        return services.save_budget(budget, actor=lead)

    results = race(lambda: create(1), lambda: create(2))

    winners = [r for r in results if isinstance(r, Budget)]
    losers = [r for r in results if isinstance(r, ValidationError)]
    assert (len(winners), len(losers)) == (1, 1), results
    # the loser's check ran either before the winner committed (its clean() names
    # period_start) or after (the constraint's own check), or lost at the database
    messages = [m for ms in losers[0].message_dict.values() for m in ms]
    assert any("already has a budget for part of this period" in m for m in messages)
    assert Budget.objects.count() == 1


# --- racing deletes and edits of one budget (a live probe: 500s and doubled audit rows) ---


def _stored_budget(team) -> Budget:
    return Budget.objects.create(
        team=team,
        period_start=datetime(2030, 6, 1, tzinfo=UTC),
        period_end=datetime(2030, 7, 1, tzinfo=UTC),
        energy_limit_kwh=10.0,
    )


def _client(user):
    from django.db import connection
    from rest_framework.test import APIClient

    def call(method, *args, **kwargs):
        client = APIClient()
        client.force_authenticate(user)
        try:
            return getattr(client, method)(*args, **kwargs)
        finally:
            connection.close()

    return call


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(3))
def test_two_racing_deletes_of_a_budget_have_one_winner_and_one_audit_entry(
    race, lead, admin_user, team, attempt
):
    from cluster.models import AuditEntry

    budget = _stored_budget(team)
    url = f"/api/budgets/{budget.pk}/"
    results = race(lambda: _client(lead)("delete", url), lambda: _client(admin_user)("delete", url))
    assert sorted(r.status_code for r in results) == [204, 404], results
    deleted = AuditEntry.objects.filter(object_type="budget", object_id=budget.pk, action="deleted")
    assert deleted.count() == 1
    assert not Budget.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(3))
def test_a_delete_racing_an_edit_of_a_budget_answers_without_a_500(
    race, lead, admin_user, team, attempt
):
    from cluster.models import AuditEntry

    budget = _stored_budget(team)
    url = f"/api/budgets/{budget.pk}/"
    deleted, edited = race(
        lambda: _client(admin_user)("delete", url),
        lambda: _client(lead)("patch", url, {"energy_limit_kwh": 7.0}, format="json"),
    )
    assert deleted.status_code == 204
    # the edit ran first (200) or found the budget gone (404)
    assert edited.status_code in (200, 404), edited.content
    assert not Budget.objects.exists()
    entries = AuditEntry.objects.filter(object_type="budget", object_id=budget.pk)
    actions = sorted(entries.values_list("action", flat=True))
    assert actions == (["deleted", "updated"] if edited.status_code == 200 else ["deleted"])


def test_a_budget_deleted_under_an_edit_is_a_404_on_the_page(client, lead, team, monkeypatch):
    from django.urls import reverse

    budget = _stored_budget(team)
    client.force_login(lead)
    page = client.get(reverse("frontend:budget-edit", args=[budget.pk]))
    assert page.status_code == 200
    form = page.context["form"]
    data = {k: v for k, v in form.initial.items() if v is not None}
    # the edit's save finds the row gone (deleted after the page was read)
    real = services._save_budget_audited

    def vanish(*args, **kwargs):
        Budget.objects.filter(pk=budget.pk).delete()
        return real(*args, **kwargs)

    monkeypatch.setattr(services, "_save_budget_audited", vanish)
    response = client.post(reverse("frontend:budget-edit", args=[budget.pk]), data)
    assert response.status_code == 404
