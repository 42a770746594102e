"""The job-side client (``jobclient/wattflow_client.py``), the agent's reading of what it
writes, and the example training script under the process agent: stopped by SIGTERM it
checkpoints and exits 0, started again it resumes, and its gradient statistics reach the
agent's progress events.

NVML is the module-level fake of ``test_nvml_backend``; the processes are real.
"""

import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.net import free_port
from support.polling import wait_for
from test_nvml_backend import FakeNvml, _device

from telemetry.agent.backends import NvmlBackend
from telemetry.agent.client import AgentClient
from telemetry.agent.jobs import Progress, parse_progress, read_progress
from telemetry.agent.loop import Agent, AgentConfig
from telemetry.agent.spool import Spool

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "jobclient"))
import wattflow_client as wf  # noqa: E402

EXAMPLE = ROOT / "jobclient" / "train_logreg.py"


# --- the progress file as the agent reads it -------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", Progress(42.0)),
        ("41\n42\n", Progress(42.0)),  # the legacy format: the last line
        ('{"iterations": 5, "samples": 320}', Progress(5.0)),
        ('{"iterations": 5, "grad_sqr": 2.5, "grad_var": 0.5}', Progress(5.0, 2.5, 0.5)),
        ('{"iterations": 5, "grad_sqr": 2.5}', Progress(5.0)),  # no partner: dropped
        ('{"iterations": 5, "grad_sqr": -1, "grad_var": 0.5}', Progress(5.0)),
        ('{"iterations": 5, "grad_sqr": "2", "grad_var": 0.5}', Progress(5.0)),
        ('{"iterations": 5, "grad_sqr": true, "grad_var": 0.5}', Progress(5.0)),
        ('{"iterations": 5, "grad_sqr": NaN, "grad_var": 0.5}', Progress(5.0)),
        # a noise scale the server refuses as no measurement (a norm near 0 at convergence):
        # sent, the whole event was refused and the job's count stopped moving
        ('{"iterations": 5, "grad_sqr": 2e-13, "grad_var": 0.5}', Progress(5.0)),
        # a zero norm has no ratio either: the server refuses it, the agent leaves it out
        ('{"iterations": 5, "grad_sqr": 0, "grad_var": 0.5}', Progress(5.0)),
        ('{"iterations": 5, "ts": 1795709196.5}', Progress(5.0, at=1795709196.5)),
        ('{"iterations": 5, "ts": "soon"}', Progress(5.0)),  # not a time: the agent's
        ('{"iterations": 5, "ts": -3}', Progress(5.0)),
        ('{"iterations": 5, "gr', None),  # half written: read again next tick
        ('{"samples": 5}', None),
        ('{"iterations": -1}', None),
        ('{"iterations": true}', None),  # not a count (was read as 1)
        ('{"iterations": "5"}', None),
        ("nan", None),  # the server refuses these, and the batch they come in
        ("inf", None),
        ("-3", None),
        # past the server's bound (2^63 - 1): refused there, with the exit that carried it
        # (the job stayed running, its exit quarantined)
        ("1e19", None),
        ('{"iterations": 1e19}', None),
        ('{"iterations": 1' + "0" * 400 + "}", None),
        ("9223372036854775807", Progress(float(2**63 - 1))),
        ("", None),
        ("abc", None),
    ],
)
def test_the_agent_reads_both_progress_formats(text, expected):
    assert parse_progress(text) == expected


def test_a_progress_file_nested_too_deep_or_not_text_is_unreadable_not_a_fault(tmp_path):
    # A job's file is the job's: JSON nested past Python's recursion limit raised
    # RecursionError, and bytes that are not UTF-8 UnicodeDecodeError, out of the agent's
    # tick, which then reported no other job's progress or exit on the node.
    nested = '{"iterations": 5, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert parse_progress(nested) is None
    path = tmp_path / "progress"
    path.write_bytes(b'\xff\xfe{"iterations": 5}')
    assert read_progress(path) is None


def test_the_agent_bounds_counts_as_the_server_does():
    from telemetry.agent.jobs import MAX_ITERATIONS
    from telemetry.api.serializers import MAX_ITERATIONS as SERVER_MAX_ITERATIONS

    assert MAX_ITERATIONS == SERVER_MAX_ITERATIONS


# --- the client --------------------------------------------------------------------------


def _env(tmp_path, **extra):
    env = {
        "WATTFLOW_JOB_ID": "7",
        "WATTFLOW_BATCH_SIZE": "128",
        "WATTFLOW_GPU_COUNT": "2",
        "WATTFLOW_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "WATTFLOW_PROGRESS_FILE": str(tmp_path / "progress"),
        "WATTFLOW_STOP_FILE": str(tmp_path / "stop"),
        "WATTFLOW_TOTAL_ITERATIONS": "500.0",
        "WATTFLOW_COMPLETED_ITERATIONS": "120.5",
    }
    env.update(extra)
    return env


def test_connect_reads_what_the_agent_set(tmp_path):
    job = wf.connect(_env(tmp_path), handle_signals=False)
    assert (job.job_id, job.batch_size, job.gpu_count) == ("7", 128, 2)
    assert (job.total_iterations, job.completed_iterations) == (500.0, 120.5)
    assert job.checkpoint_path("w.npz") == tmp_path / "ckpt" / "w.npz"
    assert (tmp_path / "ckpt").is_dir()
    assert job.finished(500.0) and not job.finished(499.0)


def test_connect_outside_wattflow_has_working_defaults():
    job = wf.connect({}, handle_signals=False)
    assert (job.batch_size, job.total_iterations, job.completed_iterations) == (None, None, 0.0)
    assert job.report(3, force=True) is False  # nowhere to write
    assert not job.should_stop() and not job.finished(10**9)


@pytest.mark.parametrize(
    ("name", "value"),
    [("WATTFLOW_BATCH_SIZE", "big"), ("WATTFLOW_TOTAL_ITERATIONS", "nan"),
     ("WATTFLOW_COMPLETED_ITERATIONS", "-3"), ("WATTFLOW_BATCH_SIZE", "0.5"),
     ("WATTFLOW_BATCH_SIZE", "0"), ("WATTFLOW_GPU_COUNT", "1.5")],
)  # fmt: skip
def test_unreadable_agent_numbers_name_their_variable(tmp_path, name, value):
    with pytest.raises(ValueError, match=name):
        wf.connect(_env(tmp_path, **{name: value}), handle_signals=False)


def test_connect_refuses_a_progress_file_that_is_a_directory(tmp_path):
    # given a progress path that is a directory (report failed there, at the first step)
    (tmp_path / "progress").mkdir()

    # then connect refuses it, naming the variable, and writes nothing there
    with pytest.raises(ValueError) as refused:
        wf.connect(_env(tmp_path), handle_signals=False)
    assert str(refused.value) == (
        f"WATTFLOW_PROGRESS_FILE={str(tmp_path / 'progress')!r} is a directory, not a file "
        "the job can overwrite"
    )
    assert list((tmp_path / "progress").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["progress"]


def test_connect_refuses_a_progress_file_in_a_missing_folder(tmp_path):
    progress = tmp_path / "gone" / "progress"

    with pytest.raises(ValueError) as refused:
        wf.connect(_env(tmp_path, WATTFLOW_PROGRESS_FILE=str(progress)), handle_signals=False)

    assert str(refused.value) == (
        f"WATTFLOW_PROGRESS_FILE={str(progress)!r}: its folder {str(progress.parent)!r} does "
        "not exist"
    )


# A job under Slurm: the handoff folder is root's (mode 0755, docs/slurm-node.md) and the
# Prolog gives the job's user its own progress file only. As root every folder is
# writable, so the job runs as nobody where the tests run as root.
_HANDOFF_JOB = """
import json, sys
sys.path.insert(0, sys.argv[1])
import wattflow_client as wf
env = {"WATTFLOW_PROGRESS_FILE": sys.argv[2], "WATTFLOW_BATCH_SIZE": "32"}
try:
    job = wf.connect(env, handle_signals=False)
except ValueError as exc:
    print("refused:", exc)
    raise SystemExit(0)
job.report(7, force=True)
job.report(9, force=True)
print("wrote")
"""


def _as_job_user() -> tuple[str, dict]:
    """The Python and the user the job runs as: nobody, with the system's Python 3 (the
    client needs nothing else; the venv's lives under root's home), where the tests run as
    root; else this user and this Python."""
    if os.geteuid() != 0:
        return sys.executable, {}
    import pwd
    import shutil

    nobody = pwd.getpwnam("nobody")
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    assert python, "a system python3 to run the job as nobody"
    return python, {"user": nobody.pw_uid, "group": nobody.pw_gid}


@pytest.mark.parametrize("has_file", [True, False], ids=["its-file", "no-file"])
def test_a_job_writes_its_own_file_in_a_folder_it_may_not_write_in(has_file):
    import shutil
    import subprocess
    import tempfile

    python, user = _as_job_user()
    # not under tmp_path: pytest keeps that in a folder only its user may enter
    base = Path(tempfile.mkdtemp(prefix="wattflow-handoff-"))
    try:
        os.chmod(base, 0o755)
        lib = base / "lib"
        lib.mkdir(mode=0o755)
        shutil.copy(ROOT / "jobclient" / "wattflow_client.py", lib)
        folder = base / "handoff" / "node-01"
        folder.mkdir(parents=True)
        for d in (base / "handoff", folder):
            os.chmod(d, 0o755)
        progress = folder / "42.progress"
        if has_file:  # as the Prolog leaves it: the job's user owns its file
            progress.touch(mode=0o644)
            if user:
                os.chown(progress, user["user"], user["group"])
        if not user:  # as the job's user, the folder must be closed to it
            os.chmod(folder, 0o555)

        done = subprocess.run(
            [python, "-c", _HANDOFF_JOB, str(lib), str(progress)],
            capture_output=True, text=True, timeout=60, **user,
        )  # fmt: skip

        assert done.returncode == 0, done.stderr
        if has_file:
            assert done.stdout.strip() == "wrote"
            assert json.loads(progress.read_text())["iterations"] == 9.0
            assert sorted(p.name for p in folder.iterdir()) == ["42.progress"]  # no temp file
        else:
            assert done.stdout.strip() == (
                f"refused: WATTFLOW_PROGRESS_FILE={str(progress)!r}: the job may write "
                "neither in its folder nor a file there (there is none yet)"
            )
    finally:
        os.chmod(base, 0o755)
        for d in base.rglob("*"):
            if d.is_dir():
                os.chmod(d, 0o755)
        shutil.rmtree(base)


def test_the_examples_checkpoint_survives_a_save_cut_short(tmp_path, monkeypatch):
    # The example saved with np.savez onto its checkpoint: a save cut short (a full disk,
    # the agent's SIGKILL after the grace period) left a truncated file in place of the last
    # good one, and every restart of the job then failed loading it.
    import numpy as np
    import train_logreg

    ckpt_dir = tmp_path / "ckpt"
    env = {"WATTFLOW_CHECKPOINT_DIR": str(ckpt_dir), "WATTFLOW_TOTAL_ITERATIONS": "20"}
    monkeypatch.setattr(os, "environ", {**os.environ, **env})
    connect = wf.connect
    # (the test's own process: no SIGTERM handler left behind)
    monkeypatch.setattr(wf, "connect", lambda: connect(handle_signals=False))
    assert train_logreg.main([]) == 0
    good = (ckpt_dir / "logreg.npz").read_bytes()

    real_savez = np.savez

    def disk_full(file, **arrays):
        real_savez(file, **arrays)
        if hasattr(file, "truncate"):
            file.truncate(100)
        else:
            Path(file).write_bytes(Path(file).read_bytes()[:100])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(train_logreg.np, "savez", disk_full)
    with pytest.raises(OSError, match="No space left"):
        train_logreg.main([])

    assert (ckpt_dir / "logreg.npz").read_bytes() == good
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["logreg.npz"]
    monkeypatch.setattr(train_logreg.np, "savez", real_savez)
    assert train_logreg.main([]) == 0  # it resumes from the last good checkpoint


def test_report_writes_one_json_object_the_agent_understands(tmp_path):
    job = wf.connect(_env(tmp_path), handle_signals=False, report_interval_s=3600)
    before = time.time()
    assert job.report(130, grad_sqr=2.0, grad_var=0.25) is True
    data = json.loads((tmp_path / "progress").read_text())
    at = data.pop("ts")
    assert before <= at <= time.time()
    assert data == {"iterations": 130.0, "samples": 130.0 * 128, "grad_sqr": 2.0, "grad_var": 0.25}
    assert parse_progress((tmp_path / "progress").read_text()) == Progress(130.0, 2.0, 0.25, at)
    # within the interval nothing is written, unless forced; unusable statistics are left out
    assert job.report(131) is False
    assert job.report(132, grad_sqr=math.nan, grad_var=1.0, force=True) is True
    data = json.loads((tmp_path / "progress").read_text())
    assert data.pop("ts") >= at
    assert data == {"iterations": 132.0, "samples": 132.0 * 128}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".progress")] == []
    with pytest.raises(ValueError):
        job.report(math.inf, force=True)
    with pytest.raises(ValueError):  # the server refuses true as a count; so does the client
        job.report(True, force=True)
    with pytest.raises(ValueError, match="finite"):  # an int past any float: OverflowError
        job.report(10**400, force=True)
    assert json.loads((tmp_path / "progress").read_text())["iterations"] == 132.0


def test_a_report_forced_after_the_checkpoint_save_carries_the_last_steps_time(tmp_path):
    # given a job whose last step's report fell inside the report interval (not written)
    job = wf.connect(_env(tmp_path), handle_signals=False, report_interval_s=3600)
    assert job.report(499, force=True) is True
    step_done = time.time()
    assert job.report(500) is False
    # when it saves its checkpoint and then forces the report of the same count
    time.sleep(0.2)
    assert job.report(500, force=True) is True
    # then the time written is the step's, not the save's: the interval that ends at this
    # report is the steps' alone (on a real H100 the save made the last interval ~75% longer)
    at = json.loads((tmp_path / "progress").read_text())["ts"]
    assert step_done <= at < step_done + 0.1


def test_should_stop_on_the_stop_file_and_on_sigterm(tmp_path):
    job = wf.connect(_env(tmp_path), handle_signals=False)
    assert not job.should_stop()
    (tmp_path / "stop").touch()
    assert job.should_stop()
    (tmp_path / "stop").unlink()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        job.handle_signals()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert job.should_stop()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_gradient_noise_estimates_by_hand():
    # two parts with gradients (1, 0) and (3, 0): |g_i|^2 = 1 and 9, mean (2, 0): 4
    noise = wf.GradientNoise(smoothing=0.5)
    assert noise.grad_sqr is None and noise.noise_scale(8) is None
    noise.update([1.0, 9.0], 4.0)
    # |G|^2 = (2 x 4 - 5) / 1 = 3; variance of the batch mean = (5 - 4) / 1 = 1
    assert (noise.grad_sqr, noise.grad_var) == (3.0, 1.0)
    assert noise.noise_scale(8) == pytest.approx(8 / 3)
    # the running mean has no start-up bias: the same step again leaves it alone
    noise.update([1.0, 9.0], 4.0)
    assert (noise.grad_sqr, noise.grad_var) == pytest.approx((3.0, 1.0))
    noise.update([math.inf, 9.0], 4.0)  # an overflowed step is ignored
    assert (noise.grad_sqr, noise.grad_var) == pytest.approx((3.0, 1.0))
    # finite norms whose sum overflows too: taken in, the estimate stayed infinite for good
    noise.update([1e308, 1e308], 1e308)
    assert (noise.grad_sqr, noise.grad_var) == pytest.approx((3.0, 1.0))
    noise.update([1.0, 9.0], 4.0)
    assert (noise.grad_sqr, noise.grad_var) == pytest.approx((3.0, 1.0))
    with pytest.raises(ValueError):
        noise.update([1.0], 1.0)


def test_gradient_noise_recovers_a_known_noise_scale():
    # Given per-example gradients G + noise with tr(Sigma) = 4 x 0.25 and |G|^2 = 1,
    # the noise scale is 1 sample; 8 parts of 16 examples, batch 128
    import numpy as np

    rng = np.random.default_rng(0)
    g = np.array([1.0, 0.0, 0.0, 0.0])
    noise = wf.GradientNoise(smoothing=0.99)
    for _ in range(3000):
        examples = g + rng.normal(scale=0.5, size=(128, 4))
        parts = [p.mean(axis=0) for p in np.split(examples, 8)]
        mean = examples.mean(axis=0)
        noise.update([float(p @ p) for p in parts], float(mean @ mean))
    assert noise.noise_scale(128) == pytest.approx(1.0, rel=0.1)


def test_the_noise_scale_of_a_batch_that_is_not_a_positive_number_is_refused():
    # a NaN batch gave a NaN noise scale, 0 or a negative one a noise scale of 0 or below
    noise = wf.GradientNoise(smoothing=0.5)
    noise.update([1.0, 9.0], 4.0)
    for batch in (math.nan, math.inf, 0, -8, "8", True):
        with pytest.raises(ValueError, match="batch_size must be a finite number above 0"):
            noise.noise_scale(batch)
    assert noise.noise_scale(8.0) == pytest.approx(8 / 3)


def test_connect_outside_the_main_thread_leaves_signals_to_the_main_thread(tmp_path):
    # Python allows signal handlers only in the main thread: connect() in a worker thread
    # raised "signal only works in main thread of the main interpreter" (an eighth probe)
    import threading

    before = signal.getsignal(signal.SIGTERM)
    outcome = {}

    def worker():
        try:
            outcome["job"] = wf.connect(_env(tmp_path))
        except BaseException as exc:  # noqa: BLE001 - the outcome under test
            outcome["error"] = exc

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(timeout=30)
    assert "error" not in outcome, outcome
    job = outcome["job"]
    # then no handler was installed, and the stop file still stops the job
    assert signal.getsignal(signal.SIGTERM) is before
    assert not job.signals_handled
    assert not job.should_stop()
    (tmp_path / "stop").touch()
    assert job.should_stop()


# --- the example under the process agent ------------------------------------------------


@pytest.fixture
def agent(tmp_path):
    fake = FakeNvml([_device(f"GPU-{i}", energy_mj=0) for i in range(2)])
    client = AgentClient(f"http://127.0.0.1:{free_port()}", "t", Spool(tmp_path / "spool"))
    config = AgentConfig(node_name="n", work_dir=tmp_path, stop_grace_s=20.0, post_interval_s=0.2)
    return Agent(NvmlBackend(nvml=fake), client, config)


def _assignment(tmp_path, allocation_id, *, done=0.0, delay="0.02"):
    return {
        "allocation_id": allocation_id, "job_id": 9, "workload": "gpt2",
        "command": f"exec {sys.executable} {EXAMPLE} --step-delay-s {delay}",
        "gpu_uuids": ["GPU-0", "GPU-1"], "gpu_count": 2, "batch_size": 64,
        "sm_clock_mhz": None, "power_limit_w": None,
        "checkpoint_dir": str(tmp_path / "ckpt"), "total_iterations": 150.0,
        "completed_iterations": done,
        "env": {"WATTFLOW_TOTAL_ITERATIONS": "150.0", "WATTFLOW_COMPLETED_ITERATIONS": repr(done)},
    }  # fmt: skip


def _events(tmp_path):
    events = []
    for path in sorted((tmp_path / "spool").glob("*-events.json")):
        events.extend(json.loads(path.read_text())["body"]["events"])
    return events


def _now() -> datetime:
    return datetime.now(UTC)


def test_the_example_checkpoints_on_stop_and_resumes_under_the_process_agent(agent, tmp_path):
    # given the example started by the process agent
    agent.start_job(_assignment(tmp_path, 1), _now())
    job = agent.jobs[9]
    wait_for(
        lambda: (job.iterations() or 0) >= 20, timeout_s=30.0, what="the example at iteration 20"
    )
    # when it reports, the agent's progress event carries its gradient statistics
    agent.send_events(agent.watch_jobs(_now()))
    (progress,) = [e for e in _events(tmp_path) if e["kind"] == "progress"]
    assert progress["iterations"] >= 20
    assert progress["grad_sqr"] > 0 and progress["grad_var"] > 0
    # when the agent stops it (stop file + SIGTERM)
    agent.send_events([agent.stop_job(9, _now(), reason="resized")])
    exited = _events(tmp_path)[-1]
    # then it checkpointed and exited 0 of its own accord, short of its work
    assert (exited["kind"], exited["reason"], exited["exit_status"]) == ("exited", "resized", 0)
    assert 20 <= exited["iterations"] < 150
    assert "stopped at iteration" in exited["log_tail"]
    assert (tmp_path / "ckpt" / "logreg.npz").exists()
    # when it is started again from where the server says it stands
    agent.start_job(_assignment(tmp_path, 2, done=exited["iterations"], delay="0"), _now())
    wait_for(
        lambda: agent.jobs[9].poll() is not None, timeout_s=30.0, what="the example process to exit"
    )
    agent.send_events(agent.watch_jobs(_now()))
    # then it resumed from its checkpoint and completed exactly its work
    final = _events(tmp_path)[-1]
    assert (final["kind"], final["reason"], final["exit_status"]) == ("exited", "completed", 0)
    assert final["iterations"] == 150.0
    assert "resumed from" in final["log_tail"]
    assert "done at iteration 150 (batch 64)" in final["log_tail"]


def test_a_checkpoint_dir_that_is_a_file_is_refused_at_connect_naming_the_variable(tmp_path):
    # (it was a FileExistsError traceback at the first save, after the first stretch of work)
    (tmp_path / "ckpt").write_text("not a directory")
    with pytest.raises(ValueError, match="WATTFLOW_CHECKPOINT_DIR=.*is a file"):
        wf.connect(_env(tmp_path, WATTFLOW_CHECKPOINT_DIR=str(tmp_path / "ckpt")),
                   handle_signals=False)  # fmt: skip
    # a directory that cannot be made (under a file) names the variable too
    job = wf.connect(
        _env(tmp_path, WATTFLOW_CHECKPOINT_DIR=str(tmp_path / "ckpt" / "below")),
        handle_signals=False,
    )
    with pytest.raises(ValueError, match="WATTFLOW_CHECKPOINT_DIR=.*cannot be a directory"):
        job.checkpoint_path("w.npz")


def test_a_stop_file_the_job_cannot_look_at_is_not_a_stop(tmp_path):
    too_long = tmp_path / ("x" * 300) / "stop"  # ENAMETOOLONG: exists() raised
    job = wf.connect(_env(tmp_path, WATTFLOW_STOP_FILE=str(too_long)), handle_signals=False)
    assert job.should_stop() is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--iterations", "nan"], "--iterations: 'nan' is not a finite number above 0"),
        (["--iterations", "0"], "--iterations: '0' is not a finite number above 0"),
        (["--examples", "0"], "--examples: '0' is not a whole number of 1 or more"),
        (["--lr", "inf"], "--lr: 'inf' is not a finite number above 0"),
        (["--step-delay-s", "-1"], "--step-delay-s: '-1' is not a finite number 0 or more"),
    ],
)
def test_the_example_refuses_arguments_it_cannot_train_with(tmp_path, argv, message):
    # (--iterations nan exited 0 at iteration 0; --examples 0 was a traceback)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *argv], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "WATTFLOW_CHECKPOINT_DIR": str(tmp_path / "ckpt")}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == f"train_logreg: argument {message}\n"


def test_samples_or_gradient_statistics_that_are_not_finite_are_left_out(tmp_path):
    job = wf.connect(_env(tmp_path), handle_signals=False)
    assert job.report(5, samples=math.nan, grad_sqr=10**400, grad_var=1.0, force=True)
    written = json.loads((tmp_path / "progress").read_text())  # strict JSON: no NaN
    assert set(written) == {"iterations", "ts"} and written["iterations"] == 5.0
    assert job.report(6, samples=-1.0, force=True)
    assert "samples" not in json.loads((tmp_path / "progress").read_text())


def test_connect_outside_wattflow_beside_a_file_named_checkpoint(tmp_path, monkeypatch):
    # (no WATTFLOW_CHECKPOINT_DIR: the default "checkpoint" here is the script's own file,
    # TensorFlow's index say; connect raised, naming a variable nobody set)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    job = wf.connect({}, handle_signals=False)
    assert not job.should_stop()


def test_numpy_scalars_are_counts_and_statistics_too(tmp_path):
    import numpy as np

    job = wf.connect(_env(tmp_path), handle_signals=False)
    stats = {"grad_sqr": np.float32(1.5), "grad_var": np.float32(0.5)}
    assert job.report(5, samples=np.int64(640), **stats, force=True)
    written = json.loads((tmp_path / "progress").read_text())
    assert written["samples"] == 640.0
    assert (written["grad_sqr"], written["grad_var"]) == (1.5, 0.5)


def test_a_numpy_count_is_a_count(tmp_path):
    # (the statistics took numpy scalars, the count itself raised ValueError out of the
    # training loop: a step counter kept as np.int64, or read from an array)
    import numpy as np

    job = wf.connect(_env(tmp_path), handle_signals=False)
    for count in (np.int64(5), np.float32(6.0)):
        assert job.report(count, force=True)
        assert json.loads((tmp_path / "progress").read_text())["iterations"] == float(count)
    with pytest.raises(ValueError, match="finite"):
        job.report(np.float64("nan"), force=True)
    with pytest.raises(ValueError, match="negative"):
        job.report(np.int64(-1), force=True)


@pytest.mark.parametrize("name", ["WATTFLOW_PROGRESS_FILE", "WATTFLOW_CHECKPOINT_DIR"])
def test_a_path_the_job_cannot_look_at_is_refused_at_connect_naming_the_variable(tmp_path, name):
    # A name longer than the file system takes (ENAMETOOLONG): connect raised OSError from
    # is_dir() / exists(), and the example died with a traceback (a fifth live probe).
    too_long = tmp_path / ("x" * 300) / "progress"
    with pytest.raises(ValueError, match=f"{name}=.*File name too long"):
        wf.connect(_env(tmp_path, **{name: str(too_long)}), handle_signals=False)


def test_the_example_says_so_in_one_line_and_exits_2(tmp_path):
    env = {**os.environ, **_env(tmp_path, WATTFLOW_CHECKPOINT_DIR=str(tmp_path / ("x" * 300)))}
    done = subprocess.run(
        [sys.executable, str(ROOT / "jobclient" / "train_logreg.py"), "--examples", "100"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("train_logreg: WATTFLOW_CHECKPOINT_DIR=")
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_a_progress_path_that_is_a_pipe_is_refused_and_left_as_it_is(tmp_path):
    # report() writes beside the file and renames over it: a FIFO (or /dev/null, which a
    # fifth probe's run as root replaced for the whole machine) became a regular file.
    fifo = tmp_path / "progress"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="WATTFLOW_PROGRESS_FILE=.*not a regular file"):
        wf.connect(_env(tmp_path, WATTFLOW_PROGRESS_FILE=str(fifo)), handle_signals=False)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
