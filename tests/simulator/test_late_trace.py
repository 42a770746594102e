"""A trace whose first job comes late is the same run as the trace shifted to time 0 (the
third sweep, docs/benchmarks.md): the idle cluster before the first arrival is no part
of the run. It was: ten days of 8 idle A100s were the run's energy, its bound's floor
and a matched budget's limit, and a matched period of horizon x its end from time 0
ended before any job came (PowerFlow at half of fifo's makespan: 1.456x shifted by
nothing, 0.427x shifted by ten days).
"""

from __future__ import annotations

import json
import re

import pytest

from scheduling.simulator.bounds import scenario_bound
from scheduling.simulator.compare import budgets_from, matched_budget
from scheduling.simulator.engine import SimConfig
from scheduling.simulator.scenario import load_scenario, run_policy

TEN_DAYS_S = 10 * 86_400.0  # 2,880 rounds of 300 s: the round grid is the same
ROWS = [
    # job_id, submit_time, model_name, batch_size, num_gpu, iteration
    ("a", 0.0, "resnet50", 128, 1, 20_000),
    ("b", 120.0, "bert", 64, 2, 6_000),
    ("c", 900.0, "vgg16", 256, 2, 8_000),
    ("d", 1_000.0, "resnet50", 256, 2, 30_000),
    ("e", 4_000.0, "gpt2", 32, 2, 4_000),
    ("f", 4_100.0, "bert", 32, 1, 10_000),
]


def _scenario(tmp_path, shift_s: float):
    trace = tmp_path / f"elasticflow_shift{int(shift_s)}.csv"
    lines = ["job_id,submit_time,model_name,batch_size,num_gpu,iteration"]
    lines += [f"{j},{t + shift_s},{w},{b},{g},{i}" for j, t, w, b, g, i in ROWS]
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cluster = tmp_path / "n2g2_a100.json"
    spec = {"gpu_model": "A100", "switches": 1, "nodes_per_switch": 2, "gpus_per_node": 2}
    cluster.write_text(json.dumps(spec), encoding="utf-8")
    return load_scenario(trace, cluster, config=SimConfig())


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("late")
    return _scenario(tmp, 0.0), _scenario(tmp, TEN_DAYS_S)


def test_a_late_first_job_costs_the_run_no_idle_before_it(pair):
    # given the same six jobs at 0 and ten days later
    early, late = pair

    a, b = run_policy(early, "fifo"), run_policy(late, "fifo")

    # then the run begins in the first job's round and every figure is the same
    assert (a.start_s, b.start_s) == (0.0, TEN_DAYS_S)
    assert b.timeline[0].t0_s == TEN_DAYS_S
    assert b.energy_j == pytest.approx(a.energy_j, rel=1e-9)  # before: + 10 days idle
    assert b.idle_energy_j == pytest.approx(a.idle_energy_j, rel=1e-9)
    for x, y in zip(a.jobs, b.jobs, strict=True):
        assert y.jct_s == pytest.approx(x.jct_s, rel=1e-9)
        assert y.energy_j == pytest.approx(x.energy_j, rel=1e-9)
    # and no policy's bound is charged the idle days either
    lo, hi = scenario_bound(early), scenario_bound(late)
    assert hi.min_energy_j == pytest.approx(lo.min_energy_j, rel=1e-9)


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_a_matched_period_runs_from_the_baselines_start(pair, factor):
    early, late = pair
    base = run_policy(late, "fifo")

    (budget,) = budgets_from(base, "energy", horizon_factor=factor)
    teams = budgets_from(base, "energy", horizon_factor=factor, per_team=True)

    # then its period is horizon x the baseline's run from where that run began (before:
    # [0, horizon x 10.1 days), at 0.5 ending five days before the first job), and its
    # limit holds what the baseline drew from then (before: ten idle days more)
    assert budget.period_start_s == TEN_DAYS_S
    assert budget.period_end_s == pytest.approx(
        TEN_DAYS_S + factor * (base.end_s - TEN_DAYS_S), rel=1e-12
    )
    (early_budget,) = budgets_from(run_policy(early, "fifo"), "energy", horizon_factor=factor)
    assert budget.energy_limit_j == pytest.approx(early_budget.energy_limit_j, rel=1e-9)
    assert all(t.period_start_s == TEN_DAYS_S for t in teams)


def test_a_matched_comparison_of_a_late_trace_is_the_shifted_ones(pair):
    early, late = pair

    a = matched_budget(early, baseline="fifo", candidate="powerflow", kind="energy")
    b = matched_budget(late, baseline="fifo", candidate="powerflow", kind="energy")

    ra, rb = a.report(scenario_bound(early)), b.report(scenario_bound(late))
    assert rb["avg_jct_ratio"] == pytest.approx(ra["avg_jct_ratio"], rel=1e-6)
    assert rb["candidate_energy_in_period_kwh"] == pytest.approx(
        ra["candidate_energy_in_period_kwh"], rel=1e-6
    )
    assert rb["best_possible_ratio"] == pytest.approx(ra["best_possible_ratio"], rel=1e-6)


def test_a_fixed_budgets_idle_floor_is_counted_from_the_runs_start(tmp_path, capsys):
    # given the late trace under a budget of 1.2x the idle draw from its first job to the
    # default period's end (its last submission + a week); from time 0 the idle draw is
    # 2.4x as much
    from scheduling.simulator.cli import main

    late = _scenario(tmp_path, TEN_DAYS_S)
    idle_w = scenario_bound(late).idle_power_w
    span_s = ROWS[-1][1] + 7 * 86_400.0
    limit_kwh = 1.2 * idle_w * span_s / 3.6e6
    argv = ["--trace", str(tmp_path / f"elasticflow_shift{int(TEN_DAYS_S)}.csv")]
    argv += ["--cluster", str(tmp_path / "n2g2_a100.json"), "--policy", "fifo"]
    argv += ["--energy-budget-kwh", f"{limit_kwh:.6f}", "--knowledge", "oracle"]

    assert main([*argv, "--no-progress", "--out", str(tmp_path / "out")]) == 0

    # then no note says the idle GPUs alone draw more than the budget (before: "draw
    # 1234.5 kWh a period, more than the ... budget", ten idle days before any job)
    out = capsys.readouterr().out
    assert "idle GPUs alone" not in out
    worst = re.search(r"worst spent ([0-9.]+)% of its budget\n", out)
    assert worst is not None and float(worst.group(1)) <= 100.0
