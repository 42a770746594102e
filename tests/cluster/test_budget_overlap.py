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
