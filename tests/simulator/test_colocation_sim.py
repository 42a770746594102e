"""The engine's GPU sharing (EaCO) and congestion (netdelay), worked out by hand.

Perf model (analytic, written here): one iteration takes 1 s on one GPU, 1 s on two
GPUs of one node and 1.5 s on two GPUs of two nodes; a busy GPU draws 250 W, an idle
one 50 W. Co-location table (written here): ResNet-50 at 32 per GPU next to
Recommendation at 32 per GPU keeps 80% and 50% of their speeds.
"""

from __future__ import annotations

import json

import pytest

from scheduling.core.colocation import ColocationModel
from scheduling.core.types import Allocation, Cluster, Gpu, GpuConfig, Job, Node, Plan
from scheduling.simulator.engine import SimConfig, SimulationError, Simulator
from scheduling.simulator.metrics import summarise


class Model:
    gpu_model = "X"
    idle_power_w = 50.0
    clocks_mhz = (1000,)
    batch_sizes = (32, 64)

    def __init__(self, workload: str) -> None:
        self.workload = workload

    def iter_time_s(self, cfg: GpuConfig) -> float:
        return 1.5 if len(cfg.gpus_per_node) > 1 else 1.0

    def power_w(self, cfg: GpuConfig) -> float:
        return 250.0

    def energy_per_iter_j(self, cfg: GpuConfig) -> float:
        return cfg.n_gpus * self.power_w(cfg) * self.iter_time_s(cfg)


class Catalog:
    def get(self, workload: str, gpu_model: str) -> Model:
        return Model(workload)

    def workloads(self) -> tuple[str, ...]:
        return ("ncf", "resnet50")


R50, REC = "ResNet-50 (batch size 32)", "Recommendation (batch size 32)"
COLOCATION = ColocationModel(
    gpu="test",
    ratios={(R50, REC, 1): (0.8, 0.5), (REC, R50, 1): (0.5, 0.8)},
    batches={"ResNet-50": (32,), "Recommendation": (32,)},
)


def _cluster(nodes: int) -> Cluster:
    return Cluster(
        nodes=tuple(
            Node(name=f"n{i}", switch="s0", gpus=(Gpu(f"n{i}/0", f"n{i}", 0, "X"),))
            for i in range(nodes)
        )
    )


def _job(job_id: str, workload: str, iters: float, batch: int = 32) -> Job:
    return Job(job_id, workload, "t", 0.0, iters, batch)


class Scripted:
    """Gives every active job the same fixed GPUs; remembers the snapshots."""

    def __init__(self, gpus: dict[str, tuple[str, ...]], share: int = 2) -> None:
        self.gpus = gpus
        self.share = share
        self.seen = []

    def __call__(self, snapshot, now):
        self.seen.append((now, snapshot))
        allocs = {j.job_id: Allocation(self.gpus[j.job_id], j.global_batch) for j in snapshot.jobs}
        return Plan(allocations=allocs, waiting={}, max_jobs_per_gpu=self.share)


def _run(jobs, planner, nodes=1, **cfg) -> Simulator:
    return Simulator(
        jobs,
        cluster=_cluster(nodes),
        catalog=Catalog(),
        planner=planner,
        config=SimConfig(round_length_s=500.0, **cfg),
        colocation=COLOCATION,
    )


def test_shared_gpu_runs_each_job_at_its_measured_ratio_and_draws_less_than_the_sum():
    # Given ResNet-50 (800 iters) and Recommendation (500 iters) sharing the one GPU
    planner = Scripted({"a": ("n0/0",), "b": ("n0/0",)})
    result = _run([_job("a", "resnet50", 800.0), _job("b", "ncf", 500.0)], planner).run()
    # Then A runs at 0.8 it/s and B at 0.5 it/s: both finish at 1000 s
    finish = {r.spec.job_id: r.finish_s for r in result.jobs}
    assert finish == {"a": pytest.approx(1000.0), "b": pytest.approx(1000.0)}
    # and the GPU draws 50 + 0.8 * 200 + 0.5 * 200 = 310 W, not 500 W, for 1000 s
    assert result.energy_j == pytest.approx(310_000.0)
    assert {r.spec.job_id: r.energy_j for r in result.jobs} == {
        "a": pytest.approx(185_000.0),
        "b": pytest.approx(125_000.0),
    }
    assert summarise(result)["n_colocated_jobs"] == 2
    # and the one GPU counts once in the timeline and the utilisation, though two jobs hold it
    assert [s.busy_gpus for s in result.timeline] == [1, 1]
    assert result.busy_gpu_s == pytest.approx(1000.0)
    assert summarise(result)["gpu_utilisation"] == pytest.approx(1.0)


def test_a_shared_gpu_is_busy_while_either_job_holds_it():
    # B finishes at 500 s, A holds the GPU alone to 750 s: busy 750 s, not 500 + 750
    planner = Scripted({"a": ("n0/0",), "b": ("n0/0",)})
    result = _run([_job("a", "resnet50", 500.0), _job("b", "other", 250.0)], planner).run()
    assert result.busy_gpu_s == pytest.approx(750.0)


def test_early_observation_reaches_the_next_snapshot():
    planner = Scripted({"a": ("n0/0",), "b": ("n0/0",)})
    _run([_job("a", "resnet50", 800.0), _job("b", "ncf", 500.0)], planner).run()
    first, second = planner.seen[0][1], planner.seen[1][1]
    assert [j.observed_slowdown for j in first.jobs] == [None, None]
    assert planner.seen[1][0] == 500.0
    assert {j.job_id: j.observed_slowdown for j in second.jobs} == {
        "a": pytest.approx(0.25),
        "b": pytest.approx(1.0),
    }


def test_unmeasured_pair_alternates_at_half_speed():
    # "other" has no Gavel job type: both run at half speed while they share.
    planner = Scripted({"a": ("n0/0",), "b": ("n0/0",)})
    result = _run([_job("a", "resnet50", 500.0), _job("b", "other", 250.0)], planner).run()
    finish = {r.spec.job_id: r.finish_s for r in result.jobs}
    # B: 250 iters at 0.5 it/s = 500 s; A: 250 iters by then, the rest alone at 1 it/s.
    assert finish == {"a": pytest.approx(750.0), "b": pytest.approx(500.0)}


def test_noise_is_seeded():
    def run(seed):
        planner = Scripted({"a": ("n0/0",), "b": ("n0/0",)})
        sim = _run(
            [_job("a", "resnet50", 800.0), _job("b", "ncf", 500.0)],
            planner,
            colocation_noise=0.3,
            seed=seed,
        )
        return [r.finish_s for r in sim.run().jobs]

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_plan_over_the_sharing_limit_is_refused():
    planner = Scripted({"a": ("n0/0",), "b": ("n0/0",)}, share=1)
    sim = _run([_job("a", "resnet50", 800.0), _job("b", "ncf", 500.0)], planner)
    with pytest.raises(SimulationError, match="more than one job"):
        sim.run()


def test_congestion_scales_inter_node_time_and_is_reported_as_overhead():
    # Given a 2-GPU job spread over two nodes (1.5 s per iteration; 1.0 consolidated)
    planner = Scripted({"a": ("n0/0", "n1/0")}, share=1)
    result = _run([_job("a", "resnet50", 100.0)], planner, nodes=2, congestion=3.0).run()
    # Then an iteration takes 1 + 3 * 0.5 = 2.5 s: 250 s in all
    assert result.jobs[0].finish_s == pytest.approx(250.0)
    # each GPU draws 50 + 200 * 1.5 / 2.5 = 170 W
    assert result.energy_j == pytest.approx(2 * 170.0 * 250.0)
    # and 60% of each iteration is communication beyond the consolidated time
    assert result.jobs[0].comm_overhead_gpu_s == pytest.approx(0.6 * 2 * 250.0)
    assert summarise(result)["comm_overhead_gpu_h"] == pytest.approx(300.0 / 3600.0)


def test_consolidated_job_has_no_communication_overhead():
    planner = Scripted({"a": ("n0/0",)}, share=1)
    result = _run([_job("a", "resnet50", 100.0)], planner, nodes=1, congestion=3.0).run()
    assert result.jobs[0].finish_s == pytest.approx(100.0)
    assert result.jobs[0].comm_overhead_gpu_s == 0.0


def test_cli_passes_congestion_to_the_engine_and_reports_overhead(tmp_path):
    from scheduling.simulator.cli import main

    args = [
        "--trace",
        "data/trace/elasticflow_philly_876.csv",
        "--cluster",
        "benchmarks/clusters/n4g8_a100.json",
        "--max-jobs",
        "30",
        "--arrival-scale",
        "0.1",
        "--no-progress",
    ]
    spread = ["--policy", "fifo", "--out", str(tmp_path / "a")]
    assert main([*args, *spread, "--congestion", "1"]) == 0
    assert main([*args, "--policy", "fifo", "--out", str(tmp_path / "b"), "--congestion", "3"]) == 0
    # The learned run's summary (the oracle's is *_fifo_oracle_summary.json).
    (one,) = (tmp_path / "a").glob("*_fifo_summary.json")
    (three,) = (tmp_path / "b").glob("*_fifo_summary.json")
    low = json.loads(one.read_text())["summary"]
    high = json.loads(three.read_text())["summary"]
    # First-fit spreads some jobs over nodes; congestion makes their overhead grow.
    assert high["comm_overhead_gpu_h"] > low["comm_overhead_gpu_h"] > 0.0


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("0", "'0' must be a finite positive number"),
        # spread jobs crawled: a 25-job elastic run on 15 one-GPU nodes never ended
        ("1e300", "'1e300' is more than 100"),
    ],
)
def test_cli_refuses_non_positive_or_absurd_congestion(tmp_path, capsys, value, line):
    from scheduling.simulator.cli import main

    out = tmp_path / "none"
    code = main(
        [
            "--trace",
            "data/trace/elasticflow_philly_876.csv",
            "--cluster",
            "benchmarks/clusters/n4g8_a100.json",
            "--policy",
            "fifo",
            "--congestion",
            value,
            "--out",
            str(out),
        ]
    )
    assert code == 2
    assert capsys.readouterr().err == f"error: argument --congestion: {line}\n"
    assert not out.exists()


def test_cli_refuses_a_colocation_noise_that_overflows(tmp_path, capsys):
    from scheduling.simulator.cli import main

    # Given ten 1-GPU jobs EaCO pairs on 2 GPUs, a sigma of 1000 ended the run with an
    # OverflowError (exp of the first pair's draw) and a traceback
    trace = tmp_path / "elasticflow_pairs.csv"
    trace.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n"
        + "".join(f"{i},{10 * i},resnet50_cifar10,64,1,20000\n" for i in range(10))
    )
    cluster = tmp_path / "c.json"
    cluster.write_text(
        '{"name": "two", "gpu_model": "A100", "switches": 1, "nodes_per_switch": 1, '
        '"gpus_per_node": 2}'
    )
    out = tmp_path / "none"
    argv = ["--trace", str(trace), "--cluster", str(cluster), "--policy", "eaco"]
    argv += ["--knowledge", "oracle", "--no-progress", "--out", str(out)]

    assert main([*argv, "--colocation-noise", "1000"]) == 2

    assert capsys.readouterr().err == (
        "error: argument --colocation-noise: '1000' is more than 1 (a log-normal sigma)\n"
    )
    assert not out.exists()
    assert main([*argv, "--colocation-noise", "1"]) == 0


def test_job_rows_carry_communication_overhead_and_shared_time():
    from scheduling.simulator.metrics import job_rows

    planner = Scripted({"a": ("n0/0",), "b": ("n0/0",)})
    rows = job_rows(_run([_job("a", "resnet50", 800.0), _job("b", "ncf", 500.0)], planner).run())
    assert [(r["job_id"], r["shared_s"], r["comm_overhead_gpu_s"]) for r in rows] == [
        ("a", pytest.approx(1000.0), 0.0),
        ("b", pytest.approx(1000.0), 0.0),
    ]
