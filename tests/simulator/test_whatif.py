"""The budget what-if's curve (scheduling/simulator/whatif.py) on real traces and the fitted
perf catalog: more budget never predicts a worse average JCT, and a job that can never
run is named instead of blanking every point."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from scheduling.simulator.scenario import load_scenario
from scheduling.simulator.whatif import monotone, replay_queue

DATA = Path(__file__).resolve().parents[2] / "data"
DAY_S = 86400.0


def _queue(trace: str, cluster: str, first: int, n: int):
    scenario = load_scenario(DATA / "trace" / trace, DATA / "clusters" / cluster)
    jobs = [replace(j, submit_time_s=0.0) for j in scenario.jobs[first : first + n]]
    return scenario, jobs


SCENARIOS = [
    ("pollux_workload-1.csv", "n16g4_t4.json", 0, 16),
    ("pollux_workload-3.csv", "n16g4_t4.json", 40, 16),
    ("pollux_workload-6.csv", "n16g4_t4.json", 100, 12),
]


@pytest.mark.parametrize(("trace", "cluster", "first", "n"), SCENARIOS)
@pytest.mark.parametrize("kind", ["energy", "carbon"])
def test_more_budget_never_predicts_a_worse_average_jct(trace, cluster, first, n, kind):
    # given a team's queue and what it spends without a budget
    scenario, jobs = _queue(trace, cluster, first, n)
    common = dict(
        cluster=scenario.cluster, catalog=scenario.catalog, kind=kind, period_start_s=-DAY_S,
        period_end_s=DAY_S, ci_g_per_kwh=250.0,
    )  # fmt: skip
    free = replay_queue(jobs, limit=1e9, **common)
    need = free.energy_kwh if kind == "energy" else free.co2_kg
    assert free.avg_jct_s is not None and need > 0

    # when the what-if replays it under budgets from a fifth to twice that, in a shuffled
    # order as the page may send them
    budgets = [need * f for f in (0.7, 0.2, 2.0, 0.4, 1.0)]
    raw = [(b, replay_queue(jobs, limit=b, **common).avg_jct_s) for b in budgets]
    curve = monotone(raw)

    # then the curve is over every budget, in order, never rising, and never above a replay
    assert [b for b, _ in curve] == sorted(budgets)
    finished = [j for _, j in curve if j is not None]
    assert finished, "some budget finishes the queue"
    assert all(a >= b for a, b in zip(finished, finished[1:], strict=False))
    for (b, best), (_, own) in zip(curve, sorted(raw), strict=True):
        assert own is None or best <= own
        assert best is None or best == min(j for bb, j in raw if bb <= b and j is not None)


def test_monotone_keeps_the_gap_until_a_budget_finishes_and_the_best_after():
    points = [(3.0, 500.0), (1.0, None), (2.0, 700.0), (4.0, 650.0), (5.0, 400.0)]
    assert monotone(points) == [(1.0, None), (2.0, 700.0), (3.0, 500.0), (4.0, 500.0), (5.0, 400.0)]


def test_a_job_that_can_never_run_is_named_and_the_rest_still_get_a_jct():
    # given a queue with a job asking for more T4s than the cluster has, and one whose
    # workload has no perf model
    scenario, jobs = _queue("pollux_workload-1.csv", "n16g4_t4.json", 0, 6)
    too_big = replace(jobs[0], job_id="too-big", min_gpus=128, max_gpus=128, requested_gpus=128)
    unknown = replace(jobs[1], job_id="unknown", workload="no-such-model")

    # when the what-if replays it
    replay = replay_queue(
        [*jobs, too_big, unknown], cluster=scenario.cluster, catalog=scenario.catalog,
        kind="energy", limit=1e9, period_end_s=DAY_S, ci_g_per_kwh=0.0,
    )  # fmt: skip

    # then both are named with the core's reason and the runnable six have an average JCT
    assert [job for job, _ in replay.never_run] == ["too-big", "unknown"]
    assert "needs 128 GPU(s) of one model" in replay.never_run[0][1]
    assert "no performance model" in replay.never_run[1][1]
    assert (replay.n_jobs, replay.n_finished) == (6, 6)
    assert replay.avg_jct_s is not None and replay.avg_jct_s > 0


def test_a_job_still_running_at_the_horizon_is_named():
    # given a queue whose one job is a million times longer than the trace's (years)
    scenario, jobs = _queue("pollux_workload-1.csv", "n16g4_t4.json", 0, 2)
    long = replace(jobs[0], job_id="long", total_iters=jobs[0].total_iters * 1e6)

    # when the what-if replays it
    replay = replay_queue(
        [long, jobs[1]], cluster=scenario.cluster, catalog=scenario.catalog,
        kind="energy", limit=1e9, period_end_s=DAY_S, ci_g_per_kwh=0.0,
    )  # fmt: skip

    # then no average is predicted (its point is a gap) and the job that makes it one is
    # named: the page drew an empty plot and said nothing of why
    assert replay.avg_jct_s is None
    assert replay.unfinished == ("long",)
    assert replay.n_finished == 1
