"""The job comment and the Prolog's handoff file: written by the server, read by the agent."""

import json

import pytest

from telemetry.agent.slurm_handoff import Handoff, HandoffError, SlurmJobTag


def test_comment_round_trips_with_and_without_gpu_settings():
    tag = SlurmJobTag(job_id=12, allocation_id=34, power_limit_w=250, sm_clock_mhz=None)
    assert tag.comment() == "wattflow job=12 allocation=34 power_limit_w=250 sm_clock_mhz=-"
    assert SlurmJobTag.parse(tag.comment()) == tag
    bare = SlurmJobTag(job_id=1, allocation_id=2)
    assert SlurmJobTag.parse(bare.comment()) == bare
    assert SlurmJobTag.is_wattflow(tag.comment())
    assert not SlurmJobTag.is_wattflow("someone else's job")
    assert not SlurmJobTag.is_wattflow(None)


@pytest.mark.parametrize(
    "comment",
    [
        None,
        "",
        "other job=1 allocation=2 power_limit_w=- sm_clock_mhz=-",
        "wattflow job=1 allocation=2 power_limit_w=-",  # a field missing
        "wattflow job=1 job=1 allocation=2 power_limit_w=- sm_clock_mhz=-",  # twice
        "wattflow job=1 allocation=2 power_limit_w=-5 sm_clock_mhz=-",  # negative
        "wattflow job=1 allocation=2 power_limit_w=1e3 sm_clock_mhz=-",
        "wattflow job=- allocation=2 power_limit_w=- sm_clock_mhz=-",
        "wattflow job=1 allocation=2 power_limit_w=- sm_clock_mhz=- extra=1",
    ],
)
def test_malformed_comments_are_refused(comment):
    with pytest.raises(HandoffError):
        SlurmJobTag.parse(comment)


def test_handoff_file_gives_sorted_gpu_indices(tmp_path):
    path = tmp_path / "77.json"
    comment = SlurmJobTag(job_id=5, allocation_id=9, sm_clock_mhz=1200).comment()
    path.write_text(json.dumps({"slurm_job_id": "77", "slurm_job_gpus": "3,1", "comment": comment}))
    handoff = Handoff.read(path)
    assert handoff.slurm_job_id == 77
    assert handoff.gpu_indices == (1, 3)
    assert handoff.tag.sm_clock_mhz == 1200


def test_unreadable_handoff_file_is_a_handoff_error(tmp_path):
    path = tmp_path / "1.json"
    path.write_text("{not json")
    with pytest.raises(HandoffError):
        Handoff.read(path)
    with pytest.raises(HandoffError):
        Handoff.read(tmp_path / "missing.json")
