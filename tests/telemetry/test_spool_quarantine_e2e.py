"""A refused message never stalls a node: against a real daphne server, a job event the server
refuses is quarantined with the server's reason, the messages behind it are delivered, and the
node's heartbeat puts the quarantine on the Node for admins to see."""

import json
import uuid
from datetime import timedelta

import pytest
from agent_samples import series
from django.utils import timezone
from test_agent_e2e import server  # noqa: F401  (the daphne fixture)

from cluster import services as cluster_services
from cluster.models import Gpu, Job, Node
from telemetry.agent.client import AgentClient
from telemetry.agent.loop import Agent, AgentConfig
from telemetry.agent.simulated import SimulatedBackend
from telemetry.agent.spool import Spool
from telemetry.models import GpuSample, JobEvent

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def node_with_job(make_node, make_job, member, team):
    node = make_node("node-01", gpus=2)
    token = node.issue_agent_token()
    job = make_job(owner=member, team=team, max_gpus=2)
    cluster_services.start_job(
        job, gpus=list(Gpu.objects.filter(node=node)), batch_size=256,
        at=timezone.now() - timedelta(minutes=1),
    )  # fmt: skip
    job.refresh_from_db()
    return node, token, job


def _event(job, kind, *, ts, **extra):
    return {
        "event_id": str(uuid.uuid4()),
        "job_id": job.pk,
        "allocation_id": job.current_allocation_id,
        "kind": kind,
        "ts": ts.isoformat(),
        **extra,
    }


def test_a_refused_message_is_quarantined_and_the_rest_flows(
    server,  # noqa: F811
    node_with_job,
    tmp_path,
):
    node, token, job = node_with_job
    spool = Spool(tmp_path / "spool")
    client = AgentClient(server.url, token, spool, timeout_s=10.0)
    started = job.current_allocation.started_at
    # given a spool left by an outage: an exit stamped 10 min before the job started (a badly
    # wrong clock), then samples
    too_early = _event(
        job, "exited", ts=started - timedelta(minutes=10), reason="failed", exit_status=1
    )
    spool.put("events", {"events": [too_early]})
    now = timezone.now().replace(microsecond=0)
    spool.put("samples", {"samples": series("GPU-node-01-0", now - timedelta(seconds=20), 5)})

    # when the agent delivers new samples (the spool is replayed first)
    fresh = {"samples": series("GPU-node-01-0", now - timedelta(seconds=10), 5)}
    assert client.deliver("samples", fresh) is True

    # then both sample batches are stored, the spool is empty, the exit is quarantined with
    # the server's status and reason, and the job was not touched
    assert GpuSample.objects.count() == 10
    assert len(spool) == 0
    [kept] = (tmp_path / "spool" / "quarantine").iterdir()
    record = json.loads(kept.read_text())
    assert record["status"] == 400
    assert "allowed clock skew" in record["reason"]
    assert record["body"] == {"events": [too_early]}
    assert not JobEvent.objects.exists()
    assert Job.objects.get(pk=job.pk).state == "running"

    # a batch with one good and one refused event: the good one is stored, the other kept
    progress = _event(job, "progress", ts=timezone.now(), iterations=100.0)
    bad = _event(job, "progress", ts=timezone.now(), iterations=5.0)
    bad["allocation_id"] = 999999
    assert client.deliver("events", {"events": [progress, bad]}) is True
    assert list(JobEvent.objects.values_list("event_id", flat=True)) == [
        uuid.UUID(progress["event_id"])
    ]
    assert Job.objects.get(pk=job.pk).completed_iterations == 100.0
    assert spool.quarantine_status().count == 2
    assert "Unknown allocation 999999" in spool.quarantine_status().last_reason

    # and the agent's heartbeat shows the quarantine on the node
    agent = Agent(
        SimulatedBackend(node_name="node-01", n_gpus=2, gpu_model="A100"),
        client,
        AgentConfig(node_name="node-01", work_dir=tmp_path, heartbeat_interval_s=60.0),
    )
    client.post("heartbeat", agent.heartbeat_body(timezone.now()))
    stored = Node.objects.get(pk=node.pk)
    assert (stored.agent_spooled, stored.agent_quarantined) == (0, 2)
    assert stored.agent_quarantine_reason.startswith("HTTP 400: ")
    assert "Unknown allocation 999999" in stored.agent_quarantine_reason


def test_a_refused_sample_batch_loses_only_the_samples_the_server_named(
    server,  # noqa: F811
    node_with_job,
    tmp_path,
):
    node, token, _ = node_with_job
    spool = Spool(tmp_path / "spool")
    client = AgentClient(server.url, token, spool, timeout_s=10.0)
    start = timezone.now().replace(microsecond=0) - timedelta(minutes=2)
    # 40 samples, 25 of them reading 5 kW (out of range): more than one answer lists (20)
    batch = series("GPU-node-01-0", start, 40)
    bad = set(range(0, 40, 8)) | set(range(15, 35))
    for i in bad:
        batch[i]["power_w"] = 5000.0
    assert client.deliver("samples", {"samples": batch}) is True
    # the 15 good samples are stored; the 25 bad ones are kept aside with the server's reason
    stored = set(GpuSample.objects.values_list("ts", flat=True))
    assert stored == {start + timedelta(seconds=i) for i in range(40) if i not in bad}
    kept = [
        s
        for path in sorted((tmp_path / "spool" / "quarantine").iterdir())
        for s in json.loads(path.read_text())["body"]["samples"]
    ]
    assert sorted(s["ts"] for s in kept) == sorted(batch[i]["ts"] for i in bad)
    assert "Must be between 0 and 2000 W" in spool.quarantine_status().last_reason
    assert len(spool) == 0


def test_a_batch_refused_as_a_whole_is_quarantined_whole(
    server,  # noqa: F811
    node_with_job,
    other_node_token,
    tmp_path,
):
    # node-02's token posting node-01's GPU: 403, about the batch, not a sample
    spool = Spool(tmp_path / "spool")
    client = AgentClient(server.url, other_node_token, spool, timeout_s=10.0)
    batch = series("GPU-node-01-0", timezone.now().replace(microsecond=0), 3)
    assert client.deliver("samples", {"samples": batch}) is True
    assert not GpuSample.objects.exists()
    [kept] = (tmp_path / "spool" / "quarantine").iterdir()
    record = json.loads(kept.read_text())
    assert (record["status"], record["body"]) == (403, {"samples": batch})


@pytest.fixture
def other_node_token(make_node):
    return make_node("node-02", gpus=1).issue_agent_token()


def test_a_resend_with_other_values_is_kept_out_and_logged(
    server,  # noqa: F811
    node_with_job,
    tmp_path,
    caplog,
):
    node, token, job = node_with_job
    client = AgentClient(server.url, token, Spool(tmp_path / "spool"), timeout_s=10.0)
    start = timezone.now().replace(microsecond=0) - timedelta(seconds=10)
    assert client.deliver("samples", {"samples": series("GPU-node-01-0", start, 3)}) is True
    # a plain resend (the agent's retry after an outage) says nothing
    with caplog.at_level("WARNING", logger="telemetry.agent.client"):
        assert client.deliver("samples", {"samples": series("GPU-node-01-0", start, 3)})
    assert not caplog.records
    # when the same GPU and times come again with another draw
    other = series("GPU-node-01-0", start, 3, power_w=111.0)
    with caplog.at_level("WARNING", logger="telemetry.agent.client"):
        assert client.deliver("samples", {"samples": other}) is True
    # then the stored samples keep their values and the agent says why it matters
    assert sorted(GpuSample.objects.values_list("power_w", flat=True)) == [250.0] * 3
    [record] = caplog.records
    assert "already held 3 of these samples" in record.getMessage()
