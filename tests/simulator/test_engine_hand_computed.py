"""A tiny scenario worked out by hand that the engine must reproduce exactly.

Cluster: one node ``n0`` with two GPUs. Perf model (written here, analytic): an
iteration takes 2/n seconds on n GPUs; a busy GPU draws 200 W alone and 150 W each when
two work together; an idle powered GPU draws 50 W. Rounds every 1000 s, a checkpoint-
restart costs 50 s. Grid: 100 g/kWh in the first hour, 400 g/kWh after.

The scripted planner (standing in for a policy, so the hand computation does not
depend on a real policy's tie-breaking): jobs in submit order; a job alone gets both
GPUs; otherwise the k-th job gets GPU k and the rest wait.

Jobs: A (submit 0, 1500 iters), B (submit 500, 1200 iters), C (submit 1500, 600 iters).

  t=0     A alone on 2 GPUs (fresh start): 1 it/s, 300 W.           A: 1000 done
  t=1000  A resized to n0/0 (restart to 1050), B starts on n0/1.     A: +475, B: +500
  t=2000  A keeps n0/0, finishes at 2050 (25 iters); B on n0/1; C waits.  B: +500
  t=3000  B moved to n0/0 (restart to 3050), finishes 3450; C starts on n0/1. C: +500
  t=4000  C alone: resized to both GPUs (restart to 4050), 100 iters at 1 it/s: 4150.

JCT: A 2050, B 3450-500 = 2950, C 4150-1500 = 2650. Queueing: A 0, B 500, C 1500.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from scheduling.core.types import (
    J_PER_KWH,
    Allocation,
    GpuConfig,
    HardLimitAction,
    Job,
    Plan,
    Snapshot,
    WaitCode,
    WaitReason,
)
from scheduling.simulator.carbon import HourlyIntensity, HourlyPoint
from scheduling.simulator.cluster_spec import ClusterSpec
from scheduling.simulator.engine import BudgetSpec, SimConfig, SimulationError, Simulator
from scheduling.simulator.metrics import summarise

START = datetime(2022, 6, 1, tzinfo=UTC)


class AnalyticModel:
    workload = "toy"
    gpu_model = "X"
    idle_power_w = 50.0
    clocks_mhz = (1000,)
    batch_sizes = (32,)

    def iter_time_s(self, cfg: GpuConfig) -> float:
        return 2.0 / cfg.n_gpus

    def power_w(self, cfg: GpuConfig) -> float:
        return 200.0 if cfg.n_gpus == 1 else 150.0

    def energy_per_iter_j(self, cfg: GpuConfig) -> float:
        return cfg.n_gpus * self.power_w(cfg) * self.iter_time_s(cfg)


class Catalog:
    def __init__(self) -> None:
        self.model = AnalyticModel()

    def get(self, workload: str, gpu_model: str) -> AnalyticModel:
        if (workload, gpu_model) != ("toy", "X"):
            raise KeyError((workload, gpu_model))
        return self.model

    def workloads(self) -> tuple[str, ...]:
        return ("toy",)


class ScriptedPlanner:
    """The rule in the module docstring; remembers every snapshot it was shown."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, Snapshot]] = []

    def __call__(self, snapshot: Snapshot, now: float) -> Plan:
        self.seen.append((now, snapshot))
        jobs = sorted(snapshot.jobs, key=lambda j: j.submit_time_s)
        if len(jobs) == 1:
            return Plan(allocations={jobs[0].job_id: Allocation(("n0/0", "n0/1"), 32)}, waiting={})
        allocations = {j.job_id: Allocation((f"n0/{k}",), 32) for k, j in enumerate(jobs[:2])}
        waiting = {
            j.job_id: WaitReason(WaitCode.BEHIND_IN_QUEUE, "two jobs ahead") for j in jobs[2:]
        }
        return Plan(allocations=allocations, waiting=waiting)


def toy_job(job_id: str, submit_s: float, iters: float) -> Job:
    return Job(
        job_id=job_id,
        workload="toy",
        team="t",
        submit_time_s=submit_s,
        total_iters=iters,
        global_batch=32,
    )


JOBS = (toy_job("A", 0.0, 1500.0), toy_job("B", 500.0, 1200.0), toy_job("C", 1500.0, 600.0))
INTENSITY = HourlyIntensity(
    [
        HourlyPoint(START, 100.0, False),
        HourlyPoint(datetime(2022, 6, 1, 1, tzinfo=UTC), 400.0, False),
    ],
    start=START,
)
CLUSTER = ClusterSpec(
    name="toy", gpu_model="X", switches=1, nodes_per_switch=1, gpus_per_node=2
).build()

# Cluster power by hand, piece by piece: (t0, t1, watts). Idle pieces are marked.
PIECES = [
    (0, 1000, 300),  # A on two GPUs
    (1000, 1050, 50 + 200),  # A restarting (idle power), B running
    (1050, 2050, 200 + 200),  # A and B
    (2050, 3000, 50 + 200),  # A's freed GPU idle (powered), B
    (3000, 3050, 50 + 200),  # B restarting after its move, C running
    (3050, 3450, 200 + 200),
    (3450, 4000, 50 + 200),  # B's freed GPU idle, C (crosses the hour at 3600)
    (4000, 4050, 2 * 50),  # C restarting on two GPUs
    (4050, 4150, 2 * 150),  # C on two GPUs
]
IDLE_PIECES = [(2050, 3000, 50), (3450, 4000, 50)]


def co2_by_hand(pieces) -> float:
    total = 0.0
    for t0, t1, watts in pieces:
        first = max(min(t1, 3600) - t0, 0)
        second = t1 - t0 - first
        total += watts * (first * 100.0 + second * 400.0) / J_PER_KWH
    return total


def run(**config):
    planner = ScriptedPlanner()
    sim = Simulator(
        JOBS,
        cluster=CLUSTER,
        catalog=Catalog(),
        planner=planner,
        config=SimConfig(round_length_s=1000.0, restart_cost_s=50.0, **config),
        intensity=INTENSITY,
        budget=BudgetSpec(period_end_s=5000.0, energy_limit_j=2.0e6),
    )
    return sim.run(), planner


def test_hand_computed_scenario_reproduces_jcts_energy_and_carbon_exactly():
    # Given the scenario of the module docstring, when it is simulated
    result, _ = run()
    by_id = {r.spec.job_id: r for r in result.jobs}

    # then every completion, JCT and queueing delay is the hand-computed one
    assert {k: r.finish_s for k, r in by_id.items()} == pytest.approx(
        {"A": 2050, "B": 3450, "C": 4150}, abs=1e-9
    )
    assert {k: r.jct_s for k, r in by_id.items()} == pytest.approx(
        {"A": 2050, "B": 2950, "C": 2650}, abs=1e-9
    )
    assert {k: r.queueing_delay_s for k, r in by_id.items()} == {"A": 0.0, "B": 500.0, "C": 1500.0}
    # and the restarts are the resize of A, the move of B and the resize of C
    assert {k: (r.n_starts, r.n_resizes) for k, r in by_id.items()} == {
        "A": (1, 1),
        "B": (1, 1),
        "C": (1, 1),
    }
    # and energy and carbon are the integrals of the piecewise power
    assert result.energy_j == pytest.approx(sum((t1 - t0) * w for t0, t1, w in PIECES), abs=1e-9)
    assert result.energy_j == pytest.approx(1_295_000.0, abs=1e-9)
    assert result.co2_g == pytest.approx(co2_by_hand(PIECES), abs=1e-9)
    assert result.idle_energy_j == pytest.approx(
        sum((t1 - t0) * w for t0, t1, w in IDLE_PIECES), abs=1e-9
    )
    # per job: busy and restart energy only
    assert by_id["A"].energy_j == pytest.approx(300_000 + 50 * 50 + 1000 * 200, abs=1e-9)
    assert by_id["B"].energy_j == pytest.approx(2000 * 200 + 50 * 50 + 400 * 200, abs=1e-9)
    assert by_id["C"].energy_j == pytest.approx(1000 * 200 + 50 * 100 + 100 * 300, abs=1e-9)
    assert by_id["C"].co2_g == pytest.approx(
        co2_by_hand([(3000, 4000, 200), (4000, 4050, 100), (4050, 4150, 300)]), abs=1e-9
    )
    assert result.end_s == 4150.0


def test_hand_computed_summary_metrics():
    result, _ = run()
    summary = summarise(result)
    assert summary["n_jobs"] == 3
    assert summary["n_finished"] == 3
    assert summary["avg_jct_s"] == pytest.approx((2050 + 2950 + 2650) / 3, abs=1e-9)
    assert summary["median_jct_s"] == pytest.approx(2650.0, abs=1e-9)
    assert summary["p99_jct_s"] == pytest.approx(2650 + 0.98 * (2950 - 2650), abs=1e-9)
    assert summary["makespan_s"] == pytest.approx(4150.0, abs=1e-9)
    assert summary["avg_queueing_delay_s"] == pytest.approx(2000 / 3, abs=1e-9)
    assert summary["energy_kwh"] == pytest.approx(1_295_000.0 / J_PER_KWH, abs=1e-12)
    assert summary["co2_kg"] == pytest.approx(co2_by_hand(PIECES) / 1000, abs=1e-12)
    # GPU-seconds held: A 2x1000 + 1x1050, B 2000 + 450, C 1000 + 2x150
    assert summary["gpu_utilisation"] == pytest.approx(6800 / (2 * 4150), abs=1e-12)


def test_idle_nodes_draw_idle_power_unless_powered_off():
    # Given a second, never used node of two GPUs
    two_nodes = ClusterSpec(
        name="toy2", gpu_model="X", switches=1, nodes_per_switch=2, gpus_per_node=2
    ).build()
    energy_by_hand = sum((t1 - t0) * w for t0, t1, w in PIECES)

    def energy(power_off: bool) -> float:
        sim = Simulator(
            JOBS,
            cluster=two_nodes,
            catalog=Catalog(),
            planner=ScriptedPlanner(),
            config=SimConfig(
                round_length_s=1000.0, restart_cost_s=50.0, power_off_idle_nodes=power_off
            ),
            intensity=INTENSITY,
        )
        result = sim.run()
        assert result.end_s == 4150.0
        return result.energy_j

    # then powered, it idles at 2 x 50 W for the whole run; powered off, it draws nothing
    assert energy(False) == pytest.approx(energy_by_hand + 2 * 50.0 * 4150.0, abs=1e-9)
    assert energy(True) == pytest.approx(energy_by_hand, abs=1e-9)


@pytest.mark.parametrize(
    ("noise_scale", "finish_s"),
    [
        # Perfect scaling (the old model): twice the batch, half the iterations.
        (float("inf"), 750.0),
        # Noise scale 32 samples: E(64) = (32 + 32) / (32 + 64) = 2/3, so an iteration
        # at 64 does 64 x 2/3 useful samples: 1500 x 32 / (128 / 3) = 1125 iterations.
        (32.0, 1125.0),
        # Unknown: the worst case, min(64, 32) useful samples: no gain at all.
        (None, 1500.0),
    ],
)
def test_a_larger_batch_does_only_its_useful_samples_of_work(noise_scale, finish_s):
    # Work is useful samples at the submitted batch (1 s per iteration on two GPUs here).
    def big_batch(snapshot: Snapshot, now: float) -> Plan:
        return Plan(allocations={"A": Allocation(("n0/0", "n0/1"), 64)}, waiting={})

    job = dataclasses.replace(toy_job("A", 0.0, 1500.0), noise_scale=noise_scale)
    sim = Simulator(
        (job,),
        cluster=CLUSTER,
        catalog=Catalog(),
        planner=big_batch,
        config=SimConfig(round_length_s=1000.0),
    )
    result = sim.run()
    assert result.jobs[0].finish_s == pytest.approx(finish_s, abs=1e-9)
    assert result.energy_j == pytest.approx(finish_s * 300.0, abs=1e-9)


def test_snapshots_carry_progress_and_the_budget_that_remains():
    _, planner = run()
    times = [now for now, _ in planner.seen]
    assert times == [0.0, 1000.0, 2000.0, 3000.0, 4000.0]
    at_1000 = planner.seen[1][1]
    (budget,) = at_1000.budgets
    assert budget.energy_used_j == pytest.approx(300_000.0, abs=1e-9)
    assert budget.energy_remaining_j == pytest.approx(1_700_000.0, abs=1e-9)
    assert budget.co2_used_g == pytest.approx(300_000.0 * 100.0 / J_PER_KWH, abs=1e-12)
    a = next(j for j in at_1000.jobs if j.job_id == "A")
    assert a.done_iters == pytest.approx(1000.0, abs=1e-9)
    assert a.allocation == Allocation(("n0/0", "n0/1"), 32)
    assert a.attained_gpu_s == pytest.approx(2000.0, abs=1e-9)
    # C arrived at 1500 but is first seen at the round at 2000, waiting
    at_2000 = planner.seen[2][1]
    assert [j.job_id for j in at_2000.jobs] == ["A", "B", "C"]
    assert at_2000.carbon.ci_g_per_kwh == 100.0
    assert at_2000.carbon.forecast[:2] == ((0.0, 100.0), (3600.0, 400.0))
    assert planner.seen[4][1].carbon.ci_g_per_kwh == 400.0


def test_replanning_on_events_starts_arrivals_immediately():
    # With replanning at arrivals and completions, B starts at 500 (A resized then).
    result, planner = run(replan_on_events=True)
    times = [now for now, _ in planner.seen]
    assert times[:3] == [0.0, 500.0, 1000.0]
    b = next(r for r in result.jobs if r.spec.job_id == "B")
    assert b.first_start_s == 500.0
    assert b.queueing_delay_s == 0.0


def test_a_plan_that_gives_one_gpu_twice_is_refused():
    def greedy(snapshot: Snapshot, now: float) -> Plan:
        return Plan(
            allocations={j.job_id: Allocation(("n0/0",), 32) for j in snapshot.jobs}, waiting={}
        )

    jobs = (toy_job("A", 0.0, 10.0), toy_job("B", 0.0, 10.0))
    sim = Simulator(jobs, cluster=CLUSTER, catalog=Catalog(), planner=greedy)
    with pytest.raises(SimulationError, match="more than one job"):
        sim.run()
    # and nothing ran
    assert [r.done_iters for r in sim._records] == [0.0, 0.0]


def _never(snapshot: Snapshot, now: float) -> Plan:
    """A job nothing will ever run (no perf model)."""
    return Plan(
        allocations={},
        waiting={j.job_id: WaitReason(WaitCode.NO_PERF_MODEL, "no model") for j in snapshot.jobs},
    )


def _one_job(planner, *, budgets=(), iters: float = 10.0, **config) -> Simulator:
    """Job A (``iters`` iterations of 2 s) alone, rounds of 100 s, a stall after 1,000 s."""
    return Simulator(
        (toy_job("A", 0.0, iters),),
        cluster=CLUSTER,
        catalog=Catalog(),
        planner=planner,
        config=SimConfig(round_length_s=100.0, stall_limit_s=1000.0, **config),
        budgets=budgets,
    )


def _never_and_too_big(snapshot: Snapshot, now: float) -> Plan:
    """Job A waits for ever on something that may change (no model yet); job B asks for
    more GPUs than the cluster has."""
    reasons = {
        "A": WaitReason(WaitCode.NO_PERF_MODEL, "no model"),
        "B": WaitReason(WaitCode.NO_MATCHING_GPU, "Waiting: it asks for 4 X GPU(s), 2 here."),
    }
    return Plan(allocations={}, waiting={j.job_id: reasons[j.job_id] for j in snapshot.jobs})


def test_a_stalled_run_names_the_jobs_too_big_for_the_cluster():
    # given a job that stalls the run beside one that can never fit the cluster
    jobs = (toy_job("A", 0.0, 10.0), toy_job("B", 0.0, 10.0))
    sim = Simulator(
        jobs, cluster=CLUSTER, catalog=Catalog(), planner=_never_and_too_big,
        config=SimConfig(round_length_s=100.0, stall_limit_s=1000.0),
    )  # fmt: skip

    result = sim.run()

    # then it stops at the stall limit as before (A could have run: a stall, not a clean
    # end), and names B with the policy's reason (before: never_runnable empty, B unnamed)
    assert result.stopped_early
    assert result.end_s == 1000.0
    assert result.never_runnable == {"B": "Waiting: it asks for 4 X GPU(s), 2 here."}
    assert result.stopped_why.startswith("no job progressed for 0.0116 days (the stall limit)")
    assert result.stopped_why.endswith(
        "; 1 job(s) can never run on this cluster (B: Waiting: it asks for 4 X GPU(s), 2 here.)"
    )
    assert summarise(result)["never_runnable"] == result.never_runnable
    assert result.stopped_with_runnable_jobs  # A is left too: the CLI still exits 1


def test_jobs_nothing_will_run_end_the_run_as_unfinished():
    result = _one_job(_never).run()
    assert result.stopped_early
    assert result.jobs[0].finish_s is None
    assert result.end_s == 1000.0
    assert result.wait_codes == {"no_perf_model": 10}
    assert summarise(result)["n_unfinished"] == 1


def _runs_only_in_the_second_period(snapshot: Snapshot, now: float) -> Plan:
    """A job its spent cluster budget holds back: it runs once that budget's next period
    applies (another team's budget, if any, does not matter)."""
    (budget,) = [b for b in snapshot.budgets if b.team is None]
    if budget.budget_id.endswith("@1"):
        return Plan(
            allocations={j.job_id: Allocation(("n0/0",), 32) for j in snapshot.jobs}, waiting={}
        )
    return Plan(
        allocations={},
        waiting={j.job_id: WaitReason(WaitCode.BUDGET_EXHAUSTED, "spent") for j in snapshot.jobs},
    )


def test_a_job_waiting_for_the_next_budget_period_is_not_a_stall():
    # Nothing runs for 5,000 s, five times the stall limit, but the budget renews at 5,000:
    # the job runs then (10 iterations of 2 s) instead of ending the run unfinished, and
    # the first period pays the idle GPUs it waited on (two at 50 W for 5,000 s).
    budget = BudgetSpec(period_end_s=5000.0, energy_limit_j=1.0e5)
    result = _one_job(_runs_only_in_the_second_period, budgets=[budget]).run()
    assert not result.stopped_early
    assert result.jobs[0].finish_s == pytest.approx(5020.0)
    first = result.budget_periods[0]
    assert first.energy_j == pytest.approx(2 * 50.0 * 5000.0)
    assert first.share == pytest.approx(5.0)


def test_another_budgets_shorter_periods_are_not_the_renewal_the_job_waits_for():
    # Another team's budget renews every 300 s; the cluster budget that holds the job
    # back renews at 5,000: the run waits for that one (before, the first short period
    # counted as the renewal and the run ended at 1,000 with the job unfinished).
    budgets = [
        BudgetSpec(period_end_s=5000.0, energy_limit_j=1.0e5),
        BudgetSpec(period_end_s=300.0, energy_limit_j=1.0e5, team="other", budget_id="o"),
    ]
    result = _one_job(_runs_only_in_the_second_period, budgets=budgets).run()
    assert not result.stopped_early
    assert result.jobs[0].finish_s == pytest.approx(5020.0)


def test_a_run_that_stops_as_a_period_begins_stalls_from_there():
    # The job runs until 5,000, exactly when the period renews, and never again: the round
    # planned at 5,000 with the renewed budget runs nothing, so the stall limit counts from
    # there (1,000 s later), not from the period after.
    def until_5000(snapshot: Snapshot, now: float) -> Plan:
        if now < 5000.0:
            return Plan(allocations={"A": Allocation(("n0/0",), 32)}, waiting={})
        return _never(snapshot, now)

    budget = BudgetSpec(period_end_s=5000.0, energy_limit_j=1.0e9)
    result = _one_job(until_5000, budgets=[budget], iters=1.0e6).run()
    assert result.stopped_early
    assert result.end_s == pytest.approx(6000.0)


def test_a_job_no_budget_period_starts_still_ends_the_run_as_a_stall():
    # The same budget, but a job nothing will ever run: the round planned in the renewed
    # period (5,000-5,100) does not start it either, so the run ends as a stall there (at
    # least stall_limit_s after anything last ran), not at max_time_s.
    budget = BudgetSpec(period_end_s=5000.0, energy_limit_j=1.0e5)
    result = _one_job(_never, budgets=[budget], max_time_s=1.0e6).run()
    assert result.stopped_early
    assert result.jobs[0].finish_s is None
    assert result.end_s == pytest.approx(5100.0)


def test_a_preempted_job_keeps_its_progress_and_pays_a_restart_on_resume():
    # One GPU, rounds of 100 s, restart 10 s. A (150 iters = 300 s) runs first; B (25
    # iters = 50 s) arrives at 50 and, shorter, preempts A at 100; A resumes at 200.
    one_gpu = ClusterSpec(
        name="toy1", gpu_model="X", switches=1, nodes_per_switch=1, gpus_per_node=1
    ).build()

    def shortest_first(snapshot: Snapshot, now: float) -> Plan:
        job = min(snapshot.jobs, key=lambda j: j.total_iters - j.done_iters)
        waiting = {
            j.job_id: WaitReason(WaitCode.PREEMPTED, "a shorter job runs")
            for j in snapshot.jobs
            if j is not job
        }
        return Plan(allocations={job.job_id: Allocation(("n0/0",), 32)}, waiting=waiting)

    sim = Simulator(
        (toy_job("A", 0.0, 150.0), toy_job("B", 50.0, 25.0)),
        cluster=one_gpu,
        catalog=Catalog(),
        planner=shortest_first,
        config=SimConfig(round_length_s=100.0, restart_cost_s=10.0),
    )
    result = sim.run()
    a, b = result.jobs
    # A: 50 iters in [0, 100), stopped, restart [200, 210), 100 iters in [210, 410)
    assert (a.finish_s, b.finish_s) == (pytest.approx(410.0), pytest.approx(150.0))
    assert (a.n_starts, a.n_preemptions, a.n_resizes) == (2, 1, 0)
    assert (b.n_starts, b.n_preemptions) == (1, 0)
    # energy: A 100 s + B 50 s + idle 50 s + A's restart 10 s + A 200 s
    by_hand = 100 * 200 + 50 * 200 + 50 * 50 + 10 * 50 + 200 * 200
    assert result.energy_j == pytest.approx(by_hand, abs=1e-9)
    assert a.energy_j == pytest.approx(100 * 200 + 10 * 50 + 200 * 200, abs=1e-9)
    assert a.attained_gpu_s == pytest.approx(100 + 210, abs=1e-9)


# --- the hard-limit watch: a pause_jobs budget is stopped where it is spent ----------------


class RunsAUnlessSpent:
    """Runs A on n0/0 whatever its budgets' pacing would say, but not while a budget in
    force is spent (as ``round.admit`` pauses a spent ``pause_jobs`` budget's jobs);
    remembers when it planned and what each budget in force had left then."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, bool]] = []
        self.spent_ids: list[set[str]] = []

    def __call__(self, snapshot: Snapshot, now: float) -> Plan:
        in_force = [b for b in snapshot.budgets if b.period_start_s <= now < b.period_end_s]
        spent = any(b.exhausted for b in in_force)
        self.seen.append((now, spent))
        self.spent_ids.append({b.budget_id for b in in_force if b.exhausted})
        if spent:
            return Plan(
                allocations={},
                waiting={"A": WaitReason(WaitCode.BUDGET_EXHAUSTED, "spent")},
            )
        return Plan(allocations={"A": Allocation(("n0/0",), 32)}, waiting={})


def _watched(budget: BudgetSpec | list[BudgetSpec], iters: float, **config) -> tuple:
    planner = RunsAUnlessSpent()
    sim = Simulator(
        (toy_job("A", 0.0, iters),),
        cluster=CLUSTER,
        catalog=Catalog(),
        planner=planner,
        config=SimConfig(round_length_s=100.0, restart_cost_s=0.0, **config),
        intensity=INTENSITY,
        budgets=budget if isinstance(budget, list) else [budget],
    )
    return sim.run(), planner


def test_a_team_budget_is_stopped_at_its_limit_inside_a_round():
    # A draws 200 W on one GPU and the team's period pays 10 kJ: spent at 50 s, halfway
    # through the first round, where the planner (which ignores pacing) would have run
    # it to 100 s: 200% of the period. The stretch ends at 50 s, the period is handed
    # to the next round as spent, and A runs 50 s (25 iterations) a period, finishing
    # its 99 iterations in the fourth at 15,048.
    budget = BudgetSpec(period_end_s=5000.0, energy_limit_j=1.0e4, team="t")
    result, planner = _watched(budget, iters=99.0)
    assert (50.0 - 1e-5, True) <= planner.seen[1] <= (50.0, True)
    assert result.jobs[0].finish_s == pytest.approx(15048.0)
    shares = [p.share for p in result.budget_periods]
    assert len(shares) == 4
    assert all(1.0 - 1e-6 < s <= 1.0 for s in shares[:3]), shares


def test_a_carbon_budget_is_stopped_where_the_grid_makes_it_spent():
    # 200 W at 100 g/kWh for the first hour is 20 g; the 30 g period has 10 g left at
    # 400 g/kWh, 450 s more: spent at 4,050, inside the round from 4,000.
    budget = BudgetSpec(period_end_s=5000.0, co2_limit_g=30.0, team="t")
    result, planner = _watched(budget, iters=1.0e4, max_time_s=4500.0)
    stops = [t for t, spent in planner.seen if spent]
    assert stops[0] == pytest.approx(4050.0, abs=1e-4)
    assert result.budget_periods[0].co2_g == pytest.approx(30.0, abs=1e-6)
    assert result.budget_periods[0].co2_g <= 30.0
    assert result.jobs[0].done_iters == pytest.approx(4050.0 / 2, abs=1e-3)


def test_a_cluster_budget_counts_the_idle_gpus_and_its_floor_goes_on():
    # A at 200 W and the idle GPU at 50 W: 20 kJ are spent at 80 s. A stops there; the
    # idle GPUs keep drawing on the period (the floor no plan can keep: 500 kJ a period,
    # more than the limit, so nothing is set aside for it).
    budget = BudgetSpec(period_end_s=5000.0, energy_limit_j=2.0e4)
    result, planner = _watched(budget, iters=1.0e4, max_time_s=1000.0)
    assert planner.seen[1][0] == pytest.approx(80.0, abs=1e-5)
    assert result.jobs[0].done_iters == pytest.approx(40.0, abs=1e-4)
    assert result.budget_periods[0].energy_j == pytest.approx(2.0e4 + 100.0 * 920.0, abs=1e-2)


def test_a_cluster_budget_stops_its_jobs_where_what_is_left_is_the_floor_to_its_end():
    # The two GPUs' idle floor, 100 W, takes 500 kJ of the 600 kJ period: A (200 W, so
    # 150 W above the floor with the other GPU idle) may spend the other 100 kJ, and is
    # stopped at 666.67 s, not where the limit itself is reached (2,400 s): after that
    # the idle GPUs draw the rest of the period and it ends at its limit, not 150% of it.
    budget = BudgetSpec(period_end_s=5000.0, energy_limit_j=6.0e5)
    result, planner = _watched(budget, iters=1.0e6, max_time_s=5000.0)
    stops = [t for t, spent in planner.seen if spent]
    assert stops[0] == pytest.approx(1.0e5 / 150.0, abs=1e-4)
    assert result.jobs[0].done_iters == pytest.approx(1.0e5 / 150.0 / 2.0, abs=1e-3)
    period = result.budget_periods[0]
    assert period.energy_j <= 6.0e5
    assert period.energy_j == pytest.approx(6.0e5, abs=1e-2)


def test_nothing_is_set_aside_in_the_runs_last_stretch():
    # 550 kJ a period: 50 kJ above the 500 kJ floor, which A (150 W above it) spends by
    # 333 s. But A finishes at 400 s and nothing is to come: the run, and its charging,
    # end there (100 kJ spent), so it is not stopped in its last round.
    budget = BudgetSpec(period_end_s=5000.0, energy_limit_j=5.5e5)
    result, planner = _watched(budget, iters=200.0, max_time_s=5000.0)
    assert not any(spent for _, spent in planner.seen)
    assert result.jobs[0].finish_s == pytest.approx(400.0)
    assert result.budget_periods[0].energy_j == pytest.approx(250.0 * 400.0, abs=1e-3)


def test_a_last_stretch_another_budget_stops_sets_the_cluster_floor_aside():
    # A (40 iterations, 80 s) would end the run in its first round, so no floor was set
    # aside; but the team's 7 kJ stop A at 35 s, the run goes on, and the idle GPUs then
    # drew on the cluster's 503 kJ period to its end: 505.25 kJ, 100.45% of it (found by
    # the budget-contract fuzz, seed 225). The cluster's 3 kJ above its 500 kJ floor are
    # spent first, at 20 s (A: 150 W above it): A runs 20 s a period, and ends at 15,020.
    budgets = [
        BudgetSpec(period_end_s=5000.0, energy_limit_j=7.0e3, team="t", budget_id="team"),
        BudgetSpec(period_end_s=5000.0, energy_limit_j=5.03e5, budget_id="cluster"),
    ]
    result, planner = _watched(budgets, iters=40.0, max_time_s=30000.0)
    stops = [t for t, spent in planner.seen if spent]
    assert stops[0] == pytest.approx(20.0, abs=1e-4)
    assert planner.spent_ids[1] == {"cluster"}
    assert result.jobs[0].finish_s == pytest.approx(15020.0, abs=1e-4)
    for period in result.budget_periods:
        assert period.share <= 1.0, period


@pytest.mark.parametrize("action", [HardLimitAction.HOLD_QUEUE, HardLimitAction.NOTIFY_ONLY])
def test_budgets_that_keep_their_jobs_running_are_not_stopped(action):
    # hold_queue keeps running jobs on their GPUs, notify_only holds nothing back: the
    # watch leaves both alone and A runs its rounds to their ends.
    budget = BudgetSpec(
        period_end_s=5000.0, energy_limit_j=1.0e4, team="t", hard_limit_action=action
    )
    result, planner = _watched(budget, iters=1.0e4, max_time_s=300.0)
    assert [t for t, _ in planner.seen] == [0.0, 100.0, 200.0]
    assert result.budget_periods[0].share == pytest.approx(2.0)


def test_only_the_budget_spent_first_is_stopped():
    # The cluster's 20 kJ are spent at 80 s (A and the idle GPU: 250 W), the team's 18 kJ
    # would be at 90 s (A: 200 W): the stretch ends at 80 s with the cluster's period
    # spent and the team's not (16 kJ of 18 kJ).
    budgets = [  # the team's first: the watch looks at it first
        BudgetSpec(period_end_s=5000.0, energy_limit_j=1.8e4, team="t", budget_id="team"),
        BudgetSpec(period_end_s=5000.0, energy_limit_j=2.0e4, budget_id="cluster"),
    ]
    result, planner = _watched(budgets, iters=1.0e4, max_time_s=300.0)
    assert planner.seen[1][0] == pytest.approx(80.0, abs=1e-5)
    assert planner.spent_ids[1] == {"cluster"}
    team = next(p for p in result.budget_periods if p.budget_id == "team")
    assert team.energy_j == pytest.approx(1.6e4, abs=1e-2)


def test_a_job_that_only_restarts_ends_the_run_as_a_stall():
    # A planner that moves A to the other GPU every round, with a restart longer than a
    # round: after its first round A is always allocated but never progresses. The run
    # ends as a stall once nothing progressed for stall_limit_s (1,000 s after 100 s),
    # not at max_time_s.
    def mover(snapshot: Snapshot, now: float) -> Plan:
        gpu = "n0/0" if int(now // 100) % 2 else "n0/1"
        return Plan(allocations={"A": Allocation((gpu,), 32)}, waiting={})

    result = _one_job(mover, iters=1.0e6, restart_cost_s=150.0, max_time_s=1.0e6).run()
    assert result.stopped_early
    assert result.jobs[0].done_iters == pytest.approx(50.0)  # its fresh start's 100 s
    assert result.end_s == pytest.approx(1100.0)


def _paced_until_3000_into_a_period(snapshot: Snapshot, now: float) -> Plan:
    """A pacing policy: a job its period's allowance does not cover yet waits as
    ``over_round_allowance`` until 3,000 s into the second period (as PowerFlow with
    ``pricing=false`` holds a job until the unspent allowance has grown)."""
    (budget,) = [b for b in snapshot.budgets if b.team is None]
    if budget.budget_id.endswith("@1") and now - budget.period_start_s >= 3000.0:
        return Plan(
            allocations={j.job_id: Allocation(("n0/0",), 32) for j in snapshot.jobs}, waiting={}
        )
    return Plan(
        allocations={},
        waiting={
            j.job_id: WaitReason(WaitCode.OVER_ROUND_ALLOWANCE, "not this round")
            for j in snapshot.jobs
        },
    )


def test_a_job_a_pacing_policy_holds_in_a_fresh_period_is_not_a_stall():
    # An independent sweep: PowerFlow with pricing=false at fifo's energy (periods of 13.5
    # days) held a job that arrived at the end of a period for 10.6 days into the next, and
    # the run stopped after the 7-day stall limit, exit 1, with that job unfinished. A job
    # waiting for its round's allowance gets the whole renewed period before the run
    # calls it a stall (here the stall limit is 1,000 s and the period 5,000 s).
    budget = BudgetSpec(period_end_s=5000.0, energy_limit_j=1.0e9)
    result = _one_job(_paced_until_3000_into_a_period, budgets=[budget]).run()
    assert not result.stopped_early
    assert result.jobs[0].finish_s == pytest.approx(8020.0)


def test_a_job_paced_for_ever_still_ends_the_run_as_a_stall_after_a_whole_period():
    def paced(snapshot: Snapshot, now: float) -> Plan:
        return Plan(
            allocations={},
            waiting={
                j.job_id: WaitReason(WaitCode.OVER_ROUND_ALLOWANCE, "no") for j in snapshot.jobs
            },
        )

    budget = BudgetSpec(period_end_s=5000.0, energy_limit_j=1.0e9)
    result = _one_job(paced, budgets=[budget], max_time_s=1.0e6).run()
    assert result.stopped_early
    assert result.jobs[0].finish_s is None
    assert result.end_s == pytest.approx(10100.0)  # the first round after the whole period


def test_a_stall_names_the_jobs_it_left_and_a_team_budget_below_one_restart():
    # given a team budget of 1 kJ a period of 500 s: A's fresh start runs 5 s on one GPU
    # at 200 W (2.5 of its 10 iterations) before the watch stops it; every later start
    # resumes from a checkpoint, 50 s at the 50 W idle draw (2.5 kJ), and is stopped
    # mid-restart, so A never progresses again (a team split by need whose periods are
    # much shorter than the run: the third sweep's starving team)
    budget = BudgetSpec(period_end_s=500.0, energy_limit_j=1000.0, team="t")
    sim = Simulator(
        (toy_job("A", 0.0, 10.0),), cluster=CLUSTER, catalog=Catalog(),
        planner=RunsAUnlessSpent(),
        config=SimConfig(round_length_s=100.0, restart_cost_s=50.0, stall_limit_s=3000.0),
        budgets=[budget],
    )  # fmt: skip

    result = sim.run()

    # then the stall names A, how far it got and how often it started, and why it cannot
    # go on (before: "those left only restarted or could not run", A unnamed)
    assert result.stopped_early and result.jobs[0].finish_s is None
    assert result.jobs[0].n_starts == 7
    assert result.stopped_why.endswith(
        "those left only restarted or could not run; 1 job(s) left unfinished (A: 25.0% "
        "done, started 7 time(s), its team t's budget gives 1000 J a period, less than one "
        "checkpoint restart on 1 GPU(s) draws (2500 J: 50 s at idle))"
    )


def test_a_stall_names_the_jobs_it_left_without_a_budget_cause_where_there_is_none():
    # given A moved every round with a restart longer than a round (no budget at all)
    def mover(snapshot: Snapshot, now: float) -> Plan:
        gpu = "n0/0" if int(now // 100) % 2 else "n0/1"
        return Plan(allocations={"A": Allocation((gpu,), 32)}, waiting={})

    result = _one_job(mover, iters=1.0e6, restart_cost_s=150.0, max_time_s=1.0e6).run()

    # then A is named with its progress and starts, and no budget is blamed
    assert result.stopped_why.endswith(
        "; 1 job(s) left unfinished (A: 0.0% done, started 1 time(s))"
    )


def test_a_stall_gives_the_policy_s_last_reason_for_a_job_it_never_started():
    # given a policy that never starts A and says why each round (as PowerFlow held jobs
    # whose team's one-hour budget could not pay their first round, in the fourth sweep)
    def holds(snapshot: Snapshot, now: float) -> Plan:
        return Plan(
            allocations={},
            waiting={
                j.job_id: WaitReason(
                    WaitCode.OVER_ROUND_ALLOWANCE, "Waiting: its first round costs too much."
                )
                for j in snapshot.jobs
            },
        )

    result = _one_job(holds, max_time_s=1.0e6).run()

    # then the stall names A with that reason (before: "A: 0.0% done, started 0 time(s)"
    # and nothing of why)
    assert result.stopped_early and result.jobs[0].finish_s is None
    assert result.stopped_why.endswith(
        "; 1 job(s) left unfinished (A: 0.0% done, started 0 time(s), waiting in the last "
        "round (over_round_allowance: its first round costs too much))"
    )


def _two_on_their_own_gpus_unless_spent(snapshot: Snapshot, now: float) -> Plan:
    """Every job on its own GPU, none while a budget in force is spent."""
    in_force = [b for b in snapshot.budgets if b.period_start_s <= now < b.period_end_s]
    if any(b.exhausted for b in in_force):
        return Plan(
            allocations={},
            waiting={
                j.job_id: WaitReason(WaitCode.BUDGET_EXHAUSTED, "spent") for j in snapshot.jobs
            },
        )
    return Plan(
        allocations={j.job_id: Allocation((f"n0/{i}",), 32) for i, j in enumerate(snapshot.jobs)},
        waiting={},
    )


def test_a_team_budget_of_exactly_its_jobs_draw_lets_the_last_one_finish():
    # given A (333.3 iterations of 2 s at 200 W) and B (1.1 iterations, from 500 s) of
    # one team, run unbudgeted, then under a team budget of exactly what they drew (as a
    # policy matched to its own spend per team); rounds of 300 s
    def sim(budgets=()):
        jobs = (toy_job("A", 0.0, 333.3), toy_job("B", 500.0, 1.1))
        return Simulator(
            jobs, cluster=CLUSTER, catalog=Catalog(),
            planner=_two_on_their_own_gpus_unless_spent,
            config=SimConfig(round_length_s=300.0, restart_cost_s=50.0, stall_limit_s=1.0e7),
            budgets=budgets,
        )  # fmt: skip

    free = sim().run()
    drawn = sum(j.energy_j for j in free.jobs)
    budget = BudgetSpec(period_end_s=1.0e6, energy_limit_j=drawn, team="t")

    result = sim([budget]).run()

    # then both finish when they did, started once (before: the float sums put the limit
    # a hair before A's end, the watch stopped it a microsecond short and it finished
    # after the period, at 1,000,050 s, started twice)
    assert [j.finish_s for j in result.jobs] == pytest.approx([666.6, 602.2])
    assert [j.n_starts for j in result.jobs] == [1, 1]
    # and the team's period stays within its limit: the microsecond A ran past the
    # watch's stop (200 W) is the most left uncharged
    used = sum(j.energy_j for j in result.jobs)
    assert drawn - 200.0 * 1e-5 <= used <= drawn


def _first_unspent_team_on_one_gpu(snapshot: Snapshot, now: float) -> Plan:
    """FIFO on GPU n0/0: the first job (in submit order) whose team has no spent budget in
    force; the rest wait."""
    spent = {
        b.team
        for b in snapshot.budgets
        if b.period_start_s <= now < b.period_end_s and b.exhausted and b.team is not None
    }
    runnable = [j for j in snapshot.jobs if j.team not in spent]
    waiting = {
        j.job_id: WaitReason(
            WaitCode.BUDGET_EXHAUSTED if j.team in spent else WaitCode.BEHIND_IN_QUEUE, "waits"
        )
        for j in snapshot.jobs
        if not runnable or j is not runnable[0]
    }
    allocations = {runnable[0].job_id: Allocation(("n0/0",), 32)} if runnable else {}
    return Plan(allocations=allocations, waiting=waiting)


def test_a_team_carbon_budget_spent_on_its_last_jobs_finish_keeps_the_round_grid():
    # given A (team t, 333.7 iterations of 2 s: to 667.4 s) and then B (team u, 1500
    # iterations: 3000 s) on one GPU, FIFO, rounds of 300 s, a grid at 400 g/kWh for the
    # first hour and 100 after: run unbudgeted, B starts at the round after A's finish
    # (900 s); then under team carbon budgets of exactly what each team drew (as a policy
    # matched to its own carbon per team)
    intensity = HourlyIntensity(
        [
            HourlyPoint(START, 400.0, False),
            HourlyPoint(datetime(2022, 6, 1, 1, tzinfo=UTC), 100.0, False),
        ],
        start=START,
    )

    def sim(budgets=()):
        jobs = (toy_job("A", 0.0, 333.7), dataclasses.replace(toy_job("B", 0.0, 1500.0), team="u"))
        return Simulator(
            jobs, cluster=CLUSTER, catalog=Catalog(), planner=_first_unspent_team_on_one_gpu,
            config=SimConfig(round_length_s=300.0, restart_cost_s=50.0, stall_limit_s=1.0e7),
            intensity=intensity, budgets=budgets,
        )  # fmt: skip

    free = sim().run()
    assert [j.finish_s for j in free.jobs] == pytest.approx([667.4, 3900.0])
    drawn = {j.spec.job_id: j.co2_g for j in free.jobs}
    budgets = [
        BudgetSpec(period_end_s=1.0e6, co2_limit_g=drawn["A"], team="t", budget_id="t"),
        BudgetSpec(period_end_s=1.0e6, co2_limit_g=drawn["B"], team="u", budget_id="u"),
    ]

    result = sim(budgets).run()

    # then B still starts at 900 s, on the round grid, and both finish when they did,
    # started once (before: the watch ended the stretch at A's finish, the next round
    # came at 667.4 s, B started there, drew more of the dirty first hour, reached its
    # team's limit at 3,442.4 s, 225 s short of its end, waited for the period's end and
    # finished after a restart at 1,000,275 s, started twice)
    assert [j.finish_s for j in result.jobs] == pytest.approx([667.4, 3900.0])
    assert [j.first_start_s for j in result.jobs] == pytest.approx([0.0, 900.0])
    assert [j.n_starts for j in result.jobs] == [1, 1]
    # and no team's period is over its limit, not even by a float's hair: the microsecond
    # A ran past the watch's stop is the most left uncharged
    for j in result.jobs:
        assert (
            drawn[j.spec.job_id] - 200.0 * 1e-5 * 400.0 / J_PER_KWH
            <= j.co2_g
            <= drawn[j.spec.job_id]
        )


def test_a_team_budget_of_exactly_its_jobs_draw_never_shows_a_period_over_it():
    # given A (576 iterations from 0 s) and B (573.9 iterations from 797 s) of one team,
    # each on its own GPU, run unbudgeted, then under a team energy budget of exactly
    # what they drew, job by job (as a policy matched to its own spend per team)
    def sim(budgets=()):
        jobs = (toy_job("A", 0.0, 576.0), toy_job("B", 797.0, 573.9))
        return Simulator(
            jobs, cluster=CLUSTER, catalog=Catalog(),
            planner=_two_on_their_own_gpus_unless_spent,
            config=SimConfig(round_length_s=300.0, restart_cost_s=50.0, stall_limit_s=1.0e7),
            budgets=budgets,
        )  # fmt: skip

    free = sim().run()
    drawn = sum(j.energy_j for j in free.jobs)

    result = sim([BudgetSpec(period_end_s=1.0e6, energy_limit_j=drawn, team="t")]).run()

    # then both finish when they did, started once, and the period is within its limit
    # to the last bit (before: the ledger's sum, stretch by stretch, came to
    # 462,460.00000000006 J against the jobs' 462,460.0: 1.0000000000000002 of it, over)
    assert [j.finish_s for j in result.jobs] == pytest.approx([1152.0, 2097.8])
    assert [j.n_starts for j in result.jobs] == [1, 1]
    (period,) = result.budget_periods
    assert drawn - 200.0 * 1e-5 <= period.energy_j <= drawn
    assert period.share <= 1.0


def test_a_team_budget_spent_just_after_a_round_keeps_its_job_on_the_gpu_until_then():
    # given A (team t, 150 iterations of 2 s and a hair more: it finishes 2e-10 s after
    # the round at 300 s) and then B (team u) on one GPU, FIFO, rounds of 300 s: run
    # unbudgeted, A holds the GPU in the round at 300 s and B starts at 600 s; then
    # under a budget for team t of exactly what A drew
    def sim(budgets=()):
        jobs = (
            toy_job("A", 0.0, 150.0 + 1e-10),
            dataclasses.replace(toy_job("B", 0.0, 10.0), team="u"),
        )
        return Simulator(
            jobs, cluster=CLUSTER, catalog=Catalog(), planner=_first_unspent_team_on_one_gpu,
            config=SimConfig(round_length_s=300.0, restart_cost_s=50.0, stall_limit_s=1.0e7),
            budgets=budgets,
        )  # fmt: skip

    free = sim().run()
    assert [j.first_start_s for j in free.jobs] == [0.0, 600.0]
    drawn = free.jobs[0].energy_j

    result = sim([BudgetSpec(period_end_s=1.0e6, energy_limit_j=drawn, team="t")]).run()

    # then the watch, finding the limit reached within a hair of A's end, lets A finish
    # where it does, holding the GPU in the round at 300 s as it did unbudgeted, and B
    # starts at 600 s as it did (a guard: passes at the commit before the watch's limit
    # margin; a form of the fix that finished A within the stretch before started B at
    # 300 s)
    assert [j.first_start_s for j in result.jobs] == [0.0, 600.0]
    assert [j.finish_s for j in result.jobs] == [j.finish_s for j in free.jobs]
    assert [j.n_starts for j in result.jobs] == [1, 1]
    (period,) = result.budget_periods
    assert drawn - 200.0 * 1e-5 <= period.energy_j <= drawn
