"""The Slurm Prolog, Epilog and Task Prolog the project ships (``deploy/slurm/``), run as real
processes by ``/bin/sh`` (dash: POSIX sh) with only the variables slurmd gives them, and the
agent's monitor loop consuming what they write: with the fake-pynvml NVML backend (which calls
set and restore the GPUs) and with the simulated backend."""

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.net import free_port
from test_agent_jobs import _spooled_events
from test_nvml_backend import FakeNvml, _device

from telemetry.agent.backends import NvmlBackend
from telemetry.agent.client import AgentClient
from telemetry.agent.loop import Agent, AgentConfig
from telemetry.agent.monitor import HandoffWatcher
from telemetry.agent.runners import NoneRunner
from telemetry.agent.simulated import SimulatedBackend
from telemetry.agent.slurm_handoff import Handoff, HandoffError, SlurmJobTag
from telemetry.agent.spool import Spool

SCRIPTS = Path(__file__).resolve().parents[2] / "deploy" / "slurm"
NODE = "gpu-07"
T0 = datetime(2026, 11, 22, 7, 0, tzinfo=UTC)
NOBODY = 65534
TAG = SlurmJobTag(job_id=12, allocation_id=34, power_limit_w=250)


def _run(script, handoff_dir, **env):
    """Run a script as slurmd would: no PATH, no inherited environment, just these variables."""
    variables = {"WATTFLOW_HANDOFF_DIR": str(handoff_dir), "SLURMD_NODENAME": NODE, **env}
    return subprocess.run(
        ["/bin/sh", str(SCRIPTS / script)],
        env={k: str(v) for k, v in variables.items() if v is not None},
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip


def _prolog(handoff_dir, job_id, gpus, comment, **env):
    return _run(
        "prolog.sh", handoff_dir, SLURM_JOB_ID=job_id, SLURM_JOB_GPUS=gpus,
        SLURM_JOB_COMMENT=comment, SLURM_JOB_UID=NOBODY, **env,
    )  # fmt: skip


def _epilog(handoff_dir, job_id, comment=None):
    return _run("epilog.sh", handoff_dir, SLURM_JOB_ID=job_id, SLURM_JOB_COMMENT=comment)


def test_prolog_hands_a_wattflow_job_over_and_epilog_takes_it_back(tmp_path):
    done = _prolog(tmp_path, 4711, "2,5", TAG.comment())
    assert (done.returncode, done.stderr) == (0, "")
    node_dir = tmp_path / NODE
    assert sorted(p.name for p in node_dir.iterdir()) == ["4711.json", "4711.progress"]
    handoff = Handoff.read(node_dir / "4711.json")
    assert handoff == Handoff(slurm_job_id=4711, tag=TAG, gpu_indices=(2, 5))
    progress = (node_dir / "4711.progress").stat()
    assert (progress.st_uid, progress.st_size, progress.st_mode & 0o777) == (NOBODY, 0, 0o644)
    done = _epilog(tmp_path, 4711, TAG.comment())
    assert (done.returncode, done.stderr) == (0, "")
    assert list(node_dir.iterdir()) == []


@pytest.mark.parametrize("comment", [None, "", "training run 3", "wattflowish job=1", "Wattflow"])
def test_prolog_and_epilog_leave_other_jobs_alone(tmp_path, comment):
    assert _prolog(tmp_path, 9, "0", comment).returncode == 0
    assert not (tmp_path / NODE).exists()
    (tmp_path / NODE).mkdir()
    (tmp_path / NODE / "other.json").write_text("{}")  # not this job's: stays
    assert _epilog(tmp_path, 9, comment).returncode == 0
    assert [p.name for p in (tmp_path / NODE).iterdir()] == ["other.json"]


@pytest.mark.parametrize(
    ("job_id", "gpus", "node", "said"),
    [
        ("", "0", NODE, "SLURM_JOB_ID"),
        ("12;rm", "0", NODE, "SLURM_JOB_ID"),
        ("12", "0-3", NODE, "SLURM_JOB_GPUS"),
        ("12", "0", "../etc", "node name"),
    ],
)
def test_prolog_refuses_odd_slurm_values_with_one_line_and_never_fails_the_job(
    tmp_path, job_id, gpus, node, said
):
    done = _prolog(tmp_path, job_id, gpus, TAG.comment(), SLURMD_NODENAME=node)
    assert done.returncode == 0
    assert len(done.stderr.strip().splitlines()) == 1 and said in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_prolog_without_a_writable_handoff_dir_still_exits_0(tmp_path):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    done = _prolog(blocked, 3, "0", TAG.comment())
    assert done.returncode == 0
    assert "cannot create" in done.stderr
    assert _epilog(blocked, 3).returncode == 0
    assert _epilog(tmp_path / "missing", 3).returncode == 0


def test_a_comment_with_quotes_still_makes_valid_json_which_the_agent_refuses(tmp_path):
    done = _prolog(tmp_path, 8, "0", 'wattflow job=1" "x\\"\ny')
    assert done.returncode == 0
    raw = json.loads((tmp_path / NODE / "8.json").read_text())
    assert raw["comment"] == 'wattflow job=1" "x\\"y'
    with pytest.raises(HandoffError):
        Handoff.read(tmp_path / NODE / "8.json")


def test_task_prolog_points_a_wattflow_job_at_its_progress_file(tmp_path):
    _prolog(tmp_path, 77, "0", TAG.comment())
    done = _run("task_prolog.sh", tmp_path, SLURM_JOB_ID=77)
    assert done.stdout == f"export WATTFLOW_PROGRESS_FILE={tmp_path}/{NODE}/77.progress\n"
    other = _run("task_prolog.sh", tmp_path, SLURM_JOB_ID=78)
    assert (other.returncode, other.stdout) == (0, "")


def _agent(tmp_path, backend):
    client = AgentClient(f"http://127.0.0.1:{free_port()}", "t", Spool(tmp_path / "spool"))
    config = AgentConfig(node_name=NODE, work_dir=tmp_path, post_interval_s=1.0)
    return Agent(
        backend, client, config, runner=NoneRunner(),
        handoffs=HandoffWatcher(tmp_path / "handoff", NODE),
    )  # fmt: skip


def test_the_agent_applies_what_the_prolog_wrote_and_restores_after_the_epilog(tmp_path):
    handoff_dir = tmp_path / "handoff"
    fake = FakeNvml([_device(f"GPU-{i}", energy_mj=0) for i in range(4)])
    agent = _agent(tmp_path, NvmlBackend(nvml=fake))
    agent.tick(T0)
    fake.calls.clear()
    # Slurm starts job 900 (Wattflow job 12) on GPUs 0 and 2, and a job of someone else
    assert _prolog(handoff_dir, 900, "0,2", TAG.comment()).returncode == 0
    assert _prolog(handoff_dir, 901, "1", "not ours").returncode == 0
    agent.tick(T0 + timedelta(seconds=1))
    assert fake.calls == [
        ("set_power_limit", "GPU-0", 250_000),
        ("set_power_limit", "GPU-2", 250_000),
    ]
    # the job writes its progress where the Task Prolog pointed it
    export = _run("task_prolog.sh", handoff_dir, SLURM_JOB_ID=900).stdout
    Path(export.strip().split("=", 1)[1]).write_text("17")
    agent.tick(T0 + timedelta(seconds=2))
    # the job ends: the Epilog runs, the agent restores GPUs 0 and 2 only
    fake.calls.clear()
    assert _epilog(handoff_dir, 900, TAG.comment()).returncode == 0
    agent.tick(T0 + timedelta(seconds=3))
    assert fake.calls == [
        ("set_power_limit", "GPU-0", 400_000), ("set_power_limit", "GPU-2", 400_000),
    ]  # fmt: skip
    assert [d["limit_mw"] for d in fake.devices] == [400_000] * 4
    assert _spooled_events(tmp_path) == [("progress", None, 17.0, None)]


def test_the_simulated_agent_reports_the_clock_the_prolog_handed_over(tmp_path):
    handoff_dir = tmp_path / "handoff"
    backend = SimulatedBackend(node_name=NODE, n_gpus=2, gpu_model="A100")
    agent = _agent(tmp_path, backend)
    tag = SlurmJobTag(job_id=5, allocation_id=6, sm_clock_mhz=1110)
    assert _prolog(handoff_dir, 31, "1", tag.comment()).returncode == 0
    agent.tick(T0)
    agent.tick(T0 + timedelta(seconds=1))
    _epilog(handoff_dir, 31)
    agent.tick(T0 + timedelta(seconds=2))
    agent.tick(T0 + timedelta(seconds=3))
    samples = []
    for path in sorted((tmp_path / "spool").glob("*-samples.json")):
        samples.extend(json.loads(path.read_text())["body"]["samples"])
    clocks = [s["sm_clock_mhz"] for s in samples if s["gpu_uuid"] == f"GPU-sim-{NODE}-1"]
    # each tick reads the GPUs, then looks at the handoffs: a change shows from the next one
    assert clocks == [None, 1110, 1110, None]
    assert {s["sm_clock_mhz"] for s in samples if s["gpu_uuid"] == f"GPU-sim-{NODE}-0"} == {None}


def test_the_scripts_are_posix_sh():
    for script in ("prolog.sh", "epilog.sh", "task_prolog.sh"):
        assert (SCRIPTS / script).read_text().startswith("#!/bin/sh\n")
        assert os.access(SCRIPTS / script, os.X_OK)
        subprocess.run(["/bin/sh", "-n", str(SCRIPTS / script)], check=True)
