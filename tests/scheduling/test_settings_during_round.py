"""The scheduler settings changed in the admin while a round runs.

A policy's state belongs to that policy: the admin resets it when the policy changes. A
round that planned with the old policy wrote its state back after the admin's change had
committed, so the new policy was handed the old one's timers and history; and the admin's
save wrote back the whole row as read when the form was posted, so a round's state stored
meanwhile was undone by an edit of the interval alone."""

import dataclasses
import threading
from datetime import UTC, datetime

import pytest
from django.db import connection

from scheduling import services
from scheduling.models import SchedulerSettings

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_a_policy_changed_while_a_round_runs_does_not_get_the_old_policys_state(
    admin_client, monkeypatch
):
    SchedulerSettings.load()
    SchedulerSettings.objects.filter(pk=1).update(policy="fifo", policy_state={})
    real_plan_round = services.plan_round
    answers = []

    def change_policy():
        try:
            answers.append(
                admin_client.post(
                    "/admin/scheduling/schedulersettings/1/change/",
                    {"policy": "greenflow", "round_interval_s": 60},
                ).status_code
            )
        finally:
            connection.close()

    def plan_round(snapshot, *, policy, now):
        plan = real_plan_round(snapshot, policy=policy, now=now)
        # an admin switches the policy while this (fifo) round is planning
        thread = threading.Thread(target=change_policy)
        thread.start()
        thread.join(timeout=30)
        return dataclasses.replace(plan, policy_state={"fifo_timers": {"1": 3}})

    monkeypatch.setattr(services, "plan_round", plan_round)

    result = services.run_scheduling_round(now=NOW, force=True)

    assert result.ran
    assert answers == [302]
    config = SchedulerSettings.load()
    assert (config.policy, config.policy_state) == ("greenflow", {})


def test_an_admin_edit_of_the_interval_keeps_the_state_a_round_stored_meanwhile(
    admin_client, monkeypatch
):
    SchedulerSettings.load()
    SchedulerSettings.objects.filter(pk=1).update(policy="fifo", policy_state={"old": 1})
    real_clean = SchedulerSettings.clean

    def clean(self):
        # a round commits its state after the admin's form read the row
        SchedulerSettings.objects.filter(pk=1).update(policy_state={"round": 2})
        real_clean(self)

    monkeypatch.setattr(SchedulerSettings, "clean", clean)

    response = admin_client.post(
        "/admin/scheduling/schedulersettings/1/change/",
        {"policy": "fifo", "round_interval_s": 30},
    )

    assert response.status_code == 302
    config = SchedulerSettings.load()
    assert (config.round_interval_s, config.policy_state) == (30, {"round": 2})
