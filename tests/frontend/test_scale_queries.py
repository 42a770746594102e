"""Pages and API lists at a large cluster's size: the number of SQL queries must not grow with
the rows shown (benchmarks/scale_db.py measures them on 100,000 jobs; docs/benchmarks.md,
"The service at a real cluster's size"), and the job list's order is read from an index."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token

from cluster.choices import Role
from cluster.models import Budget, Job, Team
from telemetry.models import EnergyLedgerEntry

pytestmark = pytest.mark.django_db


def _ledger(gpu, job, team, hour, energy_j=3.6e6):
    EnergyLedgerEntry.objects.create(
        gpu=gpu,
        hour=hour,
        job=job,
        team=team,
        energy_j=energy_j,
        co2_g=200.0,
        ci_g_per_kwh=200.0,
        zone="ES",
        minutes_j=[energy_j / 60] * 60,
    )


def _queries(client, url, **params) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, params)
        if response.streaming:
            b"".join(response.streaming_content)
    assert response.status_code == 200, response.content
    return len(ctx.captured_queries)


def test_reports_page_and_csv_read_jobs_in_a_fixed_number_of_queries(
    admin_user, team, make_user, make_node, make_job
):
    gpu = make_node("node-01", gpus=1).gpus.get()
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    client = Client()
    client.force_login(admin_user)
    counts = []
    for total in (2, 6):
        while Job.objects.count() < total:
            owner = make_user(f"user{Job.objects.count()}", team=team)
            _ledger(gpu, make_job(owner=owner, team=team), team, hour)
        counts.append(
            (
                _queries(client, reverse("frontend:reports")),
                _queries(client, reverse("frontend:reports-csv")),
            )
        )
    # Each job's team and owner were two queries a job (186,000 for 93,000 jobs).
    assert counts[0] == counts[1]


def test_the_reports_page_lists_jobs_a_page_at_a_time_and_keeps_every_total(
    admin_user, team, other_team, make_user, make_node, make_job, monkeypatch
):
    # A month of a 100-node cluster is 93,000 jobs: listed whole, the page was 15 MB and
    # took over a minute. Jobs come a page at a time (largest energy first); the team and
    # user rows, the total and the CSV export still count every job.
    from frontend import admin_views

    monkeypatch.setattr(admin_views, "REPORT_JOBS_PER_PAGE", 2, raising=False)
    gpu = make_node("node-01", gpus=1).gpus.get()
    now = timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    owners = [
        (make_user("ann", team=team), team),
        (make_user("bob", team=other_team), other_team),
        (make_user("cy", team=team), team),
    ]
    for k in range(5):
        owner, owner_team = owners[k % 3]
        job = make_job(owner=owner, team=owner_team, name=f"job-{k}")
        _ledger(gpu, job, owner_team, hour, energy_j=3.6e6 * (k + 1))
    # idle energy and a job's energy before the period are no one's in this report
    EnergyLedgerEntry.objects.create(
        gpu=gpu,
        hour=hour,
        team=None,
        job=None,
        energy_j=9e9,
        co2_g=1.0,
        ci_g_per_kwh=1.0,
        zone="ES",
        minutes_j=[],
    )
    _ledger(gpu, Job.objects.first(), team, hour - timedelta(days=40), energy_j=7e9)
    period = {"start": (now - timedelta(days=29)).date(), "end": now.date()}
    in_period = EnergyLedgerEntry.objects.filter(
        job__isnull=False, hour__gte=hour - timedelta(days=1)
    )
    ledger_kwh = sum(in_period.values_list("energy_j", flat=True)) / 3.6e6
    ledger_kg = sum(in_period.values_list("co2_g", flat=True)) / 1000
    client = Client()
    client.force_login(admin_user)
    seen = []
    for number in (1, 2, 3):
        response = client.get(reverse("frontend:reports"), {**period, "page": number})
        assert response.status_code == 200
        html = response.content.decode()
        table = html[
            html.index('id="report-job"') : html.index("</table>", html.index('id="report-job"'))
        ]
        shown = response.context["rows"]["job"]
        assert len(shown) == table.count("<tr>") - 1 == (2 if number < 3 else 1)
        assert response.context["job_page"].paginator.num_pages == 3
        seen += shown
        rows, total = response.context["rows"], response.context["total"]
        assert sum(r["energy_kwh"] for r in rows["team"]) == pytest.approx(ledger_kwh)
        assert sum(r["energy_kwh"] for r in rows["user"]) == pytest.approx(ledger_kwh)
        assert (total["energy_kwh"], total["co2_kg"]) == (
            pytest.approx(ledger_kwh),
            pytest.approx(ledger_kg),
        )
    # every job once over the pages, largest first; their sum is the ledger's
    assert [r["name"] for r in seen] == [f"job-{k}" for k in range(4, -1, -1)]
    assert sum(r["energy_kwh"] for r in seen) == pytest.approx(ledger_kwh)
    assert "page=2#report-job" in client.get(reverse("frontend:reports"), period).content.decode()
    # a page alone is the default period's (the last 30 days, as here)
    alone = client.get(reverse("frontend:reports"), {"page": 3})
    assert alone.status_code == 200
    assert [r["name"] for r in alone.context["rows"]["job"]] == ["job-0"]
    csv_lines = b"".join(
        client.get(reverse("frontend:reports-csv"), period).streaming_content
    ).decode()
    assert sum(line.startswith("job,") for line in csv_lines.splitlines()) == 5


def test_the_dashboards_series_read_seconds_not_timestamps_and_keep_microseconds(
    member, team, make_job, make_node
):
    # A week of a 100-node cluster is 20,000 completions: parsed as timestamps they took
    # 0.6 s of the dashboard's 2.6 s; read as seconds (floats), 0.03 s. The times must
    # come back to the microsecond.
    from cluster import services
    from cluster.choices import JobState
    from cluster.queries import completed_jcts, queue_and_running_series

    node = make_node(gpus=1)
    t0 = timezone.now().replace(microsecond=123457) - timedelta(hours=3)
    job = make_job(owner=member, team=team, at=t0)
    started = t0 + timedelta(minutes=5, microseconds=1)
    done = t0 + timedelta(minutes=65, microseconds=999_999)
    services.start_job(job, gpus=[node.gpus.get()], batch_size=256, at=started)
    services.transition_job(job, to=JobState.COMPLETED, at=done)
    end = t0 + timedelta(hours=3)
    with CaptureQueriesContext(connection) as ctx:
        jcts = completed_jcts(Job.objects.all(), start=t0, end=end)
        series = queue_and_running_series(Job.objects.all(), start=t0, end=end)
    assert jcts == [(done, (done - t0).total_seconds())]
    assert series == [(t0, 1, 0), (started, 0, 1), (done, 0, 0), (end, 0, 0)]
    selects = [q["sql"] for q in ctx.captured_queries]
    assert len(selects) == 3
    for sql in selects:
        head = re.split(r' FROM "\w+"(?!\.)', sql)[0]  # the select list
        assert "EXTRACT(EPOCH FROM" in head, sql
        # no timestamp column is selected outside EXTRACT(EPOCH FROM ...)::float8
        assert "_at" not in re.sub(r"EXTRACT\(EPOCH FROM .*?\)::float8", "", head), sql


def test_the_csv_export_streams_its_rows(admin_user, team, member, make_node, make_job):
    gpu = make_node("node-01", gpus=1).gpus.get()
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    _ledger(gpu, make_job(owner=member, team=team), team, hour)
    client = Client()
    client.force_login(admin_user)
    response = client.get(reverse("frontend:reports-csv"))
    # A month of a large cluster is ~100,000 rows: sent as written, not held in one body.
    assert response.streaming
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert lines[0].startswith("level,key,name") and [line[:4] for line in lines[1:]] == [
        "team",
        "user",
        "job,",
    ]


def _weekly_budgets(team: Team, weeks: int, *, now) -> None:
    start = now.replace(minute=30, second=0, microsecond=0) - timedelta(days=7 * (weeks - 1))
    have = Budget.objects.filter(team=team).count()
    for k in range(have, weeks):
        Budget.objects.create(
            team=team,
            period_start=start + timedelta(days=7 * k) - timedelta(days=7 * weeks),
            period_end=start + timedelta(days=7 * (k + 1)) - timedelta(days=7 * weeks),
            energy_limit_kwh=100.0,
        )


def test_budget_pages_and_api_read_usage_in_a_fixed_number_of_queries(
    admin_user, make_user, make_node, make_job
):
    gpu = make_node("node-01", gpus=1).gpus.get()
    now = timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    page, api = Client(), Client()
    page.force_login(admin_user)
    token, _ = Token.objects.get_or_create(user=admin_user)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    counts = []
    for teams in (2, 6):
        while Team.objects.count() < teams:
            n = Team.objects.count()
            team = Team.objects.create(name=f"Team {n}", slug=f"team-{n}")
            lead = make_user(f"lead{n}", team=team, role=Role.LEAD)
            job = make_job(owner=lead, team=team)
            for back in (0, 1, 30, 24 * 8):  # the running hour, earlier ones, a past period
                _ledger(gpu, job, team, hour - timedelta(hours=back))
            # a running budget that starts inside an hour, and past ones
            Budget.objects.create(
                team=team,
                period_start=hour - timedelta(days=3, minutes=-17),
                period_end=hour + timedelta(days=4),
                energy_limit_kwh=100.0,
            )
            Budget.objects.create(
                team=team,
                period_start=hour - timedelta(days=10, minutes=-17),
                period_end=hour - timedelta(days=3, minutes=-17),
                carbon_limit_kg=50.0,
            )
        counts.append(
            (
                _queries(page, reverse("frontend:budget-list")),
                _queries(page, reverse("frontend:dashboard")),
                _queries(page, reverse("frontend:dashboard-data")),
                _queries(api, "/api/budgets/"),
            )
        )
    # Two or three queries a budget before (216 for 30 teams' weekly budgets over a month).
    assert counts[0] == counts[1]


def test_the_budget_page_tells_the_lead_which_budgets_they_may_edit(
    lead, team, other_team, make_user
):
    now = timezone.now()
    for t in (team, other_team):
        Budget.objects.create(
            team=t, period_start=now, period_end=now + timedelta(days=1), energy_limit_kwh=1.0
        )
    make_user("both", team=other_team).memberships.create(team=team, role=Role.LEAD)
    client = Client()
    client.force_login(lead)
    rows = client.get(reverse("frontend:budget-list")).context["rows"]
    assert [(r["team"], r["can_edit"]) for r in rows] == [("Vision", True)]


def _distinct_columns(ctx) -> list[str]:
    """The select lists of the SELECT DISTINCT (not DISTINCT ON) queries in ``ctx``."""
    return [
        re.split(r' FROM "\w+"(?!\.)', q["sql"])[0]
        for q in ctx.captured_queries
        if q["sql"].startswith("SELECT DISTINCT ") and not q["sql"].startswith("SELECT DISTINCT ON")
    ]


def test_distinct_names_are_read_one_row_a_name(
    admin_user, member, team, make_job, make_node, api_client
):
    # The models' default order joined the DISTINCT: the job list's workload choices read
    # every job (100,000 rows, 3 s of the admin's /jobs/ on a large cluster), a submit's
    # GPU model check every GPU. A model the catalog spells ("a100") needs no query since
    # the submit takes the catalog's spelling; one it lacks reads the registered models,
    # one row a model (DISTINCT ON the model).
    make_node("node-01", gpus=2)
    for k in range(3):
        make_job(owner=member, team=team, name=f"job-{k}")
    client = Client()
    client.force_login(admin_user)
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(reverse("frontend:job-list")).status_code == 200
        submitted = api_client(member).post(
            "/api/jobs/",
            {
                "team": team.slug,
                "name": "on a100",
                "workload": "resnet50",
                "gpu_model": "a100",
                "min_gpus": 1,
                "global_batch_size": 256,
                "total_iterations": 100,
            },
            format="json",
        )
        on_l40s = api_client(member).post(
            "/api/jobs/",
            {
                "team": team.slug,
                "name": "on an l40s",
                "workload": "resnet50",
                "gpu_model": "nvidia l40s",
                "min_gpus": 1,
                "global_batch_size": 256,
                "total_iterations": 100,
            },
            format="json",
        )
    assert submitted.status_code == 201, submitted.content
    assert submitted.json()["gpu_model"] == "A100"
    # (no L40S is registered: refused as a job that could never start, after the lookup)
    assert on_l40s.status_code == 400 and "0 l40s GPUs" in on_l40s.json()["min_gpus"][0]
    selects = _distinct_columns(ctx)
    assert [s.split(" AS ")[-1] for s in selects] == ['"workload"'], selects
    assert all(s.count(" AS ") == 1 for s in selects), selects
    on_model = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("SELECT DISTINCT ON")]
    assert on_model, "the model the catalog lacks read no registered models"
    assert all(q.startswith('SELECT DISTINCT ON ("cluster_gpu"."model")') for q in on_model), (
        on_model
    )


def test_the_job_lists_order_is_read_from_an_index(db):
    # With sequential scans priced out, a plan that still sorts has no index to read the
    # order from: an admin's first page sorted every job (420 ms on 100,000).
    query = Job.objects.order_by("-submitted_at", "-id")[:25]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = query.explain()
    assert "Sort" not in plan, plan
