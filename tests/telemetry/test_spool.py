"""The agent's disk spool on its own (no server needed): order, limits, survival of restarts."""

import pytest

from telemetry.agent.spool import Rejected, ServerUnreachable, Spool


def test_replay_sends_oldest_first_and_keeps_the_rest_when_the_server_fails(tmp_path):
    spool = Spool(tmp_path)
    for i in range(5):
        spool.put("samples", {"n": i})
    sent = []

    def flaky(endpoint, body):
        if body["n"] == 3:
            raise ServerUnreachable("down again")
        sent.append(body["n"])

    assert spool.replay(flaky) == 3
    assert sent == [0, 1, 2]
    assert len(spool) == 2
    # a new spool object on the same folder (an agent restart) continues in order
    again = Spool(tmp_path)
    again.put("events", {"n": 5})
    assert again.replay(lambda e, b: sent.append(b["n"])) == 3
    assert sent == [0, 1, 2, 3, 4, 5]
    assert len(again) == 0


def test_replay_stops_after_its_limit(tmp_path):
    spool = Spool(tmp_path)
    for i in range(4):
        spool.put("samples", {"n": i})
    sent = []
    assert spool.replay(lambda e, b: sent.append(b["n"]), limit=3) == 3
    assert sent == [0, 1, 2] and len(spool) == 1


def test_a_rejected_message_is_moved_aside_and_does_not_block_the_queue(tmp_path):
    spool = Spool(tmp_path)
    spool.put("samples", {"n": 0})
    spool.put("samples", {"n": 1})
    sent = []

    def picky(endpoint, body):
        if body["n"] == 0:
            raise Rejected("HTTP 400")
        sent.append(body["n"])

    assert spool.replay(picky) == 1
    assert sent == [1]
    assert [p.name for p in (tmp_path / "rejected").iterdir()] == ["000000000000-samples.json"]


@pytest.mark.parametrize("endpoint", ["samples", "events"])
def test_files_are_named_by_sequence_and_endpoint(tmp_path, endpoint):
    path = Spool(tmp_path).put(endpoint, {})
    assert path.name == f"000000000000-{endpoint}.json"
    assert not list(tmp_path.glob("*.tmp"))
