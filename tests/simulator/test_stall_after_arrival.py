"""The stall limit counts from the last arrival at the earliest: a job that arrives weeks
after the last progress is not stopped at its first round because it does not run in that
one. Seen where a job larger than its period waited for its first part in a matched run
(docs/benchmarks.md, "A job larger than a period"): the run stopped "no job progressed for
17.8 days" at the round its job arrived, counting the 17.8 days before it came."""

from __future__ import annotations

from dataclasses import replace

from scheduling.simulator.engine import SimConfig
from scheduling.simulator.scenario import core_planner, load_scenario, run_policy

DAY = 86400.0


def test_a_job_that_arrives_after_a_long_quiet_spell_gets_its_own_stall_limit(tmp_path):
    trace = tmp_path / "elasticflow_late.csv"
    trace.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n"
        f"early,0,resnet50,64,1,100\nlate,{20 * DAY:.0f},resnet50,64,1,100\n"
    )
    cluster = tmp_path / "n1g2_a100.json"
    cluster.write_text(
        '{"gpu_model": "A100", "switches": 1, "nodes_per_switch": 1, "gpus_per_node": 2}'
    )
    scenario = load_scenario(
        trace, cluster, config=SimConfig(knowledge="oracle", stall_limit_s=7 * DAY)
    )
    inner = core_planner("fifo")

    def hold_late_an_hour(snapshot, now):
        # given a policy that leaves the late job waiting for its first hour
        if now < 20 * DAY + 3600.0:
            snapshot = replace(snapshot, jobs=tuple(j for j in snapshot.jobs if j.job_id != "late"))
        return inner(snapshot, now)

    result = run_policy(scenario, "fifo", planner=hold_late_an_hour)
    finish = {r.spec.job_id: r.finish_s for r in result.jobs}
    # then it runs after that hour and finishes; the run is not stopped at its arrival
    assert not result.stopped_early, result.stopped_why
    assert finish["early"] is not None and finish["late"] is not None
    assert finish["late"] > 20 * DAY + 3600.0
