"""Load the demo: two teams with a lead and a member each, an admin, a simulated cluster of
4 nodes x 8 A100 GPUs under 2 switches, an agent token per node and a budget per team.

Idempotent: running it again updates the same rows, keeps agent tokens that still match
(from ``var/agent_tokens.json``) and creates nothing twice.

Where the numbers come from:
- A100-SXM4-40GB (catalog key ``A100``) power limits (400 W default and max, 100 W min) are
  NVIDIA's board values.
- SM clocks: the Perseus A100-SXM sweep in data/perf/perseus gives the top clock and the
  15 MHz step; the list extends that step down to 210 MHz, the A100's lowest graphics clock.
- Budgets are sized from the work the demo replays, so that their limits are crossed while
  you watch: ``replay_trace`` (Procfile.dev) submits the first ``WATTFLOW_REPLAY_JOBS`` jobs of
  the trace at ``WATTFLOW_REPLAY_SPEEDUP`` with at most ``WATTFLOW_REPLAY_MAX_WAIT_S`` between
  them, teams in turn; each job's energy is predicted by its workload's A100 model in the perf
  catalog on the GPUs it asks for (as the submit page predicts a new job), its carbon at this
  hour's intensity of ``TELEMETRY_CARBON_ZONE``, the zone the ledgers use. A team's budget is
  ``DEMO_BUDGET_SHARE`` of its jobs' predicted energy (vision, kWh) or carbon (language, kg
  CO2e), over a period from now (to the second) until the replay has submitted its jobs
  (whole minutes). Usage counts to the minute, so the period holds nothing the team drew
  before: a rerun opens at 0 % used as a first run does, and the earlier run's budget is
  kept, ending where the new one begins. That is less than the teams spend in the window, so
  pacing binds from the first minutes and the soft limits (80 %) are crossed within the
  period.
- Grid carbon intensity: the shipped hourly 2022 series of ``TELEMETRY_CARBON_ZONE``
  (data/carbon, Electricity Maps) replayed onto this year by ``import_carbon --onto-year``,
  so accounting, GreenFlow and the dashboard see real clean and dirty hours, not one mean.
"""

import argparse
import csv
import json
import math
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.utils import timezone
from tqdm import tqdm

from cluster.choices import HardLimitAction, NodeStatus, Role
from cluster.models import Budget, Gpu, Membership, Node, Team
from cluster.services import NamedActor, record_retirement, retirement
from config.commands import OneLineCommand
from config.env import at_start_up, env_float, env_int
from scheduling.adapters import current_catalog
from scheduling.core.carbon_data import carbon_file
from scheduling.core.perf_models import energy_to_finish_j
from scheduling.core.types import G_PER_KG, J_PER_KWH, GpuConfig
from scheduling.management.commands.replay_trace import (
    DEFAULT_TRACE,
    MIN_SPEEDUP,
    positive,
    submission_schedule,
)
from scheduling.simulator.traces import read_elasticflow_trace
from telemetry.carbon import intensity_for_hour

DATA_DIR = Path(settings.BASE_DIR) / "data"
PERSEUS_A100 = DATA_DIR / "perf" / "perseus" / "stage_profile_bloom+a100_sxm_bf16.csv"

# The perf catalog's key for the A100-SXM4-40GB, which is also what the simulated agent
# registers, so a node's agent and the seeded rows describe the GPUs the same way.
GPU_MODEL = "A100"
GPU_MEMORY_MB = 40960
GPU_DEFAULT_POWER_LIMIT_W = 400
GPU_MIN_POWER_LIMIT_W = 100
GPU_MAX_POWER_LIMIT_W = 400
A100_LOWEST_SM_CLOCK_MHZ = 210
NODES = 4
GPUS_PER_NODE = 8
NODES_PER_SWITCH = 2
# What the demo's teams may spend of what their replayed jobs are predicted to need: jobs
# run on after the replay submits them, so within its window a team spends about a third of
# their need (a demo run: language 12 g CO2e in its first 2.5 min of 162 g predicted); 15 %
# makes pacing bind from the first minutes.
DEMO_BUDGET_SHARE = 0.15
# Procfile.dev's defaults for the replay (the same environment variables).
REPLAY_JOBS = at_start_up(env_int)("WATTFLOW_REPLAY_JOBS", 120)
REPLAY_SPEEDUP = at_start_up(env_float)("WATTFLOW_REPLAY_SPEEDUP", 1000.0)
REPLAY_MAX_WAIT_S = at_start_up(env_float)("WATTFLOW_REPLAY_MAX_WAIT_S", 10.0)
REPLAY_MAX_GPUS = 8  # replay_trace --max-gpus default
REPLAY_TEAMS = ("vision", "language")  # replay_trace's --teams default: jobs alternate


@dataclass(frozen=True)
class DemoUser:
    username: str
    password: str
    team_slug: str | None
    role: Role | None


TEAMS = {"vision": "Vision", "language": "Language"}
USERS = [
    DemoUser("admin", "wattflow-admin", None, None),
    DemoUser("vision_lead", "vision-lead-demo", "vision", Role.LEAD),
    DemoUser("vision_member", "vision-member-demo", "vision", Role.MEMBER),
    DemoUser("language_lead", "language-lead-demo", "language", Role.LEAD),
    DemoUser("language_member", "language-member-demo", "language", Role.MEMBER),
]


def a100_sm_clocks_mhz() -> list[int]:
    """Supported SM clocks, highest first as NVML lists them (see the module docstring)."""
    with PERSEUS_A100.open(newline="") as handle:
        measured = sorted({int(float(row["frequency"])) for row in csv.DictReader(handle)})
    step = min(b - a for a, b in zip(measured, measured[1:], strict=False))
    return list(range(measured[-1], A100_LOWEST_SM_CLOCK_MHZ - 1, -step))


@dataclass(frozen=True)
class ReplayedWork:
    """What the demo's replay will submit: per team, the jobs' predicted energy (J) and
    carbon (g), and how long the submissions last (wall seconds)."""

    energy_j: dict[str, float]
    co2_g: dict[str, float]
    span_s: float


def replayed_work(now: datetime) -> ReplayedWork:
    """Predict the jobs ``replay_trace`` submits with Procfile.dev's settings (see above)."""
    jobs = read_elasticflow_trace(DEFAULT_TRACE)[:REPLAY_JOBS]
    dues, _ = submission_schedule(jobs, speedup=REPLAY_SPEEDUP, max_wait_s=REPLAY_MAX_WAIT_S)
    catalog = current_catalog()
    ci = intensity_for_hour(settings.TELEMETRY_CARBON_ZONE, now).ci_g_per_kwh
    energy = dict.fromkeys(REPLAY_TEAMS, 0.0)
    co2 = dict.fromkeys(REPLAY_TEAMS, 0.0)
    for i, job in enumerate(tqdm(jobs, desc="predict replay", unit="job", disable=None)):
        team = REPLAY_TEAMS[i % len(REPLAY_TEAMS)]
        cfg = GpuConfig(
            n_gpus=min(job.requested_gpus, REPLAY_MAX_GPUS), global_batch=job.global_batch
        )
        iters = max(1, round(job.total_iters / REPLAY_SPEEDUP))
        joules = energy_to_finish_j(catalog.get(job.workload, GPU_MODEL), cfg, iters)
        energy[team] += joules
        co2[team] += joules / J_PER_KWH * ci
    return ReplayedWork(energy_j=energy, co2_g=co2, span_s=dues[-1])


def demo_period(now: datetime, span_s: float) -> tuple[datetime, datetime]:
    """From now (to the second) until the replay's span has passed, in whole minutes (at
    least one); pacing spreads the budget over it, and usage counts to the minute.

    It started at the hour's start, so that a rerun within the hour found the same budgets;
    but then the period held what the first run's jobs drew: a rerun opened at 680 % used,
    and once that use was added to the limit, at 87 % (the soft limit crossed before the
    replay began). Started now, a rerun's budget opens empty, as a first run's does."""
    start = now.replace(microsecond=0)
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=max(1, math.ceil(span_s / 60)))
    return start, end


def _check_replay_settings() -> None:
    """The replay's settings as ``replay_trace`` reads them from Procfile.dev (``--limit``,
    ``--speedup``, ``--max-wait-s``): a value it refuses stops the demo here, with one line,
    before anything is stored. The budgets are sized from them first, and 0 jobs, a
    speed-up of 0, NaN or infinity raised an IndexError, a ZeroDivisionError, a ValueError
    or a budget of infinite size (refused by the database) as tracebacks."""
    for name, value, parse in (
        ("WATTFLOW_REPLAY_JOBS", REPLAY_JOBS, positive(int)),
        ("WATTFLOW_REPLAY_SPEEDUP", REPLAY_SPEEDUP, positive(float, lower=MIN_SPEEDUP)),
        ("WATTFLOW_REPLAY_MAX_WAIT_S", REPLAY_MAX_WAIT_S, positive(float)),
    ):
        try:
            parse(str(value))
        except argparse.ArgumentTypeError as exc:
            raise CommandError(f"{name} {exc}") from None


class Command(OneLineCommand):
    help = "Load demo teams, users, a 4x8 A100 cluster, agent tokens and budgets (idempotent)."

    def handle(self, *args, **options) -> None:
        _check_replay_settings()
        now = timezone.now()
        tokens_path = Path(settings.WATTFLOW_VAR_DIR) / "agent_tokens.json"
        with transaction.atomic():
            teams = self._teams(now)
            self._users(teams)
            nodes = self._cluster()
            tokens = self._tokens(nodes, tokens_path, now)
        self._write_tokens(tokens_path, tokens)
        self._carbon(now)
        # After the cluster and the carbon hours: the predictions use both.
        with transaction.atomic():
            budgets = self._budgets(teams, now)
        self._report(tokens, tokens_path, budgets)

    def _carbon(self, now: datetime) -> None:
        """This year's hours (and next year's when the day-ahead forecast reaches into it)."""
        zone = settings.TELEMETRY_CARBON_ZONE
        path = carbon_file(DATA_DIR, zone)
        if not path.exists():
            self.stderr.write(
                f"no shipped carbon file for zone {zone} ({path}); accounting uses the fallback"
            )
            return
        for year in sorted({now.year, (now + timedelta(days=2)).year}):
            call_command("import_carbon", str(path), zone=zone, onto_year=year, stdout=self.stdout)

    def _teams(self, now: datetime) -> dict[str, Team]:
        teams = {}
        for slug, name in TEAMS.items():
            teams[slug], _ = Team.objects.update_or_create(
                slug=slug,
                defaults={"name": name},
                create_defaults={"name": name, "created_at": now},
            )
        return teams

    def _users(self, teams: dict[str, Team]) -> None:
        user_model = get_user_model()
        for demo in USERS:
            user, _ = user_model.objects.get_or_create(username=demo.username)
            user.email = f"{demo.username}@wattflow.example"
            user.is_staff = user.is_superuser = demo.team_slug is None
            user.set_password(demo.password)
            user.save()
            if demo.team_slug:
                Membership.objects.update_or_create(
                    user=user, team=teams[demo.team_slug], defaults={"role": demo.role}
                )

    def _cluster(self) -> list[Node]:
        clocks = a100_sm_clocks_mhz()
        nodes = []
        for n in tqdm(range(NODES), desc="nodes", unit="node", disable=None):
            switch = n // NODES_PER_SWITCH + 1
            node, _ = Node.objects.update_or_create(
                name=f"node-{n + 1:02d}",
                defaults={
                    "switch_label": f"switch-{switch}",
                    "rack_label": f"rack-{switch}",
                    "gpu_model": GPU_MODEL,
                    "status": NodeStatus.HEALTHY,
                },
            )
            for index in range(GPUS_PER_NODE):
                # The UUIDs the simulated agent (`--simulate`) reports for this node, so its
                # registration updates these rows instead of replacing them; by UUID, as the
                # agent registers (a demo GPU retired since is back in service; a GPU of
                # another UUID at its index is refused, not renamed).
                uuid = f"GPU-sim-{node.name}-{index}"
                taken = Gpu.objects.in_service().filter(node=node, index=index).exclude(uuid=uuid)
                if taken.exists():
                    raise CommandError(
                        f"{node.name}'s GPU index {index} holds {taken.get().uuid}, not the "
                        f"demo's {uuid}: retire it first"
                    )
                back = Gpu.objects.filter(uuid=uuid, retired_at__isnull=False).first()
                before = back and retirement(back, back.retired_at)
                gpu, _ = Gpu.objects.update_or_create(
                    uuid=uuid,
                    defaults={
                        "node": node,
                        "index": index,
                        "retired_at": None,
                        "model": GPU_MODEL,
                        "memory_mb": GPU_MEMORY_MB,
                        "default_power_limit_w": GPU_DEFAULT_POWER_LIMIT_W,
                        "min_power_limit_w": GPU_MIN_POWER_LIMIT_W,
                        "max_power_limit_w": GPU_MAX_POWER_LIMIT_W,
                        "supported_sm_clocks_mhz": clocks,
                    },
                )
                if before:  # back in service, audited as an agent's registration audits it
                    record_retirement(gpu, before=before, actor=NamedActor("seed_demo"))
            nodes.append(node)
        return nodes

    def _tokens(self, nodes: list[Node], path: Path, now: datetime) -> dict[str, str]:
        stored: dict[str, str] = {}
        if path.exists():
            try:
                stored = json.loads(path.read_text())
            except ValueError:
                stored = {}
        tokens = {}
        for node in nodes:
            raw = stored.get(node.name, "")
            tokens[node.name] = raw if node.has_agent_token(raw) else node.issue_agent_token(at=now)
        return tokens

    def _write_tokens(self, path: Path, tokens: dict[str, str]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Agent tokens are credentials: owner-only file.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(tokens, handle, indent=2, sort_keys=True)

    def _budgets(self, teams: dict[str, Team], now: datetime) -> list[Budget]:
        work = replayed_work(now)
        start, end = demo_period(now, work.span_s)
        energy_kwh = round(DEMO_BUDGET_SHARE * work.energy_j["vision"] / J_PER_KWH, 3)
        carbon_kg = round(DEMO_BUDGET_SHARE * work.co2_g["language"] / G_PER_KG, 4)
        wanted = {
            "vision": {
                "energy_limit_kwh": energy_kwh,
                "carbon_limit_kg": None,
                "hard_limit_action": HardLimitAction.PAUSE_JOBS,
            },
            "language": {
                "energy_limit_kwh": None,
                "carbon_limit_kg": carbon_kg,
                "hard_limit_action": HardLimitAction.HOLD_QUEUE,
            },
        }
        budgets = []
        for slug, values in wanted.items():
            team_end = self._make_room(teams[slug], start, end)
            # Keyed by its start: a rerun within the same second updates the same budget (keyed
            # by its end too, it created a second budget over the first one's period, refused
            # by the overlap constraint with a traceback).
            values = {**values, "period_end": team_end, "warn_fraction": 0.8}
            budget, _ = Budget.objects.update_or_create(
                team=teams[slug],
                period_start=start,
                defaults=values,
                create_defaults={**values, "created_at": now},
            )
            budgets.append(budget)
        return budgets

    def _make_room(self, team: Team, start: datetime, end: datetime) -> datetime:
        """A team's budget periods may not overlap: one that began before ``start`` (this
        month's, an earlier run of the demo's) now ends there and is kept as history, with
        what its team used in it; one that begins at ``start`` is the demo's own, moved by the
        caller; the demo's period ends where a later one begins. Returns the demo period's
        end."""
        overlapping = Budget.objects.filter(team=team, period_start__lt=end, period_end__gt=start)
        overlapping.filter(period_start__lt=start).update(period_end=start)
        later = (
            overlapping.filter(period_start__gt=start)
            .order_by("period_start")
            .values_list("period_start", flat=True)
            .first()
        )
        return end if later is None else min(end, later)

    def _report(self, tokens: dict[str, str], tokens_path: Path, budgets: list[Budget]) -> None:
        out = self.stdout
        out.write(self.style.SUCCESS("Demo data ready. Logins (username / password):"))
        for demo in USERS:
            where = f"{demo.role} of {demo.team_slug}" if demo.team_slug else "admin (superuser)"
            out.write(f"  {demo.username:<16} {demo.password:<22} {where}")
        out.write(f"Cluster: {NODES} nodes x {GPUS_PER_NODE} {GPU_MODEL}-SXM4-40GB, 2 switches.")
        out.write(f"Agent tokens (also in {tokens_path}):")
        for name, token in tokens.items():
            out.write(f"  {name}  {token}")
        out.write("Budgets:")
        for budget in budgets:
            limit = (
                f"{budget.energy_limit_kwh} kWh"
                if budget.energy_limit_kwh is not None
                else f"{budget.carbon_limit_kg} kg CO2e"
            )
            out.write(
                f"  {budget.team.slug:<10} {limit}, {budget.period_start:%Y-%m-%d %H:%M:%S} to "
                f"{budget.period_end:%H:%M} UTC (the replay's submissions; "
                f"{DEMO_BUDGET_SHARE:.0%} of its jobs' predicted need)"
            )
