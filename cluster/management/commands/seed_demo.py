"""Load the demo: two teams with a lead and a member each, an admin, a simulated cluster of
4 nodes x 8 A100 GPUs under 2 switches, an agent token per node and a budget per team.

Idempotent: running it again updates the same rows, keeps agent tokens that still match
(from ``var/agent_tokens.json``) and creates nothing twice.

Where the numbers come from:
- A100-SXM4-40GB (catalog key ``A100``) power limits (400 W default and max, 100 W min) are
  NVIDIA's board values.
- SM clocks: the Perseus A100-SXM sweep in data/perf/perseus gives the top clock and the
  15 MHz step; the list extends that step down to 210 MHz, the A100's lowest graphics clock.
- Budgets are policy, not measurements: the vision team may spend half of what its share
  (16 GPUs) would draw at the 400 W limit over the month; the language team's carbon budget is
  the same energy times the 2022 mean carbon intensity of US-CAL-CISO (data/carbon).
- Grid carbon intensity: the shipped hourly 2022 series of ``TELEMETRY_CARBON_ZONE``
  (data/carbon, Electricity Maps) replayed onto this year by ``import_carbon --onto-year``,
  so accounting, GreenFlow and the dashboard see real clean and dirty hours, not one mean.
"""

import csv
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone
from tqdm import tqdm

from cluster.choices import HardLimitAction, NodeStatus, Role
from cluster.models import Budget, Gpu, Membership, Node, Team
from scheduling.simulator.carbon import carbon_file

DATA_DIR = Path(settings.BASE_DIR) / "data"
PERSEUS_A100 = DATA_DIR / "perf" / "perseus" / "stage_profile_bloom+a100_sxm_bf16.csv"
CARBON_CISO = DATA_DIR / "carbon" / "em_US-CAL-CISO_2022_hourly.csv"
CARBON_COLUMN = "Carbon Intensity gCO₂eq/kWh (LCA)"

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
TEAM_GPU_SHARE = 16
BUDGET_UTILISATION = 0.5


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


def mean_carbon_intensity_g_per_kwh() -> float:
    with CARBON_CISO.open(newline="", encoding="utf-8") as handle:
        values = [float(row[CARBON_COLUMN]) for row in csv.DictReader(handle)]
    return sum(values) / len(values)


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    end = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
    return start, end


class Command(BaseCommand):
    help = "Load demo teams, users, a 4x8 A100 cluster, agent tokens and budgets (idempotent)."

    def handle(self, *args, **options) -> None:
        now = timezone.now()
        tokens_path = Path(settings.WATTFLOW_VAR_DIR) / "agent_tokens.json"
        with transaction.atomic():
            teams = self._teams(now)
            self._users(teams)
            nodes = self._cluster()
            tokens = self._tokens(nodes, tokens_path, now)
            budgets = self._budgets(teams, now)
        self._write_tokens(tokens_path, tokens)
        self._carbon(now)
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
                Gpu.objects.update_or_create(
                    node=node,
                    index=index,
                    defaults={
                        # The UUIDs the simulated agent (`--simulate`) reports for this node,
                        # so its registration updates these rows instead of replacing them.
                        "uuid": f"GPU-sim-{node.name}-{index}",
                        "model": GPU_MODEL,
                        "memory_mb": GPU_MEMORY_MB,
                        "default_power_limit_w": GPU_DEFAULT_POWER_LIMIT_W,
                        "min_power_limit_w": GPU_MIN_POWER_LIMIT_W,
                        "max_power_limit_w": GPU_MAX_POWER_LIMIT_W,
                        "supported_sm_clocks_mhz": clocks,
                    },
                )
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
        start, end = month_bounds(now)
        hours = (end - start).total_seconds() / 3600
        energy_kwh = round(
            TEAM_GPU_SHARE * GPU_DEFAULT_POWER_LIMIT_W / 1000 * hours * BUDGET_UTILISATION, 1
        )
        carbon_kg = round(energy_kwh * mean_carbon_intensity_g_per_kwh() / 1000, 1)
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
            budget, _ = Budget.objects.update_or_create(
                team=teams[slug],
                period_start=start,
                period_end=end,
                defaults={**values, "warn_fraction": 0.8},
                create_defaults={**values, "warn_fraction": 0.8, "created_at": now},
            )
            budgets.append(budget)
        return budgets

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
            out.write(f"  {budget.team.slug:<10} {limit} ({budget})")
