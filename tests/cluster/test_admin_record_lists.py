"""The admin's lists of records that grow as the service runs (job events, GPU minutes and
hours, allocations, round decisions, the audit log) and its job list cost a page, not the
table: each counts at most ``BoundedCountPaginator.limit`` rows and reads its order from
an index (docs/benchmarks.md, "The admin's other long lists": on the scale database the
job events' list took 2.5 s, the GPU minutes' 1.7 s, each sorting its whole table, and
the audit log read each row's team with a query of its own)."""

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cluster import services
from cluster.choices import AuditAction
from cluster.models import AuditEntry, Gpu, Job, JobAllocation
from scheduling.models import RoundDecision, SchedulingRound
from telemetry.models import GpuHour, GpuMinute, JobEvent

T0 = datetime(2026, 11, 22, 3, 0, 0, tzinfo=UTC)
ROWS = 6  # of each table; the bound is set below it
LIMIT = 4


def _round(at: datetime) -> SchedulingRound:
    return SchedulingRound.objects.create(
        started_at=at, finished_at=at, policy="fifo", outcome="applied", round_length_s=60.0,
        schedulable_gpus=4, active_jobs=1, running_jobs=1, waiting_jobs=0, changes=1,
        predicted_energy_j=0.0, predicted_co2_g=0.0, ci_g_per_kwh=100.0, plan_duration_s=0.1,
    )  # fmt: skip


@pytest.fixture
def records(make_node, make_job, member, team, other_team, admin_user):
    """``ROWS`` rows of every listed table, written out of their list's order where the
    list is by time (as a late, spooled event or a recomputed hour is)."""
    node = make_node("node-01", gpus=ROWS)
    gpus = list(Gpu.objects.order_by("pk"))[:2]
    jobs = []
    for k in range(ROWS):
        job = make_job(owner=member, team=team, name=f"job-{k}")
        gpu = Gpu.objects.get(node=node, index=k)
        services.start_job(job, gpus=[gpu], batch_size=256, at=T0 + timedelta(minutes=k))
        job.refresh_from_db()
        jobs.append(job)
    for k, job in enumerate(jobs):
        JobEvent.objects.create(
            event_id=uuid.uuid4(), node=node, job=job, allocation_id=job.current_allocation_id,
            kind="progress", ts=T0 + timedelta(minutes=ROWS - k), iterations=k, received_at=T0,
        )  # fmt: skip
        for gpu in gpus:
            values = {"samples": 60, "power_avg_w": 300.0, "power_max_w": 320.0, "energy_j": 1.0}
            GpuMinute.objects.create(gpu=gpu, minute=T0 + timedelta(minutes=ROWS - k), **values)
            GpuHour.objects.create(gpu=gpu, hour=T0 + timedelta(hours=ROWS - k), **values)
        decision_round = _round(T0 + timedelta(minutes=k))
        RoundDecision.objects.create(round=decision_round, job=job, action="start")
        services.record_audit(
            actor=admin_user, action=AuditAction.UPDATED, object_type="budget", object_id=k,
            team=(team, other_team, None)[k % 3], at=T0 + timedelta(minutes=k),
        )  # fmt: skip
    return jobs


LISTS = [
    ("/admin/telemetry/jobevent/", JobEvent, True),
    ("/admin/telemetry/gpuminute/", GpuMinute, True),
    ("/admin/telemetry/gpuhour/", GpuHour, True),
    ("/admin/cluster/joballocation/", JobAllocation, True),
    ("/admin/scheduling/rounddecision/", RoundDecision, True),
    ("/admin/cluster/auditentry/", AuditEntry, False),  # (ordered on its ``at`` index)
    ("/admin/scheduling/schedulinground/", SchedulingRound, False),  # (``started_at``)
    ("/admin/cluster/job/", Job, False),  # (its list's index, docs: "The service at ...")
]


def _counts(queries, table: str) -> list[str]:
    return [
        q["sql"] for q in queries if re.search(r"COUNT\(", q["sql"], re.I) and table in q["sql"]
    ]


def _sorts(queries, table: str) -> list[str]:
    """The plans of the queries that read ``table``'s rows for the page that sort them,
    sequential scans and sorts priced out (the test's tables are small enough for the
    planner to sort anyway): a plan that still sorts has no index to read its order from."""
    sorting = []
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        for query in queries:
            sql = query["sql"]
            if f'FROM "{table}"' in sql and "ORDER BY" in sql and "COUNT(" not in sql.upper():
                cursor.execute("EXPLAIN " + sql)
                plan = "\n".join(r[0] for r in cursor.fetchall())
                if "Sort" in plan:
                    sorting.append(plan)
    return sorting


@pytest.mark.parametrize(("url", "model", "by_key"), LISTS)
def test_a_long_record_list_counts_up_to_a_bound_and_reads_its_order_from_an_index(
    records, admin_client, monkeypatch, url, model, by_key
):
    # given more rows than the count's bound
    monkeypatch.setattr("cluster.admin_readonly.BoundedCountPaginator.limit", LIMIT)
    table = model._meta.db_table
    with CaptureQueriesContext(connection) as ctx:
        response = admin_client.get(url)
    assert response.status_code == 200
    # then every count of the table is bounded (before: a COUNT(*) of the whole table, two
    # on the job list), and the page says so
    counts = _counts(ctx.captured_queries, table)
    assert counts, "no count"
    assert all("LIMIT" in sql for sql in counts), counts
    assert f"more than {LIMIT} {model._meta.verbose_name_plural}" in response.content.decode()
    if by_key:
        # and the page's rows come from the primary key backwards, newest written first
        # (before: sorted by time, or by the jobs' or rounds' order, over the whole table)
        assert _sorts(ctx.captured_queries, table) == []
        shown = [row.pk for row in response.context["cl"].result_list]
        assert shown == sorted(model.objects.values_list("pk", flat=True), reverse=True)


def test_a_short_record_list_counts_exactly(records, admin_client):
    response = admin_client.get("/admin/telemetry/jobevent/")
    assert response.context["cl"].result_count == ROWS
    html = response.content.decode()
    assert f"{ROWS} {JobEvent._meta.verbose_name_plural}" in html and "more than" not in html


def test_the_audit_list_reads_its_teams_with_the_page(records, admin_client, team, admin_user):
    # given 6 entries, then 18, each naming a team or none
    with CaptureQueriesContext(connection) as few:
        admin_client.get("/admin/cluster/auditentry/")
    for k in range(12):
        services.record_audit(
            actor=admin_user, action=AuditAction.UPDATED, object_type="budget", object_id=k,
            team=team if k % 2 else None,
        )  # fmt: skip
    with CaptureQueriesContext(connection) as many:
        response = admin_client.get("/admin/cluster/auditentry/")
    # then the page takes as many queries for 18 as for 6 (before: one more a row with a
    # team: 109 queries for a page of 100 on the scale database) and names each team
    assert len(many.captured_queries) == len(few.captured_queries)
    assert response.content.decode().count(f">{team.name}<") >= 6
