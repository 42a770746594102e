"""Energy-counter steps are checked against power x time: an implausible step is refused
(charged its integrated power instead, kept for audit), counter resets and gaps behave as
before, and a genuine counter is never refused."""

from datetime import timedelta

import pytest
from agent_samples import series
from telemetry_clock import T0

from cluster import services as cluster_services
from cluster.models import Budget, Gpu
from telemetry.accounting import delete_expired_samples, process_dirty_hours
from telemetry.energy import Holder, Point, attribute, plausible_step_j
from telemetry.models import EnergyLedgerEntry, GpuSample, RefusedEnergyStep
from telemetry.usage import budget_usage

MAX_W = 400.0  # the test GPUs' largest power limit


def _attribute(points, holders=(), *, max_power_w=MAX_W, tolerance=0.5, max_gap_s=60.0):
    return attribute(
        points, list(holders), window_start_s=0.0, window_end_s=3600.0, max_gap_s=max_gap_s,
        max_power_w=max_power_w, tolerance=tolerance,
    )  # fmt: skip


def _counter(readings, *, power_w=300.0, step_s=1.0):
    return [Point(i * step_s, power_w, e) for i, e in enumerate(readings)]


def test_the_plausible_step_is_max_power_with_tolerance_over_the_interval_plus_a_second():
    assert plausible_step_j(400.0, 1.0, 0.5) == pytest.approx(400.0 * 1.5 * 2.0)
    assert plausible_step_j(400.0, 10.0, 0.0) == pytest.approx(4400.0)


def test_a_genuine_counter_at_full_power_is_never_refused():
    # a GPU drawing 10 % above its limit (transients), sampled every second for an hour
    points = _counter([i * 440.0 for i in range(3601)], power_w=440.0)
    result = _attribute(points)
    assert result.refused == []
    assert result.by_job_j == {None: pytest.approx(3600 * 440.0)}


def test_a_single_spiked_reading_is_refused_and_charged_its_integrated_power():
    # given a counter at 300 J/s with one reading 1e12 J too high
    readings = [0.0, 300.0, 600.0 + 1e12, 900.0, 1200.0]
    result = _attribute(_counter(readings, power_w=300.0))
    # then the jump up is refused, the fall back is a reset; both intervals integrate 300 W
    [refused] = result.refused
    assert (refused.prev_t_s, refused.t_s, refused.step_j) == (1.0, 2.0, pytest.approx(300 + 1e12))
    assert refused.charged_j == pytest.approx(300.0)
    assert result.resets == 1
    assert result.by_job_j == {None: pytest.approx(4 * 300.0)}


def test_a_counter_that_stays_at_the_jumped_level_is_believed_again_after_the_jump():
    readings = [0.0, 300.0, 1e12, 1e12 + 300.0, 1e12 + 600.0]
    result = _attribute(_counter(readings, power_w=300.0))
    assert [r.t_s for r in result.refused] == [2.0]
    assert result.resets == 0
    assert result.by_job_j == {None: pytest.approx(300.0 + 300.0 + 300.0 + 300.0)}


def test_a_step_just_under_the_bound_is_believed_and_just_over_is_refused():
    bound = plausible_step_j(MAX_W, 1.0, 0.5)
    believed = _attribute(_counter([0.0, bound], power_w=100.0))
    assert (believed.refused, believed.by_job_j[None]) == ([], pytest.approx(bound))
    refused = _attribute(_counter([0.0, bound + 1.0], power_w=100.0))
    assert len(refused.refused) == 1
    assert refused.by_job_j[None] == pytest.approx(100.0)


def test_a_reported_power_above_the_limit_raises_the_bound():
    # power readings of 1000 W (a GPU registered with a low limit) allow 1000 W steps
    result = _attribute(_counter([0.0, 1000.0, 2000.0], power_w=1000.0), max_power_w=300.0)
    assert result.refused == []


def test_a_counter_reset_is_not_a_refused_step():
    result = _attribute(_counter([5000.0, 5300.0, 20.0, 320.0], power_w=300.0))
    assert (result.refused, result.resets) == ([], 1)
    assert result.by_job_j == {None: pytest.approx(900.0)}


def test_a_jump_across_a_gap_is_refused_and_the_gap_stays_unattributed():
    # 120 s without samples (the agent was down), the counter claims 1e9 J meanwhile
    points = [Point(0.0, 300.0, 0.0), Point(120.0, 300.0, 1e9), Point(121.0, 300.0, 1e9 + 300)]
    result = _attribute(points)
    assert [r.t_s for r in result.refused] == [120.0]
    assert result.gap_j == pytest.approx(120 * 300.0)  # integrated, not the claimed 1e9
    assert result.by_job_j == {None: pytest.approx(300.0)}


def test_a_long_interval_allows_a_proportionally_larger_step():
    # 30 s between samples at 400 W: 12,000 J is plausible
    result = _attribute(_counter([0.0, 12000.0], power_w=400.0, step_s=30.0))
    assert result.refused == []


def test_the_refused_energy_goes_to_no_holder():
    holder = Holder(job_id=7, start_s=0.0)
    result = _attribute(_counter([0.0, 300.0, 1e12], power_w=300.0), [holder])
    assert result.by_job_j == {7: pytest.approx(600.0)}


def test_without_a_max_power_nothing_is_checked():
    result = attribute(
        _counter([0.0, 1e12]), [], window_start_s=0.0, window_end_s=3600.0, max_gap_s=60.0
    )
    assert result.refused == []


# --- through the API, ingestion and accounting --------------------------------------------


@pytest.fixture
def budget_job(agent_node, make_job, member, team):
    node, _ = agent_node
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    job = make_job(owner=member, team=team)
    cluster_services.start_job(job, gpus=[gpu], batch_size=256, at=T0 - timedelta(minutes=1))
    budget = Budget.objects.create(
        team=team, period_start=T0 - timedelta(days=1), period_end=T0 + timedelta(days=1),
        energy_limit_kwh=2303.0,
    )  # fmt: skip
    return gpu, job, budget


def _post_series(agent_client, token, gpu, spike_at=None):
    samples = series(gpu.uuid, T0, 11, power_w=300.0)
    for i, s in enumerate(samples):
        s["energy_j"] = 1e6 + 300.0 * i + (1e12 if spike_at is not None and i >= spike_at else 0)
    return agent_client(token).post("/api/agent/samples/", {"samples": samples}, format="json")


@pytest.mark.parametrize("spike_at", [5, 10])
def test_a_1e12_joule_jump_books_nothing_and_leaves_the_budget_as_it_was(
    settings, agent_node, agent_client, budget_job, spike_at
):
    # the samples' T0 is in the past; keep them inside the retention window
    settings.TELEMETRY_RETENTION_S = 10 * 365 * 24 * 3600
    gpu, job, budget = budget_job
    # when a batch whose counter jumps by 1e12 J (within the accepted range) is posted
    response = _post_series(agent_client, agent_node[1], gpu, spike_at=spike_at)
    assert response.status_code == 200 and response.json()["inserted"] == 11
    process_dirty_hours()
    # then the team is charged its 10 s at 300 W and not a joule of the jump
    used = budget_usage(budget)
    assert used.energy_j == pytest.approx(3000.0)
    assert sum(EnergyLedgerEntry.objects.values_list("energy_j", flat=True)) == pytest.approx(
        3000.0
    )
    # and the refused reading is on record, once, however often the hour is accounted
    [step] = RefusedEnergyStep.objects.filter(gpu=gpu)
    assert step.ts == T0 + timedelta(seconds=spike_at)
    assert step.step_j == pytest.approx(1e12 + 300.0)
    assert step.charged_j == pytest.approx(300.0)
    _post_series(agent_client, agent_node[1], gpu, spike_at=spike_at)  # a replayed batch
    process_dirty_hours()
    assert RefusedEnergyStep.objects.count() == 1
    assert budget_usage(budget).energy_j == pytest.approx(3000.0)


def test_the_same_batch_without_the_jump_costs_the_same(
    settings, agent_node, agent_client, budget_job
):
    settings.TELEMETRY_RETENTION_S = 10 * 365 * 24 * 3600
    gpu, job, budget = budget_job
    assert _post_series(agent_client, agent_node[1], gpu).status_code == 200
    process_dirty_hours()
    assert budget_usage(budget).energy_j == pytest.approx(3000.0)
    assert not RefusedEnergyStep.objects.exists()


def test_retention_keeps_a_flagged_sample(settings, agent_node, agent_client, budget_job):
    settings.TELEMETRY_RETENTION_S = 10 * 365 * 24 * 3600
    gpu, _, _ = budget_job
    _post_series(agent_client, agent_node[1], gpu, spike_at=5)
    process_dirty_hours()
    settings.TELEMETRY_RETENTION_S = 3600
    delete_expired_samples(now=T0 + timedelta(days=1))
    assert list(GpuSample.objects.values_list("ts", flat=True)) == [T0 + timedelta(seconds=5)]


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("TELEMETRY_MAX_CLOCK_SKEW_S", -1.0),
        ("TELEMETRY_COUNTER_TOLERANCE", float("nan")),
        # passed the warning's "<= 0", then every accounting raised in timedelta() (a probe)
        ("TELEMETRY_MAX_GAP_S", float("nan")),
        ("TELEMETRY_MAX_GAP_S", float("inf")),
    ],
)
def test_a_negative_or_nan_bound_is_a_system_check_error(settings, setting, value):
    from telemetry.checks import check_telemetry_settings

    assert "telemetry.E003" not in {p.id for p in check_telemetry_settings(None)}
    setattr(settings, setting, value)
    assert "telemetry.E003" in {p.id for p in check_telemetry_settings(None)}


def test_the_read_slack_does_not_grow_with_the_number_of_samples():
    # 20,000 samples 1 ms apart, each step claiming 899 J on a 400 W GPU: the slack (1 s
    # of full power) was allowed on every step, and 18 MJ were charged for 20 s (a probe)
    n = 20_000
    points = [Point(i * 0.001, 600.0, i * 899.0) for i in range(n)]
    result = _attribute(points, max_power_w=400.0)
    full_w = 600.0 * 1.5
    assert result.by_job_j[None] <= full_w * (n * 0.001 + 1.0)
    assert len(result.refused) > n // 2


def test_a_late_reading_spends_the_slack_and_the_next_early_one_earns_it_back():
    # at 450 W (675 W with the tolerance), readings jittered: steps of 880 J then 20 J
    # around the true 450 J, over and over: each late one spends 205 J of the 675 J slack
    # and the next earns it back, so all are believed however long it runs
    readings = []
    energy = 0.0
    for i in range(200):
        readings.append(energy)
        energy += 880.0 if i % 2 == 0 else 20.0
    result = _attribute(_counter(readings, power_w=450.0))
    assert result.refused == []
    # late readings in a row overdraw it (205 J each): the fourth is refused
    late = _attribute(_counter([0.0, 880.0, 1760.0, 2640.0, 3520.0], power_w=450.0))
    assert [r.t_s for r in late.refused] == [4.0]


@pytest.mark.parametrize("pattern", ["resets", "missing"])
def test_resets_or_missing_readings_do_not_refill_the_slack(pattern):
    # the same forged 899 J steps 1 ms apart, with the counter falling back to 0 between
    # them (a "reset") or every third reading missing: each non-counter step refilled the
    # whole slack, and half or two thirds of the forged steps were believed (a review)
    n = 20_000
    points = []
    for i in range(n):
        if pattern == "resets":
            energy = 0.0 if i % 2 == 0 else 899.0
        else:
            energy = None if i % 3 == 2 else i * 899.0
        points.append(Point(i * 0.001, 600.0, energy))
    result = _attribute(points, max_power_w=400.0)
    assert result.by_job_j[None] <= 600.0 * 1.5 * (n * 0.001 + 2.0)


@pytest.mark.django_db
def test_a_gap_longer_than_a_year_is_a_system_check_error(settings):
    # finite, it passed E003, and the expiry's cutoff (now less the retention, an hour and
    # the gap) fell before year 1: every run of it raised OverflowError, no sample expired
    from telemetry.checks import check_telemetry_settings

    settings.TELEMETRY_MAX_GAP_S = 365 * 86400.0
    assert "telemetry.E003" not in {p.id for p in check_telemetry_settings(None)}
    delete_expired_samples(now=T0)  # a year's gap is room enough, and works

    settings.TELEMETRY_MAX_GAP_S = 1e11
    with pytest.raises(OverflowError):
        delete_expired_samples(now=T0)
    assert "telemetry.E003" in {p.id for p in check_telemetry_settings(None)}
