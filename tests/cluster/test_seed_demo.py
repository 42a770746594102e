"""seed_demo loads the demo once, and running it again changes nothing."""

import io
import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
import time_machine
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from cluster.choices import HardLimitAction, Role
from cluster.management.commands import seed_demo
from cluster.models import Budget, Gpu, Membership, Node, Team
from scheduling.adapters import current_catalog
from scheduling.core.perf_models import energy_to_finish_j
from scheduling.core.types import GpuConfig
from scheduling.simulator.traces import read_elasticflow_trace
from telemetry.carbon import intensity_for_hour
from telemetry.choices import CarbonSource
from telemetry.models import CarbonIntensity
from telemetry.usage import budget_usage, running_budgets

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


# Within one second: a rerun later opens the next demo budget from then (see below).
@time_machine.travel(datetime(2026, 3, 10, 15, 0, 5, tzinfo=UTC), tick=False)
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


def test_seed_demo_again_later_in_the_hour_opens_new_budgets_and_ends_the_first_there(
    db, settings, tmp_path
):
    # (while the demo's period started at the hour, a rerun a minute later asked for a
    # second budget over the first one's period, and the overlap constraint refused it with
    # a traceback; now each run's budget starts when it runs, and the earlier one ends there)
    settings.WATTFLOW_VAR_DIR = tmp_path
    with time_machine.travel(datetime(2026, 3, 10, 15, 0, 5, tzinfo=UTC), tick=False):
        call_command("seed_demo", stdout=io.StringIO())
    first = dict(Budget.objects.values_list("team__slug", "period_end"))
    rerun = datetime(2026, 3, 10, 15, 7, 5, tzinfo=UTC)
    with time_machine.travel(rerun, tick=False):
        call_command("seed_demo", stdout=io.StringIO())

    assert Budget.objects.count() == 4
    earlier = dict(
        Budget.objects.filter(period_start__lt=rerun).values_list("team__slug", "period_end")
    )
    assert earlier == {"vision": rerun, "language": rerun}
    later = dict(Budget.objects.filter(period_start=rerun).values_list("team__slug", "period_end"))
    assert {slug: (later[slug] - end).total_seconds() for slug, end in first.items()} == {
        "vision": 420.0,
        "language": 420.0,
    }


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


def _replayed_need(ci_g_per_kwh: float) -> dict[str, tuple[float, float]]:
    """Per team: the predicted energy (J) and carbon (g) of the jobs the demo's replay submits
    (Procfile.dev's defaults: the first 120 trace jobs, 1000x, teams in turn, up to 8 GPUs),
    each from its workload's A100 model in the catalog."""
    catalog = current_catalog()
    need = {"vision": [0.0, 0.0], "language": [0.0, 0.0]}
    for i, job in enumerate(
        read_elasticflow_trace(ROOT / "data/trace/elasticflow_philly_876.csv")[:120]
    ):
        cfg = GpuConfig(n_gpus=min(job.requested_gpus, 8), global_batch=job.global_batch)
        joules = energy_to_finish_j(
            catalog.get(job.workload, "A100"), cfg, max(1, round(job.total_iters / 1000))
        )
        team = need["vision" if i % 2 == 0 else "language"]
        team[0] += joules
        team[1] += joules / 3.6e6 * ci_g_per_kwh
    return {slug: (e, c) for slug, (e, c) in need.items()}


@time_machine.travel(datetime(2026, 3, 10, 15, 20, 40, tzinfo=UTC), tick=False)
def test_seed_demo_budgets_are_a_share_of_the_replayed_jobs_need_over_the_replay(
    db, settings, tmp_path
):
    # given a budget of this month already in place for vision (a lead made it, or an
    # earlier make run)
    settings.WATTFLOW_VAR_DIR = tmp_path
    vision_team = Team.objects.create(slug="vision", name="Vision", created_at=datetime.now(UTC))
    month = Budget.objects.create(
        team=vision_team,
        period_start=datetime(2026, 3, 1, tzinfo=UTC),
        period_end=datetime(2026, 4, 1, tzinfo=UTC),
        energy_limit_kwh=2380.8,
        created_at=datetime.now(UTC),
    )

    call_command("seed_demo", stdout=io.StringIO())

    # then each team's budget runs from now until the replay has submitted its jobs (549 s
    # of wall time at the defaults: 10 whole minutes from this minute), over 15 % of its
    # jobs' predicted need
    vision = Budget.objects.get(
        team__slug="vision", period_start__gte=datetime(2026, 3, 10, tzinfo=UTC)
    )
    language = Budget.objects.get(team__slug="language")
    window = (
        datetime(2026, 3, 10, 15, 20, 40, tzinfo=UTC),
        datetime(2026, 3, 10, 15, 30, tzinfo=UTC),
    )
    assert (vision.period_start, vision.period_end) == window
    assert (language.period_start, language.period_end) == window
    # the carbon at the hour's intensity of the zone the ledgers use (ES), not another's
    ci = intensity_for_hour("ES", datetime(2026, 3, 10, 15, tzinfo=UTC)).ci_g_per_kwh
    need = _replayed_need(ci)
    assert (vision.energy_limit_kwh, vision.carbon_limit_kg) == (
        round(0.15 * need["vision"][0] / 3.6e6, 3),
        None,
    )
    assert (language.energy_limit_kwh, language.carbon_limit_kg) == (
        None,
        round(0.15 * need["language"][1] / 1000, 4),
    )
    assert 0.05 < vision.energy_limit_kwh < 5  # kWh a few minutes of the demo spend
    assert vision.hard_limit_action == HardLimitAction.PAUSE_JOBS
    assert language.hard_limit_action == HardLimitAction.HOLD_QUEUE
    assert (vision.warn_fraction, language.warn_fraction) == (0.8, 0.8)
    # and the month's budget is kept, ending where the demo's begins (periods never overlap)
    month.refresh_from_db()
    assert (month.period_start, month.period_end, month.energy_limit_kwh) == (
        datetime(2026, 3, 1, tzinfo=UTC),
        window[0],
        2380.8,
    )


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


def test_seed_demo_again_within_the_hour_opens_its_budgets_below_the_soft_limit_as_a_first_run(
    db, settings, tmp_path
):
    # A new user's walkthrough: make run, Ctrl-C, make run 30 minutes later opened vision's
    # budget at 680 % used (the period started at the hour and held the first run's jobs);
    # once the rerun added that use to the limit, at 87 % (the soft limit crossed at once).
    from telemetry.models import EnergyLedgerEntry

    settings.WATTFLOW_VAR_DIR = tmp_path
    with time_machine.travel(datetime(2026, 3, 10, 15, 0, 5, tzinfo=UTC), tick=False):
        call_command("seed_demo", stdout=io.StringIO())
    first = {b.team.slug: b for b in Budget.objects.select_related("team")}
    # given the first run's jobs drew 0.9 kWh (vision) and 0.5 kWh (language) in its first
    # 30 minutes, accounted by minute as accounting keeps them
    gpus = list(Gpu.objects.order_by("pk")[:2])
    for gpu, slug, kwh, ci in ((gpus[0], "vision", 0.9, 222.0), (gpus[1], "language", 0.5, 220.0)):
        EnergyLedgerEntry.objects.create(
            gpu=gpu, hour=datetime(2026, 3, 10, 15, tzinfo=UTC),
            team=Team.objects.get(slug=slug), energy_j=kwh * 3.6e6, co2_g=kwh * ci,
            ci_g_per_kwh=ci, zone="ES", minutes_j=[kwh * 3.6e6 / 30] * 30 + [0.0] * 30,
        )  # fmt: skip

    # when the demo is loaded again at 15:30:05
    rerun = datetime(2026, 3, 10, 15, 30, 5, tzinfo=UTC)
    with time_machine.travel(rerun, tick=False):
        call_command("seed_demo", stdout=io.StringIO())
        running = {b.team.slug: b for b in running_budgets(now=rerun).select_related("team")}

    # then each team's running budget opens as the first run's did: nothing used, the same
    # share of the replay's need, the soft limit far off
    for slug, kind, limit in (("vision", "energy", "energy_limit_kwh"),
                              ("language", "carbon", "carbon_limit_kg")):  # fmt: skip
        usage = getattr(budget_usage(running[slug]), kind)
        assert (usage.used, usage.over_soft) == (0.0, False)
        assert getattr(running[slug], limit) == getattr(first[slug], limit)
    # and the first run's budgets are kept as they ran (15:00:05 to 15:10), with their use
    for budget in first.values():
        stored = Budget.objects.get(pk=budget.pk)
        assert (stored.period_start, stored.period_end) == (budget.period_start, budget.period_end)
    assert budget_usage(first["vision"]).energy_kwh == pytest.approx(0.03 * (10 - 5 / 60))


@pytest.mark.parametrize(
    ("variable", "constant", "value"),
    [
        ("WATTFLOW_REPLAY_JOBS", "REPLAY_JOBS", 0),  # was an IndexError
        ("WATTFLOW_REPLAY_JOBS", "REPLAY_JOBS", -1),  # was taken (the replay refuses it)
        ("WATTFLOW_REPLAY_SPEEDUP", "REPLAY_SPEEDUP", 0.0),  # was a ZeroDivisionError
        ("WATTFLOW_REPLAY_SPEEDUP", "REPLAY_SPEEDUP", math.nan),  # was a ValueError
        ("WATTFLOW_REPLAY_SPEEDUP", "REPLAY_SPEEDUP", math.inf),
        ("WATTFLOW_REPLAY_MAX_WAIT_S", "REPLAY_MAX_WAIT_S", -5.0),  # was taken
    ],
)
def test_replay_settings_the_replay_would_refuse_stop_seed_demo_with_one_line(
    db, settings, tmp_path, monkeypatch, variable, constant, value
):
    # given a replay setting ``replay_trace`` refuses (Procfile.dev passes these to it):
    # seed_demo sized its budgets from it first, and raised a traceback or took it
    settings.WATTFLOW_VAR_DIR = tmp_path
    monkeypatch.setattr(seed_demo, constant, value)
    # when the demo is loaded, then it stops with the variable named, nothing stored
    with pytest.raises(CommandError, match=f"^{variable} must be "):
        call_command("seed_demo", stdout=io.StringIO())
    assert set(_counts().values()) == {0}
