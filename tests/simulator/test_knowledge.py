"""The simulator's knowledge modes: ``oracle`` (the catalog) and ``learned`` (each job's
online model from simulated observations), and reports that carry both."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from scheduling.core.types import Allocation
from scheduling.simulator.cli import UsageError, build_parser, execute
from scheduling.simulator.engine import SimConfig
from scheduling.simulator.knowledge import LearnedKnowledge
from scheduling.simulator.metrics import summarise
from scheduling.simulator.scenario import load_scenario, run_policy

DATA = Path(__file__).resolve().parents[2] / "data"
TRACE = DATA / "trace" / "pollux_workload-2.csv"
CLUSTER = DATA / "clusters" / "n16g4_t4.json"


@pytest.fixture(scope="module")
def scenario():
    return load_scenario(TRACE, CLUSTER, max_jobs=16)


def _run(scenario, policy, **config):
    scenario = replace(scenario, config=replace(scenario.config, **config))
    return run_policy(scenario, policy)


def _outcome(result):
    return [(r.spec.job_id, r.finish_s, r.energy_j, r.n_resizes) for r in result.jobs]


def test_learned_runs_are_deterministic_for_a_seed(scenario):
    # given noisy observations, seeded
    a = _run(scenario, "zeus", knowledge="learned", measurement_noise=0.2, seed=3)
    b = _run(scenario, "zeus", knowledge="learned", measurement_noise=0.2, seed=3)
    # then the same seed gives the very same run, job by job
    assert _outcome(a) == _outcome(b)
    assert summarise(a) == summarise(b)
    assert a.jobs[0].finish_s is not None


def test_learned_without_noise_from_the_own_workload_decides_as_the_oracle(scenario):
    # given exact observations and each job starting from its own workload's catalog model
    # (and no exploration, which deliberately runs other limits than the oracle's)
    oracle = _run(scenario, "zeus", knowledge="oracle")
    learned = _run(
        scenario,
        "zeus",
        knowledge="learned",
        measurement_noise=0.0,
        hide_workloads=False,
        exploration_budget=None,
    )
    # then the learned models predict what runs, so every decision and outcome is the oracle's
    assert [(j, n) for j, _, _, n in _outcome(learned)] == [
        (j, n) for j, _, _, n in _outcome(oracle)
    ]
    for (_, f_l, e_l, _), (_, f_o, e_o, _) in zip(_outcome(learned), _outcome(oracle), strict=True):
        assert f_l == pytest.approx(f_o, rel=1e-6)
        assert e_l == pytest.approx(e_o, rel=1e-6)


def test_noisy_hidden_workloads_change_what_policies_decide(scenario):
    # given the same trace, policies that see only learned models of hidden workloads
    oracle = _run(scenario, "zeus", knowledge="oracle")
    learned = _run(scenario, "zeus", knowledge="learned", measurement_noise=0.05)
    # then the outcome differs from perfect knowledge (and every job still finishes)
    assert _outcome(learned) != _outcome(oracle)
    assert summarise(learned)["n_unfinished"] == 0


def test_a_hidden_workload_starts_from_another_workload_then_from_its_profile(scenario):
    knowledge = LearnedKnowledge(scenario.catalog, measurement_noise=0.0, seed=0)
    first, second = _two_of_a_workload(scenario)
    gpu = "T4"
    # when no job of its workload has run, the prior is another catalog workload's model
    prior, label = knowledge.prior(first, gpu)
    assert prior.workload != first.workload
    assert label.endswith("(nearest other)")
    model = knowledge.job_perf([first], [gpu])[(first.job_id, gpu)]
    assert model.estimated
    # when the first job has run (observed at its own truth) and finished
    truth = scenario.catalog.get(first.workload, gpu)
    alloc = Allocation(gpu_ids=("g0",), global_batch=first.global_batch)
    cfg_time = truth.iter_time_s(_cfg(alloc))
    for _ in range(3):
        knowledge.observe(first, gpu, alloc, (1,), cfg_time, truth.power_w(_cfg(alloc)))
    learned = knowledge.job_perf([first], [gpu])[(first.job_id, gpu)]
    assert not learned.estimated
    assert learned.iter_time_s(_cfg(alloc)) == pytest.approx(cfg_time, rel=0.05)
    knowledge.finish(first)
    # then the next job of the workload starts from what the first learned
    prior2, label2 = knowledge.prior(second, gpu)
    assert label2.startswith(f"profile {first.workload}@T4 (1 jobs)")
    assert prior2.workload == first.workload
    assert prior2.iter_time_s(_cfg(alloc)) == pytest.approx(cfg_time, rel=0.05)
    assert prior.iter_time_s(_cfg(alloc)) != pytest.approx(cfg_time, rel=0.05)


def test_a_workload_starting_from_its_own_catalog_model_is_not_a_guess(scenario):
    # given workloads not hidden: a job of a catalog workload starts from the catalog's own
    # model of it, as the live service uses that model as it is; a prior that is measured,
    # not estimated (policies do not hold it at its minimum until it reports)
    first, _ = _two_of_a_workload(scenario)
    own = LearnedKnowledge(scenario.catalog, hide_workloads=False)
    model = own.job_perf([first], ["T4"])[(first.job_id, "T4")]
    assert own.prior(first, "T4")[1] == f"catalog {first.workload}"
    assert model.prior_measured and not model.estimated
    hidden = LearnedKnowledge(scenario.catalog)
    assert hidden.job_perf([first], ["T4"])[(first.job_id, "T4")].estimated


def test_a_profile_measured_at_two_per_gpu_batches_backs_the_next_jobs_prediction(scenario):
    knowledge = LearnedKnowledge(scenario.catalog, measurement_noise=0.0, seed=0)
    jobs = [j for j in scenario.jobs if j.workload == _two_of_a_workload(scenario)[0].workload]
    gpu = "T4"
    truth = scenario.catalog.get(jobs[0].workload, gpu)

    def run_and_finish(job, n_gpus):
        alloc = Allocation(
            gpu_ids=tuple(f"g{i}" for i in range(n_gpus)), global_batch=job.global_batch
        )
        cfg = replace(_cfg(alloc), gpus_per_node=(n_gpus,))
        for _ in range(3):
            t, p = truth.iter_time_s(cfg), truth.power_w(cfg)
            knowledge.observe(job, gpu, alloc, (n_gpus,), t, p)
        knowledge.finish(job)

    # given a first job of the workload measured on one GPU: its profile knows one per-GPU batch
    run_and_finish(jobs[0], 1)
    # then the next job, before it reports, is still known by a prior alone (its upgrades to
    # more GPUs, smaller per-GPU batches, would be the first prior's guess)
    assert knowledge.job_perf([jobs[1]], [gpu])[(jobs[1].job_id, gpu)].estimated

    # when a job of the same global batch is measured on two GPUs (half the per-GPU batch)
    # and finishes
    second = next(j for j in jobs[1:] if j.global_batch == jobs[0].global_batch)
    run_and_finish(second, 2)

    # then the next job's model is backed by what the profile measured, before it reports
    model = knowledge.job_perf([jobs[-1]], [gpu])[(jobs[-1].job_id, gpu)]
    assert model.prior_measured and not model.estimated
    assert model.n_time_obs == 0


def _two_of_a_workload(scenario):
    by: dict[str, list] = {}
    for j in scenario.jobs:
        by.setdefault(j.workload, []).append(j)
    return next(js[:2] for js in by.values() if len(js) >= 2)


def _cfg(alloc):
    from scheduling.core.types import GpuConfig

    return GpuConfig(n_gpus=alloc.n_gpus, global_batch=alloc.global_batch, gpus_per_node=(1,))


def _simulate(tmp_path, *extra):
    args = build_parser().parse_args(
        [
            "--trace", str(TRACE), "--cluster", str(CLUSTER), "--max-jobs", "10",
            "--no-progress", "--out", str(tmp_path), *extra,
        ]
    )  # fmt: skip
    execute(args, stdout=open(tmp_path / "stdout.txt", "w"))  # noqa: SIM115
    report = json.loads((tmp_path / "pollux_workload-2_n16g4_t4_report.json").read_text())
    return report, (tmp_path / "stdout.txt").read_text()


def test_simulate_reports_learned_and_oracle_for_every_run(tmp_path):
    report, text = _simulate(tmp_path, "--policy", "powerflow", "--match-baseline", "fifo")
    # then each run is learned at the top (what existing readers take) with oracle beside it
    for name in ("fifo", "powerflow@fifo-energy"):
        run = report["runs"][name]
        assert run["knowledge"] == "learned"
        assert run["oracle"]["knowledge"] == "oracle"
        assert run["learned_vs_oracle"]["avg_jct"] == pytest.approx(
            run["avg_jct_s"] / run["oracle"]["avg_jct_s"]
        )
        assert run["learned_vs_oracle"]["energy"] == pytest.approx(
            run["energy_kwh"] / run["oracle"]["energy_kwh"]
        )
        assert f"{name} [learned]" in text and f"{name} [oracle]" in text
    (line,) = report["comparisons"]
    assert line["knowledge"] == "learned" and line["oracle"]["knowledge"] == "oracle"
    assert line["oracle"]["baseline_energy_kwh"] == pytest.approx(
        report["runs"]["fifo"]["oracle"]["energy_kwh"]
    )
    assert report["scenario"]["knowledge"] == ["learned", "oracle"]
    assert report["scenario"]["measurement_noise"] == 0.05
    # each mode's per-job results are written, the oracle's under its own name
    assert (tmp_path / "pollux_workload-2_n16g4_t4_fifo_jobs.csv").exists()
    assert (tmp_path / "pollux_workload-2_n16g4_t4_fifo_oracle_jobs.csv").exists()


def test_simulate_with_one_knowledge_mode_reports_that_mode_alone(tmp_path):
    report, text = _simulate(tmp_path, "--policy", "fifo", "--knowledge", "oracle")
    run = report["runs"]["fifo"]
    assert run["knowledge"] == "oracle"
    assert "oracle" not in run and "learned_vs_oracle" not in run
    assert "[learned]" not in text


def test_simulate_refuses_a_negative_measurement_noise(tmp_path):
    with pytest.raises(UsageError, match="--measurement-noise"):
        build_parser().parse_args(
            ["--trace", str(TRACE), "--cluster", str(CLUSTER), "--policy", "fifo",
             "--measurement-noise", "-0.1"]
        )  # fmt: skip
    with pytest.raises(ValueError, match="measurement_noise"):
        SimConfig(measurement_noise=float("nan"))
    with pytest.raises(ValueError, match="knowledge"):
        SimConfig(knowledge="psychic")


def test_learned_zeus_explores_power_limits_within_its_bound_and_records_it(scenario, tmp_path):
    from scheduling.simulator.metrics import EXPLORATION_COLUMNS, job_rows, write_results

    # given zeus on learned knowledge, where a new job's first rounds try power limits
    result = _run(scenario, "zeus", knowledge="learned", measurement_noise=0.02)
    records = [r.exploration for r in result.jobs if r.exploration]
    assert len(records) == len([r for r in result.jobs if r.first_start_s is not None])
    # then every job explored, each within its bound (3 % of its predicted JCT), and one
    # that ran long enough tried several limits and settled on one
    for rec in records:
        assert rec["spent_s"] <= rec["budget_s"] + 1e-9
        assert rec["budget_frac"] == 0.03
    done = [rec for rec in records if rec["status"] == "done"]
    assert done and all(rec["result_w"] is not None for rec in done)
    assert max(len(rec["tried"]) for rec in records) >= 3
    # and the per-job CSV says what each job tried and what it cost
    rows = job_rows(result)
    assert all(col in rows[0] for col in EXPLORATION_COLUMNS)
    explored = [row for row in rows if row["exploration_limits_w"]]
    assert explored and all(row["exploration_s"] >= 0 for row in explored)
    paths = write_results(result, tmp_path, name="zeus", meta={})
    assert "exploration_limits_w" in paths["jobs"].read_text().splitlines()[0]


def test_learned_zeus_with_the_batch_probe_runs_jobs_once_at_twice_their_batch(tmp_path):
    from scheduling.simulator.metrics import job_rows
    from scheduling.simulator.traces import with_batch_range

    # given jobs that may run up to twice their batch (and know their efficiency)
    base = load_scenario(TRACE, CLUSTER, max_jobs=16)
    scenario = replace(base, jobs=with_batch_range(base.jobs, 2))
    assert all(j.noise_scale is not None for j in scenario.jobs)
    off = _run(scenario, "zeus", knowledge="learned", measurement_noise=0.02)
    on = _run(scenario, "zeus", knowledge="learned", measurement_noise=0.02,
              exploration_batch_probe=True)  # fmt: skip
    # then without the probe no record has one; with it some jobs ran one at twice their
    # batch, each within its bound, and the per-job CSV marks it
    assert not any("other_batch" in (r.exploration or {}) for r in off.jobs)
    probed = [r.exploration for r in on.jobs if (r.exploration or {}).get("other_batch")]
    ran = [rec for rec in probed if rec["other_batch"]["runnable"] is not None]
    assert ran
    for rec in ran:
        other = rec["other_batch"]
        assert other["batch"] == 2 * other["from_batch"]
        assert other["runnable"] is True  # the simulator's jobs always fit
        assert rec["spent_s"] <= rec["budget_s"] + 1e-9
    marked = [row for row in job_rows(on) if "/b" in (row["exploration_limits_w"] or "")]
    assert len(marked) == len(ran)


@pytest.mark.parametrize(("policy", "knowledge"), [("zeus", "oracle"), ("fifo", "learned")])
def test_exploration_leaves_oracle_runs_and_policies_that_do_not_explore_alone(
    scenario, policy, knowledge
):
    from scheduling.simulator.metrics import EXPLORATION_COLUMNS, job_rows

    on = _run(scenario, policy, knowledge=knowledge, measurement_noise=0.02)
    off = _run(scenario, policy, knowledge=knowledge, measurement_noise=0.02,
               exploration_budget=None)  # fmt: skip
    assert _outcome(on) == _outcome(off)
    assert summarise(on) == summarise(off)
    assert not any(r.exploration for r in on.jobs)
    assert not any(col in job_rows(on)[0] for col in EXPLORATION_COLUMNS)


def test_a_job_naming_its_parameter_count_starts_from_the_workload_nearest_in_size(scenario):
    # given published sizes (data/perf/param_counts.csv): bert 110M, yolov3 61.9M,
    # imagenet 25.6M, cifar10 11.2M
    counts = {"bert": 110e6, "yolov3": 61.9e6, "imagenet": 25.6e6, "cifar10": 11.2e6}
    knowledge = LearnedKnowledge(scenario.catalog, param_counts=counts)
    job = next(j for j in scenario.jobs if j.workload == "imagenet")
    # then imagenet (hidden) starts from cifar10 (2.3x), not yolov3 (2.4x) or bert (4.3x),
    # before any observation and at its first
    prior, label = knowledge.prior(job, "T4")
    assert (prior.workload, label) == ("cifar10", "catalog cifar10 (nearest in parameters)")
    assert knowledge.prior(job, "T4", first=None)[0].workload == "cifar10"
    # a workload without a published size keeps the rule without it
    ncf = next(j for j in scenario.jobs if j.workload not in counts)
    assert knowledge.prior(ncf, "T4")[1].endswith("(nearest other)")
    # and by default (PARAM_PRIOR off, measured as no better: docs/benchmarks.md) no size
    assert LearnedKnowledge(scenario.catalog).prior(job, "T4")[1].endswith("(nearest other)")


def test_a_job_seen_in_a_configuration_its_fit_lacks_is_refitted():
    # A vgg16 job (hidden: its prior is another workload, which stops gaining at four
    # GPUs) runs on one A100, then on four. Its second configuration is new to its fit,
    # so the job is refitted, as the live service refits each round: the eight GPUs it
    # has not run on are then predicted faster than four, as they are (51 against 67 ms).
    # Before, the model waited for four times the configurations (O(log n) fits a job)
    # and kept the one-GPU fit's shape: eight GPUs looked slower, an elastic policy never
    # tried them, and a lone vgg16 job on 128 GPUs took 489 h where the oracle's took 263.
    from scheduling.core.perf_models import load_catalog
    from scheduling.core.types import GpuConfig, Job

    catalog = load_catalog()
    truth = catalog.get("vgg16", "A100")
    job = Job(
        job_id="j", workload="vgg16", team="t", submit_time_s=0.0, total_iters=1e6,
        global_batch=64, requested_gpus=4, min_gpus=1, max_gpus=64,
    )  # fmt: skip
    knowledge = LearnedKnowledge(catalog, measurement_noise=0.0, seed=0)

    def cfg(n):
        return GpuConfig(n_gpus=n, global_batch=64, gpus_per_node=(n,))

    def run_on(n):
        alloc = Allocation(gpu_ids=tuple(f"g{i}" for i in range(n)), global_batch=64)
        time_s, power_w = truth.iter_time_s(cfg(n)), truth.power_w(cfg(n))
        knowledge.observe(job, "A100", alloc, (n,), time_s, power_w)
        return knowledge.job_perf([job], ["A100"])[("j", "A100")]

    run_on(1)
    fits = knowledge.n_fits
    model = run_on(4)

    assert knowledge.n_fits == fits + 1
    assert model.iter_time_s(cfg(8)) < model.iter_time_s(cfg(4))
    # (61.7 ms against 51.1: the all-reduce keeps half the one-GPU level,
    # online_model.NETWORK_LEVEL; carrying all of it gave 60.1 ms)
    assert model.iter_time_s(cfg(8)) == pytest.approx(truth.iter_time_s(cfg(8)), rel=0.25)
    # the same configuration again adds weight, not a configuration: no refit
    run_on(4)
    assert knowledge.n_fits == fits + 1


@pytest.mark.parametrize("knowledge", ["learned", "oracle"])
@pytest.mark.parametrize("policy", ["fifo", "elastic", "powerflow"])
def test_on_two_gpu_models_no_job_is_placed_where_the_truth_lacks_its_workload(policy, knowledge):
    # given a cluster of A100s and T4s and jobs of gpt2 and resnet50, which the catalog (the
    # simulator's truth) has on the A100 only, free to run on either model; learned knowledge
    # would size them from a prior on the T4 too (another workload's), a model the simulator
    # has no truth to advance them by
    from scheduling.core.perf_models import load_catalog
    from scheduling.core.types import Cluster, Gpu, Job, Node
    from scheduling.simulator.engine import Simulator
    from scheduling.simulator.scenario import core_planner

    catalog = load_catalog()
    assert not catalog.has("gpt2", "T4") and not catalog.has("resnet50", "T4")
    nodes = tuple(
        Node(name=n, switch="s0", gpus=tuple(Gpu(f"{n}/{i}", n, i, model) for i in range(k)))
        for n, model, k in (("t4", "T4", 8), ("a100", "A100", 2))
    )
    jobs = [
        Job(job_id=f"{w}{k}", workload=w, team="t", submit_time_s=60.0 * k, total_iters=20000.0,
            global_batch=b, requested_gpus=2, min_gpus=1, max_gpus=4)
        for k, (w, b) in enumerate([("gpt2", 128), ("resnet50", 128)] * 4)
    ]  # fmt: skip
    config = SimConfig(knowledge=knowledge, measurement_noise=0.05, seed=1)
    inner, placed = core_planner(policy), set()

    def planner(snapshot, now):
        plan = inner(snapshot, now)
        placed.update(g.split("/")[0] for a in plan.allocations.values() for g in a.gpu_ids)
        return plan

    sim = Simulator(
        jobs, cluster=Cluster(nodes=nodes), catalog=catalog, planner=planner, config=config
    )

    # when it runs, then every job finishes, on A100s only
    result = sim.run()
    assert len(result.jobs) == len(jobs)
    assert all(r.finish_s is not None for r in result.jobs)
    assert placed == {"a100"}


def test_without_a_carbon_zone_the_printed_carbon_is_not_a_zero(tmp_path):
    # A new user's walkthrough: a run without --carbon-zone printed "carbon 0.0 kg" beside
    # 25.2 kWh, which reads as clean power; nothing priced the kWh.
    def printed(*extra):
        args = build_parser().parse_args(
            ["--trace", str(TRACE), "--cluster", str(CLUSTER), "--max-jobs", "6",
             "--policy", "fifo", "--knowledge", "oracle", "--no-progress",
             "--out", str(tmp_path), *extra]
        )  # fmt: skip
        out = tmp_path / "stdout.txt"
        with open(out, "w") as stdout:
            execute(args, stdout=stdout)
        return out.read_text()

    text = printed()
    (line,) = [x for x in text.splitlines() if x.startswith("fifo [oracle]")]
    assert "carbon       n/a" in line and "0.0 kg" not in line
    assert "carbon: n/a without --carbon-zone" in text
    (priced,) = [x for x in printed("--carbon-zone", "ES").splitlines() if x.startswith("fifo")]
    co2 = float(priced.split("carbon")[1].split("kg")[0])
    assert co2 > 0


def test_a_matched_comparison_names_its_unit_as_the_run_lines_do(tmp_path):
    # the walkthrough's comparison line read "spent 19.3 of 25.2 kwh inside the period"
    args = build_parser().parse_args(
        ["--trace", str(TRACE), "--cluster", str(CLUSTER), "--max-jobs", "6",
         "--policy", "powerflow", "--match-baseline", "fifo", "--knowledge", "oracle",
         "--no-progress", "--out", str(tmp_path)]
    )  # fmt: skip
    out = tmp_path / "stdout.txt"
    with open(out, "w") as stdout:
        execute(args, stdout=stdout)
    (line,) = [x for x in out.read_text().splitlines() if "at equal energy" in x]
    assert " kWh inside the period" in line, line
