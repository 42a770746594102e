"""A cluster budget whose idle floor alone is over its limit in every period (the third
sweep's heavytail case, docs/benchmarks.md): no plan keeps such a period, and PowerFlow /
GreenFlow set no floor aside in it, as the simulator's hard-limit watch sets none aside.
Its jobs run until the limit is spent, then its ``hard_limit_action`` (``pause_jobs``)
stops them to the period's end, as it stops ``fifo``'s. Before, the pacer set the floor
aside, found nothing left for any job, and the run stalled after 7 days with every job
"started 0 time(s)" where ``fifo`` finished them all."""

from __future__ import annotations

import json

import pytest

from scheduling.simulator.budgets import BudgetSpec
from scheduling.simulator.engine import SimConfig
from scheduling.simulator.scenario import load_scenario, powered_idle_w, run_policy

ROWS = [
    # job_id, submit_time, model_name, batch_size, num_gpu, iteration
    ("a", 0.0, "resnet50", 128, 1, 4_000),
    ("b", 120.0, "bert", 64, 2, 2_000),
    ("c", 900.0, "vgg16", 256, 2, 2_000),
    ("d", 1_000.0, "resnet50", 256, 2, 3_000),
]
PERIOD_S = 3_600.0


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("infeasible")
    trace = tmp / "elasticflow_infeasible.csv"
    lines = ["job_id,submit_time,model_name,batch_size,num_gpu,iteration"]
    lines += [f"{j},{t},{w},{b},{g},{i}" for j, t, w, b, g, i in ROWS]
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cluster = tmp / "n2g2_a100.json"
    spec = {"gpu_model": "A100", "switches": 1, "nodes_per_switch": 2, "gpus_per_node": 2}
    cluster.write_text(json.dumps(spec), encoding="utf-8")
    return load_scenario(trace, cluster, config=SimConfig()), trace, cluster


def _budget(scenario, share: float) -> BudgetSpec:
    # an energy budget a period of ``share`` of what the idle GPUs alone draw in it
    return BudgetSpec(
        period_end_s=PERIOD_S, energy_limit_j=share * powered_idle_w(scenario) * PERIOD_S
    )


@pytest.mark.parametrize("policy", ["powerflow", "greenflow"])
def test_a_budget_its_idle_floor_outspends_runs_its_jobs_up_to_the_limit(inputs, policy):
    scenario = inputs[0]
    # given a cluster budget of 90% of its idle floor in every period
    budget = _budget(scenario, 0.9)

    fifo = run_policy(scenario, "fifo", budget=budget)
    result = run_policy(scenario, policy, budget=budget)

    # then every job runs and finishes, as under fifo (before: none started, the run
    # stalled after 7 days: stopped_early, 4 unfinished)
    assert not fifo.stopped_early
    assert not result.stopped_early
    assert all(r.finish_s is not None for r in result.jobs)
    # and it is held to the limit as fifo is: in a period with work the watch stops the
    # jobs where the limit is spent, so no period spends more than the floor alone would
    # plus the limit (the overspend is the floor's, after the stop)
    idle_w = powered_idle_w(scenario)
    for p in result.budget_periods:
        floor_j = idle_w * (p.end_s - p.start_s)
        assert p.energy_j <= floor_j + p.energy_limit_j + 1e-6 * p.energy_limit_j


def test_a_budget_its_idle_floor_keeps_still_sets_the_floor_aside(inputs):
    scenario = inputs[0]
    # given a budget above its idle floor (feasible): the floor is set aside, and no
    # period is over (the change applies only where the floor alone is over)
    budget = _budget(scenario, 1.05)

    result = run_policy(scenario, "powerflow", budget=budget)

    assert all(p.share <= 1.0 + 1e-9 for p in result.budget_periods)


def test_the_command_line_warns_of_the_periods_no_plan_could_keep(inputs, tmp_path, capsys):
    from scheduling.simulator.cli import main

    scenario, trace, cluster = inputs

    # given the command line's fixed budget, an hour at 90% of the idle floor
    limit_kwh = 0.9 * powered_idle_w(scenario) * PERIOD_S / 3.6e6
    argv = ["--trace", str(trace), "--cluster", str(cluster)]
    argv += ["--policy", "powerflow", "--energy-budget-kwh", f"{limit_kwh:.6f}"]
    argv += ["--budget-period-h", "1", "--knowledge", "oracle", "--no-progress"]

    # then the run finishes (before: exit 1, stalled with every job "started 0 time(s)")
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0

    # and it says which periods no plan could keep, and what the budget did in them
    out = capsys.readouterr().out
    assert "periods are ones no plan could keep over their whole length (the idle GPUs" in out
    assert "then the budget's hard limit action (pause_jobs) stops them" in out
    (report,) = (tmp_path / "out").glob("*_report.json")
    run = json.loads(report.read_text())["runs"]["powerflow"]
    assert run["budget_periods_unkeepable"] >= 1
    assert run["n_unfinished"] == 0


def test_a_matched_budget_comparison_counts_its_unkeepable_periods_too(tmp_path, capsys):
    from scheduling.simulator.cli import main

    # given a matched carbon budget (fifo's carbon, periods of a tenth of its run) on a
    # grid whose intensity changes: in its dirtier periods the idle GPUs alone emit more
    # than a tenth of what fifo emitted over its whole run
    rows = [*ROWS, *((f"e{i}", 7_200.0 * (i + 1), "resnet50", 128, 1, 500) for i in range(8))]
    trace = tmp_path / "elasticflow_matched.csv"
    lines = ["job_id,submit_time,model_name,batch_size,num_gpu,iteration"]
    lines += [f"{j},{t},{w},{b},{g},{i}" for j, t, w, b, g, i in rows]
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cluster = tmp_path / "n2g2_a100.json"
    spec = {"gpu_model": "A100", "switches": 1, "nodes_per_switch": 2, "gpus_per_node": 2}
    cluster.write_text(json.dumps(spec), encoding="utf-8")
    argv = ["--trace", str(trace), "--cluster", str(cluster), "--policy", "powerflow"]
    argv += ["--match-baseline", "fifo", "--budget-kind", "carbon"]
    argv += ["--carbon-zone", "US-CAL-CISO", "--horizon-factor", "0.1"]
    argv += ["--knowledge", "oracle", "--no-progress", "--out", str(tmp_path / "out")]

    assert main(argv) == 0

    # then the comparison's report carries the count, as a fixed budget's run does
    # (before: the field was only in a fixed budget's run, the comparison had none), and
    # it is the count the line's "where the idle GPUs alone drew more" gives
    out = capsys.readouterr().out
    (report,) = (tmp_path / "out").glob("*_report.json")
    data = json.loads(report.read_text())
    (line,) = data["comparisons"]
    assert line["budget_periods_unkeepable"] >= 1
    assert f"{line['budget_periods_unkeepable']} of them where the idle GPUs alone" in out
    assert (
        data["runs"]["powerflow@fifo-carbon"]["budget_periods_unkeepable"]
        == (line["budget_periods_unkeepable"])
    )
    # and the warning says what the budget does in them
    assert "periods are ones no plan could keep over their whole length" in out
