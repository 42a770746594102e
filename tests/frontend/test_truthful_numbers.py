"""What the pages say is true: percentages past 100, the scope of every count, the queue
from when jobs exist, jobs kept running by hold_queue, the round behind each allocation,
words instead of codes, styled error pages. Real database, real services, real rounds."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.views.defaults import server_error
from frontend_scene import build_scene

from cluster import services
from cluster.choices import HardLimitAction, JobState
from cluster.models import Budget, Job, Node
from cluster.queries import completed_jcts, queue_and_running_series
from frontend.dashboard import dashboard_payload
from scheduling.models import RoundDecision, SchedulerSettings
from scheduling.services import run_scheduling_round
from telemetry.models import CarbonIntensity

pytestmark = pytest.mark.django_db


@pytest.fixture
def scene(db):
    return build_scene()


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_use_past_the_hard_limit_reads_past_100_percent(scene):
    vision = scene.budgets["vision"]
    payload = dashboard_payload(scene.users["member"], now=scene.now)
    (before,) = payload["budgets"]
    used_kg = before["limits"][1]["used"]
    # given a carbon limit of half what was used
    Budget.objects.filter(pk=vision.pk).update(carbon_limit_kg=used_kg / 2)
    (row,) = dashboard_payload(scene.users["member"], now=scene.now)["budgets"]
    carbon = row["limits"][1]
    assert carbon["percent"] == pytest.approx(200.0)
    assert carbon["bar_percent"] == 100.0
    assert carbon["over_hard"] is True
    page = client_of(scene.users["member"]).get(reverse("frontend:budget-list")).content.decode()
    assert "200.0 %" in page
    # the burn chart marks where both limits were crossed
    names = [t["name"] for t in row["figures"]["carbon"]["data"]]
    assert any(n.startswith("soft limit crossed ") for n in names)
    assert any(n.startswith("hard limit crossed ") for n in names)


def test_every_count_says_its_scope(scene):
    member = dashboard_payload(scene.users["member"], now=scene.now)
    admin = dashboard_payload(scene.users["admin"], now=scene.now)
    assert member["scope"] == "your team Vision"
    assert admin["scope"] == "all teams"
    assert "(your team Vision)" in member["figures"]["queue"]["layout"]["title"]["text"]
    assert "(all teams)" in admin["figures"]["jct"]["layout"]["title"]["text"]
    html = client_of(scene.users["member"]).get("/").content.decode()
    assert html.count('data-scope="team">your team Vision<') == 2
    assert html.count('data-scope="cluster">the cluster') == 2


def test_queue_and_running_start_at_the_first_job_with_exact_steps(
    member, team, make_job, make_node
):
    node = make_node(gpus=2)
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=3)
    a = make_job(owner=member, team=team, name="a", at=t0)
    b = make_job(owner=member, team=team, name="b", at=t0 + timedelta(minutes=10))
    services.start_job(a, gpus=[node.gpus.first()], batch_size=256, at=t0 + timedelta(minutes=5))
    services.transition_job(a, to=JobState.COMPLETED, at=t0 + timedelta(minutes=65))
    services.cancel_job(b, at=t0 + timedelta(minutes=30))
    end = t0 + timedelta(hours=3)
    series = queue_and_running_series(Job.objects.all(), start=end - timedelta(hours=24), end=end)
    # nothing before the first submit (t0), then every change, then the end
    assert series == [
        (t0, 1, 0),
        (t0 + timedelta(minutes=5), 0, 1),
        (t0 + timedelta(minutes=10), 1, 1),
        (t0 + timedelta(minutes=30), 0, 1),
        (t0 + timedelta(minutes=65), 0, 0),
        (end, 0, 0),
    ]
    assert completed_jcts(Job.objects.all(), start=t0, end=end) == [
        (t0 + timedelta(minutes=65), 3900.0)
    ]
    assert queue_and_running_series(Job.objects.none(), start=t0, end=end) == []


def test_a_paused_job_waits_again_in_the_queue_series(member, team, make_job, make_node):
    # a live probe: two paused jobs showed as running (the series read only first starts)
    node = make_node(gpus=1)
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=3)
    a = make_job(owner=member, team=team, name="a", at=t0)
    services.start_job(a, gpus=[node.gpus.first()], batch_size=256, at=t0 + timedelta(minutes=5))
    services.transition_job(a, to=JobState.PAUSED, at=t0 + timedelta(minutes=20))
    end = t0 + timedelta(hours=1)
    series = queue_and_running_series(Job.objects.all(), start=t0, end=end)
    assert series == [
        (t0, 1, 0),
        (t0 + timedelta(minutes=5), 0, 1),
        (t0 + timedelta(minutes=20), 1, 0),
        (end, 1, 0),
    ]


def test_a_job_submitted_while_a_round_ran_never_makes_the_queue_negative(
    member, team, make_job, make_node
):
    # A new user's walkthrough of `make run`: the queue chart dipped to -1 waiting. A round
    # stamped its starts with the clock it took before reading the queue, so a job submitted
    # (committed) while the round ran started 2 s "before" its submit. Rounds now leave such
    # a job for the next one (tests/scheduling/test_submit_during_round.py); the chart still
    # reads the rows written before.
    node = make_node(gpus=1)
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=t0)
    config = SchedulerSettings.load()
    config.policy = "fifo"
    config.save()
    earlier = make_job(owner=member, team=team, name="earlier", at=t0 - timedelta(seconds=60))
    services.cancel_job(earlier, at=t0 - timedelta(seconds=30))
    job = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, at=t0 + timedelta(seconds=2))
    # The stamps such a round wrote (rounds now leave such a job for the next round; the
    # live database keeps the rows written before): started at the round's clock.
    services.start_job(job, gpus=node.gpus.all(), batch_size=256, at=t0)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert job.current_allocation.started_at < job.submitted_at  # the live stamps, as seen
    end = t0 + timedelta(minutes=1)
    series = queue_and_running_series(Job.objects.all(), start=t0 - timedelta(hours=1), end=end)
    assert all(waiting >= 0 and running >= 0 for _, waiting, running in series), series
    assert series == [
        (earlier.submitted_at, 1, 0),
        (t0 - timedelta(seconds=30), 0, 0),
        (job.submitted_at, 0, 1),
        (end, 0, 1),
    ]


def test_a_job_kept_running_by_hold_queue_is_not_shown_as_waiting(scene):
    # given vision's budget used up, with "start no new jobs" at the hard limit
    Budget.objects.filter(pk=scene.budgets["vision"].pk).update(
        energy_limit_kwh=0.001, hard_limit_action=HardLimitAction.HOLD_QUEUE
    )
    result = run_scheduling_round(now=timezone.now(), policy="powerflow", force=True)
    assert result.ran
    running = scene.jobs["running"]
    running.refresh_from_db()
    assert running.state == JobState.RUNNING
    payload = dashboard_payload(scene.users["member"], now=timezone.now())
    row = next(d for d in payload["latest_round"]["decisions"] if d["job_id"] == running.pk)
    assert (row["action"], row["gpus"], row["placement"]) == ("keep", 4, "node-01: 0,1,2,3")
    assert row["reason_code"] == "budget_exhausted"
    # the round line counts it as running, as the job rows do, cluster-wide
    states = list(Job.objects.values_list("state", flat=True))
    assert (payload["latest_round"]["queue_length"], payload["latest_round"]["running"]) == (
        states.count(JobState.QUEUED),
        states.count(JobState.RUNNING),
    )
    assert payload["latest_round"]["running"] >= 1
    page = client_of(scene.users["member"]).get(reverse("frontend:job-detail", args=[running.pk]))
    html = page.content.decode()
    assert "Would wait: Budget used up." in html
    assert "It keeps running" in html
    assert "budget_exhausted" not in html


def test_each_allocation_names_its_node_gpus_and_the_round_that_made_it(scene):
    # fifo runs the sweep at the default clock: the round retunes it (1200 MHz -> default)
    result = run_scheduling_round(now=timezone.now(), policy="fifo", force=True)
    assert result.ran and result.applied == 1
    job = scene.jobs["running"]
    page = client_of(scene.users["member"]).get(reverse("frontend:job-detail", args=[job.pk]))
    first, second = page.context["allocations"]
    assert first["placement"] == second["placement"] == "node-01: 0,1,2,3"
    assert first["why"] == "not made by a recorded round"  # the scene started it by hand
    assert second["why"].startswith(
        f"Retuned: clock 1200 MHz → default by round {result.round_id} (fifo, grid "
    )
    # the round stored why with its decision, and the page adds what the sentence there says
    # beyond what changed (the job's budget this round, when it has one)
    decision = RoundDecision.objects.get(round_id=result.round_id, job=job)
    assert decision.reason == "fifo re-planned it: 1200 MHz → default clocks."
    # its first clause is what the page already says: not twice (fifo sets no allowances)
    assert "re-planned" not in second["why"] and second["why"].endswith("g/kWh)")
    html = page.content.decode()
    assert "node-01: 0,1,2,3" in html and "Retuned: clock 1200 MHz" in html


def test_the_job_page_uses_words_not_codes_and_no_doubled_waiting(scene, settings):
    job = scene.jobs["gpt2-small"]
    Job.objects.filter(pk=job.pk).update(
        pending_reason_code="budget_exhausted",
        pending_reason="Waiting: the team's energy budget is used up.",
    )
    html = (
        client_of(scene.users["member"])
        .get(reverse("frontend:job-detail", args=[job.pk]))
        .content.decode()
    )
    assert (
        "Why it waits: Budget used up.</strong> The team&#x27;s energy budget is used up." in html
    )
    assert "Waiting:" not in html
    listing = client_of(scene.users["member"]).get(reverse("frontend:job-list")).content.decode()
    assert ">Budget used up<" in listing


def test_a_completed_job_says_energy_used(scene):
    job = scene.jobs["finished-0"]
    html = (
        client_of(scene.users["member"])
        .get(reverse("frontend:job-detail", args=[job.pk]))
        .content.decode()
    )
    assert "Energy used" in html and "Energy so far" not in html


def test_forbidden_and_missing_pages_are_styled_and_say_why(scene):
    member = client_of(scene.users["member"])
    forbidden = member.get(reverse("frontend:reports"))
    assert forbidden.status_code == 403
    html = forbidden.content.decode()
    assert 'id="error-page"' in html and "Admins only." in html and "wattflow.css" in html
    missing = member.get("/no-such-page/")
    assert missing.status_code == 404
    assert 'id="error-page"' in missing.content.decode()


def test_the_grid_figure_shows_the_imported_hours_around_now(scene, settings):
    call_command("import_carbon", "data/carbon/em_ES_2022_hourly.csv", "--zone", "ES",
                 "--onto-year", str(scene.now.year))  # fmt: skip
    settings.TELEMETRY_CARBON_ZONE = "ES"
    payload = dashboard_payload(scene.users["member"], now=scene.now)
    grid = payload["figures"]["grid"]
    past, ahead = grid["data"][0], grid["data"][1]
    # 24 hours back and the stored 24 ahead, one step per hour, the hour of now in both
    assert (len(past["x"]), len(ahead["x"])) == (25, 24)
    hour = scene.now.replace(minute=0, second=0)
    stored = CarbonIntensity.objects.get(zone="ES", hour=hour).ci_g_per_kwh
    assert past["y"][-1] == round(stored, 1)
    assert payload["grid_now"]["ci_g_per_kwh"] == stored
    assert grid["layout"]["shapes"]  # clean and dirty hours are shaded
    power = next(t for t in grid["data"] if t["name"] == "cluster GPU power (kW)")
    assert power["x"] and min(power["y"]) > 0  # the scene's four hours of samples


def test_the_500_page_is_styled_and_needs_no_request_context(rf):
    response = server_error(rf.get("/jobs/"))
    html = response.content.decode()
    assert response.status_code == 500
    assert 'id="error-page"' in html and "wattflow.css" in html
    assert "Something went wrong on our side" in html
