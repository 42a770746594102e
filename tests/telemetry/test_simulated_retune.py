"""A simulated job retuned in place (a new power limit, same GPUs and batch) draws the new
power from the next interval on, as its progress already does."""

from datetime import UTC, datetime, timedelta

import pytest
from support.net import free_port
from test_agent_jobs import _assignment

from telemetry.agent.client import AgentClient
from telemetry.agent.loop import Agent, AgentConfig
from telemetry.agent.simulated import SimulatedBackend
from telemetry.agent.spool import Spool

T0 = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)


def test_a_power_limit_retune_changes_the_simulated_power_and_energy(tmp_path):
    backend = SimulatedBackend(node_name="n", n_gpus=1, gpu_model="A100")
    client = AgentClient(f"http://127.0.0.1:{free_port()}", "t", Spool(tmp_path / "spool"))
    agent = Agent(backend, client, AgentConfig(node_name="n", work_dir=tmp_path))
    gpu = ["GPU-sim-n-0"]
    agent.reconcile({"assignments": [_assignment(tmp_path, 1, gpu, power_limit_w=300)]}, T0)
    job = backend.jobs[7]
    at_300 = job.model.power_w(job.config())
    backend.read(T0)
    assert backend.read(T0 + timedelta(seconds=10))[0].power_w == pytest.approx(at_300)
    # when the scheduler lowers the limit in place (a new allocation, same shape)
    agent.reconcile({"assignments": [_assignment(tmp_path, 2, gpu, power_limit_w=150)]}, T0)
    assert backend.jobs[7] is job and job.power_limit_w == 150
    at_150 = job.model.power_w(job.config())
    assert at_150 < at_300
    reading = backend.read(T0 + timedelta(seconds=20))
    # then the ten seconds since are charged at the new power
    assert reading[0].power_w == pytest.approx(at_150)
    assert reading[0].energy_j == pytest.approx(10 * at_300 + 10 * at_150)
