"""The contention-free bounds: hand-computed on a tiny scenario, never beaten by any
registered policy on a real trace, and carried into the simulator's report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from scheduling.core.perf_models import load_catalog
from scheduling.core.registry import policy_names
from scheduling.core.types import GpuConfig
from scheduling.simulator.bounds import jct_bound, scenario_bound
from scheduling.simulator.cli import main
from scheduling.simulator.compare import matched_budget
from scheduling.simulator.engine import BudgetSpec, SimConfig
from scheduling.simulator.metrics import summarise
from scheduling.simulator.scenario import load_scenario, run_policy
from tests.core.corekit import AnalyticModel, Catalog, job

DATA = Path(__file__).resolve().parents[2] / "data"
TRACE = DATA / "trace" / "pollux_workload-1.csv"
CLUSTER = DATA / "clusters" / "n16g4_t4.json"

# One job on a 2-GPU cluster, rounds every 300 s, submitted at 100 s (first plan at 300 s).
# AnalyticModel("w"): T = 1 s/iter / n * (0.5 + 0.5 / r), P = 50 + 200 r^2 W, r = clock/2000.
# Its 3600 iterations, configurations (n, r) -> (time, energy above idle = n*200 r^2*T):
#   (2, 1)   : 1800 s, 720,000 J      fastest
#   (2, .75) : 2100 s, 472,500 J
#   (2, .5)  : 2700 s, 270,000 J      leanest ((1, .5) is as lean and slower)
# Idle floor: 2 GPUs x 50 W until the earliest end, 300 + 1800 s: 210,000 J.
TINY = dict(
    catalog=Catalog(AnalyticModel("w", clocks_mhz=(1000, 1500, 2000))),
    node_gpus_by_model={"A100": (2,)},
    idle_power_by_model={"A100": 50.0},
    round_length_s=300.0,
)


def tiny_bound(**kw):
    return jct_bound([job("a", submit=100.0, iters=3600.0, min_gpus=1, max_gpus=2)], **TINY, **kw)


def test_tiny_bound_is_the_hand_computed_one():
    bound = tiny_bound()
    (frontier,) = bound.jobs
    assert frontier.earliest_start_s == 300.0
    assert frontier.time_s == pytest.approx((1800.0, 2100.0, 2700.0))
    assert frontier.energy_above_idle_j == pytest.approx((720_000.0, 472_500.0, 270_000.0))
    assert bound.avg_jct_s == pytest.approx(200.0 + 1800.0)
    assert bound.floor_energy_j == pytest.approx(210_000.0)
    assert bound.min_energy_j == pytest.approx(210_000.0 + 270_000.0)


def test_energy_bound_follows_the_hand_computed_frontier():
    bound = tiny_bound()
    # Enough energy for the fastest configuration: nothing constrains the job.
    assert bound.avg_jct_at_energy_s(1e12) == pytest.approx(2000.0)
    # Exactly the middle configuration's energy: at best that configuration's time.
    assert bound.avg_jct_at_energy_s(210_000.0 + 472_500.0) == pytest.approx(200.0 + 2100.0)
    # Half-way between the two leaner points: at best half of each (the hull's line).
    halfway = 210_000.0 + (472_500.0 + 270_000.0) / 2
    assert bound.avg_jct_at_energy_s(halfway) == pytest.approx(200.0 + (2100.0 + 2700.0) / 2)
    # Less than the leanest run needs: nothing can finish.
    assert bound.avg_jct_at_energy_s(bound.min_energy_j - 1.0) == math.inf


def test_replanning_on_events_starts_the_bound_at_submission_and_powered_off_nodes_have_no_floor():
    bound = tiny_bound(replan_on_events=True, power_off_idle_nodes=True)
    assert bound.avg_jct_s == pytest.approx(1800.0)
    assert bound.floor_energy_j == 0.0
    # With idle nodes off a busy GPU pays its whole draw: 2 x 100 W x 2700 s at r = 0.5.
    assert bound.min_energy_j == pytest.approx(540_000.0)


def test_a_job_no_gpu_model_can_run_is_left_out_of_the_bound():
    bound = jct_bound([job("a", iters=3600.0), job("x", workload="unknown", iters=10.0)], **TINY)
    assert [f.job_id for f in bound.jobs] == ["a"]


def test_the_bound_takes_the_fastest_spread_over_nodes_not_the_fewest_nodes():
    # The fitted A100 model of bert runs 8 GPUs faster on 8 nodes than on one node.
    catalog = load_catalog()
    model = catalog.get("bert", "A100")
    packed = model.iter_time_s(GpuConfig(n_gpus=8, global_batch=64, gpus_per_node=(8,)))
    spread = model.iter_time_s(GpuConfig(n_gpus=8, global_batch=64, gpus_per_node=(1,) * 8))
    assert spread < packed
    bert = job("b", workload="bert", iters=1000.0, min_gpus=8, max_gpus=8)
    bound = jct_bound(
        [bert],
        catalog=catalog,
        node_gpus_by_model={"A100": (8,) * 16},
        idle_power_by_model={"A100": 50.0},
        round_length_s=300.0,
    )
    assert bound.jobs[0].time_s[0] == pytest.approx(1000.0 * spread)


@pytest.fixture(scope="module")
def scenario():
    return load_scenario(TRACE, CLUSTER, carbon_zone="ES", config=SimConfig(stall_limit_s=86400))


@pytest.fixture(scope="module")
def bound(scenario):
    return scenario_bound(scenario)


@pytest.mark.parametrize("policy", policy_names())
def test_no_registered_policy_beats_the_bound(scenario, bound, policy):
    summary = summarise(run_policy(scenario, policy))
    assert summary["n_unfinished"] == 0
    assert summary["avg_jct_s"] >= bound.avg_jct_s
    assert summary["energy_kwh"] * 3.6e6 >= bound.min_energy_j


def test_a_budgeted_run_never_beats_the_bound_at_its_energy(scenario, bound):
    comparison = matched_budget(scenario, baseline="fifo_lowclock", candidate="powerflow")
    line = comparison.report(bound)
    spent_j = line["candidate_energy_kwh"] * 3.6e6
    assert line["candidate_avg_jct_s"] >= bound.avg_jct_at_energy_s(spent_j)
    assert line["bound_avg_jct_s"] == bound.avg_jct_at_energy_s(comparison.budget.energy_limit_j)
    assert line["best_possible_ratio"] >= line["avg_jct_ratio"]


def test_the_report_carries_the_bound_and_the_best_possible_ratio(tmp_path, capsys):
    code = main(
        [
            "--trace",
            str(TRACE),
            "--cluster",
            str(CLUSTER),
            "--policy",
            "powerflow",
            "--match-baseline",
            "elastic",
            "--max-jobs",
            "40",
            "--no-progress",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    (path,) = tmp_path.glob("*_report.json")
    report = json.loads(path.read_text())
    (line,) = report["comparisons"]
    assert report["bound"]["avg_jct_s"] <= line["bound_avg_jct_s"] <= line["baseline_avg_jct_s"]
    assert line["best_possible_ratio"] == pytest.approx(
        line["baseline_avg_jct_s"] / line["bound_avg_jct_s"]
    )
    out = capsys.readouterr().out
    assert "no policy can beat avg JCT" in out
    assert f"no policy could exceed {line['best_possible_ratio']:.3f}x" in out


def test_no_job_of_a_ones_run_beats_its_own_contention_free_time(tmp_path):
    # ONES grows a job's global batch with its GPUs (its per-GPU batch is fixed) even where
    # the job names no batch range; ncf's T4 iteration takes about as long at batch 256 as
    # at 64, so on 4 GPUs it does about four times the useful samples per second. The bound
    # knew only the submitted batch: this job finished in 942 s against a "fastest" of
    # 1,395 s (an independent sweep on its own traces). The bound of a run of ones has
    # ones' batches; the one of runs without it keeps each job's batch in its range.
    trace = tmp_path / "elasticflow_ncf.csv"
    trace.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\nk2,0,ncf,64,1,200000\n"
    )
    cluster = tmp_path / "n1g4_t4.json"
    cluster.write_text(
        json.dumps({"gpu_model": "T4", "switches": 1, "nodes_per_switch": 1, "gpus_per_node": 4})
    )
    scenario = load_scenario(trace, cluster, config=SimConfig(knowledge="oracle"))
    (frontier,) = scenario_bound(scenario, ones_batches=True).jobs
    (record,) = run_policy(scenario, "ones").jobs
    assert record.jct_s is not None
    assert record.jct_s >= frontier.wait_s + frontier.time_s[0]
    (fixed,) = scenario_bound(scenario).jobs
    assert fixed.time_s[0] == pytest.approx(200000 * 0.00697, rel=0.01)  # batch 64, 1 GPU
    # The simulator's report of a run of ones carries that bound.
    out = tmp_path / "out"
    args = ["--trace", str(trace), "--cluster", str(cluster), "--policy", "ones"]
    assert main([*args, "--knowledge", "oracle", "--no-progress", "--out", str(out)]) == 0
    (path,) = out.glob("*_report.json")
    report = json.loads(path.read_text())
    assert report["bound"]["avg_jct_s"] <= report["runs"]["ones"]["avg_jct_s"]


def test_no_job_of_a_budgeted_run_beats_its_own_contention_free_time(tmp_path):
    # A budgeted run plans between rounds: at each period's start and end, where a probe
    # of a prior-only job ends, where the hard-limit watch stops a stretch. The bound
    # waited for the next round boundary (300 s): a job submitted at 950 s started at the
    # period's end at 1,000 s, 250 s before that (an independent sweep found the same with
    # a learned GreenFlow probe ending at 60 s). A budgeted bound starts jobs at submission.
    trace = tmp_path / "elasticflow_late.csv"
    trace.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\nj,950,resnet50,64,1,2000\n"
    )
    cluster = tmp_path / "n1g1_a100.json"
    cluster.write_text(
        json.dumps({"gpu_model": "A100", "switches": 1, "nodes_per_switch": 1, "gpus_per_node": 1})
    )
    scenario = load_scenario(trace, cluster, config=SimConfig(knowledge="oracle"))
    budget = BudgetSpec(period_end_s=1000.0, energy_limit_j=1e9)
    (record,) = run_policy(scenario, "fifo", budgets=(budget,)).jobs
    assert record.first_start_s == 1000.0
    (frontier,) = scenario_bound(scenario, budgeted=True).jobs
    assert record.jct_s >= frontier.wait_s + frontier.time_s[0]
    # Without budgets plans come at round boundaries only.
    (unbudgeted,) = run_policy(scenario, "fifo").jobs
    assert unbudgeted.first_start_s == 1200.0
    assert scenario_bound(scenario).jobs[0].earliest_start_s == 1200.0
    # The simulator's report of a budgeted run carries that bound.
    out = tmp_path / "out"
    args = ["--trace", str(trace), "--cluster", str(cluster), "--policy", "fifo"]
    args += ["--energy-budget-kwh", "1000", "--budget-period-h", str(1000 / 3600)]
    assert main([*args, "--knowledge", "oracle", "--no-progress", "--out", str(out)]) == 0
    (path,) = out.glob("*_report.json")
    report = json.loads(path.read_text())
    assert report["bound"]["avg_jct_s"] <= report["runs"]["fifo"]["avg_jct_s"]


def test_the_bound_covers_every_batch_of_a_jobs_range_not_only_the_catalogs():
    # An independent sweep: learned PowerFlow, batches up to 8x, on 4 x 6 T4; a bert job
    # submitted at batch 1 (range 1-8) ran at a batch between the catalog's sizes (its
    # learned model's sizes are the catalog's scaled to the job's batch), and finished in
    # 99 s against a "contention-free" 467 s, drawing 11 kJ against a "least" 17 kJ: the
    # bound took only the catalog's batch sizes inside the range (none; batch 1 alone).
    from scheduling.core.goodput import useful_samples_per_iter, with_noise_scales

    catalog = load_catalog()
    (j,) = with_noise_scales(
        [job("a", workload="bert", global_batch=1, min_batch=1, max_batch=8, iters=1000.0)]
    )
    bound = jct_bound(
        [j],
        catalog=catalog,
        node_gpus_by_model={"T4": (1,)},
        idle_power_by_model={"T4": 0.0},
        round_length_s=300.0,
        replan_on_events=True,
    )
    (frontier,) = bound.jobs
    model = catalog.get("bert", "T4")
    for batch in range(1, 9):
        cfg = GpuConfig(n_gpus=1, global_batch=batch)
        time_s = 1000.0 * model.iter_time_s(cfg) * 1 / useful_samples_per_iter(j, batch)
        assert frontier.time_s[0] <= time_s * (1 + 1e-12), batch
        assert frontier.energy_above_idle_j[-1] <= model.power_w(cfg) * time_s * (1 + 1e-12)


def test_no_catalog_model_iterates_faster_or_draws_less_at_a_larger_batch():
    # What the bound's grid between two batches rests on (``bounds._batch_grid``).
    catalog = load_catalog()
    for workload in catalog.workloads():
        for gpu in catalog.gpu_models_for(workload):
            model = catalog.get(workload, gpu)
            low_w, high_w = model.power_limits_w
            settings = ((None, None), (min(model.clocks_mhz), None), (None, low_w))
            for n in (1, 3, 8):
                for clock, limit in settings:
                    values = [
                        model.time_and_power(
                            GpuConfig(
                                n_gpus=n, global_batch=b, sm_clock_mhz=clock, power_limit_w=limit
                            )
                        )
                        for b in sorted({n, *(int(n * 1.1**k) for k in range(80))})
                    ]
                    for (t0, p0), (t1, p1) in zip(values, values[1:], strict=False):
                        # (equal up to the last bit of a float)
                        ok = t1 >= t0 * (1 - 1e-12) and p1 >= p0 * (1 - 1e-12)
                        assert ok, (workload, gpu, n, clock, limit)


def test_a_wide_batch_range_is_a_grid_whose_neighbours_are_at_most_a_step_apart():
    from scheduling.simulator.bounds import BATCH_STEP, EXACT_BATCHES, _batch_grid

    assert _batch_grid(3, 3 + EXACT_BATCHES - 1, ()) == list(range(3, 3 + EXACT_BATCHES))
    grid = _batch_grid(100, 4000, (96, 128, 5000))
    assert grid[0] == 100 and grid[-1] == 4000 and 128 in grid and 96 not in grid
    assert all(up <= lo * BATCH_STEP + 1 for lo, up in zip(grid, grid[1:], strict=False))
    assert len(grid) < 60


def test_a_jobs_least_gpu_energy_is_listed_once_per_configuration_set_not_per_job(monkeypatch):
    # 50,000 one-iteration jobs on 4,096 GPUs: the bound listed every job's whole
    # configuration set again (3,073 products a job), 240 of the run's 300 s. Count the
    # products of n GPUs and a configuration's power: one per configuration, not per job.
    import scheduling.simulator.bounds as bounds

    products = []

    class Watt(float):
        def __rmul__(self, n):
            products.append(n)
            return float(self) * n

    listed = bounds._configurations

    def configurations(*args, **kw):
        return [(t, n, Watt(p)) for t, n, p in listed(*args, **kw)]

    monkeypatch.setattr(bounds, "_configurations", configurations)
    jobs = [job(f"j{i}", submit=0.0, iters=3600.0, min_gpus=1, max_gpus=2) for i in range(50)]

    bound = jct_bound(jobs, **TINY)

    n_configurations = len(configurations(TINY["catalog"], jobs[0], "A100", (2,)))
    products.clear()
    bound_again = jct_bound(jobs, **TINY)
    assert 0 < len(products) <= n_configurations
    (first, *_) = bound.jobs
    assert first.least_gpu_energy_j == bound_again.jobs[0].least_gpu_energy_j > 0
