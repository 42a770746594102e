"""Fill a database at a real cluster's size, then measure every page and API list/detail.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/wattflow_scale \\
        .venv/bin/python benchmarks/scale_db.py fill [--jobs 100000 --days 28 ...]
    DATABASE_URL=... .venv/bin/python benchmarks/scale_db.py measure [--repeat 3] [--json OUT]

``fill`` refuses a database that already has jobs (run it on a freshly migrated one). It
writes, with ``bulk_create`` and, for the telemetry tables, PostgreSQL's COPY:

- 100 nodes x 8 A100 GPUs on 13 switches; 30 teams, each a lead and 4 members, and ``admin``
  (every password ``scale-password``);
- weekly energy budgets per team over the period (the current one running), hourly carbon
  intensity for it and the day ahead;
- a scheduling round a minute over the period;
- ``--jobs`` jobs submitted over ``--days`` days in every state (most completed; failed,
  cancelled, queued, paused and ~250 running on the GPUs), with their allocations (some
  resized: two), the round decisions that made and ended them, job scheduling states, one
  exit event per finished job that ran, and an audit trail of budget edits;
- the ledger (one row per GPU, hour and job the allocations held it; the last two days with
  per-minute energy), GPU hours for the period, GPU minutes for the last ``--minute-hours``
  and raw 1 Hz samples for the last ``--sample-minutes``.

``reports`` (after ``fill``) has the running jobs report their progress, as agents do:
each node of each open allocation every ``--every`` seconds from its start to now (the
count rising to 90% of the job's work), so that a round reads each one's first two
reports and its newest; the fill leaves them none.

``steady`` (rolled back) marks every node heard from, runs one forced round that makes the
running jobs what the planner keeps, then times ``--repeat`` more rounds step by step (the
read steps, the plan, the write steps: queries, SQL and wall time of each); ``--explain``
prints each distinct read that touches over 10,000 rows of one table (EXPLAIN ANALYZE).

``measure`` logs in as ``admin``, ``lead01`` (lead of team-01) and ``t01_member1`` and gets
every page and every API list and detail, printing the SQL query count and the median wall
time of each (Django's test client, in process, with ``CaptureQueriesContext``). The largest
response's memory is not measured here; the CSV export's streaming has a test.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.hashers import make_password  # noqa: E402
from django.db import connection, reset_queries, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from cluster.choices import HardLimitAction, JobState, Role  # noqa: E402
from cluster.models import (  # noqa: E402
    AuditEntry,
    Budget,
    Gpu,
    Job,
    JobAllocation,
    Membership,
    Node,
    Team,
)
from scheduling.models import JobSchedulingState, RoundDecision, SchedulingRound  # noqa: E402
from telemetry.models import (  # noqa: E402
    CarbonIntensity,
    EnergyLedgerEntry,
    GpuHour,
    GpuMinute,
    GpuSample,
    JobEvent,
)

PASSWORD = "scale-password"
WORKLOADS = ("bert", "cifar10", "deepspeech2", "gpt2", "imagenet", "resnet50", "vgg16", "yolov3")
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
BATCH = 5000


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def log(message: str) -> None:
    say(f"[{time.strftime('%H:%M:%S')}] {message}")


def copy_rows(model, columns: list[str], rows) -> int:
    """COPY ``rows`` (tuples in ``columns`` order) into ``model``'s table; returns the count."""
    table = model._meta.db_table
    n = 0
    with connection.cursor() as cursor:
        raw = cursor.cursor
        with raw.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
                n += 1
    return n


def fill(args) -> None:
    if Job.objects.exists():
        sys.exit("fill: this database already has jobs; fill a freshly migrated one")
    rng = random.Random(args.seed)
    now = timezone.now()
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    start = this_hour - timedelta(days=args.days)
    t0 = time.perf_counter()

    # --- people -------------------------------------------------------------------------
    password = make_password(PASSWORD)
    User = get_user_model()
    User.objects.bulk_create(
        [User(username="admin", password=password, is_staff=True, is_superuser=True)]
    )
    teams = Team.objects.bulk_create(
        [Team(name=f"Team {t:02d}", slug=f"team-{t:02d}") for t in range(1, args.teams + 1)]
    )
    users, roles = [], []
    for t, team in enumerate(teams, start=1):
        users.append(User(username=f"lead{t:02d}", password=password))
        roles.append((team, Role.LEAD))
        for m in range(1, 5):
            users.append(User(username=f"t{t:02d}_member{m}", password=password))
            roles.append((team, Role.MEMBER))
    users = User.objects.bulk_create(users)
    Membership.objects.bulk_create(
        [
            Membership(user=u, team=team, role=role)
            for u, (team, role) in zip(users, roles, strict=True)
        ]
    )
    team_users = {team.pk: [] for team in teams}
    for u, (team, _) in zip(users, roles, strict=True):
        team_users[team.pk].append(u.pk)
    log(f"{len(teams)} teams, {len(users) + 1} users")

    # --- cluster ------------------------------------------------------------------------
    nodes = Node.objects.bulk_create(
        [
            Node(
                name=f"node-{n:03d}",
                switch_label=f"switch-{(n - 1) // 8 + 1}",
                rack_label=f"rack-{(n - 1) // 8 + 1}",
                gpu_model="A100",
                last_heartbeat_at=now,
            )
            for n in range(1, args.nodes + 1)
        ]
    )
    clocks = list(range(1410, 209, -15))
    gpus = Gpu.objects.bulk_create(
        [
            Gpu(
                node=node,
                index=i,
                uuid=f"GPU-scale-{node.name}-{i}",
                model="A100",
                memory_mb=40960,
                default_power_limit_w=400,
                min_power_limit_w=100,
                max_power_limit_w=400,
                supported_sm_clocks_mhz=clocks,
                max_sm_clock_mhz=1410,
                power_limit_w=400,
                sm_clock_mhz=1410,
                reported_at=now,
            )
            for node in nodes
            for i in range(8)
        ]
    )
    gpu_ids = [g.pk for g in gpus]
    log(f"{len(nodes)} nodes, {len(gpus)} GPUs")

    # --- carbon, budgets, rounds --------------------------------------------------------
    zone = settings.TELEMETRY_CARBON_ZONE
    hours = [start + k * HOUR for k in range(args.days * 24 + 25)]
    ci = {h: 150.0 + 100.0 * rng.random() for h in hours}
    CarbonIntensity.objects.bulk_create(
        [
            CarbonIntensity(zone=zone, hour=h, ci_g_per_kwh=v, source="imported")
            for h, v in ci.items()
        ],
        batch_size=BATCH,
    )
    budgets = []
    week = timedelta(days=7)
    for team in teams:
        b_start = start
        while b_start < now + week:
            budgets.append(
                Budget(
                    team=team,
                    period_start=b_start,
                    period_end=b_start + week,
                    energy_limit_kwh=2000.0,
                    hard_limit_action=HardLimitAction.HOLD_QUEUE,
                    created_at=b_start,
                )
            )
            b_start += week
    Budget.objects.bulk_create(budgets, batch_size=BATCH)
    round_times = []
    at = start
    while at < now:
        round_times.append(at)
        at += timedelta(seconds=args.round_interval_s)
    rounds = SchedulingRound.objects.bulk_create(
        [
            SchedulingRound(
                started_at=at,
                finished_at=at + timedelta(seconds=0.4),
                policy="powerflow",
                round_length_s=args.round_interval_s,
                schedulable_gpus=len(gpus),
                active_jobs=300,
                queued_jobs=100,
                running_jobs=250,
                waiting_jobs=50,
                changes=3,
                predicted_energy_j=1e7,
                predicted_co2_g=500.0,
                ci_g_per_kwh=200.0,
                plan_duration_s=0.3,
            )
            for at in round_times
        ],
        batch_size=BATCH,
    )
    log(f"{len(hours)} carbon hours, {len(budgets)} budgets, {len(rounds)} rounds")

    def round_at(when: datetime) -> int:
        k = int((when - start).total_seconds() // args.round_interval_s)
        return max(0, min(k, len(rounds) - 1))

    # --- jobs ---------------------------------------------------------------------------
    n_running = args.running
    n_queued, n_paused = args.queued, args.paused
    n_hist = args.jobs - n_running - n_queued - n_paused
    states = (
        [JobState.RUNNING] * n_running
        + [JobState.QUEUED] * n_queued
        + [JobState.PAUSED] * n_paused
        + rng.choices(
            [JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED], [85, 7, 8], k=n_hist
        )
    )
    span_s = (now - start).total_seconds()
    jobs, plans = [], []
    for k, state in enumerate(states):
        team = teams[rng.randrange(len(teams))]
        owner = rng.choice(team_users[team.pk])
        workload = WORKLOADS[k % len(WORKLOADS)]
        g = rng.choice((1, 1, 2, 2, 4, 8))
        if state in (JobState.RUNNING, JobState.QUEUED, JobState.PAUSED):
            submitted = now - timedelta(seconds=rng.uniform(60, 6 * 3600))
        else:
            submitted = start + timedelta(seconds=rng.uniform(0, span_s - 4 * 3600))
        iters = rng.randrange(1000, 100000)
        job = Job(
            owner_id=owner,
            team=team,
            name=f"{workload}-{k}",
            workload=workload,
            min_gpus=1,
            max_gpus=g,
            global_batch_size=256,
            min_batch_size=128,
            max_batch_size=512,
            total_iterations=iters,
            state=state,
            submitted_at=submitted,
        )
        started = ended = None
        ran = state != JobState.QUEUED and not (state == JobState.CANCELLED and rng.random() < 0.5)
        if ran:
            started = rounds[round_at(submitted + timedelta(seconds=rng.expovariate(1 / 600)))]
            started = started.started_at
            if state in (JobState.RUNNING, JobState.PAUSED):
                started = min(started, now - MINUTE)
                job.completed_iterations = iters * rng.random()
            else:
                duration = timedelta(seconds=min(rng.expovariate(1 / 7200), 3 * 24 * 3600))
                ended = rounds[round_at(min(started + duration, now - 2 * MINUTE))].started_at
                ended = max(ended, started)
                job.finished_at = ended
                job.completed_iterations = iters if state == JobState.COMPLETED else iters / 2
                job.exit_status = 0 if state == JobState.COMPLETED else 1
            job.started_at = started
        elif state == JobState.CANCELLED:
            job.finished_at = submitted + timedelta(seconds=rng.uniform(10, 3600))
        if state in (JobState.QUEUED, JobState.PAUSED):
            job.pending_reason_code = "no_free_block"
            job.pending_reason = "waiting for GPUs"
            job.pending_round_id = rounds[-1].pk
        jobs.append(job)
        plans.append((g, started, ended))
    jobs = Job.objects.bulk_create(jobs, batch_size=BATCH)
    log(f"{len(jobs)} jobs")

    # --- allocations, decisions, states, events -----------------------------------------
    running_gpus = iter(rng.sample(gpu_ids, len(gpu_ids)))
    allocs, alloc_gpus = [], []
    for job, (g, started, ended) in zip(jobs, plans, strict=True):
        if started is None:
            continue
        if job.state == JobState.RUNNING:
            chosen = [next(running_gpus, None) for _ in range(g)]
            chosen = [c for c in chosen if c is not None] or rng.sample(gpu_ids, 1)
        else:
            base = rng.randrange(0, len(gpu_ids) - 8)
            chosen = gpu_ids[base : base + g]
        pieces = [(started, ended)]
        if ended is not None and (ended - started) > 2 * HOUR and rng.random() < 0.2:
            middle = rounds[round_at(started + (ended - started) / 2)].started_at
            pieces = [(started, middle), (middle, ended)]
        if job.state == JobState.PAUSED:
            pieces = [(started, started + (now - started) / 2)]
        for a_start, a_end in pieces:
            allocs.append(
                JobAllocation(job=job, batch_size=256, started_at=a_start, ended_at=a_end)
            )
            alloc_gpus.append(chosen)
    allocs = JobAllocation.objects.bulk_create(allocs, batch_size=BATCH)
    through = JobAllocation.gpus.through
    through.objects.bulk_create(
        [
            through(joballocation_id=a.pk, gpu_id=gid)
            for a, chosen in zip(allocs, alloc_gpus, strict=True)
            for gid in chosen
        ],
        batch_size=BATCH,
    )
    running = [a for a in allocs if a.ended_at is None]
    for a in running:
        a.job.current_allocation = a
    Job.objects.bulk_update([a.job for a in running], ["current_allocation"], batch_size=BATCH)
    decisions = []
    for a, chosen in zip(allocs, alloc_gpus, strict=True):
        uuids = [f"GPU-scale-{gid}" for gid in chosen]
        decisions.append(
            RoundDecision(
                round_id=rounds[round_at(a.started_at)].pk,
                job_id=a.job_id,
                action="start",
                gpu_uuids=uuids,
                batch_size=256,
                reason="started on free GPUs",
            )
        )
        if a.ended_at is not None and a.job.state == JobState.PAUSED:
            decisions.append(
                RoundDecision(
                    round_id=rounds[round_at(a.ended_at)].pk,
                    job_id=a.job_id,
                    action="stop",
                    reason_code="budget_exhausted",
                    reason="over this round's share of the budget",
                )
            )
    RoundDecision.objects.bulk_create(decisions, batch_size=BATCH)
    JobSchedulingState.objects.bulk_create(
        [
            JobSchedulingState(job=job, observed_until=job.finished_at or now)
            for job, (_, started, _) in zip(jobs, plans, strict=True)
            if started is not None
        ],
        batch_size=BATCH,
    )
    events = JobEvent.objects.bulk_create(
        [
            JobEvent(
                event_id=uuid.UUID(int=rng.getrandbits(128)),
                node=nodes[0],
                job=job,
                kind="exited",
                ts=job.finished_at,
                exit_status=job.exit_status,
                reason="completed" if job.exit_status == 0 else "failed",
                received_at=job.finished_at,
            )
            for job, (_, started, _) in zip(jobs, plans, strict=True)
            if started is not None and job.finished_at is not None
        ],
        batch_size=BATCH,
    )
    admin = User.objects.get(username="admin")
    AuditEntry.objects.bulk_create(
        [
            AuditEntry(
                at=start + timedelta(seconds=rng.uniform(0, span_s)),
                actor=admin,
                actor_username="admin",
                action="updated",
                object_type="budget",
                object_id=str(rng.choice(budgets).pk),
                team=rng.choice(teams),
                before={"energy_limit_kwh": 1000.0},
                after={"energy_limit_kwh": 2000.0},
            )
            for _ in range(args.audit)
        ],
        batch_size=BATCH,
    )
    log(f"{len(allocs)} allocations, {len(decisions)} decisions, {len(events)} exit events")

    # --- telemetry ----------------------------------------------------------------------
    ledger: dict[tuple[int, datetime, int], int] = {}
    for a, chosen in zip(allocs, alloc_gpus, strict=True):
        end = a.ended_at or now
        h = a.started_at.replace(minute=0, second=0, microsecond=0)
        while h < end:
            for gid in chosen:
                ledger[gid, h, a.job_id] = a.job.team_id
            h += HOUR
    recent = this_hour - 2 * 24 * HOUR
    zone_col = zone

    def ledger_rows():
        for (gid, h, job_id), team_id in ledger.items():
            energy = 300.0 * 3600 * (0.5 + rng.random() / 2)
            minutes = [energy / 60] * 60 if h >= recent else []
            yield (
                gid,
                h,
                job_id,
                team_id,
                energy,
                energy / 3.6e6 * ci[h],
                ci[h],
                False,
                zone_col,
                minutes,
            )

    n = copy_rows(
        EnergyLedgerEntry,
        [
            "gpu_id",
            "hour",
            "job_id",
            "team_id",
            "energy_j",
            "co2_g",
            "ci_g_per_kwh",
            "ci_estimated",
            "zone",
            "minutes_j",
        ],
        ledger_rows(),
    )
    log(f"{n} ledger rows")
    n = copy_rows(
        GpuHour,
        ["gpu_id", "hour", "samples", "power_avg_w", "power_max_w", "util_avg_pct", "energy_j"],
        (
            (gid, h, 3600, 280.0, 390.0, 80.0, 280.0 * 3600)
            for h in hours
            if h <= this_hour
            for gid in gpu_ids
        ),
    )
    log(f"{n} GPU hours")
    first_minute = now.replace(second=0, microsecond=0) - timedelta(hours=args.minute_hours)
    minutes = [first_minute + k * MINUTE for k in range(args.minute_hours * 60)]
    n = copy_rows(
        GpuMinute,
        ["gpu_id", "minute", "samples", "power_avg_w", "power_max_w", "util_avg_pct", "energy_j"],
        (
            (gid, m, 60, 250.0 + (gid % 50), 390.0, 80.0, (250.0 + gid % 50) * 60)
            for m in minutes
            for gid in gpu_ids
        ),
    )
    log(f"{n} GPU minutes")
    first_sample = now.replace(microsecond=0) - timedelta(minutes=args.sample_minutes)
    n = copy_rows(
        GpuSample,
        [
            "gpu_id",
            "ts",
            "power_w",
            "energy_j",
            "util_pct",
            "mem_used_mib",
            "temp_c",
            "sm_clock_mhz",
            "power_limit_w",
        ],
        (
            (
                gid,
                first_sample + timedelta(seconds=s),
                280.0,
                280.0 * s,
                80.0,
                30000.0,
                60.0,
                1410,
                400.0,
            )  # fmt: skip
            for s in range(args.sample_minutes * 60)
            for gid in gpu_ids
        ),
    )
    log(f"{n} raw samples")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    log(f"filled in {time.perf_counter() - t0:.0f} s")


# --- measuring --------------------------------------------------------------------------


def targets(who: str) -> list[tuple[str, str]]:
    """(label, path) of every page and API list/detail ``who`` may open."""
    job = Job.objects.filter(team__slug="team-01", state=JobState.COMPLETED).order_by("-pk")
    job = job.filter(allocations__isnull=False).first()
    running = Job.objects.filter(team__slug="team-01", state=JobState.RUNNING).first()
    budget = Budget.objects.filter(team__slug="team-01").order_by("-period_start").first()
    node, gpu = Node.objects.order_by("pk").first(), Gpu.objects.order_by("pk").first()
    now = timezone.now()
    today = now.date().isoformat()
    day = (now - timedelta(days=1)).astimezone(UTC).strftime("%Y-%m-%dT%H:00:00Z")
    rows = [
        ("page /", "/"),
        ("page /dashboard/data/", "/dashboard/data/"),
        ("page /jobs/", "/jobs/"),
        ("page /jobs/?page=last", "/jobs/?page=last"),
        ("page /jobs/?state=completed", "/jobs/?state=completed"),
        ("page /jobs/new/", "/jobs/new/"),
        ("page /jobs/<completed>/", f"/jobs/{job.pk}/"),
        ("page /jobs/<running>/", f"/jobs/{running.pk}/"),
        ("page /budgets/", "/budgets/"),
        ("api /api/jobs/", "/api/jobs/"),
        ("api /api/jobs/?page=last", "/api/jobs/?page=last"),
        ("api /api/jobs/?state=running", "/api/jobs/?state=running"),
        ("api /api/jobs/<id>/", f"/api/jobs/{job.pk}/"),
        ("api /api/jobs/<id>/allocations/", f"/api/jobs/{job.pk}/allocations/"),
        ("api /api/teams/", "/api/teams/"),
        ("api /api/teams/team-01/", "/api/teams/team-01/"),
        ("api /api/budgets/", "/api/budgets/"),
        ("api /api/budgets/<id>/", f"/api/budgets/{budget.pk}/"),
        ("api /api/telemetry/ledger/", "/api/telemetry/ledger/"),
        ("api /api/telemetry/ledger/ (a middle page)", _ledger_middle_page()),
        ("api /api/telemetry/ledger/?job=", f"/api/telemetry/ledger/?job={job.pk}"),
        ("api /api/telemetry/ledger/totals/", "/api/telemetry/ledger/totals/"),
        (
            "api /api/telemetry/ledger/totals/?hour_after=-1d",
            f"/api/telemetry/ledger/totals/?hour_after={day}",
        ),
        ("api /api/telemetry/gpu-hours/", "/api/telemetry/gpu-hours/"),
        ("api /api/telemetry/gpu-hours/?gpu=", f"/api/telemetry/gpu-hours/?gpu={gpu.pk}"),
        ("api /api/telemetry/gpu-minutes/", "/api/telemetry/gpu-minutes/"),
        (
            "api /api/telemetry/gpu-minutes/?node=",
            f"/api/telemetry/gpu-minutes/?node={node.name}",
        ),
        ("metrics /metrics", "/metrics"),
    ]
    if who == "admin":
        rows += [
            ("page /reports/ (1 day)", f"/reports/?start={today}&end={today}"),
            ("page /reports/export.csv (1 day)", f"/reports/export.csv?start={today}&end={today}"),
            ("page /reports/", "/reports/"),
            ("page /reports/export.csv", "/reports/export.csv"),
            ("page /nodes/", "/nodes/"),
            ("api /api/nodes/", "/api/nodes/"),
            ("api /api/nodes/<id>/", f"/api/nodes/{node.pk}/"),
            ("api /api/gpus/", "/api/gpus/"),
            ("api /api/gpus/<id>/", f"/api/gpus/{gpu.pk}/"),
            ("admin /admin/cluster/job/", "/admin/cluster/job/"),
            ("admin /admin/cluster/job/<id>/", f"/admin/cluster/job/{job.pk}/change/"),
            ("admin /admin/scheduling/schedulinground/", "/admin/scheduling/schedulinground/"),
            ("admin /admin/scheduling/rounddecision/", "/admin/scheduling/rounddecision/"),
            (
                "admin /admin/scheduling/jobschedulingstate/",
                "/admin/scheduling/jobschedulingstate/",
            ),
            ("admin /admin/cluster/joballocation/", "/admin/cluster/joballocation/"),
            ("admin /admin/cluster/auditentry/", "/admin/cluster/auditentry/"),
            ("admin /admin/telemetry/jobevent/", "/admin/telemetry/jobevent/"),
            ("admin /admin/telemetry/gpuminute/", "/admin/telemetry/gpuminute/"),
            ("admin /admin/telemetry/gpuhour/", "/admin/telemetry/gpuhour/"),
            ("admin /admin/cluster/gpu/<id>/ (samples)", f"/admin/cluster/gpu/{gpu.pk}/change/"),
            ("admin /admin/telemetry/energyledgerentry/", "/admin/telemetry/energyledgerentry/"),
            (
                "admin /admin/telemetry/energyledgerentry/?p=99",
                "/admin/telemetry/energyledgerentry/?p=99",
            ),
        ]
    if who != "member":
        rows.append(("page /budgets/<id>/edit/", f"/budgets/{budget.pk}/edit/"))
    return rows


def _ledger_middle_page() -> str:
    """The API's ledger page after the row in the middle of the ledger's order (a cursor
    as its ``next`` links give)."""
    from urllib.parse import urlsplit

    from rest_framework.pagination import Cursor
    from rest_framework.test import APIRequestFactory

    from telemetry.api.reports import LedgerPagination
    from telemetry.models import EnergyLedgerEntry

    order = LedgerPagination.ordering
    rows = EnergyLedgerEntry.objects.order_by(*order)
    row = rows[rows.count() // 2]
    pagination = LedgerPagination()
    pagination.base_url = APIRequestFactory().get("/api/telemetry/ledger/").build_absolute_uri()
    url = pagination.encode_cursor(Cursor(0, False, tuple(getattr(row, f) for f in order)))
    return f"{urlsplit(url).path}?{urlsplit(url).query}"


def measure(args) -> None:
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from rest_framework.authtoken.models import Token

    settings.ALLOWED_HOSTS = ["*"]
    User = get_user_model()
    results = []
    for who, username in (("admin", "admin"), ("lead", "lead01"), ("member", "t01_member1")):
        user = User.objects.get(username=username)
        token, _ = Token.objects.get_or_create(user=user)
        page_client = Client()
        page_client.force_login(user)
        api_client = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
        for label, path in targets(who):
            if args.only and args.only not in label:
                continue
            if args.skip and any(word in label for word in args.skip.split(",")):
                continue
            client = api_client if label.startswith("api") else page_client
            times, queries, status, size = [], 0, 0, 0
            for _ in range(args.repeat):
                reset_queries()  # the log keeps 9,000: a full one counts nothing
                with CaptureQueriesContext(connection) as ctx:
                    t = time.perf_counter()
                    response = client.get(path)
                    body = (
                        b"".join(response.streaming_content)
                        if response.streaming
                        else response.content
                    )
                    times.append(time.perf_counter() - t)
                queries, status, size = len(ctx.captured_queries), response.status_code, len(body)
                if args.slow_sql:
                    for q in ctx.captured_queries:
                        if float(q["time"]) * 1000 >= args.slow_sql:
                            say(f"    {float(q['time']) * 1000:7.1f} ms {q['sql'][:300]}")
            ms = statistics.median(times) * 1000
            results.append(
                {
                    "who": who,
                    "target": label,
                    "status": status,
                    "queries": queries,
                    "ms": round(ms, 1),
                    "bytes": size,
                }
            )
            say(f"{who:6} {label:52} {status} {queries:5d} q {ms:9.1f} ms {size:9d} B")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


class _RolledBack(Exception):
    pass


def round_(args) -> None:
    """One forced scheduling round at now, rolled back: its queries and wall time."""
    from django.test.utils import CaptureQueriesContext

    from scheduling.services import run_scheduling_round

    for _ in range(args.repeat):
        reset_queries()
        try:
            with CaptureQueriesContext(connection) as ctx, transaction.atomic():
                t = time.perf_counter()
                result = run_scheduling_round(now=timezone.now(), force=True)
                elapsed = time.perf_counter() - t
                raise _RolledBack
        except _RolledBack:
            pass
        db_ms = sum(float(q["time"]) for q in ctx.captured_queries) * 1000
        say(
            f"round: ran={result.ran} {len(ctx.captured_queries)} q, {elapsed * 1000:.0f} ms "
            f"({db_ms:.0f} ms in SQL), {len(result.plan.allocations)} allocations planned"
        )
        if args.slow_sql:
            for q in ctx.captured_queries:
                if float(q["time"]) * 1000 >= args.slow_sql:
                    say(f"    {float(q['time']) * 1000:7.1f} ms {q['sql'][:300]}")


# The round's steps as ``run_scheduling_round`` calls them (module, attribute, phase): read
# (what the plan is built from) or write (what the round stores). Wrapped by ``steady`` to
# count each one's queries and time.
ROUND_STEPS = (
    ("scheduling.services", "_account_budgets_near_their_limits", "read"),
    ("scheduling.services", "mark_silent_nodes", "read"),
    ("scheduling.services", "refresh_ended_allocations", "read"),
    ("scheduling.services", "refresh_online_models", "read"),
    ("scheduling.workload_profiles", "fold_finished_jobs", "read"),
    ("scheduling.adapters", "build_snapshot", "read"),
    ("scheduling.services", "plan_round", "plan"),
    ("scheduling.budget_alerts", "record_spent", "write"),
    ("scheduling.budget_alerts", "record_overruns", "write"),
    ("scheduling.budget_alerts", "unsent", "write"),
    ("scheduling.services", "_record_round", "write"),
    ("scheduling.services", "_apply", "write"),
    ("scheduling.services", "_record_waiting", "write"),
    ("scheduling.services", "_record_exploration", "write"),
    ("scheduling.services", "round_summary", "write"),
)


def _wrap_steps(stats: dict, ctx) -> list:
    """Wrap ``ROUND_STEPS`` to add each call's queries, SQL and wall time to ``stats``;
    returns what to put back."""
    import importlib

    undo = []
    for module_name, attr, phase in ROUND_STEPS:
        module = importlib.import_module(module_name)
        original = getattr(module, attr)

        def wrapped(*a, _f=original, _key=(phase, attr), **kw):
            n0, t0 = len(ctx.captured_queries), time.perf_counter()
            try:
                return _f(*a, **kw)
            finally:
                row = stats.setdefault(_key, [0, 0.0, 0.0])
                queries = ctx.captured_queries[n0:]
                row[0] += len(queries)
                row[1] += sum(float(q["time"]) for q in queries)
                row[2] += time.perf_counter() - t0

        setattr(module, attr, wrapped)
        undo.append((module, attr, original))
    return undo


def _seq_scans(queries) -> None:
    """Print each distinct read of ``queries`` that touches more than 10,000 rows of one
    table (EXPLAIN ANALYZE: rows a scan returned plus those its filter removed): the reads
    that grow with the history rather than with live jobs."""
    import re

    seen = set()
    for q in queries:
        sql = q["sql"]
        if not sql.startswith("SELECT"):
            continue
        shape = re.sub(r"\d+", "N", sql)
        if shape in seen:
            continue
        seen.add(shape)
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN ANALYZE " + sql)
            plan = [row[0] for row in cursor.fetchall()]
        table, touched = None, 0
        for line in [*plan, "-> end"]:
            scan = re.search(
                r"Scan (?:using \w+ )?on (\w+).*actual time=\S+ rows=(\d+) loops=(\d+)", line
            )
            removed = re.search(r"Rows Removed by (?:Filter|Index Recheck): (\d+)", line)
            if removed and table:
                touched += int(removed.group(1))
                continue
            if "->" in line or scan:
                if table and touched > 10_000:
                    where = sql.find(" WHERE ")
                    say(f"    {touched:8d} rows of {table}: {sql[:70]} ...{sql[where:][:200]}")
                table, touched = None, 0
            if scan:
                table, touched = scan.group(1), int(scan.group(2)) * int(scan.group(3))


def steady(args) -> None:
    """A steady round on the filled history, rolled back: nodes heard from now, a first
    forced round makes the running jobs what the planner keeps, then ``--repeat`` more
    rounds a round length apart are measured, step by step (read and write phases)."""
    from django.test.utils import CaptureQueriesContext

    from cluster.choices import ACTIVE_JOB_STATES
    from scheduling.models import SchedulerSettings
    from scheduling.services import run_scheduling_round

    interval = timedelta(seconds=SchedulerSettings.load().round_interval_s)
    try:
        with transaction.atomic():
            now = timezone.now()
            Node.objects.update(last_heartbeat_at=now + interval * (args.repeat + 2))
            t = time.perf_counter()
            first = run_scheduling_round(now=now, force=True)
            say(
                f"settling round: {len(first.plan.changes)} changes, "
                f"{time.perf_counter() - t:.1f} s"
            )
            for k in range(1, args.repeat + 1):
                at = now + k * interval
                stats: dict = {}
                reset_queries()
                with CaptureQueriesContext(connection) as ctx:
                    undo = _wrap_steps(stats, ctx)
                    try:
                        t = time.perf_counter()
                        result = run_scheduling_round(now=at, force=True)
                        elapsed = time.perf_counter() - t
                    finally:
                        for module, attr, original in undo:
                            setattr(module, attr, original)
                active = Job.objects.filter(state__in=ACTIVE_JOB_STATES).count()
                running = Job.objects.filter(state=JobState.RUNNING).count()
                db_ms = sum(float(q["time"]) for q in ctx.captured_queries) * 1000
                say(
                    f"round {k}: {active} active jobs ({running} running), "
                    f"{len(result.plan.changes)} changes: {len(ctx.captured_queries)} q, "
                    f"{elapsed * 1000:.0f} ms ({db_ms:.0f} ms in SQL)"
                )
                for phase in ("read", "plan", "write"):
                    rows = [(a, v) for (p, a), v in stats.items() if p == phase]
                    q = sum(v[0] for _, v in rows)
                    sql = sum(v[1] for _, v in rows) * 1000
                    wall = sum(v[2] for _, v in rows) * 1000
                    say(f"  {phase:5} {q:5d} q {wall:8.0f} ms ({sql:6.0f} ms SQL)")
                    for attr, (n, sql_s, wall_s) in rows:
                        say(
                            f"    {attr:38} {n:5d} q {wall_s * 1000:8.0f} ms "
                            f"({sql_s * 1000:6.0f} ms SQL)"
                        )
                if args.slow_sql:
                    for q in ctx.captured_queries:
                        if float(q["time"]) * 1000 >= args.slow_sql:
                            say(f"    {float(q['time']) * 1000:7.1f} ms {q['sql'][:400]}")
                if args.explain:
                    _seq_scans(ctx.captured_queries)
            raise _RolledBack
    except _RolledBack:
        pass


def reports(args) -> None:
    """Progress reports of the open allocations (see the module docstring)."""
    from telemetry.models import JobEvent

    if JobEvent.objects.filter(kind="progress").exists():
        sys.exit("reports: this database has progress reports already")
    t0 = time.perf_counter()
    gpus = JobAllocation.gpus.through._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {JobEvent._meta.db_table} (event_id, node_id, job_id, "
            "allocation_id, kind, ts, iterations, received_at, reason, log_tail) "
            "SELECT gen_random_uuid(), n.node_id, a.job_id, a.id, 'progress', t, "
            "0.9 * j.total_iterations * extract(epoch FROM t - a.started_at) "
            "/ greatest(extract(epoch FROM now() - a.started_at), 1), t, '', '' "
            f"FROM {JobAllocation._meta.db_table} AS a "
            f"JOIN {Job._meta.db_table} AS j ON j.id = a.job_id "
            "JOIN (SELECT DISTINCT ag.joballocation_id, g.node_id "
            f"FROM {gpus} AS ag JOIN {Gpu._meta.db_table} AS g ON g.id = ag.gpu_id) AS n "
            "ON n.joballocation_id = a.id "
            "CROSS JOIN LATERAL generate_series(a.started_at + interval '1 second', now(), "
            "%s * interval '1 second') AS t "
            "WHERE a.ended_at IS NULL",
            [args.every],
        )
        added = cursor.rowcount
        cursor.execute(f"ANALYZE {JobEvent._meta.db_table}")
    log(f"{added} progress reports in {time.perf_counter() - t0:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fill", help="fill a freshly migrated database")
    f.add_argument("--jobs", type=int, default=100_000)
    f.add_argument("--days", type=int, default=28)
    f.add_argument("--nodes", type=int, default=100)
    f.add_argument("--teams", type=int, default=30)
    f.add_argument("--running", type=int, default=250)
    f.add_argument("--queued", type=int, default=2000)
    f.add_argument("--paused", type=int, default=100)
    f.add_argument("--audit", type=int, default=5000)
    f.add_argument("--round-interval-s", type=int, default=60)
    f.add_argument("--minute-hours", type=int, default=24)
    f.add_argument("--sample-minutes", type=int, default=10)
    f.add_argument("--seed", type=int, default=1)
    m = sub.add_parser("measure", help="time every page and API list/detail")
    m.add_argument("--repeat", type=int, default=3)
    m.add_argument("--only", default="", help="only targets whose label contains this")
    m.add_argument("--slow-sql", type=float, default=0.0, help="print queries over this many ms")
    m.add_argument("--skip", default="", help="comma-separated: skip targets containing any")
    m.add_argument("--json", default="")
    r = sub.add_parser("round", help="time one forced scheduling round (rolled back)")
    r.add_argument("--repeat", type=int, default=2)
    r.add_argument("--slow-sql", type=float, default=0.0, help="print queries over this many ms")
    st = sub.add_parser(
        "steady", help="time steady rounds after a settling one, by step (rolled back)"
    )
    st.add_argument("--repeat", type=int, default=2)
    st.add_argument("--slow-sql", type=float, default=0.0, help="print queries over this many ms")
    st.add_argument("--explain", action="store_true", help="print reads that scan a big table")
    rp = sub.add_parser("reports", help="the running jobs' progress reports (after fill)")
    rp.add_argument("--every", type=float, default=5.0, help="seconds between a node's reports")
    args = parser.parse_args()
    if args.command == "reports":
        with transaction.atomic():
            reports(args)
    elif args.command == "fill":
        with transaction.atomic():
            fill(args)
    elif args.command == "round":
        settings.DEBUG = False
        round_(args)
    elif args.command == "steady":
        settings.DEBUG = False
        steady(args)
    else:
        settings.DEBUG = False
        measure(args)


if __name__ == "__main__":
    main()
