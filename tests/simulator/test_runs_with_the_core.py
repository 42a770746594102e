"""The simulator driving the real core (plan_round, policies, fitted perf catalog) on
real traces: determinism, budget accounting, matched budgets and the command line."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from scheduling.simulator.cli import main
from scheduling.simulator.compare import matched_budget
from scheduling.simulator.engine import BudgetSpec, SimConfig
from scheduling.simulator.scenario import (
    core_planner,
    load_scenario,
    run_policy,
    with_teams_by_workload,
)

DATA = Path(__file__).resolve().parents[2] / "data"
TRACE = DATA / "trace" / "pollux_workload-1.csv"
CLUSTER = DATA / "clusters" / "n16g4_t4.json"


@pytest.fixture(scope="module")
def scenario():
    return load_scenario(TRACE, CLUSTER, carbon_zone="ES", config=SimConfig(stall_limit_s=86400))


@pytest.fixture(scope="module")
def fifo_result(scenario):
    return run_policy(scenario, "fifo")


def outcome(result):
    return [(r.spec.job_id, r.first_start_s, r.finish_s, r.energy_j, r.co2_g) for r in result.jobs]


@pytest.mark.parametrize("policy", ["fifo", "powerflow"])
def test_the_same_inputs_give_the_same_run(scenario, policy):
    budget = BudgetSpec(period_end_s=86400.0, energy_limit_j=50 * 3.6e6)
    first = run_policy(scenario, policy, budget=budget)
    second = run_policy(scenario, policy, budget=budget)
    assert outcome(first) == outcome(second)
    assert (first.energy_j, first.co2_g, first.end_s) == (
        second.energy_j,
        second.co2_g,
        second.end_s,
    )
    assert all(r.finish_s is not None for r in first.jobs)


@pytest.mark.parametrize(("policy", "kind"), [("powerflow", "energy"), ("greenflow", "carbon")])
@pytest.mark.parametrize("share", [0.5, 1.0])
def test_no_budget_period_is_overspent_and_the_next_period_takes_over(
    scenario, fifo_result, policy, kind, share
):
    # Given a share of what fifo spent as the budget per period of a third of fifo's
    # makespan (so the run spans several successive periods)
    limit = share * (fifo_result.energy_j if kind == "energy" else fifo_result.co2_g)
    period_s = fifo_result.end_s / 3
    budget = (
        BudgetSpec(period_end_s=period_s, energy_limit_j=limit)
        if kind == "energy"
        else BudgetSpec(period_end_s=period_s, co2_limit_g=limit)
    )
    seen = []
    inner = core_planner(policy)

    def recording(snapshot, now):
        (b,) = snapshot.budgets  # always exactly one period in force: none runs unbudgeted
        seen.append((now, b))
        return inner(snapshot, now)

    # When the budget-aware policy runs with it
    result = run_policy(scenario, policy, budget=budget, planner=recording)

    # then every snapshot carried the period in force and exactly what it had spent
    for now, b in seen:
        k = int(now // period_s)
        assert (b.period_start_s, b.period_end_s) == pytest.approx(
            (k * period_s, (k + 1) * period_s)
        )
        assert b.budget_id == ("simulation" if k == 0 else f"simulation@{k}")
        before = [s for s in result.timeline if b.period_start_s <= s.t0_s and s.t1_s <= now]
        assert b.energy_used_j == pytest.approx(sum(s.energy_j for s in before), rel=1e-9)
        assert b.co2_used_g == pytest.approx(sum(s.co2_g for s in before), rel=1e-9)
    # and no stretch crosses a period boundary, so each period's spend is exact
    for s in result.timeline:
        assert int(s.t0_s // period_s) == int(max(s.t1_s - 1e-6, s.t0_s) // period_s)
    periods = result.budget_periods
    assert sum(p.energy_j for p in periods) == pytest.approx(result.energy_j, rel=1e-9)
    assert len(periods) >= 3
    # and no period spent more than its limit
    assert max(p.share for p in periods) <= 1.0 + 1e-9
    assert all(r.finish_s is not None for r in result.jobs)


def test_matched_energy_comparison_reports_both_spends(scenario, fifo_result):
    comparison = matched_budget(
        scenario, baseline="fifo", candidate="powerflow", baseline_result=fifo_result
    )
    report = comparison.report()
    assert report["budget_energy_kwh"] == pytest.approx(fifo_result.energy_j / 3.6e6)
    assert report["baseline_energy_kwh"] == pytest.approx(fifo_result.energy_j / 3.6e6)
    assert report["candidate_energy_kwh"] == pytest.approx(
        comparison.candidate_result.energy_j / 3.6e6
    )
    base_jct = comparison.baseline_summary["avg_jct_s"]
    cand_jct = comparison.candidate_summary["avg_jct_s"]
    assert report["avg_jct_ratio"] == pytest.approx(base_jct / cand_jct)


def test_cli_writes_csv_json_and_plots(tmp_path, capsys):
    code = main(
        [
            "--trace", str(TRACE), "--cluster", str(CLUSTER), "--policy", "powerflow",
            "--match-baseline", "fifo", "--carbon-zone", "ES", "--max-jobs", "40",
            "--out", str(tmp_path), "--plots", "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    stem = "pollux_workload-1_n16g4_t4"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(
        [f"{stem}_{run}{mode}_{part}" for run in ("fifo", "powerflow@fifo-energy")
         for mode in ("", "_oracle")  # learned, then the oracle's beside it
         for part in ("jobs.csv", "summary.json", "timeline.csv")]
        + [f"{stem}_report.json", f"{stem}_jct_cdf.png", f"{stem}_power_energy.png"]
    )  # fmt: skip
    report = json.loads((tmp_path / f"{stem}_report.json").read_text())
    assert report["scenario"]["jobs"] == 40
    assert set(report["runs"]) == {"fifo", "powerflow@fifo-energy"}
    (comparison,) = report["comparisons"]
    assert comparison["baseline"] == "fifo" and comparison["kind"] == "energy"
    jobs_csv = (tmp_path / f"{stem}_fifo_jobs.csv").read_text().splitlines()
    assert len(jobs_csv) == 41

    # The timeline carries the budget's price where a priced policy set one.
    def prices(run: str) -> list[str]:
        with (tmp_path / f"{stem}_{run}_timeline.csv").open() as handle:
            return [row["budget_price"] for row in csv.DictReader(handle)]

    assert not any(prices("fifo"))
    priced = [float(p) for p in prices("powerflow@fifo-energy") if p]
    assert priced and all(p >= 0 for p in priced)
    assert "avg JCT ratio" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policy", "fifo"], "the following arguments are required: --trace, --cluster"),
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--policy", "fifo", "--round-length-s", "0"], "'0' must be a finite positive number"),
        (["--policy", "fifo", "--round-length-s", "nan"], "'nan' must be a finite positive"),
        (["--policy", "fifo", "--energy-budget-kwh", "inf"], "'inf' must be a finite positive"),
        (["--policy", "fifo", "--restart-cost-s", "NaN"], "'NaN' must be a finite number"),
        (["--policy", "powerflow", "--policy-param", "min_gain=NaN"], "must be a finite number"),
        (["--policy", "powerflow", "--policy-param", "spend_ahead=Infinity"], "finite number"),
        (["--policy", "greenflow", "--match-baseline", "fifo"], "needs --carbon-zone"),
        (
            [
                "--policy",
                "powerflow",
                "--energy-budget-kwh",
                "1",
                "--budget-period-h",
                "1",
                "--round-length-s",
                "7200",
            ],
            "--round-length-s 7200 is longer than the budget period",
        ),  # fmt: skip
        (
            ["--policy", "fifo", "--energy-budget-kwh", "5", "--match-baseline", "fifo"],
            "not allowed",
        ),
        (["--policy", "fifo", "--carbon-zone", "XX"], "cannot read carbon file"),
        (["--policy", "powerflow", "--policy-param", "pricing"], "takes NAME=VALUE"),
        (
            ["--policy", "powerflow", "--policy-param", "bogus=1"],
            "bad --policy-param for powerflow: it takes no 'bogus'; its parameters: ",
        ),
        (
            ["--policy", "powerflow", "--policy-param", "pricing=flase"],
            "pricing takes a value like",
        ),
        (["--policy", "powerflow", "--policy-param", "admission=lifo"], "admission must be"),
        # (each of these ended in a traceback)
        (["--policy", "fifo", "--round-length-s", "1e308"], "'1e308' is more than 86400"),
        (["--policy", "fifo", "--budget-period-h", "1e308"], "'1e308' is more than 87600"),
        (["--policy", "fifo", "--measurement-noise", "1000"], "'1000' is more than 1"),
        (
            ["--policy", "fifo", "--exploration-budget", "50"],
            "--exploration-budget: '50' must be below 1",
        ),
        (
            ["--policy", "powerflow", "--policy-param", "probe_extensions=2.5"],
            "probe_extensions takes a value like",
        ),
        (["--policy", "powerflow", "--policy-param", "clock_levels=2.5"], "at least 1, or None"),
        (["--policy", "powerflow", "--policy-param", "clock_levels=0"], "at least 1, or None"),
        (["--policy", "powerflow", "--policy-param", "restart_s=-100000"], "must be 0 or more"),
        (["--policy", "greenflow", "--policy-param", "lag_release=-1"], "must be 0 or more"),
        (["--policy", "powerflow", "--policy-param", "spend_ahead=-1"], "must be positive"),
        # a count given as a fraction or in exponent form is a number, not a whole one (both
        # said "'0.5' is not a number": a live probe)
        (["--policy", "fifo", "--max-batch-factor", "0.5"], "'0.5' is not a whole number"),
        (["--policy", "fifo", "--max-gpus", "1e3"], "'1e3' is not a whole number"),
        (["--policy", "fifo", "--max-jobs", "x"], "'x' is not a whole number"),
        (["--policy", "fifo", "--round-length-s", "x"], "'x' is not a number"),
    ],
)
def test_bad_arguments_exit_2_with_one_line_and_write_nothing(tmp_path, capsys, argv, message):
    base = [] if argv[0] != "--policy" or "required" in message else []
    full = (
        argv
        if "required" in message
        else ["--trace", str(TRACE), "--cluster", str(CLUSTER), *argv, "--out", str(tmp_path)]
    )
    assert main(base + full) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_trace_the_catalog_cannot_run_on_the_cluster_exits_2_naming_the_workloads(
    tmp_path, capsys
):
    # The catalog advances every simulated job; a workload it has no model of on the
    # cluster's GPU used to wait as no_perf_model until the run stopped as stalled.
    trace = tmp_path / "elasticflow_mixed.csv"
    trace.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n"
        "0,0,llama,8,1,100\n1,10,resnet50,128,1,100\n"
    )
    out = tmp_path / "out"
    a100 = DATA / "clusters" / "n16g8_a100.json"
    argv = ["--trace", str(trace), "--cluster", str(a100), "--policy", "fifo", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no perf model of 'llama' on A100" in err
    assert "resnet50" in err.split("its A100 workloads:")[1]
    assert err.count("\n") == 1
    assert not out.exists()


def test_jobs_too_big_for_the_cluster_end_the_run_when_only_they_are_left(tmp_path, capsys):
    # Under fifo a job runs on the GPUs it asked for: 4 on a 2-GPU node never fit. The run
    # used to go on for a stall limit (a week) of idle draw after the last job that could
    # run, charged to its energy and makespan, and said nothing about why.
    trace = tmp_path / "elasticflow_toobig.csv"
    trace.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n"
        "big,0,resnet50,128,4,100\nsmall,10,resnet50,128,1,1000\nbig2,20,resnet50,128,8,10\n"
    )
    cluster = tmp_path / "n1g2_a100.json"
    cluster.write_text(
        json.dumps(
            {"name": "n1g2", "description": "1 x 2 A100", "gpu_model": "A100", "switches": 1,
             "nodes_per_switch": 1, "gpus_per_node": 2}
        )
    )  # fmt: skip
    argv = ["--trace", str(trace), "--cluster", str(cluster), "--policy", "fifo"]
    assert main([*argv, "--knowledge", "oracle", "--no-progress", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "unfinished 2" in out
    assert "2 job(s) can never run on this cluster under fifo (big, big2)" in out
    assert "it asks for 4 A100 GPU(s) but the cluster has only 2 schedulable" in out
    (summary_file,) = tmp_path.glob("*_fifo_summary.json")
    summary = json.loads(summary_file.read_text())["summary"]
    assert sorted(summary["never_runnable"]) == ["big", "big2"]
    # the run ends when the small job finished, not a week (or a round) later
    (jobs_file,) = tmp_path.glob("*_fifo_jobs.csv")
    small = next(r for r in csv.DictReader(jobs_file.open()) if r["job_id"] == "small")
    assert summary["makespan_s"] == pytest.approx(float(small["finish_s"]))
    assert summary["idle_energy_kwh"] < 1.0


def test_a_cluster_of_a_gpu_model_the_catalog_lacks_exits_2_naming_the_models(tmp_path, capsys):
    # "a100" for "A100" said "no perf model of ... on a100 (its a100 workloads: none)"
    cluster = tmp_path / "lower.json"
    cluster.write_text(
        '{"name": "x", "gpu_model": "a100", "switches": 1, "nodes_per_switch": 1, '
        '"gpus_per_node": 8}'
    )
    trace = DATA / "trace" / "elasticflow_philly_876.csv"
    argv = ["--trace", str(trace), "--cluster", str(cluster), "--policy", "fifo"]
    assert main([*argv, "--no-progress", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "the perf catalog has no GPU model 'a100'" in err
    assert "(its GPU models: A100, T4)" in err
    assert err.count("\n") == 1


def test_carbon_periods_over_because_of_the_idle_draw_are_told_apart(tmp_path, capsys):
    # 64 idle T4s draw 3.84 kWh in 6 h, about 0.6-1 kg in Spain: a 0.6 kg budget is kept in
    # clean periods and cannot be in dirty ones, whatever the plan. GreenFlow on Philly with
    # 40 kg a day in California went 106.4% in the days that were only idle draw, and the
    # run said only "worst spent 106.4%". (Forty jobs: since GreenFlow runs its jobs in a
    # period it cannot keep, the first two finish within the first period, 0.5 h.)
    argv = ["--trace", str(TRACE), "--cluster", str(CLUSTER), "--policy", "greenflow"]
    argv += ["--carbon-zone", "ES", "--carbon-budget-kg", "0.6", "--budget-period-h", "6"]
    argv += ["--max-jobs", "40", "--knowledge", "oracle", "--no-progress", "--out", str(tmp_path)]
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "budget period(s)" in x)
    found = re.search(r"(\d+) period\(s\) over, (\d+) of them where the idle GPUs", line)
    over, floored = found.groups()
    assert int(over) >= 1
    assert floored == over  # every period over is one the idle draw alone overran


def test_a_budget_below_the_idle_floor_is_named_and_its_jobs_run(tmp_path, capsys):
    # 64 T4 GPUs idle at 10 W draw 3.84 kWh in 6 h: a 3 kWh budget cannot be kept by any
    # plan. It is named, and its jobs run up to its limit (until 8 Dec PowerFlow set the
    # floor aside, found nothing left and stalled with both jobs never started).
    argv = ["--trace", str(TRACE), "--cluster", str(CLUSTER), "--policy", "powerflow"]
    argv += ["--energy-budget-kwh", "3", "--budget-period-h", "6", "--max-jobs", "2"]
    assert main([*argv, "--knowledge", "oracle", "--no-progress", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "idle GPUs alone draw 3.8 kWh a period, more than the 3 kWh budget" in out
    assert "unfinished 0" in out


def test_no_finished_job_prints_na(tmp_path, capsys):
    # a budget no job's smallest round fits (10 Wh in 6 h beside 3.84 kWh of idle draw):
    # no job ever runs, so there is no average JCT to print (it was "nan")
    argv = ["--trace", str(TRACE), "--cluster", str(CLUSTER), "--policy", "powerflow"]
    argv += ["--energy-budget-kwh", "0.01", "--budget-period-h", "6", "--max-jobs", "2"]
    assert main([*argv, "--knowledge", "oracle", "--no-progress", "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    out = captured.out
    assert "avg JCT       n/a h  p99       n/a h" in out
    assert "nan" not in out
    # the run stalls (no job ever fits), and says so on one line
    assert captured.err.startswith("error: powerflow [oracle] stopped early with 2 of 2 jobs")
    assert captured.err.count("\n") == 1


def test_a_carbon_budget_below_the_idle_floor_is_named(tmp_path, capsys):
    # the same 3.84 kWh of idle draw in 6 h emits far more than 1 g in ES: named before
    # the run (it was named for energy budgets only)
    argv = ["--trace", str(TRACE), "--cluster", str(CLUSTER), "--policy", "greenflow"]
    argv += ["--carbon-budget-kg", "0.001", "--carbon-zone", "ES", "--budget-period-h", "6"]
    argv += ["--max-jobs", "2", "--knowledge", "oracle", "--no-progress", "--out", str(tmp_path)]
    assert main(argv) == 1  # stopped early: no job fits 1 g
    out = capsys.readouterr().out
    assert "idle GPUs alone emit" in out
    assert "in the first period, more than the 0.001 kg budget" in out


def test_a_matched_period_over_by_the_idle_floor_alone_is_named(tmp_path, capsys):
    # --horizon-factor 0.3 gives each period 30% of tiresias' carbon, nearly all of it six
    # idle A100s' draw; BR's grid in the third period makes that draw alone 2.97 kg against
    # 2.90. The comparison's line said "worst period 102.2% of its budget" and nothing
    # else, where a fixed budget's line names such periods (an independent sweep).
    trace = tmp_path / "elasticflow_two.csv"
    trace.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n"
        "f1,0.0,imagenet,128,4,50\nf2,1539856.3,inception3,512,4,20000\n"
    )
    cluster = tmp_path / "n3g2_a100.json"
    cluster.write_text(
        '{"gpu_model": "A100", "switches": 1, "nodes_per_switch": 3, "gpus_per_node": 2}'
    )
    argv = ["--trace", str(trace), "--cluster", str(cluster), "--policy", "greenflow"]
    argv += ["--carbon-zone", "BR", "--match-baseline", "tiresias", "--horizon-factor", "0.3"]
    argv += ["--knowledge", "oracle", "--no-progress", "--out", str(tmp_path / "out")]
    main(argv)  # (GreenFlow holds the late job for good: the idle floor's reserve)
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "vs tiresias" in x]
    assert "worst period 102.2" in line
    assert "1 period(s) over, 1 of them where the idle GPUs alone drew more" in line


def test_policy_params_reach_the_candidate_only_and_are_reported(tmp_path):
    def run(out, *params):
        argv = [
            "--trace", str(TRACE), "--cluster", str(CLUSTER), "--policy", "powerflow",
            "--match-baseline", "fifo", "--max-jobs", "40", "--out", str(out), "--no-progress",
        ]  # fmt: skip
        for p in params:
            argv += ["--policy-param", p]
        assert main(argv) == 0
        return json.loads(next(out.glob("*_report.json")).read_text())

    default = run(tmp_path / "default")
    # clock_levels=1 keeps every job at the highest clock: a different PowerFlow run,
    # while the fifo baseline it is matched against stays the same.
    one_clock = run(tmp_path / "one_clock", "clock_levels=1", "admission=fifo")
    assert default["policy_params"] == {}
    assert one_clock["policy_params"] == {"clock_levels": 1, "admission": "fifo"}

    def figures(run):  # all but the wall times, learned and oracle
        return {k: v for k, v in run.items() if k != "wall_s"} | {
            "oracle": {k: v for k, v in run["oracle"].items() if k != "wall_s"}
        }

    assert figures(one_clock["runs"]["fifo"]) == figures(default["runs"]["fifo"])
    candidate = "powerflow@fifo-energy"
    assert one_clock["runs"][candidate]["energy_kwh"] != default["runs"][candidate]["energy_kwh"]


def test_a_bigger_batch_is_not_free_for_a_batch_tuning_policy(tmp_path, capsys):
    # given pollux_workload-1's first 40 jobs allowed 4x their batch, under both batch models
    common = ["--trace", str(TRACE), "--cluster", str(CLUSTER), "--policy", "zeus",
              "--max-jobs", "40", "--max-batch-factor", "4", "--no-progress"]  # fmt: skip
    reports = {}
    for model in ("free", "learned"):
        out = tmp_path / model
        assert main([*common, "--batch-efficiency", model, "--out", str(out)]) == 0
        reports[model] = json.loads(next(out.glob("*_report.json")).read_text())
    # then the report says which model ran, and counting useful samples makes the same
    # policy slower on the same jobs (learned curves: every larger batch is less efficient)
    assert [reports[m]["scenario"]["batch_efficiency"] for m in reports] == ["free", "learned"]
    free, learned = (reports[m]["runs"]["zeus"] for m in ("free", "learned"))
    assert learned["n_finished"] == free["n_finished"] == 40
    assert learned["avg_jct_s"] > free["avg_jct_s"]
    assert reports["learned"]["bound"]["avg_jct_s"] > reports["free"]["bound"]["avg_jct_s"]
    capsys.readouterr()
    # and an unknown model is refused with one line
    assert main([*common, "--batch-efficiency", "magic", "--out", str(tmp_path / "x")]) == 2
    assert "--batch-efficiency" in capsys.readouterr().err


def test_without_a_batch_range_the_batch_model_changes_nothing():
    # the trace's fixed batches: nothing for efficiency to act on
    runs = [
        run_policy(load_scenario(TRACE, CLUSTER, max_jobs=30, batch_efficiency=m), "powerflow")
        for m in ("free", "learned")
    ]
    assert outcome(runs[0]) == outcome(runs[1])
    with pytest.raises(ValueError, match="batch_efficiency must be one of"):
        load_scenario(TRACE, CLUSTER, batch_efficiency="magic")


def test_team_budgets_charge_each_team_its_jobs_and_none_is_overspent(scenario, fifo_result):
    # given the trace's jobs split into teams by workload, and per team half of what its
    # jobs drew under fifo, per period of half fifo's makespan
    from scheduling.simulator.compare import budgets_from
    from scheduling.simulator.scenario import with_teams_by_workload

    teamed = with_teams_by_workload(scenario)
    base = run_policy(teamed, "fifo")
    whole = budgets_from(base, "energy", per_team=True)
    budgets = tuple(
        BudgetSpec(
            period_end_s=base.end_s / 2, energy_limit_j=b.energy_limit_j / 2, team=b.team,
            budget_id=b.budget_id,
        )
        for b in whole
    )  # fmt: skip
    assert sorted(b.team for b in budgets) == sorted({j.workload for j in scenario.jobs})
    seen = []
    inner = core_planner("powerflow")

    def recording(snapshot, now):
        seen.append(snapshot.budgets)
        return inner(snapshot, now)

    # when PowerFlow runs under them
    result = run_policy(teamed, "powerflow", budgets=budgets, planner=recording)

    # then every round saw one budget per team, each period charged its team's jobs'
    # energy only (idle GPUs are no team's), and none spent more than its limit
    assert all(sorted(b.team for b in snap) == sorted(b.team for b in budgets) for snap in seen)
    by_team: dict[str, float] = {}
    for rec in result.jobs:
        by_team[rec.spec.team] = by_team.get(rec.spec.team, 0.0) + rec.energy_j
    charged: dict[str, float] = {}
    for p in result.budget_periods:
        charged[p.team] = charged.get(p.team, 0.0) + p.energy_j
    assert charged == pytest.approx(by_team, rel=1e-9)
    assert sum(charged.values()) < result.energy_j  # the idle draw is nobody's
    assert max(p.share for p in result.budget_periods) <= 1.0 + 1e-9
    assert all(r.finish_s is not None for r in result.jobs)


def test_a_policy_prices_restarts_at_the_runs_own_restart_cost(monkeypatch):
    # At its default (30 s) against a run's 120 s, a team's period went on restarts alone.
    from scheduling.core.registry import takes
    from scheduling.simulator import scenario as scenario_module

    assert takes("powerflow", "restart_s") and takes("elastic", "restart_s")
    assert not takes("fifo", "restart_s")
    seen = {}
    real = scenario_module.core_planner

    def spy(policy, **params):
        seen[policy] = params
        return real(policy, **params)

    monkeypatch.setattr(scenario_module, "core_planner", spy)
    scn = load_scenario(TRACE, CLUSTER, config=SimConfig(restart_cost_s=120.0), max_jobs=3)
    for policy, params in (("powerflow", {}), ("fifo", {}), ("elastic", {"restart_s": 5.0})):
        scenario_module.run_policy(scn, policy, policy_params=params)
    assert seen["powerflow"] == {"restart_s": 120.0}
    assert seen["fifo"] == {}
    assert seen["elastic"] == {"restart_s": 5.0}  # a policy parameter given wins


@pytest.mark.parametrize("factor", [0.25, 1.0, 2.0])
def test_matched_budgets_hold_the_baselines_spend_over_its_run(fifo_result, factor):
    # A period shorter than the baseline's run gets that share of its spend (budgets
    # renew: with the whole spend in each of 4 periods a candidate had 4x the energy);
    # a longer one gets the whole spend.
    from scheduling.simulator.compare import budgets_from

    (cluster,) = budgets_from(fifo_result, "energy", horizon_factor=factor, idle_w=640.0)
    assert cluster.period_end_s == pytest.approx(fifo_result.end_s * factor)
    # a longer period also holds the idle GPUs' draw after the baseline's run (640 W here)
    tail_j = 640.0 * fifo_result.end_s * max(factor - 1.0, 0.0)
    assert cluster.energy_limit_j == pytest.approx(fifo_result.energy_j * min(factor, 1.0) + tail_j)
    teams = budgets_from(fifo_result, "carbon", horizon_factor=factor, per_team=True)
    assert sum(b.co2_limit_g for b in teams) == pytest.approx(
        sum(r.co2_g for r in fifo_result.jobs) * min(factor, 1.0)
    )


@pytest.mark.parametrize("where", ["file", "under a file", "empty"])
def test_an_output_folder_that_cannot_be_one_is_one_line_before_any_run(tmp_path, capsys, where):
    # (a run wrote its results at the end, into a path that was a file: a traceback after
    # the whole simulation)
    blocker = tmp_path / "taken"
    blocker.write_text("kept")
    out = {"file": str(blocker), "under a file": str(blocker / "out"), "empty": " "}[where]
    argv = ["--trace", str(TRACE), "--cluster", str(CLUSTER), "--policy", "fifo"]
    assert main([*argv, "--no-progress", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "--out" in err
    assert err.count("\n") == 1
    assert blocker.read_text() == "kept"


def test_a_cluster_name_that_cannot_name_files_is_refused(tmp_path, capsys):
    cluster = tmp_path / "c.json"
    cluster.write_text(
        '{"name": "a/b", "gpu_model": "A100", "switches": 1, "nodes_per_switch": 1, '
        '"gpus_per_node": 8}'
    )
    argv = ["--trace", str(TRACE), "--cluster", str(cluster), "--policy", "fifo"]
    assert main([*argv, "--no-progress", "--out", str(tmp_path / "out")]) == 2
    assert "name 'a/b' must be printable, without '/'" in capsys.readouterr().err


def test_a_cluster_too_large_to_build_is_refused(tmp_path, capsys):
    cluster = tmp_path / "c.json"
    cluster.write_text(
        '{"name": "huge", "gpu_model": "A100", "switches": 1000000, '
        '"nodes_per_switch": 1000000, "gpus_per_node": 1000000}'
    )
    argv = ["--trace", str(TRACE), "--cluster", str(cluster), "--policy", "fifo"]
    assert main([*argv, "--no-progress", "--out", str(tmp_path / "out")]) == 2
    assert "at most 65,536 are simulated" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--energy-budget-kwh", "1e-300"],  # its share printed with 308 digits
            "argument --energy-budget-kwh: '1e-300' is less than 0.001 (1 Wh)",
        ),
        (
            ["--carbon-budget-kg", "1e-9", "--carbon-zone", "ES"],
            "argument --carbon-budget-kg: '1e-9' is less than 0.001 (1 g)",
        ),
        (
            ["--budget-period-h", "5"],  # was ignored without a word
            "--budget-period-h only applies with --energy-budget-kwh or --carbon-budget-kg",
        ),
        (
            ["--budget-period-h", "5", "--match-baseline", "fifo"],
            "--budget-period-h only applies with --energy-budget-kwh or --carbon-budget-kg",
        ),
    ],
)
def test_a_budget_too_small_or_a_period_without_one_exits_2_with_one_line(
    tmp_path, capsys, argv, line
):
    out = tmp_path / "out"
    base = ["--trace", str(TRACE), "--cluster", str(CLUSTER), "--policy", "fifo"]

    assert main([*base, *argv, "--no-progress", "--out", str(out)]) == 2

    assert capsys.readouterr().err == f"error: {line}\n"
    assert not out.exists()


@pytest.mark.parametrize(
    ("row", "argv", "line"),
    [
        # a job of 1e12 iterations (within the trace's bound) ran for hours, a round a step
        (
            "0,0,resnet50,64,1,1e12",
            [],
            r"error: job 0 needs at least 5.\d+e\+05 days at its fastest on this cluster, "
            r"1.\d+e\+08 rounds of 300 s: more than the 100,000 a run may plan \(",
        ),
        # as did an ordinary job in 0.01 s rounds
        (
            "0,0,resnet50,64,1,100000",
            ["--round-length-s", "0.01"],
            r"error: job 0 needs at least 0.05\d+ days at its fastest on this cluster, "
            r"4.\d+e\+05 rounds of 0.01 s: more than the 100,000 a run may plan \(",
        ),
    ],
)
def test_a_run_of_more_rounds_than_can_be_simulated_exits_2_before_it_starts(
    tmp_path, capsys, row, argv, line
):
    trace = tmp_path / "elasticflow_long.csv"
    trace.write_text(f"job_id,submit_time,model_name,batch_size,num_gpu,iteration\n{row}\n")
    cluster = DATA / "clusters" / "n16g8_a100.json"
    out = tmp_path / "out"
    base = ["--trace", str(trace), "--cluster", str(cluster), "--policy", "fifo"]

    assert main([*base, *argv, "--no-progress", "--out", str(out)]) == 2

    err = capsys.readouterr().err
    assert re.match(line, err) and err.count("\n") == 1
    assert not out.exists()


def _one_gpu_cluster(tmp_path, gpu_model: str):
    """A cluster spec of one node with one GPU of ``gpu_model``, written under tmp_path."""
    cluster = tmp_path / "c.json"
    cluster.write_text(
        f'{{"name": "one", "gpu_model": "{gpu_model}", "switches": 1, "nodes_per_switch": 1, '
        '"gpus_per_node": 1}'
    )
    return cluster


def test_a_baseline_that_starts_no_job_is_one_line_not_a_traceback(tmp_path, capsys):
    # fifo never starts a job asking for 2 GPUs of a 1-GPU cluster: its run ended where it
    # began, and the budget period ending there stopped --match-baseline with a ValueError
    trace = tmp_path / "pollux_workload-9.csv"
    trace.write_text("name,time,application,num_replicas,batch_size\nx-0,0,cifar10,2,2048\n")
    cluster = _one_gpu_cluster(tmp_path, "T4")
    argv = ["--trace", str(trace), "--cluster", str(cluster), "--policy", "powerflow"]
    argv += ["--match-baseline", "fifo", "--knowledge", "oracle", "--no-progress"]

    assert main([*argv, "--out", str(tmp_path / "out")]) == 2

    assert capsys.readouterr().err == (
        "error: --match-baseline fifo started no job on this cluster, so it sets no budget to "
        "match (only jobs that can never run on this cluster were left)\n"
    )


@pytest.mark.parametrize(
    ("trace", "argv", "line"),
    [
        # periods of 12 s against 300 s rounds: no job fitted a period, the run never ended
        (
            DATA / "trace" / "pollux_workload-8.csv",
            ["--max-jobs", "25", "--horizon-factor", "0.001"],
            r"the matched budget period is 11\.\d s \(--horizon-factor 0\.001 x fifo's run\)",
        ),
        # one job fifo runs in 144 s: powerflow stalled a simulated week, then exited 1
        (
            "one",
            [],
            r"the matched budget period is 1\d\d s \(--horizon-factor 1 x fifo's run\)",
        ),
    ],
)
def test_a_matched_budget_period_shorter_than_a_round_exits_2(tmp_path, capsys, trace, argv, line):
    cluster = CLUSTER
    if trace == "one":
        trace = tmp_path / "elasticflow_one.csv"
        trace.write_text(
            "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n0,0,resnet50,64,1,1000\n"
        )
        cluster = _one_gpu_cluster(tmp_path, "A100")
    args = ["--trace", str(trace), "--cluster", str(cluster), "--policy", "powerflow"]
    args += ["--match-baseline", "fifo", "--knowledge", "oracle", "--no-progress"]

    assert main([*args, *argv, "--out", str(tmp_path / "out")]) == 2

    err = capsys.readouterr().err
    assert re.match(
        f"error: {line}, shorter than a round \\(--round-length-s 300\\): a round "
        "must fit in a period\n$",
        err,
    )


def test_a_missing_trace_file_is_named_as_missing(tmp_path, capsys):
    # (it read "unknown trace format 'nope.csv'")
    missing = tmp_path / "elasticflow_nope.csv"
    argv = ["--trace", str(missing), "--cluster", str(CLUSTER), "--policy", "fifo"]

    assert main([*argv, "--out", str(tmp_path / "out")]) == 2

    assert capsys.readouterr().err == f"error: trace {missing} does not exist\n"
    assert not (tmp_path / "out").exists()


def test_a_run_that_stops_early_says_why_on_one_line_and_exits_1(tmp_path, capsys):
    # given a restart cost no job outlives: elastic starts 5 jobs, and the ones it resizes
    # restart for ever, so nothing progresses for the stall limit (a week)
    argv = ["--trace", str(DATA / "trace" / "pollux_workload-2.csv"), "--cluster", str(CLUSTER)]
    argv += ["--policy", "elastic", "--restart-cost-s", "1e12", "--max-jobs", "5"]

    # when it runs, it exits 1 (it printed its table and exited 0; stopped_early only in
    # the JSON)
    status = main([*argv, "--knowledge", "oracle", "--no-progress", "--out", str(tmp_path)])

    # then one line says which run stopped early and why, naming the jobs it left, and its
    # results are still written
    captured = capsys.readouterr()
    assert status == 1
    assert captured.err == (
        "error: elastic [oracle] stopped early with 3 of 5 jobs unfinished: no job progressed "
        "for 7 days (the stall limit): those left only restarted or could not run; 3 job(s) "
        "left unfinished (cifar10-0: 51.3% done, started 1 time(s); cifar10-3: 67.4% done, "
        "started 1 time(s); cifar10-4: 61.2% done, started 1 time(s)); its results are "
        "incomplete\n"
    )
    (summary_file,) = tmp_path.glob("*_elastic_summary.json")
    summary = json.loads(summary_file.read_text())["summary"]
    assert summary["stopped_early"] is True
    assert summary["stopped_why"].startswith("no job progressed for 7 days")
    assert (tmp_path / "pollux_workload-2_n16g4_t4_report.json").exists()


def test_a_job_whose_team_budget_is_nothing_in_every_period_is_named_never_runnable(tmp_path):
    # Matched team budgets give a team whose jobs drew nothing under the baseline (there,
    # too big for the cluster) a budget of nothing, renewed as nothing every period: its
    # jobs never run. The run went on to the stall limit (7 to 60 simulated days of idle
    # draw) and ended "stopped early: no job progressed", exit 1, naming no job (an
    # independent sweep); it now stops when only such jobs are left, and names them.
    trace = tmp_path / "elasticflow_two_teams.csv"
    trace.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n"
        "a,0,resnet50,64,1,2000\nb,0,bert,64,1,2000\n"
    )
    cluster = tmp_path / "n1g2_a100.json"
    cluster.write_text(
        '{"gpu_model": "A100", "switches": 1, "nodes_per_switch": 1, "gpus_per_node": 2}'
    )
    scenario = with_teams_by_workload(
        load_scenario(trace, cluster, config=SimConfig(knowledge="oracle"))
    )
    budgets = (
        BudgetSpec(period_end_s=3600.0, energy_limit_j=1e7, team="resnet50", budget_id="r"),
        BudgetSpec(period_end_s=3600.0, energy_limit_j=0.0, team="bert", budget_id="b"),
    )
    result = run_policy(scenario, "fifo", budgets=budgets)
    finished = {r.spec.job_id: r.finish_s for r in result.jobs}
    assert finished["a"] is not None and finished["b"] is None
    assert list(result.never_runnable) == ["b"]
    assert "team bert's budget is nothing in every period" in result.never_runnable["b"]
    assert result.end_s == finished["a"]  # no stall of idle draw after the last finish


def test_a_run_that_plans_more_rounds_than_its_limit_stops_with_one_line(
    tmp_path, capsys, monkeypatch
):
    # The refusal above takes a job at its fastest (elastic, 64 GPUs), but fifo keeps it at
    # its request: a sweep's 10-year Philly job at 1 GPU of 15 passed the check and fifo
    # then planned a million rounds (over 5 minutes of wall time without a word). Here
    # 120,000 resnet50 iterations take 19 rounds at their fastest, 58 at 1 GPU.
    monkeypatch.setattr("scheduling.simulator.cli.MAX_ROUNDS", 30)
    trace = tmp_path / "elasticflow_long.csv"
    trace.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n0,0,resnet50,64,1,120000\n"
    )
    cluster = DATA / "clusters" / "n16g8_a100.json"
    out = tmp_path / "out"
    base = ["--trace", str(trace), "--cluster", str(cluster), "--policy", "fifo"]

    rc = main([*base, "--knowledge", "oracle", "--no-progress", "--out", str(out)])

    err = capsys.readouterr().err
    assert rc == 1
    assert err.count("\n") == 1
    assert re.match(
        r"error: fifo \[oracle\] stopped early with 1 of 1 jobs unfinished: it planned 30 "
        r"rounds, the most a run may, by 0.1\d+ simulated days \(",
        err,
    ), err
