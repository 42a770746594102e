"""A small cluster with something in every table the API reads, for the schema-driven tests
(schemathesis and the generated client): responses are only checked against the schema when
there is data to answer with, and nullable fields only show when the data has nulls.

Everything goes through the real services (submit, start, cancel) or the ORM, committed, so a
live server thread sees it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.authtoken.models import Token

from cluster import services
from cluster.choices import JobState, Role
from cluster.models import Budget, Gpu, Job, Membership, Node, Team
from telemetry.models import EnergyLedgerEntry, GpuHour, GpuMinute

PASSWORDS = {
    "member": "fuzz-member-password",
    "lead": "fuzz-lead-password",
    "admin": "fuzz-admin-password",
}


@dataclass
class Scene:
    team: Team
    other_team: Team
    users: dict  # persona -> User
    tokens: dict  # persona -> raw token ("agent": the node's agent token)
    node: Node
    queued: Job
    running: Job
    cancelled: Job
    budget: Budget


def _node(name: str, gpus: int) -> Node:
    node = Node.objects.create(
        name=name, switch_label="switch-1", rack_label="r1", gpu_model="A100"
    )
    for index in range(gpus):
        Gpu.objects.create(
            node=node,
            index=index,
            uuid=f"GPU-{name}-{index}",
            model="A100",
            memory_mb=40960,
            default_power_limit_w=400,
            min_power_limit_w=100,
            max_power_limit_w=400,
            supported_sm_clocks_mhz=[1410, 1200, 1005],
        )
    return node


def build_scene() -> Scene:
    now = timezone.now()
    user_model = get_user_model()
    team = Team.objects.create(name="Vision", slug="vision")
    other_team = Team.objects.create(name="Language", slug="language")
    users = {
        "member": user_model.objects.create_user("fuzz_member", password=PASSWORDS["member"]),
        "lead": user_model.objects.create_user("fuzz_lead", password=PASSWORDS["lead"]),
        "admin": user_model.objects.create_superuser(
            "fuzz_admin", "admin@example.org", PASSWORDS["admin"]
        ),
    }
    Membership.objects.create(user=users["member"], team=team, role=Role.MEMBER)
    Membership.objects.create(user=users["lead"], team=team, role=Role.LEAD)
    tokens = {p: Token.objects.get_or_create(user=u)[0].key for p, u in users.items()}

    node = _node("fuzz-node-01", 4)
    tokens["agent"] = node.issue_agent_token()
    _node("fuzz-node-02", 2)

    def submit(owner, name: str, **extra) -> Job:
        values = {
            "name": name,
            "workload": "resnet50",
            "total_iterations": 1000,
            "global_batch_size": 256,
            "min_gpus": 1,
            "max_gpus": 2,
            "min_batch_size": 128,
            "max_batch_size": 512,
        }
        values.update(extra)
        return services.submit_job(owner=owner, team=team, **values)

    queued = submit(users["member"], "queued baseline")
    running = submit(users["member"], "running on two")
    gpus = list(node.gpus.order_by("index")[:2])
    allocation = services.start_job(running, gpus=gpus, batch_size=256, at=now)
    cancelled = submit(users["lead"], "cancelled early")
    services.cancel_job(cancelled, at=now)
    Job.objects.filter(pk=running.pk).update(completed_iterations=10)
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING

    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    budget = services.save_budget(
        Budget(
            team=team,
            period_start=start,
            period_end=start + timedelta(days=28),
            energy_limit_kwh=500.0,
        ),
        actor=users["admin"],
    )

    hour = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    for gpu in node.gpus.all():
        GpuMinute.objects.create(
            gpu=gpu, minute=hour, samples=12, power_avg_w=250.0, power_max_w=300.0,
            util_avg_pct=None if gpu.index else 80.0, energy_j=15000.0,
        )  # fmt: skip
        GpuHour.objects.create(
            gpu=gpu, hour=hour, samples=720, power_avg_w=250.0, power_max_w=300.0,
            util_avg_pct=None if gpu.index else 80.0, energy_j=900000.0,
        )  # fmt: skip
    first, idle = gpus[0], node.gpus.get(index=3)
    EnergyLedgerEntry.objects.create(
        gpu=first, hour=hour, job=running, team=team, energy_j=900000.0, co2_g=75.0,
        ci_g_per_kwh=300.0, zone="DE",
    )  # fmt: skip
    # Idle draw: no job, no team (the nullable team the schema must admit).
    EnergyLedgerEntry.objects.create(
        gpu=idle, hour=hour, job=None, team=None, energy_j=300000.0, co2_g=25.0,
        ci_g_per_kwh=300.0, ci_estimated=True, zone="DE",
    )  # fmt: skip
    assert allocation.pk
    return Scene(
        team=team,
        other_team=other_team,
        users=users,
        tokens=tokens,
        node=node,
        queued=queued,
        running=running,
        cancelled=cancelled,
        budget=budget,
    )
