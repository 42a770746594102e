"""A spent budget is announced to its team's leads, once per budget period: on the dashboard
(leads of the team and admins only) and by e-mail through Django's mail backend (locmem in
tests: ``mail.outbox``). Live rounds against the real PostgreSQL; time is passed in."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail

from cluster import services as cluster_services
from cluster.choices import HardLimitAction, JobState, Role
from cluster.models import Budget, BudgetAlert, Gpu, Node
from scheduling import budget_alerts, services
from telemetry.ingest import ingest_batch
from telemetry.models import DirtyHour, EnergyLedgerEntry

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


@pytest.fixture
def cluster(scheduler_settings, make_node):
    scheduler_settings("fifo")
    node = make_node("node-01", gpus=8)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0 + timedelta(days=3))
    return node


@pytest.fixture
def people(make_user, team, other_team, member, admin_user):
    """Two leads of the team (one without an address), a member, and another team's lead."""
    return {
        "lead": make_user("liam_lead", team=team, role=Role.LEAD, email="liam@example.org"),
        "quiet_lead": make_user("quinn_lead", team=team, role=Role.LEAD),
        "member": member,
        "other_lead": make_user(
            "olga_lead", team=other_team, role=Role.LEAD, email="olga@example.org"
        ),
        "admin": admin_user,
    }


def _budget(team, action, *, start=T0 - timedelta(days=1), days=2, **limits):
    limits = limits or {"energy_limit_kwh": 1.0}
    return Budget.objects.create(
        team=team, period_start=start, period_end=start + timedelta(days=days),
        hard_limit_action=action, **limits,
    )  # fmt: skip


def _spend(team, job, *, hour, kwh=0.0, kg=0.0):
    EnergyLedgerEntry.objects.create(
        gpu=Gpu.objects.first(), hour=hour, job=job, team=team, energy_j=kwh * 3.6e6,
        co2_g=kg * 1000.0, ci_g_per_kwh=0.0, zone="ES",
    )  # fmt: skip


def _job(make_job, member, team):
    return make_job(
        owner=member, team=team, min_gpus=2, max_gpus=2, global_batch_size=256,
        min_batch_size=256, max_batch_size=256, at=T0 - timedelta(minutes=5),
    )  # fmt: skip


def _running_with_unaccounted_samples(cluster, people, team, make_job, *, kwh):
    """The team's job running on GPUs 0 and 1 since a minute before T0 with ``kwh`` in the
    ledger and 10 minutes of samples at 400 W on GPU 0 that accounting has not reached
    (0.067 kWh); returns a queued job of the team."""
    running = _job(make_job, people["member"], team)
    gpu, other = Gpu.objects.filter(node=cluster).order_by("index")[:2]
    cluster_services.start_job(running, gpus=[gpu, other], batch_size=256, at=T0 - MINUTE)
    _spend(team, running, hour=T0 - timedelta(hours=2), kwh=kwh)
    samples = [{"gpu_uuid": gpu.uuid, "ts": (T0 + timedelta(seconds=k)).isoformat(),
                "power_w": 400.0, "energy_j": None} for k in range(601)]  # fmt: skip
    ingest_batch(cluster, {"samples": samples}, now=T0 + timedelta(minutes=11))
    return _job(make_job, people["member"], team)


def _round(at, capture):
    with capture(execute=True):
        result = services.run_scheduling_round(now=at)
    assert result.ran
    return result


def test_a_spent_notify_only_budget_mails_the_leads_once_per_period(
    cluster, people, team, make_job, django_capture_on_commit_callbacks
):
    # given a notify_only budget of 1 kWh, spent (1.2 kWh), and a queued job of the team
    budget = _budget(team, HardLimitAction.NOTIFY_ONLY)
    job = _job(make_job, people["member"], team)
    _spend(team, job, hour=T0 - timedelta(hours=2), kwh=1.2)

    # when rounds run
    _round(T0, django_capture_on_commit_callbacks)

    # then the job runs all the same, and the team's leads with an address get one e-mail
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    alert = BudgetAlert.objects.get()
    assert (alert.budget_id, alert.team_id, alert.at, alert.action) == (
        budget.pk, team.pk, T0, HardLimitAction.NOTIFY_ONLY,
    )  # fmt: skip
    assert (alert.energy_used_kwh, alert.energy_limit_kwh) == (pytest.approx(1.2), 1.0)
    (message,) = mail.outbox
    assert message.to == ["liam@example.org"]
    assert message.subject == "[Wattflow] Vision: budget used up (energy 1.2 of 1 kWh)"
    assert "this budget only notifies" in message.body
    assert "2026-11-21 04:00 .. 2026-11-23 04:00 UTC" in message.body
    assert alert.emailed_to == ["liam@example.org"] and alert.emailed_at is not None

    # and later rounds of the same period, still spent and spending more, add nothing
    _spend(team, job, hour=T0, kwh=0.5)
    _round(T0 + MINUTE, django_capture_on_commit_callbacks)
    _round(T0 + 2 * MINUTE, django_capture_on_commit_callbacks)
    assert BudgetAlert.objects.count() == 1
    assert len(mail.outbox) == 1

    # when the next period's budget is spent too, that period gets its own alert and e-mail
    later = T0 + timedelta(days=1)
    _budget(team, HardLimitAction.NOTIFY_ONLY, start=later, days=2)
    _spend(team, job, hour=later, kwh=1.5)
    _round(later + MINUTE, django_capture_on_commit_callbacks)
    assert BudgetAlert.objects.count() == 2
    assert len(mail.outbox) == 2


def test_a_budget_not_yet_spent_alerts_nobody(
    cluster, people, team, make_job, django_capture_on_commit_callbacks
):
    _budget(team, HardLimitAction.NOTIFY_ONLY)
    job = _job(make_job, people["member"], team)
    _spend(team, job, hour=T0 - timedelta(hours=2), kwh=0.99)
    _round(T0, django_capture_on_commit_callbacks)
    assert not BudgetAlert.objects.exists()
    assert mail.outbox == []


@pytest.mark.parametrize(
    ("action", "consequence"),
    [
        (HardLimitAction.HOLD_QUEUE, "No new job starts until the period ends"),
        (HardLimitAction.PAUSE_JOBS, "Running jobs are paused"),
    ],
)
def test_hold_queue_and_pause_jobs_budgets_alert_the_leads_too(
    cluster, people, team, make_job, django_capture_on_commit_callbacks, action, consequence
):
    # given a carbon budget that stops work when spent, and spent
    _budget(team, action, energy_limit_kwh=None, carbon_limit_kg=2.0)
    job = _job(make_job, people["member"], team)
    _spend(team, job, hour=T0 - timedelta(hours=2), kg=2.5)
    _round(T0, django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED  # the budget holds it back, as before
    (message,) = mail.outbox
    assert message.to == ["liam@example.org"]
    assert "carbon 2.5 of 2 kg CO2e" in message.subject
    assert consequence in message.body
    assert BudgetAlert.objects.get().action == action


def test_a_budget_past_its_soft_limit_is_accounted_to_its_newest_samples_before_a_round(
    cluster, people, team, make_job, django_capture_on_commit_callbacks
):
    # given a hold_queue budget of 1 kWh with 0.95 kWh in the ledger (past its 80% soft
    # limit), the team's job running on GPU 0 and 10 minutes of its samples at 400 W
    # (0.067 kWh) that accounting has not reached yet, and a queued job of the team
    _budget(team, HardLimitAction.HOLD_QUEUE)
    queued = _running_with_unaccounted_samples(cluster, people, team, make_job, kwh=0.95)
    assert DirtyHour.objects.exists()

    # when a round runs
    _round(T0 + timedelta(minutes=11), django_capture_on_commit_callbacks)

    # then it read the budget spent (1.017 kWh), not the ledger's 0.95: the job waits
    queued.refresh_from_db()
    assert queued.state == JobState.QUEUED
    assert BudgetAlert.objects.get().energy_used_kwh == pytest.approx(0.95 + 400 * 600 / 3.6e6)


def test_a_budget_the_teams_gpus_could_push_past_its_soft_limit_is_accounted_first(
    cluster, people, team, make_job, django_capture_on_commit_callbacks
):
    # given a hold_queue budget of 1 kWh whose soft limit is 99.5%, 0.98 kWh in the ledger
    # (below it), the team's job running on 2 GPUs of 400 W at most, and 10 minutes of its
    # samples at 400 W (0.067 kWh) that accounting has not reached yet: the ledger alone
    # says 0.98, the GPUs could have drawn more than the 0.015 kWh to the soft limit
    budget = _budget(team, HardLimitAction.HOLD_QUEUE)
    Budget.objects.filter(pk=budget.pk).update(warn_fraction=0.995)
    queued = _running_with_unaccounted_samples(cluster, people, team, make_job, kwh=0.98)

    # when a round runs
    _round(T0 + timedelta(minutes=11), django_capture_on_commit_callbacks)

    # then it read the budget spent (1.047 kWh): the queued job waits, the leads are told
    queued.refresh_from_db()
    assert queued.state == JobState.QUEUED
    assert BudgetAlert.objects.get().energy_used_kwh == pytest.approx(0.98 + 400 * 600 / 3.6e6)


def test_a_small_budgets_alert_says_what_was_spent_in_its_own_digits(
    cluster, people, team, make_job, django_capture_on_commit_callbacks
):
    # given a 33 g carbon budget spent to 33.4 g (one decimal printed "0.0 of 0.033 kg")
    _budget(team, HardLimitAction.HOLD_QUEUE, energy_limit_kwh=None, carbon_limit_kg=0.033)
    job = _job(make_job, people["member"], team)
    _spend(team, job, hour=T0 - timedelta(hours=2), kg=0.033378)
    _round(T0, django_capture_on_commit_callbacks)
    (message,) = mail.outbox
    assert "carbon 0.0334 of 0.033 kg CO2e" in message.subject


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.033378, "0.0334"), (48.71, "48.7"), (1.2, "1.2"), (2.0, "2"), (1234.5, "1,234"),
     (1e6, "1,000,000"), (0.0, "0")],
)  # fmt: skip
def test_amounts_keep_three_significant_digits_without_an_exponent(value, text):
    assert budget_alerts.amount(value) == text


def test_a_failed_e_mail_is_sent_after_a_later_round(
    cluster, people, team, make_job, django_capture_on_commit_callbacks, settings
):
    # given a mail server that refuses connections (nothing listens on port 1)
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 2
    _budget(team, HardLimitAction.NOTIFY_ONLY)
    job = _job(make_job, people["member"], team)
    _spend(team, job, hour=T0 - timedelta(hours=2), kwh=2.0)

    # when the round that finds the budget spent cannot send
    _round(T0, django_capture_on_commit_callbacks)

    # then the alert stands, unsent; and once mail works a later round sends it, once
    alert = BudgetAlert.objects.get()
    assert alert.emailed_at is None
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    _round(T0 + MINUTE, django_capture_on_commit_callbacks)
    _round(T0 + 2 * MINUTE, django_capture_on_commit_callbacks)
    assert [m.to for m in mail.outbox] == [["liam@example.org"]]
    alert.refresh_from_db()
    assert alert.emailed_at is not None


def test_the_dashboard_shows_the_alert_to_the_teams_leads_and_admins_only(
    cluster, people, team, make_job, client, django_capture_on_commit_callbacks
):
    # given a spent notify_only budget announced by a round
    _budget(team, HardLimitAction.NOTIFY_ONLY)
    job = _job(make_job, people["member"], team)
    _spend(team, job, hour=T0 - timedelta(hours=2), kwh=1.2)
    _round(T0, django_capture_on_commit_callbacks)
    alert = BudgetAlert.objects.get()

    # then while its period runs the team's leads and admins see it, nobody else
    now = T0 + timedelta(hours=1)
    seen = {
        name: list(budget_alerts.visible_alerts(user, now=now).values_list("pk", flat=True))
        for name, user in people.items()
    }
    assert seen == {
        "lead": [alert.pk], "quiet_lead": [alert.pk], "member": [], "other_lead": [],
        "admin": [alert.pk],
    }  # fmt: skip
    # and after the period it is gone from the dashboard
    assert not budget_alerts.visible_alerts(people["admin"], now=T0 + timedelta(days=2)).exists()

    # through the page itself (its period runs on the real clock here: move it)
    Budget.objects.filter(pk=alert.budget_id).update(period_end=datetime(2100, 1, 1, tzinfo=UTC))
    marker = f'data-alert="{alert.pk}"'
    for name, expected in [("lead", True), ("member", False), ("other_lead", False)]:
        client.force_login(people[name])
        page = client.get("/").content.decode()
        assert (marker in page) is expected, name
        if expected:
            assert "budget used up" in page and "energy 1.2 of 1 kWh" in page
    client.force_login(people["lead"])
    data = client.get("/dashboard/data/").json()
    assert [a["id"] for a in data["alerts"]] == [alert.pk]


def test_a_budget_found_over_after_its_period_ended_alerts_the_leads_once(
    cluster, people, team, make_job, client, django_capture_on_commit_callbacks
):
    # given a hold_queue budget whose one-hour period ended at T0 at 0.9 of its 1 kWh in
    # the ledger its last round read, and accounting that then brought in its last
    # minutes: 1.6 kWh (a 2-minute demo period ended at 161.6% with no alert)
    start = T0 - timedelta(hours=1)
    budget = _budget(team, HardLimitAction.HOLD_QUEUE, start=start, days=1 / 24)
    job = _job(make_job, people["member"], team)
    _spend(team, job, hour=start, kwh=0.9)
    _round(T0 - MINUTE, django_capture_on_commit_callbacks)
    assert not BudgetAlert.objects.exists()
    EnergyLedgerEntry.objects.update(energy_j=1.6 * 3.6e6)

    # when the next round runs, after the period
    _round(T0 + MINUTE, django_capture_on_commit_callbacks)

    # then the leads learn it: one alert, marked as found after the period, and one e-mail
    alert = BudgetAlert.objects.get()
    assert (alert.budget_id, alert.at, alert.after_period) == (budget.pk, T0 + MINUTE, True)
    assert alert.energy_used_kwh == pytest.approx(1.6)
    (message,) = mail.outbox
    assert message.subject == (
        "[Wattflow] Vision: budget found over its limit after its period ended "
        "(energy 1.6 of 1 kWh)"
    )
    assert "no round could act on it" in message.body
    # shown to the leads for a day, then gone; later rounds add nothing
    _round(T0 + 2 * MINUTE, django_capture_on_commit_callbacks)
    assert BudgetAlert.objects.count() == 1 and len(mail.outbox) == 1
    lead = people["lead"]
    assert list(budget_alerts.visible_alerts(lead, now=T0 + timedelta(hours=23))) == [alert]
    assert not budget_alerts.visible_alerts(lead, now=T0 + timedelta(hours=25)).exists()
    assert not budget_alerts.visible_alerts(people["member"], now=T0 + MINUTE).exists()


def test_an_ended_budget_within_its_limit_or_long_ended_alerts_nobody(
    cluster, people, team, make_job, django_capture_on_commit_callbacks
):
    # given a budget that ended at T0 within its limit, and one over its limit that ended
    # two hours before (outside the look-back: accounting had long reached it)
    start = T0 - timedelta(hours=1)
    _budget(team, HardLimitAction.PAUSE_JOBS, start=start, days=1 / 24)
    job = _job(make_job, people["member"], team)
    _spend(team, job, hour=start, kwh=0.99)
    old = T0 - timedelta(hours=3)
    _budget(team, HardLimitAction.PAUSE_JOBS, start=old, days=1 / 24)
    _spend(team, job, hour=old, kwh=5.0)

    _round(T0 + MINUTE, django_capture_on_commit_callbacks)

    assert not BudgetAlert.objects.exists()
    assert mail.outbox == []


@pytest.mark.parametrize(
    ("change", "then_quiet"),
    [
        # the action alone; then a warning fraction changes: nothing to tell
        ({}, {"warn_fraction": 0.5}),
        # the action with a limit (the alert took the new action, and nobody was told: its
        # e-mail's "this budget only notifies" stayed the leads' last word while the team's
        # jobs were paused); then a limit alone, still spent: nothing to tell
        ({"energy_limit_kwh": 1.1}, {"energy_limit_kwh": 1.05}),
    ],
)
def test_a_spent_budget_whose_action_changes_mails_its_leads_again(
    cluster, people, team, make_job, django_capture_on_commit_callbacks, change, then_quiet
):
    # (the leads were told "this budget only notifies"; a lead switched it to pause_jobs and
    # the team's jobs stopped, with no word to the other leads)
    budget = _budget(team, HardLimitAction.NOTIFY_ONLY)
    job = _job(make_job, people["member"], team)
    _spend(team, job, hour=T0 - timedelta(hours=2), kwh=1.2)
    _round(T0, django_capture_on_commit_callbacks)
    assert len(mail.outbox) == 1

    # when a lead changes what the budget does at its limit, inside its period
    cluster_services.save_budget(
        budget, actor=people["lead"], at=T0 + MINUTE / 2,
        changes={"hard_limit_action": HardLimitAction.PAUSE_JOBS, **change},
    )  # fmt: skip
    _round(T0 + MINUTE, django_capture_on_commit_callbacks)

    # then the job is paused, and the leads are told so once, with the limit as it is
    job.refresh_from_db()
    assert job.state != JobState.RUNNING
    assert len(mail.outbox) == 2
    assert "Running jobs are paused" in mail.outbox[1].body
    limit = change.get("energy_limit_kwh", 1)
    assert f"energy 1.2 of {limit:g} kWh" in mail.outbox[1].subject
    assert BudgetAlert.objects.get().action == HardLimitAction.PAUSE_JOBS
    _round(T0 + 2 * MINUTE, django_capture_on_commit_callbacks)
    assert len(mail.outbox) == 2
    cluster_services.save_budget(
        budget, actor=people["lead"], at=T0 + 2 * MINUTE, changes=then_quiet
    )
    _round(T0 + 3 * MINUTE, django_capture_on_commit_callbacks)
    assert len(mail.outbox) == 2
