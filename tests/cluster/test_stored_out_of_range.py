"""Budgets and GPUs stored before today's rules (or by the ORM, a fixture, an old admin)
still read without a 500, and ``manage.py check --database default`` names each such row;
nothing stored is rewritten."""

import math
from datetime import UTC, datetime, timedelta

import pytest
from django.core.checks import run_checks
from django.utils import timezone

from cluster.models import Budget, Gpu, Team
from telemetry.models import EnergyLedgerEntry

pytestmark = pytest.mark.django_db


def _running_budget(team, **limits) -> Budget:
    # The ORM skips Budget.clean(): how a database written before the bounds holds them.
    now = timezone.now()
    return Budget.objects.create(
        team=team, period_start=now - timedelta(hours=2), period_end=now + timedelta(days=1),
        **limits,
    )  # fmt: skip


def _used(team, gpu) -> None:
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    EnergyLedgerEntry.objects.create(
        gpu=gpu, hour=hour - timedelta(hours=1), team=team, energy_j=3600.0, co2_g=1.0,
        ci_g_per_kwh=250.0, zone="ES",
    )  # fmt: skip


@pytest.mark.parametrize(
    "limits",
    [
        # a denormal limit: any use is an infinite share of it
        {"energy_limit_kwh": 5e-324},
        {"carbon_limit_kg": 5e-324},
        # 1e308 kg is inf grams
        {"carbon_limit_kg": 1e308},
        {"energy_limit_kwh": 1e308},
    ],
)
def test_a_stored_out_of_range_limit_reads_as_null_not_a_500(
    api_client, lead, team, make_node, limits
):
    budget = _running_budget(team, **limits)
    _used(team, make_node("node-01", gpus=1).gpus.get())

    for url in ("/api/budgets/", f"/api/budgets/{budget.pk}/"):
        response = api_client(lead).get(url)

        assert response.status_code == 200, url
    (limit,) = response.json()["usage"]["limits"]
    numbers = [limit[k] for k in ("used", "limit", "soft_limit", "remaining", "percent")]
    assert None in numbers
    assert all(x is None or math.isfinite(x) for x in numbers)
    assert limit["over_hard"] is (next(iter(limits.values())) < 1)
    budget.refresh_from_db()
    assert (budget.energy_limit_kwh or budget.carbon_limit_kg) == next(iter(limits.values()))


def _warnings(id_: str) -> list[str]:
    return [m.msg for m in run_checks(databases=["default"]) if m.id == id_]


def test_the_check_names_each_budget_outside_the_rules(team, other_team):
    tiny = _running_budget(team, energy_limit_kwh=5e-324, warn_fraction=5e-324)
    forever = Budget.objects.create(
        team=other_team, period_start=datetime(1, 1, 1, tzinfo=UTC),
        period_end=datetime(9999, 12, 31, tzinfo=UTC), carbon_limit_kg=1e308,
    )  # fmt: skip

    messages = _warnings("cluster.W001")

    assert len(messages) == 2
    tiny_msg = next(m for m in messages if f"#{tiny.pk} " in m)
    assert "energy_limit_kwh: Must be at least 0.001 kWh (1 Wh)." in tiny_msg
    assert "warn_fraction: Must be between 0.01 and 1" in tiny_msg
    forever_msg = next(m for m in messages if f"#{forever.pk} " in m)
    for field in ("period_start", "period_end", "carbon_limit_kg"):
        assert f"{field}: " in forever_msg
    # reported, not rewritten
    assert Budget.objects.get(pk=tiny.pk).energy_limit_kwh == 5e-324


def test_budgets_within_the_rules_give_no_warning(team):
    _running_budget(team, energy_limit_kwh=100.0, carbon_limit_kg=5.0)

    assert _warnings("cluster.W001") == []


def test_the_check_names_a_gpu_whose_max_clock_is_below_its_clock_list(make_node):
    gpu = make_node("node-01", gpus=2).gpus.get(index=1)
    Gpu.objects.filter(pk=gpu.pk).update(max_sm_clock_mhz=1000)

    (message,) = _warnings("cluster.W002")

    assert message.startswith("GPU node-01/gpu1 (#")
    assert "max_sm_clock_mhz 1000 MHz is below 1410 MHz" in message


@pytest.mark.parametrize(
    ("clocks", "said"),
    [
        ([1410, 0], "SM clocks outside 1..4000 MHz: 0"),
        ([250_000, 1410], "SM clocks outside 1..4000 MHz: 250000"),
        ([5000, 1410], "SM clocks outside 1..4000 MHz: 5000"),
        (list(range(2000, 3025)), "it lists 1025 SM clocks, more than 1024"),
    ],
)
def test_the_check_names_a_gpu_whose_stored_clock_list_breaks_todays_bounds(
    make_node, clocks, said
):
    # given a list stored before the bounds (an update bypasses the model's validation)
    gpu = make_node("node-01", gpus=1).gpus.get()
    Gpu.objects.filter(pk=gpu.pk).update(supported_sm_clocks_mhz=clocks, max_sm_clock_mhz=None)

    (message,) = _warnings("cluster.W002")

    assert message.startswith("GPU node-01/gpu0 (#") and message.endswith(said)
    # reported, not rewritten
    assert Gpu.objects.get(pk=gpu.pk).supported_sm_clocks_mhz == clocks


def test_the_check_names_a_name_with_a_direction_control(make_node):
    Team.objects.create(name="Tiny\u202eynit", slug="tiny")
    node = make_node("node-01", gpus=1)
    node.rack_label = "rack\u200b1"
    node.save(update_fields=["rack_label"])

    messages = _warnings("cluster.W003")

    assert len(messages) == 2
    assert any("team 'Tiny\\u202eynit'" in m and "U+202E" in m for m in messages)
    assert any("node 'node-01'" in m and "rack_label" in m and "U+200B" in m for m in messages)


def test_the_check_names_a_name_with_a_line_separator_or_a_filler(team):
    # (stored before the API refused them, as a sixth probe did)
    Team.objects.create(name="Vision\u2028Admins", slug="v2")
    Team.objects.create(name="\u3164", slug="blank")

    messages = _warnings("cluster.W003")

    assert len(messages) == 2
    assert any("U+2028" in m for m in messages)
    assert any("U+3164" in m for m in messages)


def test_the_check_names_a_braille_blank_and_leaves_a_mongolian_word(team):
    # a name drawn as an empty cell, and one whose vowel separator is Mongolian spelling
    Team.objects.create(name="\u2800", slug="blank")
    Team.objects.create(name="\u182c\u1820\u1837\u1820\u180e\u1820", slug="mn")

    messages = _warnings("cluster.W003")

    assert len(messages) == 1
    assert "U+2800" in messages[0]


def test_the_check_leaves_a_name_with_a_flags_emoji(team):
    # the flag of Wales: its tag characters are format characters, but they draw the flag
    Team.objects.create(
        name="\U0001f3f4\U000e0067\U000e0062\U000e0077\U000e006c\U000e0073\U000e007f", slug="cymru"
    )
    Team.objects.create(name="Vision\u2028Admins", slug="v2")

    messages = _warnings("cluster.W003")

    assert len(messages) == 1 and "U+2028" in messages[0], messages


def test_the_checks_need_the_database_flag(team):
    _running_budget(team, energy_limit_kwh=5e-324)

    # plain ``manage.py check`` (no --database) does not query
    assert [m for m in run_checks() if m.id.startswith("cluster.W")] == []


def test_the_checks_wait_for_a_migrated_database(team):
    # migrate runs the database checks before it migrates: on a fresh database they read a
    # cluster_budget table that did not exist yet, and bootstrap's migrate failed
    from django.db.migrations.recorder import MigrationRecorder

    _running_budget(team, energy_limit_kwh=5e-324)
    assert any(w.id == "cluster.W001" for w in run_checks(databases=["default"]))
    # given the database one migration short of the code (the row is restored on rollback)
    last = MigrationRecorder.Migration.objects.filter(app="cluster").order_by("-id").first()
    last.delete()
    # then the checks leave it to migrate, and say nothing about the rows they cannot read
    assert not [w for w in run_checks(databases=["default"]) if w.id.startswith("cluster.W")]


def test_the_check_names_a_gpu_stored_with_a_top_power_limit_below_ten_watts(make_node):
    # given a GPU stored at 1 W before registration refused such a limit (its draw above
    # 1.5 W is refused at ingest: its jobs' teams are not charged)
    node = make_node("node-01", gpus=2)
    low = node.gpus.get(index=1)
    Gpu.objects.filter(pk=low.pk).update(
        min_power_limit_w=1, default_power_limit_w=1, max_power_limit_w=1, power_limit_w=None
    )

    (message,) = _warnings("cluster.W004")

    assert message.startswith("GPU node-01/gpu1 (#")
    assert "max_power_limit_w 1 W is below 10 W" in message
    assert Gpu.objects.get(pk=low.pk).max_power_limit_w == 1  # reported, not rewritten
