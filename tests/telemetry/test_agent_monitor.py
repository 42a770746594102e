"""Monitor mode (``--runner none --handoff-dir DIR``): Slurm runs the jobs, the agent applies and
restores GPU settings from the Prolog's handoff files and reports progress, without a server
(its messages go to the spool, which these tests read back).

NVML is the fake of ``test_nvml_backend``; files, directories and the agent loop are real.
"""

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from support.handoffs import write_handoff
from support.net import free_port
from test_agent_jobs import _spooled_events
from test_nvml_backend import FakeNvml, _device

from telemetry.agent.__main__ import parse_args
from telemetry.agent.backends import NvmlBackend
from telemetry.agent.client import AgentClient
from telemetry.agent.loop import Agent, AgentConfig
from telemetry.agent.monitor import HandoffWatcher, progress_path
from telemetry.agent.runners import NoneRunner
from telemetry.agent.simulated import SimulatedBackend
from telemetry.agent.slurm_handoff import SlurmJobTag
from telemetry.agent.spool import Spool

T0 = datetime(2026, 11, 22, 5, 0, tzinfo=UTC)
NODE = "n1"


def _monitor(tmp_path, backend):
    client = AgentClient(f"http://127.0.0.1:{free_port()}", "t", Spool(tmp_path / "spool"))
    config = AgentConfig(node_name=NODE, work_dir=tmp_path, post_interval_s=1.0)
    watcher = HandoffWatcher(tmp_path / "handoff", NODE)
    return Agent(backend, client, config, runner=NoneRunner(), handoffs=watcher)


@pytest.fixture
def nvml_monitor(tmp_path):
    fake = FakeNvml([_device(f"GPU-{i}", energy_mj=0) for i in range(4)])
    return _monitor(tmp_path, NvmlBackend(nvml=fake)), fake


def _hand_over(tmp_path, slurm_job_id, gpus, **tag):
    comment = SlurmJobTag(**{"job_id": 12, "allocation_id": 34, **tag}).comment()
    return write_handoff(
        tmp_path / "handoff" / NODE, slurm_job_id=slurm_job_id, slurm_job_gpus=gpus,
        comment=comment,
    )  # fmt: skip


def _settings(fake):
    return [c for c in fake.calls if c[0] in ("set_power_limit", "lock_clocks")]


def test_a_handoff_sets_its_gpus_power_limit_and_its_removal_restores_them(nvml_monitor, tmp_path):
    agent, fake = nvml_monitor
    agent.tick(T0)  # no handoff yet: every GPU starts from its defaults
    fake.calls.clear()
    # when the Prolog hands over Slurm job 501 on GPUs 1 and 3 at 250 W
    handoff = _hand_over(tmp_path, 501, "3,1", power_limit_w=250)
    agent.tick(T0 + timedelta(seconds=1))
    assert fake.calls == [
        ("set_power_limit", "GPU-1", 250_000),
        ("set_power_limit", "GPU-3", 250_000),
    ]
    assert [fake.devices[i]["limit_mw"] for i in range(4)] == [400_000, 250_000, 400_000, 250_000]
    # and nothing changes while it runs
    fake.calls.clear()
    agent.tick(T0 + timedelta(seconds=2))
    assert fake.calls == []
    # when the Epilog removes the file
    handoff.unlink()
    agent.tick(T0 + timedelta(seconds=3))
    assert fake.calls == [
        ("set_power_limit", "GPU-1", 400_000), ("set_power_limit", "GPU-3", 400_000),
    ]  # fmt: skip
    assert agent.slurm_jobs == {}


def test_a_clock_handoff_locks_the_sm_clock_capped_at_the_gpus_maximum(nvml_monitor, tmp_path):
    agent, fake = nvml_monitor
    _hand_over(tmp_path, 7, "0", sm_clock_mhz=1200)
    _hand_over(tmp_path, 8, "2", job_id=13, allocation_id=35, sm_clock_mhz=5000)
    agent.tick(T0)
    # the GPUs' maximum is 1410 MHz (registered as max_sm_clock_mhz)
    assert [c for c in fake.calls if c[0] == "lock_clocks"] == [
        ("lock_clocks", "GPU-0", 1200, 1200),
        ("lock_clocks", "GPU-2", 1410, 1410),
    ]
    assert [c for c in fake.calls if c[0] == "set_power_limit" and c[2] != 400_000] == []


def test_monitor_mode_reports_progress_and_samples_but_no_starts_or_exits(nvml_monitor, tmp_path):
    agent, fake = nvml_monitor
    handoff = _hand_over(tmp_path, 501, "0", power_limit_w=300)
    agent.tick(T0)
    # the job (run by Slurm) writes its progress where the Task Prolog pointed it
    progress_path(tmp_path / "handoff" / NODE, 501).write_text("40\n")
    agent.tick(T0 + timedelta(seconds=1))
    progress_path(tmp_path / "handoff" / NODE, 501).write_text("75")
    agent.tick(T0 + timedelta(seconds=2))
    handoff.unlink()
    agent.tick(T0 + timedelta(seconds=3))
    assert _spooled_events(tmp_path) == [
        ("progress", None, 40.0, None),
        ("progress", None, 75.0, None),
    ]
    events = []
    for path in sorted((tmp_path / "spool").glob("*-events.json")):
        events.extend(json.loads(path.read_text())["body"]["events"])
    assert {(e["job_id"], e["allocation_id"]) for e in events} == {(12, 34)}
    # telemetry went on every tick: 4 GPUs x 4 ticks, and no assignment was ever asked for
    samples = []
    for path in sorted((tmp_path / "spool").glob("*-samples.json")):
        samples.extend(json.loads(path.read_text())["body"]["samples"])
    assert len(samples) == 16
    assert {s["power_limit_w"] for s in samples if s["gpu_uuid"] == "GPU-0"} == {400.0, 300.0}
    assert not list((tmp_path / "spool").glob("*assignments*"))


def _progress_times(tmp_path):
    events = []
    for path in sorted((tmp_path / "spool").glob("*-events.json")):
        events.extend(json.loads(path.read_text())["body"]["events"])
    return [(e["iterations"], datetime.fromisoformat(e["ts"])) for e in events]


def test_progress_carries_the_time_the_job_reached_its_count_where_that_is_plausible(
    nvml_monitor, tmp_path
):
    agent, _ = nvml_monitor
    _hand_over(tmp_path, 501, "0")
    path = progress_path(tmp_path / "handoff" / NODE, 501)

    def report(iterations, at, tick_s):
        path.write_text(json.dumps({"iterations": iterations, "ts": at.timestamp()}))
        agent.tick(T0 + timedelta(seconds=tick_s))

    agent.tick(T0)
    # the first report keeps the agent's time (its interval holds the warm-up anyway)
    report(10, T0 + timedelta(seconds=0.4), 1)
    # later ones the job's: the agent read them up to a tick late, the last after the
    # job's checkpoint save
    report(50, T0 + timedelta(seconds=2.3), 3)
    report(90, T0 + timedelta(seconds=4.1), 5)
    # a time not after the previous event's, or ahead of the agent's clock, is not believed
    report(95, T0 + timedelta(seconds=4.0), 7)
    report(99, T0 + timedelta(seconds=30), 9)
    # nor one that cannot be a time
    path.write_text(json.dumps({"iterations": 120, "ts": 1e300}))
    agent.tick(T0 + timedelta(seconds=11))
    # when the job's next Slurm job (a new allocation) starts before the old one's Epilog,
    # the new allocation's first event takes the agent's time again (the job's could lie
    # before the new allocation's start), the next ones the job's, a count reached during
    # the tick that read it included
    path.unlink()  # (the old job has exited; its handoff waits for its Epilog)
    _hand_over(tmp_path, 502, "1", allocation_id=35)
    path = progress_path(tmp_path / "handoff" / NODE, 502)
    report(130, T0 + timedelta(seconds=12.5), 13)
    report(140, T0 + timedelta(seconds=14.2), 15)
    report(150, T0 + timedelta(seconds=16.4), 16)
    assert _progress_times(tmp_path) == [
        (10.0, T0 + timedelta(seconds=1)),
        (50.0, T0 + timedelta(seconds=2.3)),
        (90.0, T0 + timedelta(seconds=4.1)),
        (95.0, T0 + timedelta(seconds=7)),
        (99.0, T0 + timedelta(seconds=9)),
        (120.0, T0 + timedelta(seconds=11)),
        (130.0, T0 + timedelta(seconds=13)),
        (140.0, T0 + timedelta(seconds=14.2)),
        (150.0, T0 + timedelta(seconds=16.4)),
    ]


def test_malformed_handoffs_are_logged_once_and_skipped_and_good_ones_still_apply(
    nvml_monitor, tmp_path, caplog
):
    agent, fake = nvml_monitor
    node_dir = tmp_path / "handoff" / NODE
    node_dir.mkdir(parents=True)
    (node_dir / "1.json").write_text("{not json")
    (node_dir / "2.json").write_text(json.dumps({"slurm_job_id": "2", "comment": "wattflow job=1"}))
    (node_dir / "3.json").write_text(json.dumps({"slurm_job_id": "4", "comment": "x"}))
    write_handoff(node_dir, slurm_job_id=5, slurm_job_gpus="9", comment=SlurmJobTag(1, 2).comment())
    (node_dir / ".6.json.123").write_text("{half")  # the Prolog's temporary file: not read
    _hand_over(tmp_path, 7, "2", power_limit_w=200)
    with caplog.at_level(logging.ERROR):
        for second in range(3):
            agent.tick(T0 + timedelta(seconds=second))
    assert [c for c in _settings(fake) if c[2] != 400_000] == [
        ("set_power_limit", "GPU-2", 200_000)
    ]
    assert list(agent.slurm_jobs) == [7]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 4  # once each, not once per tick
    assert all(f"{n}.json" in " ".join(errors) for n in (1, 2, 3))
    assert any("not on this node" in e for e in errors)
    # a bad file that is rewritten well is read again
    write_handoff(
        node_dir, slurm_job_id=1, slurm_job_gpus="0", comment=SlurmJobTag(3, 4, 150).comment()
    )
    agent.tick(T0 + timedelta(seconds=3))
    assert _settings(fake)[-1] == ("set_power_limit", "GPU-0", 150_000)
    assert sorted(agent.slurm_jobs) == [1, 7]


def test_a_gpu_shared_by_two_slurm_jobs_is_restored_when_the_last_one_ends(nvml_monitor, tmp_path):
    agent, fake = nvml_monitor
    first = _hand_over(tmp_path, 10, "1", power_limit_w=300)
    second = _hand_over(tmp_path, 11, "1", job_id=13, allocation_id=35, power_limit_w=300)
    agent.tick(T0)
    fake.calls.clear()
    first.unlink()
    agent.tick(T0 + timedelta(seconds=1))
    assert fake.calls == []
    second.unlink()
    agent.tick(T0 + timedelta(seconds=2))
    assert fake.calls == [("set_power_limit", "GPU-1", 400_000)]


def test_a_requeued_job_rewritten_between_ticks_is_restored_then_applied_anew(
    nvml_monitor, tmp_path
):
    agent, fake = nvml_monitor
    _hand_over(tmp_path, 20, "0", power_limit_w=300)
    agent.tick(T0)
    fake.calls.clear()
    # Epilog and the next Prolog of the same Slurm job, both before the next tick
    (tmp_path / "handoff" / NODE / "20.json").unlink()
    _hand_over(tmp_path, 20, "0", allocation_id=36, power_limit_w=280)
    agent.tick(T0 + timedelta(seconds=1))
    assert fake.calls == [
        ("set_power_limit", "GPU-0", 400_000),
        ("set_power_limit", "GPU-0", 280_000),
    ]
    assert agent.allocation_of == {12: 36}


def test_on_start_a_limit_no_agent_recorded_stays_and_held_gpus_keep_their_setting(
    nvml_monitor, tmp_path
):
    # (what an agent killed mid-job left is put back from its state file: test_nvml_backend)
    agent, fake = nvml_monitor
    fake.devices[3]["limit_mw"] = 222_000  # a site's own cap: no agent changed it
    _hand_over(tmp_path, 30, "0", power_limit_w=300)
    agent.tick(T0)
    assert [d["limit_mw"] for d in fake.devices] == [300_000, 400_000, 400_000, 222_000]
    assert ("reset_clocks", "GPU-0") not in fake.calls


def test_a_driver_refusal_is_logged_and_the_loop_goes_on(nvml_monitor, tmp_path, caplog):
    import pynvml

    agent, fake = nvml_monitor

    def refuse(handle, limit_mw):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    fake.nvmlDeviceSetPowerManagementLimit = refuse
    _hand_over(tmp_path, 40, "0,1", power_limit_w=300)
    with caplog.at_level(logging.ERROR):
        agent.tick(T0)
        agent.tick(T0 + timedelta(seconds=1))
    assert list(agent.slurm_jobs) == [40]
    assert sum("cannot set GPU" in r.getMessage() for r in caplog.records) == 2


def test_the_simulated_backend_reports_the_handed_over_settings_until_the_epilog(tmp_path):
    backend = SimulatedBackend(node_name=NODE, n_gpus=2, gpu_model="A100")
    agent = _monitor(tmp_path, backend)
    handoff = _hand_over(tmp_path, 50, "1", power_limit_w=250, sm_clock_mhz=1200)
    agent.tick(T0)
    idle, tuned = backend.read(T0 + timedelta(seconds=1))
    assert (tuned.power_limit_w, tuned.sm_clock_mhz) == (250.0, 1200)
    assert (idle.power_limit_w, idle.sm_clock_mhz) == (backend.gpus()[0].max_power_limit_w, None)
    handoff.unlink()
    agent.tick(T0 + timedelta(seconds=2))
    assert backend.settings == {}
    _, restored = backend.read(T0 + timedelta(seconds=3))
    assert (restored.power_limit_w, restored.sm_clock_mhz) == (idle.power_limit_w, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--handoff-dir", "/tmp"], "--handoff-dir is for monitor mode: add --runner none"),
        (["--runner", "none", "--handoff-dir", "/etc/hostname"], "is not a directory"),
        (["--runner", "none", "--handoff-dir", "/tmp", "--name", "a/b"], "must not contain '/'"),
    ],
)
def test_bad_monitor_options_exit_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--server", "http://127.0.0.1:1", "--token", "t", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_monitor_options_are_taken(tmp_path):
    args = parse_args(
        ["--server", "http://x", "--token", "t", "--runner", "none", "--handoff-dir", str(tmp_path)]
    )
    assert (args.runner, args.handoff_dir) == ("none", tmp_path)
