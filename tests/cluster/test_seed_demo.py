"""seed_demo loads the demo once, and running it again changes nothing."""

import csv
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import time_machine
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command

from cluster.choices import HardLimitAction, Role
from cluster.models import Budget, Gpu, Membership, Node, Team
from telemetry.carbon import intensity_for_hour
from telemetry.choices import CarbonSource
from telemetry.models import CarbonIntensity

ROOT = Path(__file__).resolve().parents[2]


def _counts() -> dict[str, int]:
    return {
        "users": get_user_model().objects.count(),
        "teams": Team.objects.count(),
        "memberships": Membership.objects.count(),
        "nodes": Node.objects.count(),
        "gpus": Gpu.objects.count(),
        "budgets": Budget.objects.count(),
    }


def test_seed_demo_is_idempotent_and_keeps_tokens(db, settings, tmp_path, capsys):
    settings.WATTFLOW_VAR_DIR = tmp_path

    call_command("seed_demo")
    first_counts = _counts()
    first_tokens = json.loads((tmp_path / "agent_tokens.json").read_text())
    first_hashes = dict(Node.objects.values_list("name", "agent_token_hash"))
    call_command("seed_demo")

    assert (
        _counts()
        == first_counts
        == {
            "users": 5,
            "teams": 2,
            "memberships": 4,
            "nodes": 4,
            "gpus": 32,
            "budgets": 2,
        }
    )
    assert json.loads((tmp_path / "agent_tokens.json").read_text()) == first_tokens
    assert dict(Node.objects.values_list("name", "agent_token_hash")) == first_hashes
    assert (tmp_path / "agent_tokens.json").stat().st_mode & 0o777 == 0o600


def test_seed_demo_builds_the_described_cluster_and_logins(db, settings, tmp_path, capsys):
    settings.WATTFLOW_VAR_DIR = tmp_path

    call_command("seed_demo")
    out = capsys.readouterr().out

    tokens = json.loads((tmp_path / "agent_tokens.json").read_text())
    assert sorted(tokens) == ["node-01", "node-02", "node-03", "node-04"]
    for name, token in tokens.items():
        assert Node.for_agent_token(token).name == name
        assert token in out
    assert dict(Node.objects.values_list("name", "switch_label")) == {
        "node-01": "switch-1",
        "node-02": "switch-1",
        "node-03": "switch-2",
        "node-04": "switch-2",
    }
    gpu = Gpu.objects.get(node__name="node-03", index=7)
    assert (gpu.uuid, gpu.model, gpu.memory_mb) == ("GPU-sim-node-03-7", "A100", 40960)
    assert set(Node.objects.values_list("gpu_model", flat=True)) == {"A100"}
    assert (gpu.min_power_limit_w, gpu.default_power_limit_w, gpu.max_power_limit_w) == (
        100,
        400,
        400,
    )
    # 1410 down to 210 MHz in the 15 MHz steps of the Perseus A100 sweep
    assert gpu.supported_sm_clocks_mhz[:3] == [1410, 1395, 1380]
    assert gpu.supported_sm_clocks_mhz[-1] == 210
    assert len(gpu.supported_sm_clocks_mhz) == 81
    assert Membership.objects.get(user__username="vision_lead").role == Role.LEAD
    assert Membership.objects.get(user__username="language_member").role == Role.MEMBER
    for username, password in [
        ("admin", "wattflow-admin"),
        ("vision_lead", "vision-lead-demo"),
        ("vision_member", "vision-member-demo"),
        ("language_lead", "language-lead-demo"),
        ("language_member", "language-member-demo"),
    ]:
        assert authenticate(username=username, password=password) is not None
        assert f"{username}" in out and password in out
    assert get_user_model().objects.get(username="admin").is_staff
    assert set(Budget.objects.values_list("team__slug", flat=True)) == {"vision", "language"}


@time_machine.travel(datetime(2026, 3, 10, 15, 0, tzinfo=UTC), tick=False)
def test_seed_demo_budgets_cover_the_current_month(db, settings, tmp_path):
    settings.WATTFLOW_VAR_DIR = tmp_path

    call_command("seed_demo", stdout=io.StringIO())

    vision = Budget.objects.get(team__slug="vision")
    language = Budget.objects.get(team__slug="language")
    march = (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 4, 1, tzinfo=UTC))
    assert (vision.period_start, vision.period_end) == march
    assert (language.period_start, language.period_end) == march
    # 16 GPUs x 0.4 kW x 744 h in March x 0.5
    assert (vision.energy_limit_kwh, vision.carbon_limit_kg) == (2380.8, None)
    assert vision.hard_limit_action == HardLimitAction.PAUSE_JOBS
    # the same energy at the 2022 mean LCA intensity of US-CAL-CISO (data/carbon)
    with (ROOT / "data/carbon/em_US-CAL-CISO_2022_hourly.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    mean_g_per_kwh = sum(float(r["Carbon Intensity gCO₂eq/kWh (LCA)"]) for r in rows) / len(rows)
    assert len(rows) == 8760
    assert (language.energy_limit_kwh, language.carbon_limit_kg) == (
        None,
        round(2380.8 * mean_g_per_kwh / 1000, 1),
    )
    assert language.hard_limit_action == HardLimitAction.HOLD_QUEUE
    assert (vision.warn_fraction, language.warn_fraction) == (0.8, 0.8)


def test_seed_demo_imports_this_years_hourly_intensities_of_the_configured_zone(
    db, settings, tmp_path
):
    settings.WATTFLOW_VAR_DIR = tmp_path
    settings.TELEMETRY_CARBON_ZONE = "NO"
    with time_machine.travel(datetime(2026, 11, 25, 9, 30, tzinfo=UTC), tick=False):
        call_command("seed_demo")
        got = intensity_for_hour("NO", datetime(2026, 11, 25, 9, 30, tzinfo=UTC))
    assert CarbonIntensity.objects.filter(zone="NO").count() == 8760
    assert CarbonIntensity.objects.filter(zone="NO", hour__year=2026).count() == 8760
    # the hour is the shipped file's, not the static yearly mean
    assert got.source == CarbonSource.IMPORTED
    values = set(CarbonIntensity.objects.filter(zone="NO").values_list("ci_g_per_kwh", flat=True))
    assert len(values) > 100  # an hourly series with clean and dirty hours, not one figure


def test_seed_demo_in_late_december_also_imports_the_next_years_first_days(db, settings, tmp_path):
    settings.WATTFLOW_VAR_DIR = tmp_path
    with time_machine.travel(datetime(2026, 12, 31, 20, tzinfo=UTC), tick=False):
        call_command("seed_demo")
    assert CarbonIntensity.objects.filter(zone="ES", hour__year=2027).count() == 8760
