"""A round's reads grow with the live jobs, not with the history: finished jobs, their
allocations and scheduling states, past rounds (docs/benchmarks.md, "The service at a real
cluster's size": on 100,000 jobs each round read the whole job table, the GPU links of every
allocation ever made and every job's scheduling state)."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cluster.choices import JobState
from cluster.models import Job, JobAllocation, Node
from scheduling.models import JobSchedulingState, RoundDecision, SchedulingRound
from scheduling.services import run_scheduling_round

pytestmark = pytest.mark.django_db

HISTORY = 400
SCAN = re.compile(r"Scan (?:using \w+ )?on (\w+).*actual time=\S+ rows=(\d+) loops=(\d+)")
REMOVED = re.compile(r"Rows Removed by (?:Filter|Index Recheck): (\d+)")


def _history(n: int, *, member, team, gpus, now) -> None:
    """``n`` more jobs that finished three days ago, each with its allocation (GPU links),
    scheduling state (no model), the round that started it and its decision."""
    at = now - timedelta(days=3)
    jobs = Job.objects.bulk_create(
        [
            Job(
                owner=member,
                team=team,
                name=f"old-{k}",
                workload="resnet50",
                min_gpus=1,
                max_gpus=2,
                global_batch_size=256,
                min_batch_size=128,
                max_batch_size=512,
                total_iterations=100,
                completed_iterations=100,
                state=(JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)[k % 3],
                submitted_at=at - timedelta(hours=2),
                started_at=at - timedelta(hours=1),
                finished_at=at,
            )
            for k in range(n)
        ]
    )
    allocations = JobAllocation.objects.bulk_create(
        [JobAllocation(job=j, batch_size=256, started_at=j.started_at, ended_at=at) for j in jobs]
    )
    through = JobAllocation.gpus.through
    through.objects.bulk_create(
        [through(joballocation=a, gpu=g) for a in allocations for g in gpus]
    )
    JobSchedulingState.objects.bulk_create(
        [JobSchedulingState(job=j, observed_until=at) for j in jobs]
    )
    rounds = SchedulingRound.objects.bulk_create(
        [
            SchedulingRound(
                started_at=j.started_at,
                finished_at=j.started_at,
                policy="fifo",
                round_length_s=60,
                schedulable_gpus=2,
                active_jobs=1,
                queued_jobs=0,
                running_jobs=1,
                waiting_jobs=0,
                changes=1,
                predicted_energy_j=1e6,
                predicted_co2_g=50.0,
                ci_g_per_kwh=200.0,
                plan_duration_s=0.1,
            )
            for j in jobs
        ]
    )
    RoundDecision.objects.bulk_create(
        [
            RoundDecision(round=r, job=j, action="start", batch_size=256)
            for r, j in zip(rounds, jobs, strict=True)
        ]
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def _rows_read(queries) -> dict[str, int]:
    """Per SELECT of ``queries`` (in order), the rows its scans touched: returned plus
    removed by a filter (EXPLAIN ANALYZE, with sequential scans priced out so that a read
    with an index to use uses it, as on a large database)."""
    touched = {}
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for k, q in enumerate(queries):
            if not q["sql"].startswith("SELECT"):
                continue
            cursor.execute("EXPLAIN ANALYZE " + q["sql"])
            rows = 0
            for (line,) in cursor.fetchall():
                scan, removed = SCAN.search(line), REMOVED.search(line)
                if scan:
                    rows += int(scan.group(2)) * int(scan.group(3))
                elif removed:
                    rows += int(removed.group(1))
            touched[f"{k}: {q['sql'][:1000]}"] = rows
        cursor.execute("SET LOCAL enable_seqscan = on")
    return touched


def test_a_rounds_reads_do_not_grow_with_finished_jobs(member, team, make_node, make_job):
    from django.utils import timezone

    node = make_node("node-01", gpus=2)
    gpus = list(node.gpus.all())
    now = timezone.now()
    for k in range(3):
        make_job(owner=member, team=team, name=f"live-{k}", min_gpus=1, max_gpus=1, at=now)
    _history(HISTORY, member=member, team=team, gpus=gpus, now=now)
    Node.objects.update(last_heartbeat_at=now)
    run_scheduling_round(now=now, policy="fifo", force=True)  # settles the live jobs
    now += timedelta(minutes=1)
    Node.objects.update(last_heartbeat_at=now)
    with CaptureQueriesContext(connection) as ctx:
        assert run_scheduling_round(now=now, policy="fifo", force=True).ran
    reads = _rows_read(ctx.captured_queries)
    # The active jobs' allocation history reads their GPU links by allocation id: joined
    # by job, PostgreSQL read the whole link table on a large database (a hash join for
    # 2,350 active jobs; a small one plans it with the index)
    joined = 'FROM "cluster_joballocation_gpus" INNER JOIN "cluster_joballocation"'
    assert not [q["sql"] for q in ctx.captured_queries if joined in q["sql"]]
    # 3 live jobs, 2 GPUs; 400 finished jobs (800 GPU links, 400 states, rounds and
    # decisions): a read that touches a quarter of them reads the history
    grown = {q: rows for q, rows in reads.items() if rows >= HISTORY // 4}
    assert not grown, "\n".join(f"{v}: {q}" for q, v in grown.items())


def test_the_wait_reasons_are_written_by_a_statement_whose_text_does_not_grow(
    member, team, make_node, make_job
):
    # A large cluster's round left 1,550 jobs waiting: their reasons went as three CASEs of
    # 1,550 branches each, which Django took 3 s to compile (the SQL ran in 0.5 s). The
    # values now go as arrays, so the statement is the same text for 2 or 11 waiting jobs.
    from django.utils import timezone

    make_node("node-01", gpus=1)
    now = timezone.now()
    statements, marked = [], []

    def keep(execute, sql, params, many, context):
        # what sets the wait reasons (not a start's or a stop's own update of the job)
        setting = sql.split(" WHERE ")[0]
        if sql.startswith("UPDATE") and "pending_reason" in setting and "state" not in setting:
            statements[-1].append(sql)
        return execute(sql, params, many, context)

    for total in (3, 12):
        while Job.objects.count() < total:
            name = f"job-{Job.objects.count()}"
            make_job(owner=member, team=team, name=name, max_gpus=1, at=now)
        Node.objects.update(last_heartbeat_at=now)
        statements.append([])
        with connection.execute_wrapper(keep):
            result = run_scheduling_round(now=now, policy="fifo", force=True)
        waiting = Job.objects.filter(state=JobState.QUEUED)
        assert waiting.count() == total - 1
        # every waiting job says why, in this round
        assert set(waiting.values_list("pending_round", flat=True)) == {result.round_id}
        assert "" not in set(waiting.values_list("pending_reason_code", flat=True))
        assert "" not in set(waiting.values_list("pending_reason", flat=True))
        marked.append(len(result.plan.waiting))
        now += timedelta(minutes=1)
    assert marked == [2, 11]
    assert statements[0] and statements[0] == statements[1], statements
