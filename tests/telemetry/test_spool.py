"""The agent's disk spool on its own (no server needed): order, limits, survival of restarts."""

import json

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


def test_a_rejected_message_is_quarantined_with_the_reason_and_does_not_block_the_queue(
    tmp_path,
):
    spool = Spool(tmp_path)
    spool.put("samples", {"n": 0})
    spool.put("samples", {"n": 1})
    sent = []

    def picky(endpoint, body):
        if body["n"] == 0:
            raise Rejected("POST samples: HTTP 400", status=400, reason='{"ts": ["bad"]}')
        sent.append(body["n"])

    assert spool.replay(picky) == 1
    assert sent == [1]
    [kept] = (tmp_path / "quarantine").iterdir()
    assert kept.name == "000000000000-samples.json"
    record = json.loads(kept.read_text())
    assert (record["body"], record["status"], record["reason"]) == (
        {"n": 0}, 400, '{"ts": ["bad"]}',
    )  # fmt: skip
    status = spool.quarantine_status()
    assert (status.count, status.last_reason) == (1, 'HTTP 400: {"ts": ["bad"]}')
    assert len(spool) == 0


def test_server_errors_hold_a_message_until_the_bound_then_quarantine_it(tmp_path):
    spool = Spool(tmp_path, max_server_errors=3)
    spool.put("events", {"n": 0})
    spool.put("events", {"n": 1})
    sent = []

    def crashing_on_0(endpoint, body):
        if body["n"] == 0:
            raise ServerUnreachable("HTTP 500", status=500)
        sent.append(body["n"])

    # the first two 500s keep the message at the head (it may be the server's passing trouble)
    assert spool.replay(crashing_on_0) == 0
    assert spool.replay(crashing_on_0) == 0
    assert (sent, len(spool), spool.quarantine_status().count) == ([], 2, 0)
    # the third in a row quarantines it, and the message behind it goes through
    assert spool.replay(crashing_on_0) == 1
    assert sent == [1]
    status = spool.quarantine_status()
    assert status.count == 1
    assert status.last_reason.startswith("HTTP 500: 3 server errors in a row")


@pytest.mark.parametrize("status", [None, 502, 503, 504])
def test_a_server_that_is_away_never_quarantines_anything(tmp_path, status):
    spool = Spool(tmp_path, max_server_errors=1)
    spool.put("samples", {"n": 0})

    def away(endpoint, body):
        raise ServerUnreachable("down", status=status)

    for _ in range(20):
        assert spool.replay(away) == 0
    assert (len(spool), spool.quarantine_status().count) == (1, 0)


def test_quarantined_messages_can_be_requeued_behind_the_queue(tmp_path):
    spool = Spool(tmp_path)
    spool.quarantine("events", {"n": 0}, status=400, reason="no")
    spool.put("events", {"n": 1})
    assert spool.requeue() == 1
    sent = []
    assert spool.replay(lambda e, b: sent.append(b["n"])) == 2
    assert sent == [1, 0]
    assert spool.quarantine_status().count == 0


def test_an_unreadable_spool_file_is_quarantined_not_a_blockage(tmp_path):
    spool = Spool(tmp_path)
    (tmp_path / "000000000000-samples.json").write_text("{not json")
    spool = Spool(tmp_path)
    spool.put("samples", {"n": 1})
    sent = []
    assert spool.replay(lambda e, b: sent.append(b["n"])) == 1
    assert sent == [1]
    assert spool.quarantine_status().count == 1


def test_messages_an_older_agent_rejected_are_adopted_into_the_quarantine(tmp_path):
    (tmp_path / "rejected").mkdir()
    (tmp_path / "rejected" / "000000000007-samples.json").write_text(
        json.dumps({"endpoint": "samples", "body": {}})
    )
    spool = Spool(tmp_path)
    assert spool.quarantine_status().count == 1
    # and numbering continues after it, so a requeued message never collides
    assert spool.put("samples", {}).name == "000000000008-samples.json"


@pytest.mark.parametrize("endpoint", ["samples", "events"])
def test_files_are_named_by_sequence_and_endpoint(tmp_path, endpoint):
    path = Spool(tmp_path).put(endpoint, {})
    assert path.name == f"000000000000-{endpoint}.json"
    assert not list(tmp_path.glob("*.tmp"))


def test_the_agent_command_refuses_a_bound_below_one(capsys):
    from telemetry.agent.__main__ import parse_args

    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--server", "http://x", "--token", "t", "--max-server-errors", "0"])
    assert exit_info.value.code == 2
    assert "--max-server-errors must be at least 1" in capsys.readouterr().err
    args = parse_args(["--server", "http://x", "--token", "t", "--requeue-quarantine"])
    assert (args.max_server_errors, args.requeue_quarantine) == (5, True)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--sample-interval-s", "nan"),
        ("--post-interval-s", "0"),
        ("--heartbeat-interval-s", "inf"),
        ("--assignment-interval-s", "-1"),
        # (1 ms sampling made batches the server refused whole; 1e308 s never reported)
        ("--sample-interval-s", "0.001"),
        ("--heartbeat-interval-s", "1e308"),
        ("--stop-grace-s", "nan"),
    ],
)
def test_the_agent_command_refuses_an_interval_out_of_its_range(capsys, option, value):
    from telemetry.agent.__main__ import parse_args

    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--server", "http://x", "--token", "t", option, value])

    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"{option} must be " in err
    assert "finite" in err or "between 0.1 and 3600 seconds" in err
    assert err.count("\n") == 1  # (argparse printed its 14-line usage first)


def test_the_agent_posts_samples_in_batches_the_server_takes(tmp_path):
    # (one post of every buffered sample was refused whole past the server's 20,000, and
    # the spool quarantined them all)
    from datetime import UTC, datetime, timedelta

    from telemetry.agent.loop import MAX_SAMPLES_PER_POST, Agent, AgentConfig
    from telemetry.agent.simulated import SimulatedBackend

    class Recorder:
        def __init__(self):
            self.sent = []

        def deliver(self, kind, body):
            self.sent.append((kind, len(body["samples"]), body["samples"][0]["ts"]))
            return True

    backend = SimulatedBackend(node_name="n", n_gpus=4, gpu_model="A100")
    client = Recorder()
    agent = Agent(backend, client, AgentConfig(node_name="n", work_dir=tmp_path))
    start = datetime(2026, 12, 6, tzinfo=UTC)
    for i in range(3000):  # 12,000 samples
        agent.buffer.extend(backend.read(start + timedelta(milliseconds=100 * i)))

    agent.post_samples()

    assert MAX_SAMPLES_PER_POST < 20_000
    assert [(kind, n) for kind, n, _ in client.sent] == [
        ("samples", MAX_SAMPLES_PER_POST),
        ("samples", MAX_SAMPLES_PER_POST),
        ("samples", 12_000 - 2 * MAX_SAMPLES_PER_POST),
    ]
    assert [ts for *_, ts in client.sent] == sorted(ts for *_, ts in client.sent)
    assert agent.buffer == []


@pytest.mark.parametrize("server", ["notaurl", "ftp://x", "http://"])
def test_the_agent_command_refuses_a_server_that_is_no_http_url(capsys, server):
    from telemetry.agent.__main__ import parse_args

    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--server", server, "--token", "t"])

    assert exit_info.value.code == 2
    assert "is not an http(s) URL" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["work-dir", "spool"])
def test_the_agent_command_refuses_a_work_dir_that_is_a_file(tmp_path, capsys, where):
    from telemetry.agent.__main__ import parse_args

    work = tmp_path / "agent"
    if where == "spool":
        work.mkdir()
        (work / "spool").write_text("")
    else:
        work.write_text("")

    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--server", "http://x", "--token", "t", "--work-dir", str(work)])

    assert exit_info.value.code == 2
    assert "is not a directory" in capsys.readouterr().err


def test_samples_the_server_did_not_take_wait_in_the_spool_behind_it(tmp_path):
    # (each batch's delivery retried the spool's head first: during an outage the head
    # met five server errors in one tick and was quarantined)
    from datetime import UTC, datetime, timedelta

    from telemetry.agent.loop import MAX_SAMPLES_PER_POST, Agent, AgentConfig
    from telemetry.agent.simulated import SimulatedBackend

    class Spooled(list):
        def put(self, kind, body):
            self.append(body)

    class Down:
        def __init__(self):
            self.tries, self.spool = 0, Spooled()

        def deliver(self, kind, body):
            self.tries += 1
            self.spool.put(kind, body)
            return False

    backend = SimulatedBackend(node_name="n", n_gpus=4, gpu_model="A100")
    client = Down()
    agent = Agent(backend, client, AgentConfig(node_name="n", work_dir=tmp_path))
    start = datetime(2026, 12, 6, tzinfo=UTC)
    for i in range(3 * MAX_SAMPLES_PER_POST // 4):
        agent.buffer.extend(backend.read(start + timedelta(seconds=i)))

    agent.post_samples()

    assert client.tries == 1
    assert [len(body["samples"]) for body in client.spool] == [MAX_SAMPLES_PER_POST] * 3


@pytest.mark.parametrize(
    "record",
    [
        {"endpoint": "progress-v2", "body": {"events": []}},  # a newer agent's endpoint
        {"endpoint": "samples", "body": []},  # a body that is no object
        {"endpoint": "events", "body": ["x"]},
        {"endpoint": 7, "body": {}},
    ],
)
def test_a_spooled_message_of_another_shape_is_quarantined_and_the_tick_goes_on(tmp_path, record):
    # (it raised out of every replay, so out of every tick before its heartbeat: the node
    # went silent, its running jobs were re-queued, and each post's samples were dropped)
    from datetime import UTC, datetime

    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    (spool_dir / "000000000000-x.json").write_text(json.dumps(record))
    agent, client, posted = _agent_on_a_server(tmp_path, Spool(spool_dir), lambda path: 200)

    agent.tick(datetime(2026, 12, 6, tzinfo=UTC))

    assert posted == ["samples/", "heartbeat/"]
    assert len(client.spool) == 0
    [kept] = (spool_dir / "quarantine").iterdir()
    kept_record = json.loads(kept.read_text())  # kept, for a person to read
    assert {k: kept_record[k] for k in ("endpoint", "body")} == {
        k: record[k] for k in ("endpoint", "body")
    }


def test_a_spooled_count_of_server_errors_that_is_no_count_counts_as_none(tmp_path):
    (tmp_path / "000000000000-events.json").write_text(
        json.dumps({"endpoint": "events", "body": {"n": 0}, "server_errors": "two"})
    )
    spool = Spool(tmp_path, max_server_errors=2)

    def failing(endpoint, body):
        raise ServerUnreachable("HTTP 500", status=500)

    assert spool.replay(failing) == 0  # (was: ValueError out of the replay, every time)
    assert len(spool) == 1
    assert spool.replay(failing) == 0
    assert spool.quarantine_status().count == 1


@pytest.mark.parametrize("fault", ["cut", "not_json"])
def test_a_job_exit_whose_answer_is_cut_off_waits_in_the_spool(tmp_path, fault):
    # (a connection cut while the answer came, ChunkedEncodingError, or a 2xx that is no
    # JSON raised out of the delivery: the exit was in no spool, the runner had already
    # forgotten the job, and the server showed it running on its GPUs for good)
    import requests

    from telemetry.agent.client import AgentClient

    class Answer:
        status_code, reason = 200, "OK"

        def __init__(self, text):
            self.text, self.content = text, text.encode()

        def json(self):
            import json as json_module

            return json_module.loads(self.text)

    class Server:
        headers: dict = {}
        up = False
        posted: list = []

        def request(self, method, url, json=None, timeout=None):
            if not self.up:
                if fault == "cut":
                    raise requests.exceptions.ChunkedEncodingError("Connection broken")
                return Answer("<html><title>Portal</title></html>")
            self.posted.append(json)
            return Answer('{"new": 1}')

    spool = Spool(tmp_path)
    client = AgentClient("http://server", "t", spool)
    client.session = server = Server()
    exit_event = {"events": [{"event_id": "e1", "job_id": 1, "kind": "exited"}]}

    assert client.deliver("events", exit_event) is False
    assert len(spool) == 1

    server.up = True
    assert client.deliver("samples", {"samples": []}) is True
    assert server.posted == [exit_event, {"samples": []}]
    assert len(spool) == 0 and spool.quarantine_status().count == 0


def test_a_full_disk_drops_the_samples_it_cannot_spool_but_not_the_heartbeat(tmp_path):
    # (with messages waiting, a new post goes to the spool; on a full disk that raised out
    # of the tick before its heartbeat, and the node fell silent while its jobs ran)
    import errno
    from datetime import UTC, datetime

    class FullDisk(Spool):
        def put(self, endpoint, body, server_errors=0):
            raise OSError(errno.ENOSPC, "No space left on device")

    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    backlog = {"endpoint": "samples", "body": {"samples": []}, "server_errors": 0}
    (spool_dir / "000000000000-x.json").write_text(json.dumps(backlog))
    # (the server answers the heartbeat; the replay of the backlog gets a 503)
    agent, _, posted = _agent_on_a_server(
        tmp_path, FullDisk(spool_dir), lambda path: 200 if path == "heartbeat/" else 503
    )

    agent.tick(datetime(2026, 12, 6, tzinfo=UTC))

    assert posted[-1] == "heartbeat/"
    assert agent.buffer == []  # dropped, not kept to grow without bound


def test_a_portal_page_for_longer_than_the_error_bound_quarantines_nothing(tmp_path):
    # (a 2xx that is no JSON counted against the message as a server error: a captive
    # portal or proxy page answering 200 for a few minutes quarantined message after
    # message, each one the server would have taken once it was back)
    from telemetry.agent.client import AgentClient

    class Page:
        status_code, reason = 200, "OK"
        text = "<html><title>Portal</title></html>"
        content = text.encode()

        def json(self):
            raise ValueError("not JSON")

    class Portal:
        headers: dict = {}

        def request(self, method, url, json=None, timeout=None):
            return Page()

    spool = Spool(tmp_path, max_server_errors=3)
    client = AgentClient("http://server", "t", spool)
    client.session = Portal()
    assert client.deliver("events", {"events": [{"event_id": "e1"}]}) is False
    for _ in range(10):
        client.deliver("samples", {"samples": []})
    assert spool.quarantine_status().count == 0
    assert len(spool) == 11


def test_a_message_that_is_no_json_is_quarantined_not_retried_for_good(tmp_path):
    # (requests refuses a body with a NaN before sending; read as an outage, the message
    # would have stayed at the head of the spool, retried every tick)
    from telemetry.agent.client import AgentClient

    client = AgentClient("http://127.0.0.1:9", "t", Spool(tmp_path / "spool"))
    assert client.deliver("events", {"events": [{"iterations": float("nan")}]}) is True
    assert len(client.spool) == 0
    [kept] = (tmp_path / "spool" / "quarantine").iterdir()
    assert json.loads(kept.read_text())["reason"] == (
        "Out of range float values are not JSON compliant"
    )


def test_job_events_the_spool_cannot_keep_are_sent_at_the_next_try(tmp_path):
    # (an exit event raised out of the tick on a full disk and was gone: the agent had
    # already forgotten the job, so the server kept it running on its GPUs)
    import errno

    class Client:
        def __init__(self):
            self.full, self.sent = True, []

        def deliver(self, endpoint, body):
            if self.full:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.sent.append([e["event_id"] for e in body["events"]])
            return True

    client = Client()
    agent = _agent(tmp_path, client)
    agent.send_events([{"event_id": "exit-1"}])  # nothing raised, nothing lost
    assert agent.unsent_events == [{"event_id": "exit-1"}]
    client.full = False
    agent.send_events([{"event_id": "progress-2"}])
    assert client.sent == [["exit-1", "progress-2"]]  # the kept one first, in order
    assert agent.unsent_events == []


def _agent(tmp_path, client):
    """A telemetry-only agent (no jobs) on one simulated GPU, speaking through ``client``."""
    from telemetry.agent.loop import Agent, AgentConfig
    from telemetry.agent.runners import make_runner
    from telemetry.agent.simulated import SimulatedBackend

    backend = SimulatedBackend(node_name="n", n_gpus=1, gpu_model="A100")
    return Agent(
        backend,
        client,
        AgentConfig(node_name="n", work_dir=tmp_path),
        runner=make_runner("none", backend, work_dir=tmp_path, stop_grace_s=1),
    )


def _agent_on_a_server(tmp_path, spool, status_of):
    """``_agent`` with a real client whose server answers each path (``samples/``,
    ``heartbeat/``, ...) with ``status_of(path)`` and an empty JSON object; returns the
    agent, its client and the paths posted, in order."""
    from telemetry.agent.client import AgentClient

    posted = []

    class Answer:
        content, text = b"{}", "{}"

        def __init__(self, status):
            self.status_code = status
            self.reason = "OK" if status < 400 else "Service Unavailable"

        def json(self):
            return {}

    class Server:
        headers: dict = {}

        def request(self, method, url, json=None, timeout=None):
            posted.append(url.rsplit("/api/agent/", 1)[1])
            return Answer(status_of(posted[-1]))

    client = AgentClient("http://server", "t", spool)
    client.session = Server()
    return _agent(tmp_path, client), client, posted
