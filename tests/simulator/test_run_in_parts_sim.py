"""A job larger than its team's period budget finishes in parts over several periods under
PowerFlow and GreenFlow, no period over its limit, as under ``fifo``; before, it never
started and the run stopped at the stall limit (docs/benchmarks.md, "The simulator on a
reviewer's own inputs", team budgets at ``--horizon-factor 0.3``)."""

from __future__ import annotations

import pytest

from scheduling.simulator.engine import BudgetSpec, SimConfig
from scheduling.simulator.scenario import load_scenario, run_policy, with_teams_by_workload

DAY = 86400.0
# resnet50 on an A100 at its cheapest: about 147 J and 0.87 s an iteration; 200 iterations
# cost about 29 kJ in under three minutes, less than a round (so no in-period cut of its
# cost ever applies: ``budget_price.in_period_points``), and three to four periods of 12 kJ
# (each resume also pays a 30 s restart).
LIMIT_J = 1.2e4


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("parts")
    trace = tmp / "elasticflow_one.csv"
    trace.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\nbig,0,resnet50,256,1,200\n"
    )
    cluster = tmp / "n1g2_a100.json"
    cluster.write_text(
        '{"gpu_model": "A100", "switches": 1, "nodes_per_switch": 1, "gpus_per_node": 2}'
    )
    return with_teams_by_workload(
        load_scenario(
            trace,
            cluster,
            carbon_zone="ES",
            config=SimConfig(knowledge="oracle", stall_limit_s=3 * DAY),
        )
    )


def _budget(kind: str, co2_per_j: float) -> BudgetSpec:
    if kind == "energy":
        return BudgetSpec(period_end_s=DAY, energy_limit_j=LIMIT_J, team="resnet50")
    return BudgetSpec(period_end_s=DAY, co2_limit_g=LIMIT_J * co2_per_j, team="resnet50")


@pytest.mark.parametrize(("policy", "kind"), [("powerflow", "energy"), ("greenflow", "carbon")])
@pytest.mark.parametrize("parts", [True, False], ids=["in parts", "whole (before)"])
def test_a_job_larger_than_its_teams_period_finishes_in_parts(scenario, policy, kind, parts):
    fifo = run_policy(scenario, "fifo")
    (rec,) = fifo.jobs
    co2_per_j = rec.co2_g / rec.energy_j  # the scenario's intensity, per joule
    assert rec.energy_j > 2 * LIMIT_J  # more than two periods' budget under fifo, too
    budget = _budget(kind, co2_per_j)
    result = run_policy(scenario, policy, budgets=(budget,), policy_params={"run_in_parts": parts})
    (job,) = result.jobs
    if not parts:  # the behaviour before: it never starts
        assert job.first_start_s is None and result.stopped_early
        return
    assert job.finish_s is not None and not result.stopped_early
    assert job.finish_s > 2 * DAY  # it needed at least three periods
    assert job.n_preemptions >= 2  # paused at the limit, resumed by the next period
    # no period spent more than its limit, and the ones that ran it spent nearly all
    shares = [p.share for p in result.budget_periods]
    assert max(shares) <= 1.0 + 1e-9
    assert sum(s > 0.95 for s in shares) >= 2
