"""The agent carrying out assignments with real processes, without a server: its messages go
to the spool (the server address refuses connections), which these tests read back.

NVML is the module-level fake of ``test_nvml_backend``; everything else is real.
"""

import json
import sys
from datetime import UTC, datetime, timedelta

import pynvml
import pytest
from support.net import free_port
from support.polling import wait_for
from test_nvml_backend import FakeNvml, _device

from telemetry.agent.backends import NvmlBackend
from telemetry.agent.client import AgentClient
from telemetry.agent.loop import Agent, AgentConfig
from telemetry.agent.simulated import SimulatedBackend
from telemetry.agent.spool import Spool

NOW = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)

# Writes its progress, then waits; on SIGTERM writes a checkpoint and exits 0 (the convention).
JOB = """
import os, signal, sys, time
ckpt = os.path.join(os.environ["WATTFLOW_CHECKPOINT_DIR"], "state")
start = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
def stop(*_):
    open(ckpt, "w").write(str(start + 5))
    print("checkpointed on", os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(os.environ["WATTFLOW_PROGRESS_FILE"], "w").write(str(start + 5))
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def agent(tmp_path):
    fake = FakeNvml([_device(f"GPU-{i}", energy_mj=0) for i in range(4)])
    client = AgentClient(f"http://127.0.0.1:{free_port()}", "t", Spool(tmp_path / "spool"))
    config = AgentConfig(node_name="n", work_dir=tmp_path, stop_grace_s=10.0)
    return Agent(NvmlBackend(nvml=fake), client, config), fake


def _assignment(tmp_path, allocation_id, uuids, **extra):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    values = {
        "allocation_id": allocation_id, "job_id": 7, "workload": "resnet50",
        "command": f"{sys.executable} {script}", "gpu_uuids": uuids, "gpu_count": len(uuids),
        "batch_size": 256, "sm_clock_mhz": None, "power_limit_w": None,
        "checkpoint_dir": str(tmp_path / "ckpt"), "total_iterations": 100,
        "completed_iterations": 0.0, "env": {},
    }  # fmt: skip
    values.update(extra)
    return values


def _spooled_events(tmp_path):
    events = []
    for path in sorted((tmp_path / "spool").glob("*-events.json")):
        events.extend(json.loads(path.read_text())["body"]["events"])
    return [(e["kind"], e.get("reason"), e.get("iterations"), e.get("exit_status")) for e in events]


def test_a_resize_checkpoints_and_restarts_the_job_on_its_new_gpus(agent, tmp_path):
    agent, fake = agent
    agent.reconcile({"assignments": [_assignment(tmp_path, 1, ["GPU-0", "GPU-1"])]}, NOW)
    first = agent.jobs[7]
    wait_for(lambda: first.iterations() == 5.0, timeout_s=20.0, what="the first job at iteration 5")
    # when the scheduler moves the job to GPUs 2 and 3 (a new allocation)
    agent.reconcile({"assignments": [_assignment(tmp_path, 2, ["GPU-2", "GPU-3"])]}, NOW)
    second = agent.jobs[7]
    # then the first process checkpointed and exited 0, the second resumed from it
    assert first.process.returncode == 0
    assert second is not first and second.gpu_indices == [2, 3]
    wait_for(
        lambda: second.iterations() == 10.0, timeout_s=20.0, what="the second job at iteration 10"
    )
    assert "checkpointed on 0,1" in first.log_tail()
    assert _spooled_events(tmp_path) == [
        ("started", None, None, None),
        ("exited", "resized", 5.0, 0),
        ("started", None, None, None),
    ]
    agent.shutdown(NOW)


def test_a_retune_changes_the_power_limit_in_place(agent, tmp_path):
    agent, fake = agent
    agent.reconcile({"assignments": [_assignment(tmp_path, 1, ["GPU-0"], power_limit_w=300)]}, NOW)
    process = agent.jobs[7].process
    agent.reconcile({"assignments": [_assignment(tmp_path, 2, ["GPU-0"], power_limit_w=250)]}, NOW)
    assert agent.jobs[7].process is process and process.poll() is None
    assert [c for c in fake.calls if c[0] == "set_power_limit"] == [
        ("set_power_limit", "GPU-0", 300_000),
        ("set_power_limit", "GPU-0", 250_000),
    ]
    agent.shutdown(NOW)


def test_agent_exit_stops_jobs_and_puts_back_what_it_changed(agent, tmp_path):
    agent, fake = agent
    agent.reconcile({"assignments": [_assignment(tmp_path, 1, ["GPU-1"], sm_clock_mhz=1200)]}, NOW)
    job = agent.jobs[7]
    wait_for(lambda: job.iterations() == 5.0, timeout_s=20.0, what="the job at iteration 5")
    fake.calls.clear()
    agent.shutdown(NOW)
    assert job.process.returncode == 0
    # only the clock the job locked is unlocked, once; no limit was changed, and the other
    # GPUs are left as they are (a site's own cap stays; a non-root agent warns nothing)
    assert fake.calls == [("reset_clocks", "GPU-1")]
    assert not fake.initialised
    assert _spooled_events(tmp_path)[-1] == ("exited", "agent_exit", 5.0, 0)


def test_a_job_listed_to_stop_is_stopped_and_its_gpu_restored(agent, tmp_path):
    agent, fake = agent
    agent.reconcile({"assignments": [_assignment(tmp_path, 1, ["GPU-0"], power_limit_w=300)]}, NOW)
    job = agent.jobs[7]
    wait_for(
        lambda: job.iterations() == 5.0, timeout_s=20.0, what="the job at iteration 5"
    )  # its SIGTERM handler is installed by then
    agent.reconcile({"assignments": [], "stop": [7]}, NOW)
    assert 7 not in agent.jobs and job.process.returncode == 0
    assert fake.devices[0]["limit_mw"] == 400_000
    assert _spooled_events(tmp_path)[-1][:2] == ("exited", "stopped")


def test_a_job_that_ended_here_is_not_started_again_while_still_assigned(agent, tmp_path):
    agent, fake = agent
    done = _assignment(tmp_path, 1, ["GPU-0"], command="exit 3")
    agent.reconcile({"assignments": [done]}, NOW)
    wait_for(
        lambda: agent.jobs[7].poll() is not None, timeout_s=20.0, what="the job process to exit"
    )
    assert agent.watch_jobs(NOW)[0]["exit_status"] == 3
    # the server has not read the exit yet (it is spooled) and still lists the job
    agent.reconcile({"assignments": [done]}, NOW)
    assert agent.jobs == {}
    # a new allocation of the same job (the scheduler re-queued it) does start
    agent.reconcile({"assignments": [_assignment(tmp_path, 2, ["GPU-0"], command="exit 0")]}, NOW)
    assert list(agent.jobs) == [7]
    agent.shutdown(NOW)


def test_a_simulated_job_without_a_perf_model_is_reported_failed(tmp_path, monkeypatch):
    # (any workload now runs as its catalog stand-in on the GPU: here the catalog has none)
    monkeypatch.setattr("telemetry.agent.simulated.catalog_stand_in", lambda *a, **k: None)
    backend = SimulatedBackend(node_name="n", n_gpus=2, gpu_model="A100")
    client = AgentClient(f"http://127.0.0.1:{free_port()}", "t", Spool(tmp_path / "spool"))
    agent = Agent(backend, client, AgentConfig(node_name="n", work_dir=tmp_path))
    unknown = _assignment(tmp_path, 4, ["GPU-sim-n-0"], workload="no-such-model")
    agent.reconcile({"assignments": [unknown]}, NOW)
    assert backend.jobs == {}
    events = _spooled_events(tmp_path)
    assert events == [("exited", "failed", None, None)]
    agent.reconcile({"assignments": [unknown]}, NOW)  # still listed: not tried again
    assert _spooled_events(tmp_path) == events


def test_after_a_retune_in_place_the_first_report_keeps_the_jobs_own_time(agent, tmp_path):
    # given a job retuned at NOW + 10 s (the process runs on); before, the new allocation's
    # first report took the agent's tick, up to a tick late, and the server now learns a
    # retune from that first report on
    agent, _ = agent
    agent.reconcile({"assignments": [_assignment(tmp_path, 1, ["GPU-0"], power_limit_w=300)]}, NOW)
    retuned = NOW + timedelta(seconds=10)
    agent.reconcile(
        {"assignments": [_assignment(tmp_path, 2, ["GPU-0"], power_limit_w=250)]}, retuned
    )
    # when the job writes that it reached 40 iterations at +12.3 s, read at the +12.5 s tick
    reached = retuned + timedelta(seconds=2.3)
    (event,) = agent._progress(retuned + timedelta(seconds=2.5), 7, 40.0, at=reached.timestamp())
    # then the event carries the job's time; a count dated before the retune would not
    assert datetime.fromisoformat(event["ts"]) == reached
    agent.shutdown(NOW)


def test_a_tick_that_raises_costs_a_tick_not_the_jobs(tmp_path, caplog):
    # given an agent running a job, whose backend raises something NVML does not (a
    # driver hiccup) on two ticks in a row; leaving the loop would shut the agent down,
    # which stops every job on the node
    fake = FakeNvml([_device(f"GPU-{i}", energy_mj=0) for i in range(2)])
    client = AgentClient(f"http://127.0.0.1:{free_port()}", "t", Spool(tmp_path / "spool"))
    config = AgentConfig(node_name="n", work_dir=tmp_path, sample_interval_s=0.02)
    agent = Agent(NvmlBackend(nvml=fake), client, config)
    agent.register = lambda: {}  # no server here: what matters is the loop
    agent.reconcile({"assignments": [_assignment(tmp_path, 1, ["GPU-0"])]}, NOW)
    read, reads, running = agent.backend.read, [], []

    def flaky(now):
        reads.append(now)
        if len(reads) in (2, 3):
            raise RuntimeError("driver hiccup")
        if len(reads) == 4:
            running.append(7 in agent.jobs and agent.jobs[7].poll() is None)
            agent.stopping.set()
        return read(now)

    agent.backend.read = flaky
    with caplog.at_level("WARNING", logger="telemetry.agent.loop"):
        agent.run()
    # then the loop went on past them, the job still running, and said so once each way
    assert len(reads) == 4 and running == [True]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("tick failed" in m for m in messages) == 1
    assert any("succeed again after 2" in m for m in messages)
    # and the shutdown at the end stopped the job as it always does
    assert agent.jobs == {}


def test_a_gpu_that_refuses_its_settings_runs_the_job_at_what_it_has(agent, tmp_path, caplog):
    # given a GPU whose driver refuses a power limit (a board that cannot manage it)
    agent, fake = agent
    fake.devices[0]["fail"] = {"nvmlDeviceSetPowerManagementLimit": pynvml.NVML_ERROR_NOT_SUPPORTED}
    # when a job is assigned to it at a power limit
    with caplog.at_level("WARNING", logger="telemetry.agent.loop"):
        agent.reconcile(
            {"assignments": [_assignment(tmp_path, 1, ["GPU-0"], power_limit_w=250)]}, NOW
        )
    # then the job starts and says so (it was neither started nor reported, every round)
    assert list(agent.jobs) == [7]
    assert _spooled_events(tmp_path) == [("started", None, None, None)]
    assert any("refused its settings" in r.getMessage() for r in caplog.records)
    agent.shutdown(NOW)


def test_what_a_round_of_assignments_did_is_reported_when_a_later_step_raises(agent, tmp_path):
    # given a running job, and a new assignment whose start raises something unforeseen
    agent, _ = agent
    agent.reconcile({"assignments": [_assignment(tmp_path, 1, ["GPU-0"])]}, NOW)
    other = _assignment(tmp_path, 5, ["GPU-1"], job_id=8)

    def broken(*_):
        raise OSError("no space left on device")

    agent.runner.start = broken
    # when the answer stops the first and starts the second
    with pytest.raises(OSError):
        agent.reconcile({"assignments": [other]}, NOW)
    # then the first job's exit is reported all the same (else it stayed assigned, stopped)
    assert [e[:2] for e in _spooled_events(tmp_path)] == [("started", None), ("exited", "stopped")]
    agent.shutdown(NOW)


def test_a_job_whose_progress_file_is_garbage_still_has_its_exit_reported(agent, tmp_path):
    # The progress file was read with errors only an OSError away from the tick: a job
    # that wrote bytes that are not UTF-8 made every tick raise before its exit (and any
    # other job's progress) was reported, and the runner had already forgotten it, so the
    # server kept it running on its GPUs.
    agent, fake = agent
    garbage = "printf '\\377\\376' > \"$WATTFLOW_PROGRESS_FILE\"; exit 0"
    agent.reconcile({"assignments": [_assignment(tmp_path, 1, ["GPU-0"], command=garbage)]}, NOW)
    wait_for(
        lambda: agent.jobs[7].poll() is not None, timeout_s=20.0, what="the job process to exit"
    )
    assert (tmp_path / "jobs" / "7" / "progress").read_bytes() == b"\xff\xfe"
    events = agent.watch_jobs(NOW)
    assert [(e["kind"], e["exit_status"], e["iterations"]) for e in events] == [("exited", 0, None)]
    agent.shutdown(NOW)


@pytest.mark.parametrize("assigned", [True, False])
def test_a_job_an_agent_killed_left_running_is_stopped_by_the_next_agent(agent, tmp_path, assigned):
    # (a job runs in its own session, so it outlives an agent that is SIGKILLed; the next
    # agent knew nothing of it: it started the still-assigned job a second time on the same
    # GPUs and checkpoint, and a job no longer assigned ran on, unknown, on GPUs the
    # scheduler gave to others)
    first_agent, fake = agent
    first_agent.reconcile({"assignments": [_assignment(tmp_path, 1, ["GPU-0"])]}, NOW)
    orphan = first_agent.jobs[7]
    wait_for(lambda: orphan.iterations() == 5.0, timeout_s=20.0, what="the job at iteration 5")

    # the agent dies without its shutdown; a new one starts on the same work dir
    client = AgentClient(f"http://127.0.0.1:{free_port()}", "t", Spool(tmp_path / "spool"))
    config = AgentConfig(node_name="n", work_dir=tmp_path, stop_grace_s=10.0)
    second_agent = Agent(NvmlBackend(nvml=fake), client, config)
    try:
        # the orphan was stopped as any stopped job is: it checkpointed and exited 0
        assert orphan.process.wait(timeout=1) == 0
        assignments = [_assignment(tmp_path, 1, ["GPU-0"])] if assigned else []
        second_agent.reconcile({"assignments": assignments}, NOW)
        if assigned:
            [again] = second_agent.jobs.values()
            # one process of the job, resumed from what the stopped one saved
            wait_for(lambda: again.iterations() == 10.0, timeout_s=20.0, what="the restart")
        else:
            assert second_agent.jobs == {}
    finally:
        second_agent.shutdown(NOW)
        if orphan.process.poll() is None:
            orphan.process.kill()


def test_a_pid_file_that_cannot_be_written_does_not_lose_the_started_job(
    agent, tmp_path, monkeypatch
):
    # (the process was started before the write: raising then would leave it running with
    # no agent that knows it)
    from pathlib import Path

    agent, _ = agent
    real = Path.write_text

    def full_disk(self, *args, **kwargs):
        if self.name == "pid":
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    agent.reconcile({"assignments": [_assignment(tmp_path, 1, ["GPU-0"])]}, NOW)
    try:
        assert list(agent.jobs) == [7]
    finally:
        agent.shutdown(NOW)


def test_an_orphan_whose_launcher_swallows_sigterm_is_stopped_by_the_stop_file(tmp_path):
    # (the stop file is the documented order for jobs whose launcher swallows signals,
    # docs/job_client.md; the next agent sent SIGTERM only, so such a job was SIGKILLed
    # after the grace period, without its checkpoint)
    import signal as signal_module
    import time

    from telemetry.agent.jobs import ProcessJob, stop_orphans

    script = tmp_path / "deaf.py"
    script.write_text(
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "open(os.environ['WATTFLOW_PROGRESS_FILE'] + '.up', 'w').close()\n"
        "while not os.path.exists(os.environ['WATTFLOW_STOP_FILE']):\n"
        "    time.sleep(0.02)\n"
        "open('saved', 'w').close()\n"
    )
    job = ProcessJob(_assignment(tmp_path, 1, ["GPU-0"], command=f"{sys.executable} {script}"),
                     [0], tmp_path)  # fmt: skip
    job.start()
    try:
        wait_for(lambda: (job.dir / "progress.up").exists(), timeout_s=20.0, what="the job")
        started = time.monotonic()
        assert stop_orphans(tmp_path, grace_s=5.0) == [7]
        assert job.process.wait(timeout=5) == 0  # it saved and exited, not SIGKILLed
        assert (job.dir / "saved").exists()
        assert time.monotonic() - started < 4.0
    finally:
        if job.process.poll() is None:
            job.process.send_signal(signal_module.SIGKILL)
            job.process.wait()


def test_a_stop_ends_the_jobs_whole_group_not_only_its_leader(tmp_path):
    # (a child that ignores SIGTERM, as a data loader or a launcher's worker may, ran on
    # holding the GPUs after the job's leader had exited on it)
    import os
    import signal as signal_module

    from telemetry.agent.jobs import ProcessJob

    script = _leaves_a_deaf_child(tmp_path / "parent.py", then="time.sleep(120)\n")
    job = ProcessJob(_assignment(tmp_path, 1, ["GPU-0"], command=f"{sys.executable} {script}"),
                     [0], tmp_path)  # fmt: skip
    job.start()
    try:
        wait_for(lambda: (job.dir / "child.up").exists(), timeout_s=20.0, what="the child")
        child = int((job.dir / "child.pid").read_text())
        job.stop(grace_s=1.0)
        # the child is gone (reaped by init once killed): no process of the group is left
        wait_for(lambda: not _alive(child), timeout_s=10.0, what="the child ended")
    finally:
        try:
            os.killpg(job.process.pid, signal_module.SIGKILL)
        except ProcessLookupError:
            pass


def _leaves_a_deaf_child(script, *, then: str):
    """A job script that starts a child ignoring SIGTERM (it writes ``child.up`` and its id
    to ``child.pid``), then runs ``then``."""
    script.write_text(
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        'open("child.up", "w").close(); time.sleep(120)\'])\n'
        "open('child.pid', 'w').write(str(child.pid))\n" + then
    )
    return script


def _alive(pid: int) -> bool:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def test_what_a_job_that_ended_on_its_own_left_in_its_group_is_ended(tmp_path):
    # (a daemon or a worker that outlived its launcher ran on, on GPUs the scheduler gave
    # to the next job, known to no agent)
    from telemetry.agent.runners import ProcessRunner

    script = _leaves_a_deaf_child(
        tmp_path / "leaves.py", then="while not os.path.exists('child.up'):\n    time.sleep(0.02)\n"
    )
    runner = ProcessRunner(tmp_path, stop_grace_s=1.0)
    runner.start(_assignment(tmp_path, 1, ["GPU-0"], command=f"{sys.executable} {script}"), [0])
    job = runner.jobs[7]
    wait_for(lambda: runner.ended(7) is not None, timeout_s=20.0, what="the leader's exit")
    child = int((job.dir / "child.pid").read_text())
    wait_for(lambda: not _alive(child), timeout_s=10.0, what="the left child ended")


def test_jobs_stopped_together_share_one_grace_period(tmp_path):
    # (stopped one after another, four jobs that ignore SIGTERM kept the agent four grace
    # periods from its next heartbeat, and a node of eight such jobs eight)
    import time

    fake = FakeNvml([_device(f"GPU-{i}", energy_mj=0) for i in range(4)])
    client = AgentClient(f"http://127.0.0.1:{free_port()}", "t", Spool(tmp_path / "spool"))
    config = AgentConfig(node_name="n", work_dir=tmp_path, stop_grace_s=3.0)
    agent = Agent(NvmlBackend(nvml=fake), client, config)
    script = tmp_path / "deaf.py"
    script.write_text(
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "open(os.environ['WATTFLOW_PROGRESS_FILE'] + '.up', 'w').close()\n"
        "time.sleep(120)\n"
    )
    command = f"{sys.executable} {script}"
    assignments = [
        _assignment(tmp_path, 10 + i, [f"GPU-{i}"], job_id=20 + i, command=command)
        for i in range(4)
    ]
    agent.reconcile({"assignments": assignments}, NOW)
    jobs = [agent.jobs[20 + i] for i in range(4)]
    try:
        for job in jobs:
            wait_for(lambda job=job: (job.dir / "progress.up").exists(), timeout_s=20.0,
                     what="a job up")  # fmt: skip
        started = time.monotonic()
        agent.reconcile({"assignments": []}, NOW + timedelta(seconds=1))
        took = time.monotonic() - started
        # every job was SIGKILLed after the one grace period, and reported stopped
        assert not agent.running_job_ids()
        assert all(job.process.returncode == -9 for job in jobs)
        exits = [e for e in _spooled_events(tmp_path) if e[0] == "exited"]
        assert [(kind, reason, status) for kind, reason, _, status in exits] == [
            ("exited", "stopped", -9)
        ] * 4
        assert 3.0 <= took < 9.0  # one grace period, not four (12 s)
    finally:
        for job in jobs:
            if job.process.poll() is None:
                job.process.kill()
                job.process.wait()


def test_a_stop_after_the_leader_exited_asks_what_is_left_of_its_group_to_save(tmp_path):
    # (with the leader gone, nothing was signalled: a worker that saves on SIGTERM was left
    # to wait out the whole grace period and was SIGKILLed, its checkpoint never written)
    import time

    from telemetry.agent.runners import ProcessRunner

    script = tmp_path / "leaves.py"
    script.write_text(
        "import subprocess, sys, os, time\n"
        "subprocess.Popen([sys.executable, '-c', "
        "'import signal, sys, time\\n"
        "def save(*_):\\n"
        '    open("child.saved", "w").close()\\n'
        "    sys.exit(0)\\n"
        "signal.signal(signal.SIGTERM, save)\\n"
        'open("child.up", "w").close()\\n'
        "time.sleep(120)\\n'])\n"
        "while not os.path.exists('child.up'):\n    time.sleep(0.02)\n"
    )
    runner = ProcessRunner(tmp_path, stop_grace_s=10.0)
    runner.start(_assignment(tmp_path, 1, ["GPU-0"], command=f"{sys.executable} {script}"), [0])
    job = runner.jobs[7]
    wait_for(lambda: job.process.poll() is not None, timeout_s=20.0, what="the leader's exit")

    started = time.monotonic()
    ended = runner.stop(7)

    assert ended.status == 0  # the leader's own
    assert (job.dir / "child.saved").exists()
    assert time.monotonic() - started < 5.0  # not the whole 10 s grace


def _saves_on_sigterm(tmp_path, job_id, gpu, *, before_ready=""):
    """An assignment of a job that checkpoints on SIGTERM (``JOB``), running ``before_ready``
    first; it writes ``progress.up`` once ready."""
    script = tmp_path / f"job{job_id}.py"
    script.write_text(
        JOB.replace(
            'print("ready", flush=True)',
            before_ready + "open(os.environ['WATTFLOW_PROGRESS_FILE'] + '.up', 'w').close()",
        )
    )
    return _assignment(
        tmp_path, 100 + job_id, [gpu], job_id=job_id, command=f"{sys.executable} {script}",
        checkpoint_dir=str(tmp_path / f"ckpt{job_id}"),
    )  # fmt: skip


def test_a_job_whose_log_cannot_be_read_is_still_reported_stopped_with_the_others(agent, tmp_path):
    # (its log.txt made a directory by the job: the error raised out of the stop, and every job
    # stopped with it was forgotten unreported, its GPUs kept assigned by the server)
    agent, _ = agent
    odd = "os.remove('log.txt'); os.mkdir('log.txt')\n"
    agent.reconcile(
        {"assignments": [_saves_on_sigterm(tmp_path, 20, "GPU-0"),
                         _saves_on_sigterm(tmp_path, 21, "GPU-1", before_ready=odd),
                         _saves_on_sigterm(tmp_path, 22, "GPU-2")]},
        NOW,
    )  # fmt: skip
    jobs = [agent.jobs[j] for j in (20, 21, 22)]
    for job in jobs:
        wait_for(lambda job=job: (job.dir / "progress.up").exists(), timeout_s=20.0,
                 what="a job up")  # fmt: skip

    agent.reconcile({"assignments": []}, NOW + timedelta(seconds=1))

    assert not agent.running_job_ids()
    assert [job.process.returncode for job in jobs] == [0, 0, 0]
    exits = [e for e in _spooled_events(tmp_path) if e[0] == "exited"]
    assert [(reason, status) for _, reason, _, status in exits] == [("stopped", 0)] * 3


def test_a_job_whose_stop_fails_is_kept_and_the_others_are_reported(agent, tmp_path):
    # (one failure raised out of the stop of all: none was reported, all were forgotten, and
    # a job still assigned was started a second time on its GPUs)
    agent, _ = agent
    agent.reconcile(
        {"assignments": [_saves_on_sigterm(tmp_path, j, f"GPU-{j - 20}") for j in (20, 21, 22)]},
        NOW,
    )
    jobs = {j: agent.jobs[j] for j in (20, 21, 22)}
    for job in jobs.values():
        wait_for(lambda job=job: (job.dir / "progress.up").exists(), timeout_s=20.0,
                 what="a job up")  # fmt: skip

    def fails(deadline):
        raise RuntimeError("a fault while waiting for the job")

    jobs[21].end_stop = fails
    agent.reconcile({"assignments": []}, NOW + timedelta(seconds=1))

    # the two others are stopped and reported; the one whose stop failed is still known
    assert agent.running_job_ids() == {21}
    assert [e[:2] for e in _spooled_events(tmp_path) if e[0] == "exited"] == [
        ("exited", "stopped")
    ] * 2
    # and is stopped at the next round
    del jobs[21].end_stop
    agent.reconcile({"assignments": []}, NOW + timedelta(seconds=6))
    assert not agent.running_job_ids()
    assert len([e for e in _spooled_events(tmp_path) if e[0] == "exited"]) == 3
    assert jobs[21].process.returncode == 0
