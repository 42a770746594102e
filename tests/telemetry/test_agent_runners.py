"""The agent's job runners: chosen once (``--runner``), the loop driving each through one
interface. The process and simulated runners' behaviour is covered by ``test_agent_jobs``,
``test_agent_e2e`` and ``test_simulated_sharing``; here: the choice, and the ``none`` runner
(another system runs the jobs) launching nothing while telemetry goes on."""

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from support.net import free_port
from test_agent_jobs import _assignment
from test_nvml_backend import FakeNvml, _device

from telemetry.agent.__main__ import parse_args
from telemetry.agent.backends import NvmlBackend
from telemetry.agent.client import AgentClient
from telemetry.agent.loop import Agent, AgentConfig
from telemetry.agent.runners import (
    CannotStart,
    NoneRunner,
    ProcessRunner,
    SimulatedRunner,
    make_runner,
)
from telemetry.agent.simulated import SimulatedBackend
from telemetry.agent.spool import Spool

T0 = datetime(2026, 11, 22, 6, 0, tzinfo=UTC)


def _client(tmp_path):
    return AgentClient(f"http://127.0.0.1:{free_port()}", "t", Spool(tmp_path / "spool"))


def test_the_backend_picks_the_default_runner(tmp_path):
    config = AgentConfig(node_name="n", work_dir=tmp_path)
    nvml = Agent(
        NvmlBackend(nvml=FakeNvml([_device("GPU-0", energy_mj=0)])), _client(tmp_path), config
    )
    sim = Agent(
        SimulatedBackend(node_name="n", n_gpus=1, gpu_model="A100"), _client(tmp_path), config
    )
    assert isinstance(nvml.runner, ProcessRunner)
    assert isinstance(sim.runner, SimulatedRunner)


def test_the_simulated_runner_needs_simulated_gpus(tmp_path):
    backend = NvmlBackend(nvml=FakeNvml([_device("GPU-0", energy_mj=0)]))
    with pytest.raises(ValueError, match="simulated backend"):
        make_runner("simulated", backend, work_dir=tmp_path, stop_grace_s=1.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--runner", "simulated"], "--runner simulated needs --simulate"),
        (["--runner", "slurm"], "invalid choice: 'slurm'"),
    ],
)
def test_a_bad_runner_choice_exits_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--server", "http://127.0.0.1:1", "--token", "t", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_the_none_runner_fetches_no_assignments_and_keeps_sampling(tmp_path, caplog):
    # given an agent whose jobs another system runs, and a process agent beside it
    fake = FakeNvml([_device(f"GPU-{i}", energy_mj=0) for i in range(2)])
    config = AgentConfig(node_name="n", work_dir=tmp_path, post_interval_s=1.0)
    agent = Agent(NvmlBackend(nvml=fake), _client(tmp_path), config, runner=NoneRunner())
    with caplog.at_level(logging.WARNING):
        for second in range(3):
            agent.tick(T0 + timedelta(seconds=second))
    # then it never asked for assignments (the server is down: asking would have warned)
    assert not [r for r in caplog.records if "assignments" in r.getMessage()]
    # and every tick's samples wait in the spool, with no job event among them
    spooled = sorted((tmp_path / "spool").glob("*.json"))
    assert [p.name.split("-", 1)[1] for p in spooled] == ["samples.json"] * 3
    samples = [s for p in spooled for s in json.loads(p.read_text())["body"]["samples"]]
    assert len(samples) == 6
    # and an assignment handed to it anyway is refused as a job that cannot start here
    agent.reconcile({"assignments": [_assignment(tmp_path, 1, ["GPU-0"])]}, T0)
    assert agent.running_job_ids() == set()
    with pytest.raises(CannotStart):
        NoneRunner().start(_assignment(tmp_path, 1, ["GPU-0"]), [0])


def test_a_process_agent_asks_for_assignments(tmp_path, caplog):
    fake = FakeNvml([_device("GPU-0", energy_mj=0)])
    agent = Agent(NvmlBackend(nvml=fake), _client(tmp_path), AgentConfig("n", tmp_path))
    with caplog.at_level(logging.WARNING):
        agent.tick(T0)
    assert any("cannot fetch assignments" in r.getMessage() for r in caplog.records)
