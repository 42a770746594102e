"""Reading Slurm's output (no Slurm needed): squeue's columns, scontrol's and sacct's exit
codes, sinfo's flags."""

import json

import pytest

from scheduling.executors.slurm_cli import (
    SlurmError,
    parse_sacct,
    parse_scontrol_job,
    parse_sinfo,
    parse_squeue,
)


def test_squeue_text_keeps_a_comment_with_bars_whole_and_has_no_exit_code_yet():
    text = (
        "41|RUNNING|n1|gres:gpu:3|None|/out/41.out|wattflow job=1 allocation=2 power_limit_w=- "
        "sm_clock_mhz=-\n"
        "42|FAILED|n[1-2]|gres:gpu:2|NonZeroExitCode|/out/42.out|a|b\n"
        "43|PENDING||gres:gpu:1|JobHeldUser|(null)|(null)\n"
    )

    running, failed, held = parse_squeue(text)

    assert (running.job_id, running.active, running.gpus_per_node, running.nodes) == (
        41, True, 3, "n1"
    )  # fmt: skip
    assert running.comment.endswith("sm_clock_mhz=-")
    assert (failed.active, failed.comment, failed.exit_code) == (False, "a|b", None)
    assert (held.state, held.reason, held.output, held.comment) == (
        "PENDING", "JobHeldUser", "", ""
    )  # fmt: skip


def test_scontrol_gives_the_exit_code_and_the_signal_of_an_ended_job():
    (info,) = parse_squeue("42|FAILED|n1|gres:gpu:1|NonZeroExitCode|/o|x\n")
    line = "JobId=42 JobName=x UserId=root(0) JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0"

    assert parse_scontrol_job(line, info).exit_code == 3
    killed = parse_scontrol_job(line.replace("ExitCode=3:0", "ExitCode=0:9"), info)
    assert (killed.exit_code, killed.signal, killed.state) == (0, 9, "FAILED")


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


@pytest.mark.parametrize("text", ["not a job line", "x|RUNNING|n1|g|r|o|c"])
def test_unreadable_squeue_output_is_one_slurm_error(text):
    with pytest.raises(SlurmError, match="^unreadable squeue line"):
        parse_squeue(text)
