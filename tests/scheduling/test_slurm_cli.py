"""Reading Slurm's output (no Slurm needed): squeue's wait status, sacct's text, sinfo's flags."""

import json

import pytest

from scheduling.executors.slurm_cli import (
    SlurmError,
    parse_sacct,
    parse_sinfo,
    parse_squeue,
)


def _squeue(**job):
    base = {"job_id": 7, "job_state": "RUNNING", "comment": "", "nodes": "n1", "exit_code": 0,
            "standard_output": "/out/7.out", "tres_per_node": "gres:gpu:3"}  # fmt: skip
    return json.dumps({"meta": {}, "errors": [], "jobs": [{**base, **job}]})


def test_squeue_exit_code_is_a_wait_status_decoded_only_once_the_job_ended():
    # given a job that exited 3 (768 = 3 << 8), one killed by SIGKILL (9), and one running
    (failed,) = parse_squeue(_squeue(job_state="FAILED", exit_code=768))
    (killed,) = parse_squeue(_squeue(job_state="CANCELLED", exit_code=9))
    (running,) = parse_squeue(_squeue(exit_code=768))

    assert (failed.exit_code, failed.signal, failed.active) == (3, None, False)
    assert (killed.exit_code, killed.signal) == (0, 9)
    assert (running.exit_code, running.active, running.gpus_per_node) == (None, True, 3)


def test_sacct_text_gives_the_exit_code_its_json_loses():
    text = (
        "12|FAILED|3:0|n1|wattflow job=1 allocation=2 power_limit_w=- sm_clock_mhz=-\n"
        "13|CANCELLED by 0|0:15|n2|\n"
    )

    failed, cancelled = parse_sacct(text)

    assert (failed.job_id, failed.state, failed.exit_code, failed.signal) == (12, "FAILED", 3, None)
    assert failed.comment.startswith("wattflow job=1 ")
    assert (cancelled.state, cancelled.signal, cancelled.nodes) == ("CANCELLED", 15, "n2")


def test_sinfo_flags_make_a_node_unavailable():
    payload = json.dumps({"nodes": [
        {"name": "n1", "state": "idle", "state_flags": ["DRAIN"]},
        {"name": "n2", "state": "mixed", "state_flags": []},
        {"name": "n3", "state": "down", "state_flags": ["NOT_RESPONDING"]},
    ]})  # fmt: skip

    assert [(n.name, n.available) for n in parse_sinfo(payload)] == [
        ("n1", False),
        ("n2", True),
        ("n3", False),
    ]


@pytest.mark.parametrize("payload", ["not json", '{"jobs": [{"job_state": "RUNNING"}]}'])
def test_unreadable_squeue_output_is_one_slurm_error(payload):
    with pytest.raises(SlurmError, match="^unreadable squeue --json output"):
        parse_squeue(payload)
