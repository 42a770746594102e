"""A job resized keeps its GPU count while it settles (two restarts): with restarts longer
than a round, PowerFlow's price favoured its two counts in turn and resized it every round,
so it never progressed (a reviewer's sweep: 2,096 resizes, stopped as stalled)."""

import csv
import json

from scheduling.simulator.cli import main


def test_a_job_whose_restart_outlasts_the_round_is_not_resized_until_it_settles(tmp_path, capsys):
    # given two imagenet jobs on 12 T4s, PowerFlow at fifo_lowclock's energy over periods
    # of half its makespan, replanned on events, restarts of 600 s in rounds of 300 s
    trace = tmp_path / "elasticflow_h37.csv"
    trace.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n"
        "f0,44.3,imagenet,32,2,1\nf1,44.3,imagenet,32,2,100000\n"
    )
    cluster = tmp_path / "h37.json"
    cluster.write_text(
        json.dumps(
            {
                "name": "h37",
                "gpu_model": "T4",
                "switches": 2,
                "nodes_per_switch": 3,
                "gpus_per_node": 2,
            }
        )  # fmt: skip
    )
    out = tmp_path / "out"

    # when it runs
    code = main(
        [
            "--trace",
            str(trace),
            "--cluster",
            str(cluster),
            "--policy",
            "powerflow",
            "--match-baseline",
            "fifo_lowclock",
            "--horizon-factor",
            "0.5",
            "--replan-on-events",
            "--restart-cost-s",
            "600",
            "--knowledge",
            "oracle",
            "--no-progress",
            "--out",
            str(out),
        ]  # fmt: skip
    )

    # then both jobs finish (before, the long one stalled and the run stopped with exit 1)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    line = next(ln for ln in captured.out.splitlines() if ln.startswith("powerflow@fifo_lowclock"))
    assert "unfinished 0" in line
    # and the long job was resized a few times, not every round
    (jobs_csv,) = out.glob("*powerflow@*_jobs.csv")
    rows = {r["job_id"]: r for r in csv.DictReader(jobs_csv.open())}
    assert rows["f1"]["finish_s"]
    assert int(rows["f1"]["n_resizes"]) <= 10
