"""One core: for the same cluster state, the live round (rows -> adapter -> plan_round) and
the simulator (its own snapshot of its own records) produce the same snapshot and the same plan.

The state is written as rows (nodes, a running job, a paused job with history, queued
jobs, stored carbon intensity for the day ahead, two teams' budgets with ledger spend) and,
independently, as the simulator's job records and budget specs. The simulator's clock is
anchored at the Unix epoch (``ConstantIntensity`` starting 1970-01-01), so both sides use
Unix seconds and ``epoch_s`` is 0 on both.
"""

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from cluster import services as cluster_services
from cluster.choices import HardLimitAction, JobState
from cluster.models import Budget, Gpu, Job, Node
from scheduling import adapters, services
from scheduling.core.goodput import with_noise_scales
from scheduling.core.perf_models import load_catalog
from scheduling.core.registry import policy_names
from scheduling.core.types import Allocation
from scheduling.core.types import Job as CoreJob
from scheduling.models import SchedulerSettings
from scheduling.simulator.carbon import ConstantIntensity
from scheduling.simulator.cluster_spec import ClusterSpec
from scheduling.simulator.engine import BudgetSpec, SimConfig, Simulator
from scheduling.simulator.scenario import core_planner
from telemetry.choices import CarbonSource
from telemetry.models import CarbonIntensity, EnergyLedgerEntry

NOW = datetime(2026, 11, 22, 4, 30, 0, tzinfo=UTC)
CI_G_PER_KWH = 187.0
ROUND_S = 60.0
SPEC = ClusterSpec(name="two", gpu_model="A100", switches=1, nodes_per_switch=2, gpus_per_node=8)


@pytest.fixture
def cluster_rows(db, settings):
    """The simulator's cluster as rows: nodes n0, n1 on switch sw0, GPU UUIDs "n0/0"...

    The simulator here knows the catalog (oracle), where no job explores; the live round's
    exploration is turned off to match (tests/scheduling/test_exploration_live.py covers it).
    """
    settings.WATTFLOW_EXPLORATION_BUDGET = 0.0
    for node_spec in SPEC.build().nodes:
        node = Node.objects.create(
            name=node_spec.name, switch_label=node_spec.switch, gpu_model="A100",
            last_heartbeat_at=NOW - timedelta(seconds=5),
        )  # fmt: skip
        for g in node_spec.gpus:
            Gpu.objects.create(
                node=node, index=g.index, uuid=g.gpu_id, model="A100", memory_mb=40960,
                default_power_limit_w=400, min_power_limit_w=100, max_power_limit_w=400,
            )  # fmt: skip
    hour = NOW.replace(minute=0)
    for k in range(24):
        CarbonIntensity.objects.create(
            zone="ES", hour=hour + timedelta(hours=k), ci_g_per_kwh=CI_G_PER_KWH,
            source=CarbonSource.IMPORTED,
        )  # fmt: skip


# (name, workload, submitted minutes before NOW, min, max GPUs, batch, min..max batch, iters)
JOBS = [
    ("running", "resnet50", 30, 4, 4, 256, 256, 256, 20000),
    ("paused", "bert", 25, 1, 2, 64, 32, 128, 5000),
    ("queued-a", "vgg16", 10, 2, 8, 256, 128, 512, 8000),
    ("queued-b", "gpt2", 5, 8, 8, 128, 128, 128, 3000),
    ("queued-c", "resnet50", 2, 1, 1, 128, 128, 128, 1000),
]


def _rows(make_job, member, team) -> dict[str, Job]:
    jobs = {}
    for name, workload, ago_min, lo, hi, batch, bmin, bmax, iters in JOBS:
        jobs[name] = make_job(
            owner=member, team=team, name=name, workload=workload,
            at=NOW - timedelta(minutes=ago_min), min_gpus=lo, max_gpus=hi,
            global_batch_size=batch, min_batch_size=bmin, max_batch_size=bmax,
            total_iterations=iters,
        )  # fmt: skip
    gpus = {g.uuid: g for g in Gpu.objects.all()}
    # The paused job ran on 2 GPUs from 20 to 15 minutes ago, did 700 iterations.
    paused = jobs["paused"]
    cluster_services.start_job(
        paused, gpus=[gpus["n1/0"], gpus["n1/1"]], batch_size=64, at=NOW - timedelta(minutes=20)
    )
    cluster_services.transition_job(paused, to=JobState.PAUSED, at=NOW - timedelta(minutes=15))
    Job.objects.filter(pk=paused.pk).update(completed_iterations=700.0)
    # The running job started 10 minutes ago on n0/0..3, resized to n0/0..3 + clock change
    # 4 minutes ago (a retune, not a change of GPUs), and did 1500 iterations.
    running = jobs["running"]
    four = [gpus[f"n0/{i}"] for i in range(4)]
    cluster_services.start_job(running, gpus=four, batch_size=256, at=NOW - timedelta(minutes=10))
    cluster_services.set_allocation(
        running, gpus=four, batch_size=256, sm_clock_mhz=1200, at=NOW - timedelta(minutes=4)
    )
    Job.objects.filter(pk=running.pk).update(completed_iterations=1500.0)
    return {name: Job.objects.get(pk=j.pk) for name, j in jobs.items()}


PERIOD_START = NOW - timedelta(days=3)
PERIOD_END = NOW + timedelta(days=4)
VISION_KWH, VISION_USED_J, VISION_USED_G = 40.0, 9.0e7, 4500.0
LANGUAGE_KG = 12.0


def _budget_rows(team, other_team) -> dict[str, Budget]:
    """Vision: 40 kWh this week, 25 kWh of it (and 4.5 kg) spent; language: 12 kg."""
    vision = Budget.objects.create(
        team=team, period_start=PERIOD_START, period_end=PERIOD_END,
        energy_limit_kwh=VISION_KWH, hard_limit_action=HardLimitAction.HOLD_QUEUE,
    )  # fmt: skip
    language = Budget.objects.create(
        team=other_team, period_start=PERIOD_START, period_end=PERIOD_END,
        carbon_limit_kg=LANGUAGE_KG, hard_limit_action=HardLimitAction.NOTIFY_ONLY,
    )  # fmt: skip
    EnergyLedgerEntry.objects.create(
        gpu=Gpu.objects.get(uuid="n1/0"), hour=NOW.replace(minute=0) - timedelta(hours=5),
        team=team, energy_j=VISION_USED_J, co2_g=VISION_USED_G, ci_g_per_kwh=180.0, zone="ES",
    )  # fmt: skip
    return {"vision": vision, "language": language}


def _budget_specs(budgets: dict[str, Budget]) -> tuple[BudgetSpec, ...]:
    """The same budgets as the simulator takes them."""
    start, end = PERIOD_START.timestamp(), PERIOD_END.timestamp()
    return (
        BudgetSpec(
            period_end_s=end, period_start_s=start, team="language",
            budget_id=str(budgets["language"].pk), co2_limit_g=LANGUAGE_KG * 1000.0,
            hard_limit_action="notify_only",
        ),
        BudgetSpec(
            period_end_s=end, period_start_s=start, team="vision",
            budget_id=str(budgets["vision"].pk), energy_limit_j=VISION_KWH * 3.6e6,
            energy_used_j=VISION_USED_J, co2_used_g=VISION_USED_G, hard_limit_action="hold_queue",
        ),
    )  # fmt: skip


def _simulator(
    rows: dict[str, Job], policy: str, budgets: tuple[BudgetSpec, ...] = ()
) -> tuple[Simulator, dict]:
    specs = []
    for name, workload, ago_min, lo, hi, batch, bmin, bmax, iters in JOBS:
        specs.append(
            CoreJob(
                job_id=str(rows[name].pk),
                workload=workload,
                team="vision",
                submit_time_s=(NOW - timedelta(minutes=ago_min)).timestamp(),
                total_iters=float(iters),
                global_batch=batch,
                requested_gpus=hi,
                min_gpus=lo,
                max_gpus=hi,
                min_batch=bmin,
                max_batch=bmax,
            )  # fmt: skip
        )
    sim = Simulator(
        # The workloads' learned efficiency curves, as load_scenario and the adapter give them
        with_noise_scales(specs),
        cluster=SPEC.build(),
        catalog=load_catalog(),
        planner=core_planner(policy),
        config=SimConfig(round_length_s=ROUND_S),
        intensity=ConstantIntensity(CI_G_PER_KWH, start=datetime(1970, 1, 1, tzinfo=UTC)),
        budgets=budgets,
    )
    records = {rec.spec.job_id: rec for rec in sim._records}
    now_s = NOW.timestamp()
    running = records[str(rows["running"].pk)]
    running.done_iters = 1500.0
    running.allocation = Allocation(
        gpu_ids=("n0/0", "n0/1", "n0/2", "n0/3"), global_batch=256, sm_clock_mhz=1200
    )
    running.started_s = running.last_change_s = now_s - 600
    running.attained_gpu_s = 4 * 600.0
    paused = records[str(rows["paused"].pk)]
    paused.done_iters = 700.0
    paused.last_change_s = now_s - 900
    paused.attained_gpu_s = 2 * 300.0
    return sim, records


@pytest.mark.parametrize("policy", policy_names())
def test_live_round_and_simulator_plan_the_same_for_the_same_state(
    policy, cluster_rows, make_job, member, team, other_team
):
    # given the same state as rows and as simulator records, with two teams' budgets
    rows = _rows(make_job, member, team)
    sim, records = _simulator(rows, policy, _budget_specs(_budget_rows(team, other_team)))
    config = SchedulerSettings.load()
    config.policy, config.round_interval_s = policy, int(ROUND_S)
    config.save()

    # when the adapter builds its snapshot and the simulator builds its own
    live = adapters.build_snapshot(now=NOW, round_length_s=ROUND_S).snapshot
    simulated = sim._snapshot(records, NOW.timestamp())
    # (the one intended difference: in an oracle simulation the catalog is what advances
    # the jobs; live it is an estimate, on which budgets keep ``prediction_margin``)
    assert (live.exact_perf, simulated.exact_perf) == (False, True)
    simulated = dataclasses.replace(simulated, exact_perf=False)

    # then the snapshots agree field by field (the catalog is the same shipped one)
    assert live.cluster == simulated.cluster
    assert sorted(live.jobs, key=lambda j: j.job_id) == sorted(
        simulated.jobs, key=lambda j: j.job_id
    )
    assert (live.budgets, live.carbon, live.epoch_s) == (
        simulated.budgets,
        simulated.carbon,
        simulated.epoch_s,
    )
    assert [(b.team, b.energy_used_j, b.hard_limit_action) for b in live.budgets] == [
        ("language", 0.0, "notify_only"),
        ("vision", VISION_USED_J, "hold_queue"),
    ]
    assert (live.round_length_s, live.power_off_idle_nodes) == (
        simulated.round_length_s,
        simulated.power_off_idle_nodes,
    )

    # and the live round (lock, snapshot, plan, apply) plans exactly what the simulator does
    result = services.run_scheduling_round(now=NOW, force=True)
    sim_plan = sim.planner(simulated, NOW.timestamp())
    assert result.ran
    assert result.plan == sim_plan


@pytest.mark.parametrize("policy", policy_names())
def test_live_round_applies_exactly_the_plan(policy, cluster_rows, make_job, member, team):
    # given the same state, planned by the live round
    rows = _rows(make_job, member, team)
    sim, records = _simulator(rows, policy)
    config = SchedulerSettings.load()
    config.policy, config.round_interval_s = policy, int(ROUND_S)
    config.save()
    result = services.run_scheduling_round(now=NOW, force=True)
    sim_plan = sim.planner(sim._snapshot(records, NOW.timestamp()), NOW.timestamp())

    # then every change was applied and the rows are the simulator's plan
    assert result.failed == 0
    for job_id, alloc in sim_plan.allocations.items():
        job = Job.objects.select_related("current_allocation").get(pk=int(job_id))
        assert job.state == JobState.RUNNING
        assert sorted(g.uuid for g in job.current_allocation.gpus.all()) == sorted(alloc.gpu_ids)
        assert job.current_allocation.batch_size == alloc.global_batch
    for job_id in sim_plan.waiting:
        assert Job.objects.get(pk=int(job_id)).state in (JobState.QUEUED, JobState.PAUSED)
