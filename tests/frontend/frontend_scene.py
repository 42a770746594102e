"""A small, realistic cluster state for page and browser tests, built through the real services.

Two nodes of four A100s; completed, running and queued jobs of two teams; budgets; and four
hours of GPU samples ingested through ``telemetry.ingest`` and accounted by
``telemetry.accounting`` (so the ledger, rollups and carbon are the real pipeline's output).

Where the numbers come from: a busy GPU draws what the fitted performance model predicts for
its job's configuration (``scheduling/core/perf_catalog.json``, fitted to data/perf); an idle
GPU its model's idle power. Utilisation (97 % busy, 0 % idle), temperatures and the budgets'
limits are test values, not measurements (nothing in data/ measures them for this cluster).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from cluster import services
from cluster.choices import JobState, Role
from cluster.models import Budget, Gpu, Job, Membership, Node, Team
from cluster.workloads import perf_catalog
from scheduling.core.types import GpuConfig
from telemetry.accounting import process_dirty_hours
from telemetry.ingest import ingest_batch

SAMPLE_EVERY_S = 30
HISTORY_H = 4
BUSY_UTIL_PCT = 97.0
BUSY_TEMP_C = 71.0
IDLE_TEMP_C = 38.0

PASSWORDS = {
    "liam_lead": "liam-lead-pass-2026",
    "vera_member": "vera-member-pass-2026",
    "otto_outsider": "otto-outsider-pass-2026",
    "ada_admin": "ada-admin-pass-2026",
}


@dataclass
class Scene:
    now: datetime
    team: Team
    other_team: Team
    users: dict
    nodes: list[Node]
    jobs: dict[str, Job] = field(default_factory=dict)
    budgets: dict[str, Budget] = field(default_factory=dict)


def make_users(team: Team, other_team: Team) -> dict:
    """The personas with real (default-hasher) passwords, so a separate server process can
    check them."""
    User = get_user_model()
    users = {
        "lead": User.objects.create_user("liam_lead", password=PASSWORDS["liam_lead"]),
        "member": User.objects.create_user("vera_member", password=PASSWORDS["vera_member"]),
        "outsider": User.objects.create_user("otto_outsider", password=PASSWORDS["otto_outsider"]),
        "admin": User.objects.create_user(
            "ada_admin", password=PASSWORDS["ada_admin"], is_staff=True, is_superuser=True
        ),
    }
    Membership.objects.create(user=users["lead"], team=team, role=Role.LEAD)
    Membership.objects.create(user=users["member"], team=team, role=Role.MEMBER)
    Membership.objects.create(user=users["outsider"], team=other_team, role=Role.MEMBER)
    return users


def make_nodes() -> list[Node]:
    nodes = []
    for n in (1, 2):
        node = Node.objects.create(
            name=f"node-0{n}",
            switch_label="switch-1",
            rack_label="rack-1",
            gpu_model="A100",
            last_heartbeat_at=timezone.now(),
        )
        for index in range(4):
            Gpu.objects.create(
                node=node,
                index=index,
                uuid=f"GPU-scene-{n}-{index}",
                model="A100",
                memory_mb=40960,
                default_power_limit_w=400,
                min_power_limit_w=100,
                max_power_limit_w=400,
                power_limit_w=400,
                supported_sm_clocks_mhz=[1410, 1200, 1005],
            )
        nodes.append(node)
    return nodes


def _job(owner, team, name, workload, *, at, gpus=1, batch=128, iterations=20000, **extra):
    return services.submit_job(
        owner=owner,
        team=team,
        name=name,
        workload=workload,
        total_iterations=iterations,
        global_batch_size=batch,
        min_gpus=gpus,
        max_gpus=gpus,
        at=at,
        **extra,
    )


def build_scene(*, with_telemetry: bool = True) -> Scene:
    now = timezone.now().replace(microsecond=0)
    team = Team.objects.create(name="Vision", slug="vision")
    other = Team.objects.create(name="Language", slug="language")
    users = make_users(team, other)
    nodes = make_nodes()
    scene = Scene(now=now, team=team, other_team=other, users=users, nodes=nodes)
    gpus1 = list(nodes[0].gpus.order_by("index"))
    gpus2 = list(nodes[1].gpus.order_by("index"))

    # Completed jobs, one after another on node-02's first two GPUs: JCT points over the day.
    for k, hours_ago in enumerate((20, 14, 9, 3.5)):
        submitted = now - timedelta(hours=hours_ago)
        owner = users["member"] if k % 2 == 0 else users["outsider"]
        job_team = team if owner == users["member"] else other
        job = _job(owner, job_team, f"finished-{k}", "resnet50", at=submitted, gpus=2)
        started = submitted + timedelta(minutes=10 + 5 * k)
        services.start_job(job, gpus=gpus2[:2], batch_size=128, at=started)
        services.transition_job(
            job, to=JobState.COMPLETED, at=started + timedelta(minutes=40 + 10 * k)
        )
        job.refresh_from_db()
        Job.objects.filter(pk=job.pk).update(completed_iterations=job.total_iterations)
        scene.jobs[f"finished-{k}"] = job

    # Running: vision's resnet50 on node-01 GPUs 0-3, language's bert on node-02 GPUs 2-3.
    running = _job(
        users["member"], team, "resnet50-sweep", "resnet50", at=now - timedelta(hours=3), gpus=4
    )
    services.start_job(
        running, gpus=gpus1, batch_size=128, sm_clock_mhz=1200, at=now - timedelta(hours=3)
    )
    Job.objects.filter(pk=running.pk).update(completed_iterations=8200)
    scene.jobs["running"] = running
    bert = _job(
        users["outsider"], other, "bert-finetune", "bert", at=now - timedelta(hours=2), batch=64
    )
    services.start_job(bert, gpus=gpus2[2:3], batch_size=64, at=now - timedelta(hours=2))
    Job.objects.filter(pk=bert.pk).update(completed_iterations=1500)
    scene.jobs["bert"] = bert

    # Queued, with the reasons a round would have written.
    for name, workload, code, reason in (
        ("vgg16-baseline", "vgg16", "no_free_block", "Waiting for 4 free GPUs on one node."),
        ("gpt2-small", "gpt2", "over_round_allowance", "Held back: the energy budget is paced."),
    ):
        job = _job(users["lead"], team, name, workload, at=now - timedelta(minutes=30), gpus=4)
        Job.objects.filter(pk=job.pk).update(pending_reason_code=code, pending_reason=reason)
        scene.jobs[name] = job

    # A one-day period, so the sampled four hours are a visible share of it and the what-if's
    # paced budgets can run the queue (a month-long period paces a few kWh to nothing).
    scene.budgets["vision"] = Budget.objects.create(
        team=team,
        period_start=now - timedelta(hours=12),
        period_end=now + timedelta(hours=12),
        energy_limit_kwh=12.0,
        carbon_limit_kg=2.0,
        warn_fraction=0.8,
    )
    scene.budgets["language"] = Budget.objects.create(
        team=other,
        period_start=now - timedelta(days=10),
        period_end=now + timedelta(days=20),
        carbon_limit_kg=1.5,
        warn_fraction=0.75,
    )
    if with_telemetry:
        ingest_history(scene)
    return scene


def _allocations_of(gpu: Gpu) -> list[tuple]:
    rows = []
    for alloc in gpu.allocations.select_related("job").prefetch_related("gpus"):
        rows.append(
            (
                alloc.started_at,
                alloc.ended_at,
                alloc.job.workload,
                len(alloc.gpus.all()),
                alloc.batch_size,
                alloc.sm_clock_mhz,
            )
        )
    return rows


def _reading(at: datetime, allocations: list[tuple]) -> tuple[float, float, float, int | None]:
    """(power W, util %, temp °C, SM clock) of a GPU at ``at``, from the job holding it."""
    catalog = perf_catalog()
    for started, ended, workload, n_gpus, batch, clock in allocations:
        if started <= at and (ended is None or at < ended):
            model = catalog.get(workload, "A100")
            cfg = GpuConfig(n_gpus=n_gpus, global_batch=batch, sm_clock_mhz=clock)
            return model.power_w(cfg), BUSY_UTIL_PCT, BUSY_TEMP_C, clock or 1410
    return catalog.get("resnet50", "A100").idle_power_w, 0.0, IDLE_TEMP_C, None


def ingest_history(scene: Scene) -> None:
    """Samples every 30 s over the last four hours for every GPU, then accounting."""
    start = scene.now - timedelta(hours=HISTORY_H)
    for node in scene.nodes:
        samples = []
        for gpu in node.gpus.order_by("index"):
            allocations = _allocations_of(gpu)
            t = start
            while t <= scene.now:
                power_w, util, temp, clock = _reading(t, allocations)
                samples.append(
                    {
                        "gpu_uuid": gpu.uuid,
                        "ts": t.isoformat(),
                        "power_w": round(power_w, 3),
                        "util_pct": util,
                        "temp_c": temp,
                        "sm_clock_mhz": clock,
                        "power_limit_w": 400,
                    }
                )
                t += timedelta(seconds=SAMPLE_EVERY_S)
        ingest_batch(node, {"samples": samples}, now=scene.now)
    process_dirty_hours(limit=10_000)
