"""Dashboard numbers and report rows over the scene's real ledger (ingested samples, real
accounting): visibility per persona and exact sums."""

import csv
import io
from datetime import timedelta

import pytest
from django.db.models import F, Sum
from django.test import Client
from django.urls import reverse
from frontend_scene import build_scene

from frontend.dashboard import dashboard_payload
from frontend.templatetags.wattflow import amount
from scheduling.core.types import J_PER_KWH
from telemetry.models import EnergyLedgerEntry, GpuSample

pytestmark = pytest.mark.django_db


@pytest.fixture
def scene(db):
    return build_scene()


def ledger_kwh(**filters) -> float:
    return EnergyLedgerEntry.objects.filter(**filters).aggregate(e=Sum("energy_j"))["e"] / J_PER_KWH


def test_a_member_sees_their_teams_budgets_and_jobs_only(scene):
    payload = dashboard_payload(scene.users["member"], now=scene.now)
    assert [b["team"] for b in payload["budgets"]] == ["Vision"]
    assert sorted(payload["budget_figures"]) == [
        f"fig-budget-{scene.budgets['vision'].pk}-carbon",
        f"fig-budget-{scene.budgets['vision'].pk}-energy",
    ]
    # vision: 2 queued (vgg16, gpt2), 1 running (resnet50-sweep); language's bert is not theirs
    assert (payload["queue_now"], payload["running_now"]) == (2, 1)
    outsider = dashboard_payload(scene.users["outsider"], now=scene.now)
    assert [b["team"] for b in outsider["budgets"]] == ["Language"]
    assert (outsider["queue_now"], outsider["running_now"]) == (0, 1)
    admin = dashboard_payload(scene.users["admin"], now=scene.now)
    assert [b["team"] for b in admin["budgets"]] == ["Language", "Vision"]


def test_budget_progress_is_the_teams_ledger_in_the_period(scene):
    payload = dashboard_payload(scene.users["lead"], now=scene.now)
    (vision,) = payload["budgets"]
    energy, carbon = vision["limits"]
    used_kwh = ledger_kwh(team=scene.team)
    used_kg = (
        EnergyLedgerEntry.objects.filter(team=scene.team).aggregate(c=Sum("co2_g"))["c"] / 1000
    )
    assert energy["used"] == pytest.approx(used_kwh)
    assert carbon["used"] == pytest.approx(used_kg)
    assert energy["percent"] == pytest.approx(100 * used_kwh / 12.0)
    # half of the one-day period has passed: the projection doubles the use
    assert energy["projected"] == pytest.approx(2 * used_kwh)
    burn = vision["figures"]["energy"]["data"][0]
    assert burn["y"][-1] == pytest.approx(used_kwh, abs=1e-6)


def test_a_spent_pause_jobs_budget_projects_no_more_than_it_used(scene):
    # its jobs wait for the next period (a live probe: projected 17 times its limit)
    budget = scene.budgets["vision"]
    used_kwh = ledger_kwh(team=scene.team)
    type(budget).objects.filter(pk=budget.pk).update(
        energy_limit_kwh=used_kwh / 2, hard_limit_action="pause_jobs"
    )
    (vision,) = dashboard_payload(scene.users["lead"], now=scene.now)["budgets"]
    energy = vision["limits"][0]
    assert energy["over_hard"]
    assert energy["projected"] == pytest.approx(used_kwh)


def test_the_dashboard_power_is_the_latest_sample_of_every_gpu(scene):
    payload = dashboard_payload(scene.users["member"], now=scene.now)
    (bar,) = payload["figures"]["power"]["data"]
    assert bar["x"] == ["node-01", "node-02"]
    # the last samples, at scene.now: node-01 runs resnet50 on 4 GPUs at 1200 MHz
    expected = [
        round(
            sum(
                GpuSample.objects.filter(gpu__node=n, ts=scene.now).values_list(
                    "power_w", flat=True
                )
            ),
            1,
        )
        for n in scene.nodes
    ]
    assert bar["y"] == expected
    assert payload["cluster_power_w"] == pytest.approx(sum(expected), abs=0.1)


def test_report_and_csv_rows_are_the_ledger_per_team_user_and_job(scene):
    client = Client()
    client.force_login(scene.users["admin"])
    day = scene.now.date().isoformat()
    start = (scene.now - timedelta(days=2)).date().isoformat()
    response = client.get(reverse("frontend:reports"), {"start": start, "end": day})
    rows = response.context["rows"]
    assert [(r["key"], round(r["energy_kwh"], 9)) for r in rows["team"]] == sorted(
        [
            ("vision", round(ledger_kwh(team=scene.team, job__isnull=False), 9)),
            ("language", round(ledger_kwh(team=scene.other_team, job__isnull=False), 9)),
        ],
        key=lambda kv: -kv[1],
    )
    by_job = {r["name"]: r["energy_kwh"] for r in rows["job"]}
    assert sorted(by_job) == ["bert-finetune", "finished-3", "resnet50-sweep"]
    assert by_job["bert-finetune"] == pytest.approx(ledger_kwh(job=scene.jobs["bert"]))
    csv_text = client.get(reverse("frontend:reports-csv"), {"start": start, "end": day})
    csv_body = b"".join(csv_text.streaming_content).decode()
    parsed = list(csv.DictReader(io.StringIO(csv_body)))
    assert [r["level"] for r in parsed] == ["team"] * 2 + ["user"] * 2 + ["job"] * 3
    assert {r["start"] for r in parsed} == {start} and {r["end"] for r in parsed} == {day}
    # a period before the scene holds nothing
    empty = client.get(
        reverse("frontend:reports-csv"), {"start": "2020-01-01", "end": "2020-01-31"}
    )
    assert b"".join(empty.streaming_content).decode().splitlines()[1:] == []
    # a page number alone is the default period's, as on the page (it was a 400)
    paged = client.get(reverse("frontend:reports-csv"), {"page": "2"})
    assert paged.status_code == 200
    assert b"".join(paged.streaming_content).decode().startswith("level,key,name")


def test_small_amounts_read_in_their_own_digits_on_the_report_and_the_job_page(scene):
    # a job's carbon of a few grams printed as "0.000" kg (three decimals; a live probe):
    # the report and the job page print amounts as the budget page does (here one job's
    # carbon made a thousand times smaller: about 0.4 g)
    EnergyLedgerEntry.objects.filter(job=scene.jobs["bert"]).update(co2_g=F("co2_g") / 1000)
    client = Client()
    client.force_login(scene.users["admin"])
    day = scene.now.date().isoformat()
    start = (scene.now - timedelta(days=2)).date().isoformat()
    page = client.get(reverse("frontend:reports"), {"start": start, "end": day})
    html = page.content.decode()
    rows = page.context["rows"]["job"]
    assert any(0 < r["co2_kg"] < 0.0005 for r in rows)
    for r in rows:
        assert f'<td class="num">{amount(r["co2_kg"])}</td>' in html
    job = scene.jobs["bert"]
    detail = client.get(reverse("frontend:job-detail", args=[job.pk]))
    co2_kg = detail.context["co2_kg"]
    assert f'id="job-carbon">{amount(co2_kg)}</span>' in detail.content.decode()
    assert (amount(0.000412), amount(0.0412)) == ("0.000412", "0.0412")


def test_a_limit_crossed_in_the_running_hour_is_marked_at_its_minute(db, team, make_node):
    # a live probe: the used line stayed flat through the hour and the "crossed" marker
    # followed the page's refresh; the ledger keeps each minute's energy
    from datetime import UTC, datetime

    from cluster.models import Budget
    from frontend.dashboard import budget_progress

    hour = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)
    gpu = make_node(gpus=1).gpus.get()
    EnergyLedgerEntry.objects.create(
        gpu=gpu, hour=hour, team=team, energy_j=45 * 3.6e4, co2_g=0.0, ci_g_per_kwh=0.0,
        zone="ES", minutes_j=[3.6e4] * 45,
    )  # fmt: skip
    budget = Budget.objects.create(
        team=team, period_start=hour, period_end=hour + timedelta(days=1), energy_limit_kwh=0.3
    )
    progress = budget_progress(budget, now=hour + timedelta(minutes=45))
    names = [trace["name"] for trace in progress["figures"]["energy"]["data"]]
    # 0.01 kWh a minute: 0.3 kWh at 06:30, the soft limit (80%) at 06:24
    assert "hard limit crossed 12-06 06:30" in names
    assert "soft limit crossed 12-06 06:24" in names
    used = progress["figures"]["energy"]["data"][0]["y"]
    assert used[-1] == pytest.approx(0.45)
