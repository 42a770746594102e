"""The round's alerts lock the teams they need once, in pk order, as a budget edit does:
a team found after the first lock (a budget committed meanwhile) is left to the next round,
not locked behind the teams already held.

``budget_alerts.record`` locked the teams of the budgets it would alert on, then read them
again in ``record_spent`` and ``record_overruns`` and locked what it found: a budget another
connection committed in between, of a team with a lower pk, was locked after a higher one
was held, while an edit moving a budget between the two held the lower and waited on the
higher: a deadlock, which PostgreSQL broke by aborting one of them (the round, or the edit).
Three connections on the real PostgreSQL: the round is paused after its first lock."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from support.races import in_another_connection

from cluster import services as cluster_services
from cluster.models import Budget
from scheduling import budget_alerts

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_team_found_after_the_rounds_lock_is_not_locked_behind_the_others(
    team, other_team, admin_user, monkeypatch
):
    low, high = sorted([team, other_team], key=lambda t: t.pk)
    # given a budget of the higher team that ended 5 minutes ago without an alert, and a
    # budget of the lower team that runs
    Budget.objects.create(
        team=high, period_start=T0 - timedelta(days=1), period_end=T0 - timedelta(minutes=5),
        energy_limit_kwh=1.0,
    )  # fmt: skip
    moving = Budget.objects.create(
        team=low, period_start=T0 + timedelta(days=1), period_end=T0 + timedelta(days=2),
        energy_limit_kwh=1.0,
    )  # fmt: skip
    real_lock_teams = budget_alerts._lock_teams
    others = []

    def lock_teams(team_ids):
        real_lock_teams(team_ids)
        if others:
            return
        # when, the round holding the higher team, an admin commits an ended budget of the
        # lower team, and another edit moves the lower team's budget to the higher team
        # (it holds the lower team and waits on the higher, which the round holds)
        others.append(
            in_another_connection(
                lambda: cluster_services.save_budget(
                    Budget(
                        team=low,
                        period_start=T0 - timedelta(days=1),
                        period_end=T0 - timedelta(minutes=3),
                        energy_limit_kwh=1.0,
                    ),
                    actor=admin_user,
                    at=T0,
                )  # fmt: skip
            )
        )
        others[0][0].join(timeout=30)
        others.append(
            in_another_connection(
                lambda: cluster_services.save_budget(
                    Budget.objects.get(pk=moving.pk),
                    actor=admin_user,
                    at=T0,
                    changes={"team": high},
                )  # fmt: skip
            )
        )

    monkeypatch.setattr(budget_alerts, "_lock_teams", lock_teams)
    with transaction.atomic():
        budget_alerts.record((), now=T0)
    (_, created), (mover, moved) = others
    mover.join(timeout=30)

    # then the round and both edits commit (before: one of the round and the move was
    # aborted by PostgreSQL's deadlock check)
    assert created == ["saved"]
    assert moved == ["saved"]
    assert Budget.objects.get(pk=moving.pk).team_id == high.pk
