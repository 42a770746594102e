"""Accounting through the real path: ingest -> dirty hours -> rollups and ledger rows."""

from datetime import timedelta

import pytest
from agent_samples import series
from telemetry_clock import T0

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Budget, Gpu
from scheduling.core.types import J_PER_KWH
from telemetry.accounting import (
    delete_expired_samples,
    job_totals,
    process_dirty_hours,
    team_totals,
)
from telemetry.carbon import static_mean_g_per_kwh
from telemetry.choices import CarbonSource
from telemetry.ingest import ingest_batch
from telemetry.models import CarbonIntensity, DirtyHour, EnergyLedgerEntry, GpuHour, GpuMinute
from telemetry.usage import budget_usage

HOUR = T0.replace(minute=0)
NOW = T0 + timedelta(minutes=5)


@pytest.fixture
def gpu0(agent_node) -> Gpu:
    return Gpu.objects.get(uuid="GPU-node-01-0")


@pytest.fixture
def clean_hour(db):
    return CarbonIntensity.objects.create(
        zone="ES", hour=HOUR, ci_g_per_kwh=200.0, source=CarbonSource.IMPORTED
    )


def _ledger(gpu):
    return {
        e.job_id: (pytest.approx(e.energy_j), pytest.approx(e.co2_g), e.ci_estimated)
        for e in EnergyLedgerEntry.objects.filter(gpu=gpu)
    }


def test_job_switch_in_the_middle_of_a_batch_splits_energy_at_the_switch(
    agent_node, gpu0, make_job, member, team, clean_hour
):
    # given job A on GPU 0 from T0, replaced by job B at T0 + 30 s
    node, _ = agent_node
    job_a = make_job(owner=member, team=team, name="a")
    job_b = make_job(owner=member, team=team, name="b")
    cluster_services.start_job(job_a, gpus=[gpu0], batch_size=256, at=T0)
    cluster_services.transition_job(job_a, to=JobState.PAUSED, at=T0 + timedelta(seconds=30))
    cluster_services.start_job(job_b, gpus=[gpu0], batch_size=256, at=T0 + timedelta(seconds=30))
    # when one batch covering both jobs (61 samples at 200 W, no counter) is ingested
    ingest_batch(node, {"samples": series(gpu0.uuid, T0, 61, power_w=200.0)}, now=NOW)
    # (T0 is on the hour, so the previous hour, whose edge interval it bounds, is marked too)
    assert process_dirty_hours() == 2
    # then each job gets exactly its 30 s at 200 W, priced at the hour's 200 g/kWh
    co2_g = 6000.0 / J_PER_KWH * 200.0
    assert _ledger(gpu0) == {job_a.pk: (6000.0, co2_g, False), job_b.pk: (6000.0, co2_g, False)}
    assert job_totals(job_a).energy_j == pytest.approx(6000.0)
    team_total = team_totals(team, HOUR, HOUR + timedelta(hours=1))
    assert team_total.energy_j == pytest.approx(12000.0)
    assert team_total.co2_g == pytest.approx(2 * co2_g)
    assert not DirtyHour.objects.exists()


def test_energy_counter_reset_is_bridged_by_integrated_power(agent_node, gpu0, clean_hour):
    node, _ = agent_node
    # counter climbs 100 J/s, then the driver reloads and it restarts near zero
    counters = [5000.0, 5100.0, 5200.0, 30.0, 130.0, 230.0]
    samples = series(gpu0.uuid, T0, 6, power_w=100.0)
    for s, counter in zip(samples, counters, strict=True):
        s["energy_j"] = counter
    ingest_batch(node, {"samples": samples}, now=NOW)
    process_dirty_hours()
    # 4 counter intervals of 100 J + the reset interval integrated: (100 + 100) / 2 x 1 s
    assert _ledger(gpu0) == {None: (500.0, 500.0 / J_PER_KWH * 200.0, False)}
    hour = GpuHour.objects.get(gpu=gpu0, hour=HOUR)
    assert (hour.samples, hour.energy_j, hour.power_avg_w) == (6, pytest.approx(500.0), 100.0)


def test_a_duplicate_batch_is_accounted_once(agent_node, gpu0, clean_hour):
    node, _ = agent_node
    batch = {"samples": series(gpu0.uuid, T0, 11, power_w=300.0)}
    ingest_batch(node, batch, now=NOW)
    process_dirty_hours()
    ingest_batch(node, batch, now=NOW)  # the agent replays it (a lost acknowledgement)
    process_dirty_hours()
    assert _ledger(gpu0) == {None: (3000.0, 3000.0 / J_PER_KWH * 200.0, False)}


def test_a_late_batch_gives_the_same_totals_as_an_on_time_one(agent_node, gpu0, clean_hour):
    node, _ = agent_node
    everything = series(gpu0.uuid, T0, 121, power_w=150.0)
    ingest_batch(node, {"samples": everything[60:]}, now=NOW)
    process_dirty_hours()
    assert _ledger(gpu0)[None][0] == pytest.approx(60 * 150.0)
    ingest_batch(node, {"samples": everything[:61]}, now=NOW)  # replayed from the spool
    process_dirty_hours()
    assert _ledger(gpu0)[None][0] == pytest.approx(120 * 150.0)
    minutes = GpuMinute.objects.filter(gpu=gpu0).order_by("minute")
    assert [(m.minute, m.samples, m.energy_j) for m in minutes] == [
        (T0, 60, pytest.approx(9000.0)),
        (T0 + timedelta(minutes=1), 60, pytest.approx(9000.0)),
        (T0 + timedelta(minutes=2), 1, pytest.approx(0.0)),
    ]


def test_without_an_intensity_for_the_hour_carbon_uses_the_static_mean_marked_estimated(
    agent_node, gpu0
):
    node, _ = agent_node
    ingest_batch(node, {"samples": series(gpu0.uuid, T0, 11, power_w=360.0)}, now=NOW)
    process_dirty_hours()
    mean = static_mean_g_per_kwh("ES")
    entry = EnergyLedgerEntry.objects.get(gpu=gpu0)
    assert (entry.ci_g_per_kwh, entry.ci_estimated) == (mean, True)
    assert entry.co2_g == pytest.approx(3600.0 / J_PER_KWH * mean)


def test_budget_usage_sums_the_teams_ledger_in_its_period(
    agent_node, gpu0, make_job, member, team, clean_hour
):
    node, _ = agent_node
    job = make_job(owner=member, team=team)
    cluster_services.start_job(job, gpus=[gpu0], batch_size=256, at=T0 - timedelta(minutes=1))
    ingest_batch(node, {"samples": series(gpu0.uuid, T0, 37, power_w=100.0)}, now=NOW)
    process_dirty_hours()
    budget = Budget.objects.create(
        team=team, period_start=HOUR, period_end=HOUR + timedelta(days=1), energy_limit_kwh=1.0
    )
    used = budget_usage(budget)
    assert (used.energy_j, used.estimated) == (pytest.approx(3600.0), False)
    assert used.energy_kwh == pytest.approx(0.001)
    later = Budget.objects.create(
        team=team,
        period_start=HOUR + timedelta(days=1),
        period_end=HOUR + timedelta(days=2),
        energy_limit_kwh=1.0,
    )
    assert budget_usage(later).energy_j == 0.0


def test_a_period_that_starts_or_ends_inside_an_hour_counts_its_own_minutes(
    agent_node, gpu0, make_job, member, team, clean_hour
):
    # given the team's job drawing 100 W on GPU 0 for 40 minutes from T0, accounted
    node, _ = agent_node
    job = make_job(owner=member, team=team)
    cluster_services.start_job(job, gpus=[gpu0], batch_size=256, at=T0 - timedelta(minutes=1))
    done = T0 + timedelta(minutes=41)
    ingest_batch(node, {"samples": series(gpu0.uuid, T0, 2401, power_w=100.0)}, now=done)
    process_dirty_hours()
    assert EnergyLedgerEntry.objects.get(gpu=gpu0, job=job).energy_j == pytest.approx(240e3)

    def used(start_min, end_min):
        start, end = T0 + timedelta(minutes=start_min), T0 + timedelta(minutes=end_min)
        budget = Budget(team=team, period_start=start, period_end=end, energy_limit_kwh=1.0)
        return budget_usage(budget)

    # then a period of 15 to 25 minutes counts those 10 minutes (60 kJ), not the hour
    # (a period ending inside the hour counted all of it, 240 kJ)
    assert used(15, 25).energy_j == pytest.approx(60e3)
    assert used(15, 25).co2_g == pytest.approx(60e3 / J_PER_KWH * 200.0)
    # one that starts inside the hour counts its part of it (it counted none)
    assert used(30, 24 * 60).energy_j == pytest.approx(60e3)
    # two periods back to back count each minute once
    assert used(0, 17).energy_j + used(17, 60).energy_j == pytest.approx(240e3)
    assert [round(e) for _, e, _ in used(30, 24 * 60).hourly] == [60_000]
    # a period starting or ending inside a minute pays the seconds of it it holds: from
    # 10 min 15 s to 20 min 30 s, 10 min 15 s at 100 W (its first 45 s were counted nowhere)
    assert used(10.25, 20.5).energy_j == pytest.approx(61.5e3)
    # and periods meeting inside a minute split it between them
    assert used(0, 17.5).energy_j + used(17.5, 60).energy_j == pytest.approx(240e3)


def test_a_ledger_row_without_minutes_counts_whole_where_its_hour_starts_in_the_period(gpu0, team):
    EnergyLedgerEntry.objects.create(gpu=gpu0, hour=HOUR, team=team, energy_j=5e3, co2_g=1.0,
                                     ci_g_per_kwh=720.0, zone="ES")  # fmt: skip
    inside = Budget(team=team, period_start=HOUR, period_end=HOUR + timedelta(minutes=20),
                    energy_limit_kwh=1.0)  # fmt: skip
    after = Budget(team=team, period_start=HOUR + timedelta(minutes=20),
                   period_end=HOUR + timedelta(hours=2), energy_limit_kwh=1.0)  # fmt: skip
    assert (budget_usage(inside).energy_j, budget_usage(after).energy_j) == (5e3, 0.0)


def test_retention_deletes_old_samples_but_not_unaccounted_ones(agent_node, gpu0, settings):
    settings.TELEMETRY_RETENTION_S = 2 * 3600
    node, _ = agent_node
    ingest_batch(node, {"samples": series(gpu0.uuid, T0, 5)}, now=NOW)
    # not yet accounted: kept even past the window
    assert delete_expired_samples(now=T0 + timedelta(hours=5)) == 0
    process_dirty_hours()
    assert delete_expired_samples(now=T0 + timedelta(hours=1)) == 0
    assert delete_expired_samples(now=T0 + timedelta(hours=5)) == 5
    assert GpuHour.objects.filter(gpu=gpu0, hour=HOUR).exists()  # rollups stay


def test_a_late_sample_after_retention_ran_leaves_its_hours_ledger_whole(
    agent_node, gpu0, settings
):
    # given a GPU at 100 W from 03:00 to 04:00:19, accounted (360 kJ in the 03:00 hour)
    settings.TELEMETRY_RETENTION_S = 24 * 3600
    node, _ = agent_node
    samples = series(gpu0.uuid, HOUR, 3620, power_w=100.0)
    ingest_batch(node, {"samples": samples}, now=HOUR + timedelta(hours=2))
    process_dirty_hours()
    booked = EnergyLedgerEntry.objects.get(gpu=gpu0, hour=HOUR).energy_j
    assert booked == pytest.approx(360_000.0)
    # when retention runs a day and 30 minutes later, and then a sample the agent held
    # back arrives, stamped 04:00:40 (inside the window, near its hour's start: it marks
    # the 03:00 hour too)
    later = HOUR + timedelta(days=1, minutes=30)
    delete_expired_samples(now=later)
    late = series(gpu0.uuid, HOUR + timedelta(hours=1, seconds=40), 1, power_w=100.0)
    ingest_batch(node, {"samples": late}, now=later)
    process_dirty_hours()
    # then the 03:00 hour is recomputed from all its samples, not from the half retention
    # left of it (it fell to 180 kJ)
    assert EnergyLedgerEntry.objects.get(gpu=gpu0, hour=HOUR).energy_j == pytest.approx(booked)
