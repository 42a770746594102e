"""A round reads the running jobs' telemetry, and that of the allocations that ended since,
in a number of queries that does not grow with the jobs (docs/benchmarks.md, "What the
round's time still is": 802 queries for 800 running jobs, 254-267 for the ended
allocations), and learns from it what it learned job by job."""

import json
import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from cluster import services as cluster_services
from cluster.models import Gpu, Job, JobAllocation, Node
from scheduling import adapters, observations, services, workload_profiles
from scheduling.models import JobSchedulingState, WorkloadProfile
from telemetry.models import GpuSample, JobEvent

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=2)
LATER = T0 + timedelta(hours=2)
TELEMETRY = (JobEvent._meta.db_table, GpuSample._meta.db_table, JobAllocation._meta.db_table)


def _node(name: str, gpus: int) -> Node:
    node = Node.objects.create(
        name=name, switch_label="switch-1", rack_label="rack-1", gpu_model="A100"
    )
    Gpu.objects.bulk_create(
        Gpu(node=node, index=k, uuid=f"GPU-{name}-{k}", model="A100", memory_mb=40960,
            default_power_limit_w=400, min_power_limit_w=100, max_power_limit_w=400,
            supported_sm_clocks_mhz=[1410, 1200, 1005])
        for k in range(gpus)
    )  # fmt: skip
    return node


def _job(make_job, member, team, gpus: list[Gpu], *, at=T0, total=100_000, most=0) -> Job:
    job = make_job(owner=member, team=team, min_gpus=len(gpus), max_gpus=most or len(gpus),
                   global_batch_size=256, min_batch_size=256, max_batch_size=256,
                   total_iterations=total)  # fmt: skip
    cluster_services.start_job(job, gpus=gpus, batch_size=256, at=at)
    job.refresh_from_db()
    return job


def _progress(job: Job, node: Node, at: datetime, iterations: float, alloc_id=None) -> None:
    JobEvent.objects.create(
        event_id=uuid.uuid4(), node=node, job=job,
        allocation_id=alloc_id or job.current_allocation_id, kind="progress", ts=at,
        iterations=iterations, received_at=at,
    )  # fmt: skip


def _samples(gpu: Gpu, first: datetime, seconds: range, watts: float, shift=0.0) -> None:
    GpuSample.objects.bulk_create(
        GpuSample(gpu=gpu, ts=first + timedelta(seconds=k + shift), power_w=watts + k % 3)
        for k in seconds
    )


def _training(job: Job, node: Node, gpus: list[Gpu], *, pace=0.1, watts=300.0, upto=40):
    """Reports every 5 s from 1 s (``pace`` s an iteration) and 1 Hz samples up to
    ``upto`` s of each of ``gpus``."""
    start = T0 + timedelta(seconds=1)
    for k in range(0, upto + 1, 5):
        _progress(job, node, start + timedelta(seconds=k), k / pace)
    for g in gpus:
        _samples(g, start, range(upto + 1), watts)


def _running(make_job, member, team, n: int, *, telemetry: bool) -> list[Job]:
    """``n`` jobs running on one GPU each of a node of theirs, each training with
    telemetry (at its own pace) or not reporting yet."""
    jobs = []
    for k in range(n):
        node = _node(f"n{n}-{k}", 1)
        gpus = list(node.gpus.all())
        job = _job(make_job, member, team, gpus)
        if telemetry:
            _training(job, node, gpus, pace=0.05 + 0.01 * k, watts=200.0 + 10 * k)
        jobs.append(job)
    return jobs


def _rows() -> list[Job]:
    return list(
        Job.objects.filter(state="running")
        .select_related("current_allocation")
        .prefetch_related("current_allocation__gpus")
        .order_by("pk")
    )


def _reads(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if any(t in q["sql"] for t in TELEMETRY)]


@pytest.mark.parametrize("telemetry", [False, True])
def test_the_running_jobs_telemetry_is_read_in_queries_that_do_not_grow_with_them(
    make_job, member, team, telemetry
):
    # given 3 running jobs, then 12, with no report yet or training with reports and samples
    catalog = adapters.current_catalog()
    counts = []
    for n in (3, 12):
        with transaction.atomic():
            _running(make_job, member, team, n, telemetry=telemetry)
            rows = _rows()
            # when a round folds their telemetry
            with CaptureQueriesContext(connection) as queries:
                refitted = services.refresh_online_models(rows, catalog=catalog, now=NOW)
            assert refitted == (n if telemetry else 0)
            counts.append((len(_reads(queries)), len(queries.captured_queries)))
            transaction.set_rollback(True)
    # then the reads of their telemetry are as many for 12 as for 3 (before: 3 and 12 with
    # no report yet, 15 and 60 training), and so are all the queries, the refitted models'
    # stored fits and their workloads' profiles too (before: two queries a refitted model)
    assert counts[0] == counts[1]


def test_the_draws_other_workloads_measured_are_read_once_for_all_jobs_of_new_workloads(
    make_job, member, team
):
    # given 2 running jobs, then 6, of workloads the catalog lacks (each resembling
    # resnet50), training with draws at the default limit: each fit's prior reads the
    # draws other workloads measured on the A100 (``measured_on_gpu``)
    catalog = adapters.current_catalog()
    counts, fits = [], []
    for n in (2, 6):
        with transaction.atomic():
            for k in range(n):
                node = _node(f"new-{n}-{k}", 1)
                gpus = list(node.gpus.all())
                job = make_job(owner=member, team=team, workload=f"new-net-{k}",
                               resembles="resnet50", min_gpus=1, max_gpus=1,
                               global_batch_size=256, min_batch_size=256, max_batch_size=256,
                               total_iterations=100_000)  # fmt: skip
                cluster_services.start_job(job, gpus=gpus, batch_size=256, at=T0)
                job.refresh_from_db()
                _training(job, node, gpus, pace=0.05 + 0.01 * k, watts=200.0 + 10 * k)
            rows = _rows()
            # when a round folds their telemetry
            with CaptureQueriesContext(connection) as queries:
                refitted = services.refresh_online_models(rows, catalog=catalog, now=NOW)
            assert refitted == n
            draws = [q for q in queries.captured_queries if "jsonb_path_query_array" in q["sql"]]
            counts.append((len(draws), len(queries.captured_queries)))
            states = JobSchedulingState.objects.filter(job__in=rows).order_by("job_id")
            fits.append([s.online_params["A100"]["prior_params"] for s in states])
            transaction.set_rollback(True)
    # then the draws are read once a round, not once a job (before: 2 and 6 reads), and
    # the round's queries are as many for 6 jobs as for 2
    assert counts[0] == counts[1]
    assert counts[0][0] == 1
    # and the first two jobs' priors are the same either way
    assert fits[0] == fits[1][:2]


def test_the_draws_read_once_are_each_jobs_own_read_of_them(make_job, member, team):
    # given profiles of three workloads on the A100, two of them one workload by the
    # catalog's aliases (imagenet is resnet50)
    catalog = adapters.current_catalog()
    fit = {
        "observations": [
            {"n_gpus": 1, "power_w": w, "power_limit_w": None, "sm_clock_mhz": None}
            for w in (250.0, 260.0)
        ]
    }
    for version, workload in enumerate(("imagenet", "resnet50", "new-net"), start=1):
        prior = catalog.get("resnet50", "A100")
        WorkloadProfile.objects.create(
            workload=workload, gpu_model="A100", version=version, n_observations=2, created_at=T0,
            params={**workload_profiles.model_to_params(prior), "fit": fit},
        )  # fmt: skip
    draws = workload_profiles.MeasuredDraws(catalog)
    # then what the round reads once is, job by job, what each job's own read was
    for exclude in ("", "imagenet", "resnet50", "new-net", "other"):
        own = workload_profiles.measured_on_gpu("A100", catalog=catalog, exclude=exclude)
        assert draws.on("A100", exclude=exclude) == own
    assert draws.on("A100")["new-net"] == [250.0, 260.0]
    assert "new-net" not in draws.on("A100", exclude="new-net")
    assert "imagenet" not in draws.on("A100", exclude="resnet50")


def test_the_ended_allocations_are_read_in_queries_that_do_not_grow_with_them(
    make_job, member, team
):
    # given 3 jobs, then 12, each ended an hour ago (one of them resized before: two ended
    # allocations), a third of them with telemetry
    catalog = adapters.current_catalog()
    counts = []
    for n in (3, 12):
        with transaction.atomic():
            jobs = []
            for k in range(n):
                node = _node(f"e{n}-{k}", 2)
                gpus = list(node.gpus.all())
                job = _job(make_job, member, team, gpus[:1], most=2)
                if k % 3 == 0:
                    _training(job, node, gpus[:1], pace=0.05 + 0.01 * k)
                if k == 1:
                    cluster_services.set_allocation(
                        job, gpus=gpus, batch_size=256, at=T0 + timedelta(seconds=50)
                    )
                    job.refresh_from_db()
                cluster_services.transition_job(job, to="completed", at=LATER - timedelta(hours=1))
                jobs.append(job)
            with CaptureQueriesContext(connection) as queries:
                refitted = services.refresh_ended_allocations(catalog=catalog, now=LATER)
            assert refitted == len(range(0, n, 3))
            counts.append((len(_reads(queries)), len(queries.captured_queries)))
            for job in jobs:  # every one read to its end
                assert JobSchedulingState.objects.get(job=job).observed_until == (
                    JobAllocation.objects.filter(job=job).latest("ended_at").ended_at
                )
            transaction.set_rollback(True)
    # then as many reads for 12 as for 3 (before: 2 more each), and as many queries in all,
    # the refitted models' fits written together (before: two queries a refitted model)
    assert counts[0] == counts[1]


def _mix(make_job, member, team) -> list[Job]:
    """Running and ended jobs of every kind a round reads."""
    one = _node("one", 4)
    g1 = list(one.gpus.all())
    a, b = _node("a", 1), _node("b", 1)
    ga, gb = a.gpus.get(), b.gpus.get()
    jobs = []
    # training on one GPU, on two of a node, on two nodes sampling at their own instants
    jobs.append(_job(make_job, member, team, g1[:1]))
    _training(jobs[-1], one, g1[:1], pace=0.1, watts=300.0)
    GpuSample.objects.filter(gpu=g1[0], ts=T0 + timedelta(seconds=21)).update(power_w=9000.0)
    jobs.append(_job(make_job, member, team, g1[1:3]))
    _training(jobs[-1], one, g1[1:3], pace=0.2, watts=250.0)
    jobs.append(_job(make_job, member, team, [ga, gb]))
    start = T0 + timedelta(seconds=1)
    for k in range(0, 41, 5):
        _progress(jobs[-1], a, start + timedelta(seconds=k), 10.0 * k)
        _progress(jobs[-1], b, start + timedelta(seconds=k + 0.4), 10.0 * k + 3)
    _samples(ga, start, range(41), 300.0)
    _samples(gb, start, range(41), 200.0, shift=0.4)
    # one that reported once (not warm yet), one with no report, one whose samples lag
    jobs.append(_job(make_job, member, team, g1[3:4]))
    _progress(jobs[-1], one, start, 0.0)
    _samples(g1[3], start, range(10), 280.0)
    other = _node("other", 3)
    g2 = list(other.gpus.all())
    jobs.append(_job(make_job, member, team, g2[:1]))
    jobs.append(_job(make_job, member, team, g2[1:2]))
    _training(jobs[-1], other, [], pace=0.1)
    _samples(g2[1], start, range(12), 310.0)
    # one sharing its GPU with another job from 38 s, whose count goes past its work at 36 s
    jobs.append(_job(make_job, member, team, g2[2:3], total=300))
    _training(jobs[-1], other, g2[2:3], pace=0.1)
    guest = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, global_batch_size=256,
                     min_batch_size=256, max_batch_size=256, total_iterations=100_000)  # fmt: skip
    cluster_services.start_job(guest, gpus=g2[2:3], batch_size=256,
                               at=T0 + timedelta(seconds=38), max_jobs_per_gpu=2)  # fmt: skip
    jobs.append(guest)
    # ended: one that trained and finished an hour ago, one that trained, was resized and
    # finished a moment ago (its last samples may be on their way), one with no report
    third = _node("third", 4)
    g3 = list(third.gpus.all())
    done = _job(make_job, member, team, g3[:1])
    _training(done, third, g3[:1], pace=0.3)
    cluster_services.transition_job(done, to="completed", at=T0 + timedelta(seconds=45))
    resized = _job(make_job, member, team, g3[1:2], most=2)
    _training(resized, third, g3[1:2], pace=0.1, upto=30)
    first_alloc = resized.current_allocation_id
    cluster_services.set_allocation(resized, gpus=g3[1:3], batch_size=256,
                                    at=T0 + timedelta(seconds=32))  # fmt: skip
    resized.refresh_from_db()
    for k in range(35, 90, 5):
        _progress(resized, third, start + timedelta(seconds=k), 2000 + 10.0 * k)
    for g in g3[1:3]:
        _samples(g, start + timedelta(seconds=33), range(60), 330.0)
    assert first_alloc != resized.current_allocation_id
    cluster_services.transition_job(resized, to="completed", at=NOW - timedelta(seconds=5))
    silent = _job(make_job, member, team, g3[3:4])
    cluster_services.transition_job(silent, to="failed", at=T0 + timedelta(seconds=30))
    return [*jobs, done, resized, silent]


def _learned(jobs: list[Job]) -> list[tuple]:
    states = JobSchedulingState.objects.in_bulk([j.pk for j in jobs])
    return [
        (j.pk, s.observed_until, s.observations, s.online_params)
        for j in jobs
        if (s := states.get(j.pk)) is not None
    ]


def test_reading_all_jobs_at_once_learns_what_reading_each_alone_does(
    make_job, member, team, caplog
):
    # given running and ended jobs of every kind (see _mix), read twice by rounds: at 2
    # minutes (some samples lag), then at 3 after more reports and samples came
    jobs = _mix(make_job, member, team)
    catalog = adapters.current_catalog()

    def rounds(each: bool) -> tuple[list[tuple], list[tuple], list[str]]:
        caplog.clear()
        refitted = []
        for now in (NOW, NOW + timedelta(minutes=1)):
            if now != NOW:
                for job in jobs[:2]:
                    node = job.current_allocation.gpus.first().node
                    _progress(job, node, T0 + timedelta(seconds=60), 1000.0)
                    _progress(job, node, T0 + timedelta(seconds=70), 1100.0)
                    for g in job.current_allocation.gpus.all():
                        _samples(g, T0 + timedelta(seconds=42), range(30), 320.0)
            ended = services.refresh_ended_allocations(catalog=catalog, now=now)
            rows = _rows()
            if each:
                running = sum(
                    services.refresh_online_models([job], catalog=catalog, now=now) for job in rows
                )
            else:
                running = services.refresh_online_models(rows, catalog=catalog, now=now)
            refitted.append((ended, running))
        logs = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
        return refitted, _learned(jobs), logs

    # when the running jobs are read all at once, and (rolled back) one by one
    with caplog.at_level(logging.INFO), transaction.atomic():
        each = rounds(each=True)
        transaction.set_rollback(True)
    with caplog.at_level(logging.INFO):
        together = rounds(each=False)

    # then both learned the same, the same models refitted, the same refusals logged
    assert together == each
    refitted, learned, logs = together
    assert refitted == [(3, 5), (0, 2)]
    assert len(learned) == 11  # (all but the guest and the job that never reported ran)
    assert any("above the job's whole work" in message for *_, message in logs)
    assert any("observation refused" in message for *_, message in logs)


def _rows_read(sql: str, params, table: str) -> float:
    """How many of ``table``'s rows the plan of ``sql`` read (EXPLAIN ANALYZE)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)

    def walk(node) -> float:
        own = 0.0
        if node.get("Relation Name") == table:
            rows = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            own = rows * node.get("Actual Loops", 1)
        return own + sum(walk(child) for child in node.get("Plans", ()))

    return walk(plan[0]["Plan"])


def test_the_newest_reports_are_looked_up_not_found_among_every_report(make_job, member, team):
    # given 3 running jobs with 3,000 progress reports each
    jobs = _running(make_job, member, team, 3, telemetry=False)
    table = JobEvent._meta.db_table
    with connection.cursor() as cursor:
        for job in jobs:
            node = job.current_allocation.gpus.first().node
            cursor.execute(
                f"INSERT INTO {table} (event_id, node_id, job_id, allocation_id, kind, ts, "
                "iterations, received_at, reason, log_tail) "
                "SELECT gen_random_uuid(), %s, %s, %s, 'progress', "
                "%s + g * interval '1 s', g, %s, '', '' FROM generate_series(1, 3000) g",
                [node.pk, job.pk, job.current_allocation_id, T0, T0],
            )
        cursor.execute(f"ANALYZE {table}")
    keys = [(job.pk, job.current_allocation_id) for job in jobs]
    # when the round looks up their newest reports
    with CaptureQueriesContext(connection) as queries:
        newest = observations.newest_progress_of(keys, now=LATER)
    # then each is its last, and the lookup read a few reports, not all 9,000 (before:
    # a maximum over every report of every allocation, 9,000 rows read each round)
    assert newest == {key: T0 + timedelta(seconds=3000) for key in keys}
    (query,) = queries.captured_queries
    assert _rows_read(query["sql"], None, table) < 100


def test_an_allocations_newest_report_is_one_index_entry_whatever_the_jobs_other_reports(
    make_job, member, team
):
    # given a job whose first allocation reported 3,000 times and ended, then a second one
    # that reported 3,000 times more, on two nodes
    node = _node("n-newest", 2)
    gpus = list(node.gpus.all())
    job = _job(make_job, member, team, gpus[:1], most=2)
    first = job.current_allocation_id
    cluster_services.set_allocation(job, gpus=gpus, batch_size=256, at=T0 + timedelta(hours=1))
    job.refresh_from_db()
    second = job.current_allocation_id
    assert first != second
    other = _node("n-newest-2", 1)
    table = JobEvent._meta.db_table
    with connection.cursor() as cursor:
        for alloc, start, nodes in ((first, T0, [node]), (second, T0 + timedelta(hours=1),
                                                          [node, other])):  # fmt: skip
            for reporter in nodes:
                cursor.execute(
                    f"INSERT INTO {table} (event_id, node_id, job_id, allocation_id, kind, ts, "
                    "iterations, received_at, reason, log_tail) "
                    "SELECT gen_random_uuid(), %s, %s, %s, 'progress', "
                    "%s + g * interval '1 s', g, %s, '', '' FROM generate_series(1, 3000) g",
                    [reporter.pk, job.pk, alloc, start, start],
                )
        cursor.execute(f"ANALYZE {table}")
    # when the round looks up each allocation's newest report, the ended one's too
    with CaptureQueriesContext(connection) as queries:
        newest = observations.newest_progress_of([(job.pk, first), (job.pk, second)], now=LATER)
    # then each is its last, found in an entry or two of an index, not among the job's
    # reports (before, on the scale database: every report of each allocation read and
    # sorted; here: 3,000 to 9,000 rows)
    assert newest == {
        (job.pk, first): T0 + timedelta(seconds=3000),
        (job.pk, second): T0 + timedelta(hours=1, seconds=3000),
    }
    (query,) = queries.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        assert _rows_read(query["sql"], None, table) < 10


def test_a_stalled_jobs_catch_up_reads_its_own_gpus_samples_not_the_clusters(
    make_job, member, team
):
    # given two jobs' GPUs sampled at 1 Hz for 1,000 s: one job read 10 s ago, the other
    # (stalled, then resumed) not since the start
    stalled_node, steady_node = _node("n-stalled", 2), _node("n-steady", 2)
    for gpu in [*stalled_node.gpus.all(), *steady_node.gpus.all()]:
        _samples(gpu, T0, range(1, 1001), 300.0)
    until = T0 + timedelta(seconds=1000)
    items = [
        (list(steady_node.gpus.all()), until - timedelta(seconds=10)),
        (list(stalled_node.gpus.all()), T0),
    ]
    table = GpuSample._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")
    # when the round reads their samplings
    with CaptureQueriesContext(connection) as queries:
        found = adapters._sample_instants_of(items, until=until)
    # then each job has its own samplings of its window
    assert [len(f) for f in found] == [10, 1000]
    assert found[0][0] == (T0 + timedelta(seconds=991), 300.0 + 991 % 3)
    # and the read touched the jobs' own samples, 2 x (10 + 1,000) rows, not every GPU's
    # since the stalled job's start (before: 4,000, the steady job's GPUs' 990 seconds
    # more each, as the scale database read 443,868 rows for one stalled job's 9 minutes)
    # whichever join the planner picks (here, nested loops priced out, as the scale
    # database's statistics made them: there a hash join over a BRIN scan of the span)
    (query,) = queries.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_nestloop = off")
        assert _rows_read(query["sql"], None, table) <= 2 * (10 + 1000)


def test_jobs_unread_for_long_are_read_a_bounded_span_at_a_time(
    make_job, member, team, monkeypatch
):
    # given 3 running jobs training on a GPU each, 40 s of samples unread
    jobs = _running(make_job, member, team, 3, telemetry=True)
    rows = _rows()
    JobSchedulingState.objects.bulk_create([JobSchedulingState(job=job) for job in jobs])
    states = JobSchedulingState.objects.in_bulk([job.pk for job in jobs], field_name="job_id")
    items = [(job, states[job.pk], job.current_allocation) for job in rows]
    together = list(adapters.observed_measurements_of(items, now=NOW))
    # when the reads may span less than two jobs' samples
    monkeypatch.setattr(adapters, "READ_SPAN_GPU_S", 150.0, raising=False)
    with CaptureQueriesContext(connection) as queries:
        apart = list(adapters.observed_measurements_of(items, now=NOW))
    # then the samples are read a job at a time (before: all at once, however long unread;
    # after a day's pause 800 one-node jobs' 69 million rows), and found the same
    samples = [q for q in queries.captured_queries if GpuSample._meta.db_table in q["sql"]]
    assert len(samples) == 3
    assert all(found is not None for found in together)
    assert apart == together


def _blocks_read(sql: str, table: str) -> int:
    """How many pages of ``table`` and its indexes the plan of ``sql`` touched (EXPLAIN
    ANALYZE, BUFFERS): an index scan that steps over entries it does not return shows here,
    not in its rows."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql)
        plan = cursor.fetchone()[0]
    plan = plan if isinstance(plan, list) else json.loads(plan)

    def walk(node) -> int:
        own = 0
        if node.get("Relation Name") == table:
            own = node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)
        return own + sum(walk(child) for child in node.get("Plans", ()))

    return walk(plan[0]["Plan"])


def test_each_nodes_first_two_reports_are_looked_up_not_found_among_every_report(
    make_job, member, team
):
    # given 2 running jobs on two nodes each, with 10,000 progress reports a node
    jobs = []
    for k in range(2):
        a, b = _node(f"first-a{k}", 1), _node(f"first-b{k}", 1)
        jobs.append(_job(make_job, member, team, [a.gpus.get(), b.gpus.get()]))
    table = JobEvent._meta.db_table
    with connection.cursor() as cursor:
        for job in jobs:
            for shift, gpu in enumerate(job.current_allocation.gpus.all()):
                cursor.execute(
                    f"INSERT INTO {table} (event_id, node_id, job_id, allocation_id, kind, ts, "
                    "iterations, received_at, reason, log_tail) "
                    "SELECT gen_random_uuid(), %s, %s, %s, 'progress', "
                    "%s + (2 * g + %s) * interval '1 s', g, %s, '', '' "
                    "FROM generate_series(1, 10000) g",
                    [gpu.node_id, job.pk, job.current_allocation_id, T0, shift, T0],
                )
        cursor.execute(f"ANALYZE {table}")
    keys = [(job.pk, job.current_allocation_id) for job in jobs]
    nodes = {
        key: {g.node_id for g in job.current_allocation.gpus.all()}
        for key, job in zip(keys, jobs, strict=False)
    }
    for given in (None, nodes):
        # when the round looks up each node's first two reports
        with CaptureQueriesContext(connection) as queries:
            firsts = observations.first_two_reports_of(keys, gpu_nodes=given)
        # then each allocation's are the later node's first and second, in one query that
        # read a few reports, not all 40,000 (before: a window over every report of every
        # allocation), nor stepped over them in the index (with the allocation's equalities
        # beside its row comparison, the lookup of the node after another did: 300 pages)
        assert firsts == {
            key: (T0 + timedelta(seconds=3), T0 + timedelta(seconds=5)) for key in keys
        }
        (query,) = queries.captured_queries
        assert _rows_read(query["sql"], None, table) < 100
        assert _blocks_read(query["sql"], table) < 100


def _chain(make_job, member, team, node: Node, length: int) -> tuple[Job, JobAllocation]:
    """A job retuned ``length - 1`` times in place, back to back: its first allocation
    warmed up (two reports), each later one reported once; its last is running."""
    gpus = list(node.gpus.all())
    job = _job(make_job, member, team, gpus)
    first = job.current_allocation
    _progress(job, node, T0 + timedelta(seconds=1), 0.0)
    _progress(job, node, T0 + timedelta(seconds=6), 50.0)
    at = T0 + timedelta(seconds=10)
    for k in range(1, length):
        cluster_services.set_allocation(
            job, gpus=gpus, batch_size=256, at=at, sm_clock_mhz=1410 if k % 2 else 1200
        )
        job.refresh_from_db()
        _progress(job, node, at + timedelta(seconds=1), 100.0 * k)
        at += timedelta(seconds=10)
    assert JobAllocation.objects.filter(job=job).count() == length
    assert job.current_allocation_id != first.pk
    return job, JobAllocation.objects.prefetch_related("gpus").get(pk=job.current_allocation_id)


def test_a_retunes_history_is_read_in_queries_that_do_not_grow_with_its_length(
    make_job, member, team
):
    # given a job retuned in place once, then one retuned seven times, each warmed up in
    # its first allocation only
    counts = []
    for length in (2, 8):
        job, alloc = _chain(make_job, member, team, _node(f"chain{length}", 1), length)
        # when the round asks from when its running allocation shows its steady pace
        with CaptureQueriesContext(connection) as queries:
            (since,) = observations.training_since_of([(job.pk, alloc, None)])
        # then from its first report (it continues a warm job), found in as many queries
        # for the long history as for the short one (before: three more a step back)
        first = JobEvent.objects.filter(allocation_id=alloc.pk).values_list("ts", flat=True)
        assert since == first.get()
        counts.append(len(queries.captured_queries))
    assert counts[0] == counts[1]


def test_a_job_that_shares_its_gpu_throughout_is_read_from_where_the_last_read_ended(
    make_job, member, team
):
    # given a job training on a GPU that another job has shared since it started: every
    # interval and sample of it is the pair's (its observed slowdown), none its own
    node = _node("shared", 1)
    gpus = list(node.gpus.all())
    job = _job(make_job, member, team, gpus)
    guest = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, global_batch_size=256,
                     min_batch_size=256, max_batch_size=256, total_iterations=100_000)  # fmt: skip
    cluster_services.start_job(guest, gpus=gpus, batch_size=256, at=T0, max_jobs_per_gpu=2)
    _training(job, node, gpus, pace=0.1)
    catalog = adapters.current_catalog()
    marks = []
    for now, more in ((NOW, 0), (NOW + timedelta(minutes=1), 40)):
        if more:  # 40 s more of reports and samples
            for k in range(45, 45 + more, 5):
                _progress(job, node, T0 + timedelta(seconds=1 + k), k / 0.1)
            _samples(gpus[0], T0 + timedelta(seconds=42), range(more), 300.0)
        # when a round reads it
        refitted = services.refresh_online_models(
            [r for r in _rows() if r.pk == job.pk], catalog=catalog, now=now
        )
        state = JobSchedulingState.objects.get(job=job)
        marks.append((refitted, state.observed_until, state.observations))
    # then it learns nothing, but the next read starts at the last report read, as after a
    # read that measured something (before: at its warm-up every round, and with it every
    # round's read of the cluster's samples, however long the two shared the GPU)
    newest = [T0 + timedelta(seconds=41), T0 + timedelta(seconds=81)]
    assert marks == [(0, newest[0], {}), (0, newest[1], {})]
