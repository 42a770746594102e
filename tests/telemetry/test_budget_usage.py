"""One budget-usage computation (``telemetry.usage.budget_usage``): the scheduler, the pages,
the API and /metrics report the same numbers, uncapped above 100 %; and accounting pushes a
changed usage to the team's open dashboards through the real Channels stack and Redis."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from agent_samples import series
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from cluster import services as cluster_services
from cluster.choices import HardLimitAction
from cluster.models import Budget, Gpu
from config.asgi import application
from frontend.dashboard import budget_progress
from scheduling.adapters import budgets_from_rows
from scheduling.core.types import J_PER_KWH
from telemetry.accounting import process_dirty_hours
from telemetry.ingest import ingest_batch
from telemetry.models import DirtyHour, EnergyLedgerEntry
from telemetry.usage import budget_usage


@pytest.fixture
def overspent(team, agent_node):
    """Vision's running budget: 0.5 kWh of 2 kWh used, 90 g of 50 g (180 %), over 3 hours."""
    now = timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    for back, energy_j, co2_g in ((2, 0.6e6, 20.0), (1, 0.9e6, 45.0), (0, 0.3e6, 25.0)):
        EnergyLedgerEntry.objects.create(
            gpu=gpu, hour=hour - timedelta(hours=back), team=team, energy_j=energy_j,
            co2_g=co2_g, ci_g_per_kwh=100.0, zone="ES",
        )  # fmt: skip
    return Budget.objects.create(
        team=team, period_start=hour - timedelta(hours=2), period_end=hour + timedelta(days=1),
        energy_limit_kwh=2.0, carbon_limit_kg=0.05, hard_limit_action=HardLimitAction.PAUSE_JOBS,
    )  # fmt: skip


def test_usage_is_summed_per_hour_and_not_capped(overspent):
    usage = budget_usage(overspent)
    assert [(e, c) for _, e, c in usage.hourly] == [(0.6e6, 20.0), (0.9e6, 45.0), (0.3e6, 25.0)]
    assert (usage.energy_j, usage.co2_g) == (pytest.approx(1.8e6), pytest.approx(90.0))
    assert usage.carbon.percent == pytest.approx(180.0)
    assert usage.carbon.remaining == pytest.approx(-40.0)
    assert (usage.carbon.over_soft, usage.carbon.over_hard) == (True, True)
    assert usage.energy.percent == pytest.approx(25.0)
    assert (usage.energy.over_soft, usage.energy.over_hard) == (False, False)


def test_scheduler_page_api_and_metrics_read_the_same_usage(overspent, lead, api_client, client):
    usage = budget_usage(overspent)
    # the scheduler's snapshot
    (core_budget,) = budgets_from_rows([overspent])
    assert (core_budget.energy_used_j, core_budget.co2_used_g) == (usage.energy_j, usage.co2_g)
    # the page (kWh and kg for display; the burn chart ends on the same total)
    page = budget_progress(overspent, now=timezone.now())
    energy, carbon = page["limits"]
    assert energy["used"] == usage.energy_j / J_PER_KWH
    assert carbon["used"] == usage.co2_g / 1000.0
    assert page["figures"]["carbon"]["data"][0]["y"][-1] == pytest.approx(carbon["used"])
    assert (carbon["over_soft"], carbon["over_hard"]) == (True, True)
    # the API, in base units and uncapped
    body = api_client(lead).get(f"/api/budgets/{overspent.pk}/").json()
    assert body["usage"]["energy_used_j"] == usage.energy_j
    assert body["usage"]["co2_used_g"] == usage.co2_g
    api_carbon = [x for x in body["usage"]["limits"] if x["kind"] == "carbon"][0]
    assert api_carbon["percent"] == pytest.approx(180.0)
    assert api_carbon["remaining"] == pytest.approx(-40.0)
    # /metrics
    text = client.get("/metrics").content.decode()
    metrics = {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.labels.get("team") == "vision"
    }
    assert metrics["wattflow_budget_energy_joules_used"] == usage.energy_j
    assert metrics["wattflow_budget_co2_grams_used"] == usage.co2_g


def _session_headers(user) -> list[tuple[bytes, bytes]]:
    browser = Client()
    browser.force_login(user)
    return [
        (b"origin", b"http://127.0.0.1"),
        (b"cookie", f"sessionid={browser.cookies['sessionid'].value}".encode()),
    ]


@pytest.mark.django_db(transaction=True)
def test_accounting_pushes_the_changed_budget_to_the_teams_dashboards_only(
    member, outsider, team, other_team, agent_node, make_job
):
    # given a vision job drawing 100 W on GPU 0 for a minute, and vision's running budget
    node, _ = agent_node
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    now = timezone.now().replace(microsecond=0)
    start = now - timedelta(minutes=3)
    job = make_job(owner=member, team=team)
    cluster_services.start_job(job, gpus=[gpu], batch_size=256, at=start - timedelta(minutes=1))
    budget = Budget.objects.create(
        team=team, period_start=now - timedelta(days=1), period_end=now + timedelta(days=1),
        energy_limit_kwh=1.0,
    )  # fmt: skip
    Budget.objects.create(
        team=other_team, period_start=now - timedelta(days=1), period_end=now + timedelta(days=1),
        energy_limit_kwh=1.0,
    )  # fmt: skip
    batch = {"samples": series(gpu.uuid, start, 61, power_w=100.0)}
    ingest_batch(node, batch)
    member_headers, outsider_headers = _session_headers(member), _session_headers(outsider)

    def closing(call):
        """Run ``call`` in this worker thread, then close the thread's connection (else the
        test database cannot be dropped)."""

        def run():
            try:
                return call()
            finally:
                connection.close()

        return run

    def mark_hours_dirty():
        for hour in {start.replace(minute=0, second=0), now.replace(minute=0, second=0)}:
            DirtyHour.objects.get_or_create(gpu=gpu, hour=hour, defaults={"marked_at": now})

    async def scenario():
        mine = WebsocketCommunicator(application, "/ws/dashboard/", headers=member_headers)
        theirs = WebsocketCommunicator(application, "/ws/dashboard/", headers=outsider_headers)
        for ws in (mine, theirs):
            assert (await ws.connect(timeout=10))[0]
            await ws.receive_json_from(timeout=5)  # hello
        loop = asyncio.get_running_loop()
        # when accounting runs (in a worker thread, as Celery would)
        accounted = await loop.run_in_executor(None, closing(process_dirty_hours))
        pushed = await mine.receive_json_from(timeout=5)
        outsider_got_nothing = await theirs.receive_nothing(timeout=0.5)
        # and when its hours are accounted again from the same samples: nothing changed
        await loop.run_in_executor(None, closing(mark_hours_dirty))
        again = await loop.run_in_executor(None, closing(process_dirty_hours))
        replay_pushed_nothing = await mine.receive_nothing(timeout=0.5)
        for ws in (mine, theirs):
            await ws.disconnect()
        return accounted, pushed, outsider_got_nothing, again, replay_pushed_nothing

    accounted, pushed, outsider_got_nothing, again, replay_pushed_nothing = async_to_sync(
        scenario
    )()
    # then the member's dashboard got vision's budget with the new usage, nobody else's
    assert accounted >= 1 and again >= 1
    assert pushed["type"] == "budget"
    (usage,) = pushed["payload"]["budgets"]
    assert usage == {
        **budget_usage(budget).as_dict(),
        "period_start": budget.period_start.isoformat(),
        "period_end": budget.period_end.isoformat(),
    }
    assert usage["budget_id"] == budget.pk
    assert usage["energy_used_j"] == pytest.approx(6000.0)
    (energy,) = usage["limits"]
    assert energy["percent"] == pytest.approx(100 * 6000.0 / J_PER_KWH)
    assert outsider_got_nothing
    assert replay_pushed_nothing


def test_the_burn_chart_of_a_period_starting_inside_the_running_hour_starts_with_it(
    agent_node, member, team, make_job
):
    # given a vision job drawing 100 W on GPU 0 from 14:00, its budget starting at 14:30,
    # and the page read at 14:45 (15 minutes of the period: 90 kJ, less the last second)
    node, _ = agent_node
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    hour = datetime(2026, 1, 10, 14, 0, tzinfo=UTC)
    now = hour + timedelta(minutes=45)
    job = make_job(owner=member, team=team)
    cluster_services.start_job(job, gpus=[gpu], batch_size=256, at=hour)
    ingest_batch(node, {"samples": series(gpu.uuid, hour, 45 * 60, power_w=100.0)}, now=now)
    process_dirty_hours()
    budget = Budget.objects.create(
        team=team, period_start=hour + timedelta(minutes=30), period_end=hour + timedelta(hours=5),
        energy_limit_kwh=1.0,
    )  # fmt: skip
    # when the page draws its burn chart
    page = budget_progress(budget, now=now)
    used = page["figures"]["energy"]["data"][0]
    points = [(datetime.fromisoformat(x), y) for x, y in zip(used["x"], used["y"], strict=True)]
    # then it starts at the period's start, in time order, and at 14:40 shows the ten minutes
    # drawn since 14:30 (it drew the energy of 14:00..14:29 before the period, out of order)
    times = [t for t, _ in points]
    assert times == sorted(times)
    assert times[0] == budget.period_start
    assert dict(points)[hour + timedelta(minutes=40)] == pytest.approx(60_000 / J_PER_KWH, abs=1e-6)
    assert points[-1] == (now, pytest.approx(89_900 / J_PER_KWH, abs=1e-6))
    assert page["limits"][0]["used"] == pytest.approx(89_900 / J_PER_KWH)


def test_limits_typed_in_kwh_and_kg_read_back_in_j_and_g_without_float_noise(
    team, lead, api_client
):
    # given a budget typed through the API as 0.141 kWh and 0.007 kg with a 70 % soft limit
    # (0.141 * 3.6e6 is 507599.99999999994 and 7.0 * 0.7 is 4.8999999999999995: the API
    # gave those, and the page's kWh came back as 0.14099999999999999)
    now = timezone.now()
    created = api_client(lead).post(
        "/api/budgets/",
        {
            "team": team.slug,
            "period_start": (now - timedelta(hours=1)).isoformat(),
            "period_end": (now + timedelta(days=1)).isoformat(),
            "energy_limit_kwh": 0.141,
            "carbon_limit_kg": 0.007,
            "warn_fraction": 0.7,
        },
        format="json",
    )
    assert created.status_code == 201, created.content

    # when the API, the scheduler and the page read it
    body = api_client(lead).get(f"/api/budgets/{created.json()['id']}/").json()
    limits = {x["kind"]: x for x in body["usage"]["limits"]}
    budget = Budget.objects.get(pk=body["id"])
    (core_budget,) = budgets_from_rows([budget])
    page = {x["kind"]: x for x in budget_progress(budget, now=now)["limits"]}

    # then each limit is what was typed, in kWh / kg and in J / g alike
    assert (body["energy_limit_kwh"], body["carbon_limit_kg"]) == (0.141, 0.007)
    assert (limits["energy"]["limit"], limits["energy"]["soft_limit"]) == (507600.0, 355320.0)
    assert (limits["carbon"]["limit"], limits["carbon"]["soft_limit"]) == (7.0, 4.9)
    assert (core_budget.energy_limit_j, core_budget.co2_limit_g) == (507600.0, 7.0)
    assert (page["energy"]["limit"], page["carbon"]["soft_limit"]) == (0.141, 0.0049)
    # and the use is given in the limits' units too, beside the base units
    assert body["usage"]["energy_used_kwh"] == body["usage"]["energy_used_j"] / J_PER_KWH == 0.0
    assert body["usage"]["co2_used_kg"] == body["usage"]["co2_used_g"] / 1000.0 == 0.0
