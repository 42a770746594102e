"""Monitor mode against a real daphne server: a job Slurm runs (its allocation recorded as the
Slurm executor records it), handed over by the real Prolog script, tuned and followed by a
simulated agent with ``--runner none``; its progress is accepted and its GPU's energy lands in
the ledger, and no start or exit comes from the agent."""

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from test_agent_e2e import server  # noqa: F401 - the daphne fixture

from cluster import services as cluster_services
from cluster.models import Gpu
from scheduling.core.perf_models import load_catalog
from telemetry.accounting import process_dirty_hours
from telemetry.agent.client import AgentClient
from telemetry.agent.loop import Agent, AgentConfig
from telemetry.agent.monitor import HandoffWatcher
from telemetry.agent.runners import NoneRunner
from telemetry.agent.simulated import SimulatedBackend
from telemetry.agent.slurm_handoff import SlurmJobTag
from telemetry.agent.spool import Spool
from telemetry.models import EnergyLedgerEntry, GpuSample, JobEvent

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SCRIPTS = Path(__file__).resolve().parents[2] / "deploy" / "slurm"


def _script(name, handoff_dir, **env):
    env = {"WATTFLOW_HANDOFF_DIR": str(handoff_dir), "SLURMD_NODENAME": "node-01", **env}
    subprocess.run(["/bin/sh", str(SCRIPTS / name)], env=env, check=True, timeout=10)


def test_a_slurm_job_is_tuned_followed_and_charged_without_start_or_exit_events(
    server,  # noqa: F811
    make_node, make_job, member, team, tmp_path,
):  # fmt: skip
    # given a simulated 2-GPU node whose agent runs in monitor mode
    node = make_node("node-01", gpus=0)
    backend = SimulatedBackend(node_name="node-01", n_gpus=2, gpu_model="A100")
    handoff_dir = tmp_path / "handoff"
    client = AgentClient(server.url, node.issue_agent_token(), Spool(tmp_path / "spool"))
    config = AgentConfig(node_name="node-01", work_dir=tmp_path, post_interval_s=2.0,
                         heartbeat_interval_s=60.0)  # fmt: skip
    agent = Agent(backend, client, config, runner=NoneRunner(),
                  handoffs=HandoffWatcher(handoff_dir, "node-01"))  # fmt: skip
    agent.register()
    gpu1 = Gpu.objects.get(uuid="GPU-sim-node-01-1")
    # and a job the Slurm executor started on GPU 1 at 250 W (Slurm job 4242)
    job = make_job(owner=member, team=team, total_iterations=1000)
    start = timezone.now().replace(microsecond=0) - timedelta(minutes=2)
    allocation = cluster_services.start_job(
        job, gpus=[gpu1], batch_size=256, power_limit_w=250, at=start - timedelta(seconds=1)
    )
    tag = SlurmJobTag(job_id=job.pk, allocation_id=allocation.pk, power_limit_w=250)
    # when Slurm's Prolog hands it over, the job reports progress, and its Epilog runs
    _script("prolog.sh", handoff_dir, SLURM_JOB_ID="4242", SLURM_JOB_GPUS="1",
            SLURM_JOB_COMMENT=tag.comment(), SLURM_JOB_UID=str(65534))  # fmt: skip
    times = [start + timedelta(seconds=s) for s in range(12)]
    for second, now in enumerate(times):
        if second == 3:
            (handoff_dir / "node-01" / "4242.progress").write_text("40")
        if second == 9:
            _script("epilog.sh", handoff_dir, SLURM_JOB_ID="4242")
        agent.tick(now)
    agent.post_samples()
    assert len(agent.client.spool) == 0  # the server took everything
    # then GPU 1 ran at 250 W from the tick after the Prolog to the tick that saw the Epilog
    limits = list(
        GpuSample.objects.filter(gpu=gpu1).order_by("ts").values_list("power_limit_w", flat=True)
    )
    default_w = backend.gpus()[1].default_power_limit_w
    assert limits == [default_w] + [250.0] * 9 + [default_w] * 2
    # and the job's progress arrived, with no start or exit from the agent
    assert list(JobEvent.objects.filter(job=job).values_list("kind", "iterations")) == [
        ("progress", 40.0)
    ]
    job.refresh_from_db()
    assert job.completed_iterations == 40
    # and its GPU's energy (idle draw: the simulation cannot know a Slurm job's workload) is
    # charged to it, 11 one-second intervals
    while process_dirty_hours():
        pass
    idle_w = load_catalog().gpus["A100"].idle_power_w
    charged = sum(e.energy_j for e in EnergyLedgerEntry.objects.filter(job=job))
    assert charged == pytest.approx(11 * idle_w, rel=1e-6)
