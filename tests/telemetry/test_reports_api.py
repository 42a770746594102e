"""The telemetry read API: rollups for every signed-in user, ledger rows by team visibility."""

from datetime import timedelta

import pytest
from telemetry_clock import T0

from cluster.models import Gpu
from telemetry.models import EnergyLedgerEntry, GpuMinute


@pytest.fixture
def ledger(agent_node, team, other_team, make_job, member, outsider):
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    vision_job = make_job(owner=member, team=team)
    language_job = make_job(owner=outsider, team=other_team)
    rows = {}
    for name, job, energy_j, estimated in (
        ("vision", vision_job, 3.6e6, False),
        ("language", language_job, 7.2e6, True),
        ("idle", None, 1.8e6, False),
    ):
        rows[name] = EnergyLedgerEntry.objects.create(
            gpu=gpu, hour=T0, job=job, team=job and job.team, energy_j=energy_j,
            co2_g=energy_j / 3.6e6 * 100,
            ci_g_per_kwh=100.0, ci_estimated=estimated, zone="ES",
        )  # fmt: skip
    return rows


def _energies(response):
    assert response.status_code == 200
    return sorted(r["energy_j"] for r in response.json()["results"])


def test_members_see_their_teams_ledger_only(ledger, api_client, personas):
    assert _energies(api_client(personas["member"]).get("/api/telemetry/ledger/")) == [3.6e6]
    assert _energies(api_client(personas["lead"]).get("/api/telemetry/ledger/")) == [3.6e6]
    assert _energies(api_client(personas["outsider"]).get("/api/telemetry/ledger/")) == [7.2e6]
    assert _energies(api_client(personas["admin"]).get("/api/telemetry/ledger/")) == [
        1.8e6, 3.6e6, 7.2e6,
    ]  # fmt: skip


@pytest.mark.parametrize("path", ["/api/telemetry/ledger/", "/api/telemetry/ledger/totals/"])
def test_another_teams_job_reads_as_no_job(ledger, api_client, personas, path):
    # (an empty answer for it, and a 400 for an unused id, told which ids other teams had)
    member = api_client(personas["member"])
    theirs = member.get(path, {"job": ledger["language"].job_id})
    unused = member.get(path, {"job": 10**9})
    assert theirs.status_code == unused.status_code == 400
    assert theirs.json()["job"] == [
        "Select a valid choice. That choice is not one of the available choices."
    ]
    own = member.get(path, {"job": ledger["vision"].job_id})
    assert own.status_code == 200
    admin = api_client(personas["admin"]).get(path, {"job": ledger["language"].job_id})
    assert admin.status_code == 200


def test_anonymous_users_see_nothing(ledger, api_client):
    assert api_client().get("/api/telemetry/ledger/").status_code == 401
    assert api_client().get("/api/telemetry/gpu-minutes/").status_code == 401


def test_ledger_totals_follow_the_filters(ledger, api_client, personas):
    admin = api_client(personas["admin"])
    answer = admin.get("/api/telemetry/ledger/totals/", {"team": "language"}).json()
    assert answer == {"energy_j": 7.2e6, "energy_kwh": 2.0, "co2_g": 200.0, "estimated": True}
    member_view = api_client(personas["member"]).get(
        "/api/telemetry/ledger/totals/", {"team": "language"}
    )
    assert member_view.json() == {
        "energy_j": 0.0,
        "energy_kwh": 0.0,
        "co2_g": 0.0,
        "estimated": False,
    }


def test_gpu_minutes_filter_by_node_and_time(agent_node, other_node, api_client, member):
    for uuid in ("GPU-node-01-0", "GPU-node-02-0"):
        gpu = Gpu.objects.get(uuid=uuid)
        for m in range(3):
            GpuMinute.objects.create(
                gpu=gpu, minute=T0 + timedelta(minutes=m), samples=60, power_avg_w=100.0 + m,
                power_max_w=150.0, util_avg_pct=None, energy_j=6000.0 + m,
            )  # fmt: skip
    response = api_client(member).get(
        "/api/telemetry/gpu-minutes/",
        {"node": "node-01", "minute_after": (T0 + timedelta(minutes=1)).isoformat()},
    )
    assert response.status_code == 200
    assert [(r["minute"], r["energy_j"]) for r in response.json()["results"]] == [
        ("2026-11-22T03:01:00Z", 6001.0),
        ("2026-11-22T03:02:00Z", 6002.0),
    ]


def test_adjacent_hour_ranges_count_each_hour_once(agent_node, team, api_client, admin_user):
    # given one GPU idle at 100 W over three hours: 360 kJ in each hour's ledger row
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    for h in range(3):
        EnergyLedgerEntry.objects.create(
            gpu=gpu, hour=T0 + timedelta(hours=h), energy_j=360_000.0, co2_g=10.0,
            ci_g_per_kwh=100.0, zone="ES",
        )  # fmt: skip
    admin = api_client(admin_user)

    def total(after, before, path="/api/telemetry/ledger/totals/"):
        params = {"hour_after": after.isoformat(), "hour_before": before.isoformat()}
        return admin.get(path, params).json()["energy_j"]

    # when the first hour and the next two are asked for as two adjacent ranges
    first = total(T0, T0 + timedelta(hours=1))
    rest = total(T0 + timedelta(hours=1), T0 + timedelta(hours=3))
    # then each hour is in one of them ("before" is exclusive: the row of the hour starting
    # at 04:00 was drawn after 04:00), and they add up to the whole
    assert (first, rest) == (360_000.0, 720_000.0)
    assert first + rest == total(T0, T0 + timedelta(hours=3)) == 1_080_000.0
    # and the minute rollups' range is half-open alike: 03:00 and 03:01, not 03:02
    for m in range(3):
        GpuMinute.objects.create(
            gpu=gpu, minute=T0 + timedelta(minutes=m), samples=60, power_avg_w=100.0,
            power_max_w=100.0, util_avg_pct=None, energy_j=6000.0,
        )  # fmt: skip
    minutes = admin.get(
        "/api/telemetry/gpu-minutes/",
        {"minute_after": T0.isoformat(), "minute_before": (T0 + timedelta(minutes=2)).isoformat()},
    ).json()["results"]
    assert [r["minute"] for r in minutes] == ["2026-11-22T03:00:00Z", "2026-11-22T03:01:00Z"]


def test_an_admin_can_leave_the_idle_rows_out_of_the_totals(ledger, api_client, personas):
    # (an admin's totals always counted the idle GPUs' rows, which the reports page leaves
    # out, and no filter could tell the two apart)
    admin = api_client(personas["admin"])
    everything = admin.get("/api/telemetry/ledger/totals/").json()["energy_j"]
    jobs = admin.get("/api/telemetry/ledger/totals/", {"idle": "false"}).json()["energy_j"]
    idle = admin.get("/api/telemetry/ledger/totals/", {"idle": "true"}).json()["energy_j"]
    assert (everything, jobs, idle) == (12.6e6, 10.8e6, 1.8e6)
    assert _energies(admin.get("/api/telemetry/ledger/", {"idle": "true"})) == [1.8e6]
    # a member has no idle rows to see
    member = api_client(personas["member"])
    assert member.get("/api/telemetry/ledger/totals/", {"idle": "true"}).json()["energy_j"] == 0
    bad = admin.get("/api/telemetry/ledger/totals/", {"idle": "maybe"})
    assert bad.status_code == 400 and "idle" in bad.json()
