"""The agent against a real daphne server on loopback: spool and replay across an outage,
simulated readings from the perf models, and a real job process carried out end to end.

The server is a daphne subprocess on the test database (committed data: transactional_db),
stopped and started again to make a real outage.
"""

import subprocess
import sys
from datetime import timedelta

import pytest
from django.db import models
from django.utils import timezone
from support.daphne import ROOT, Daphne
from support.polling import wait_for
from test_nvml_backend import FakeNvml, _device

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, Job
from scheduling.core.goodput import efficiency, load_curves
from scheduling.core.perf_models import load_catalog
from scheduling.core.types import GpuConfig
from telemetry.accounting import process_dirty_hours
from telemetry.agent.backends import NvmlBackend
from telemetry.agent.client import AgentClient
from telemetry.agent.loop import Agent, AgentConfig
from telemetry.agent.simulated import SimulatedBackend
from telemetry.agent.spool import Spool
from telemetry.models import EnergyLedgerEntry, GpuSample, JobEvent

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def server(transactional_db, tmp_path):
    """A daphne on the test database; tests stop and start it again for an outage."""
    daphne = Daphne(
        tmp_path / "daphne.log", env={"TELEMETRY_CHECKPOINT_ROOT": str(tmp_path / "ckpt")}
    )
    daphne.start()
    yield daphne
    daphne.stop()


def _ticked(agent: Agent) -> bool:
    """One tick of ``agent`` now; True, so that a wait can tick before it checks."""
    agent.tick(timezone.now())
    return True


def _agent(backend, server, token, tmp_path, **config) -> Agent:
    client = AgentClient(server.url, token, Spool(tmp_path / "spool"), timeout_s=5.0)
    settings = {"post_interval_s": 2.0, "heartbeat_interval_s": 60.0, "assignment_interval_s": 1.0}
    settings.update(config)
    return Agent(backend, client, AgentConfig(node_name="node-01", work_dir=tmp_path, **settings))


def test_spooled_samples_are_replayed_in_order_after_an_outage_and_counted_once(
    server, make_node, make_job, member, team, tmp_path
):
    # given a simulated 2-GPU agent registered with the server, a job running on GPU 0
    node = make_node("node-01", gpus=0)
    backend = SimulatedBackend(node_name="node-01", n_gpus=2, gpu_model="A100")
    agent = _agent(backend, server, node.issue_agent_token(), tmp_path)
    agent.register()
    gpu0 = Gpu.objects.get(uuid="GPU-sim-node-01-0")
    job = make_job(owner=member, team=team, total_iterations=10**6)
    start = timezone.now().replace(microsecond=0) - timedelta(minutes=2)
    cluster_services.start_job(job, gpus=[gpu0], batch_size=256, at=start - timedelta(seconds=1))
    times = [start + timedelta(seconds=s) for s in range(14)]
    for now in times[:5]:
        agent.tick(now)
    delivered_before = GpuSample.objects.count()
    assert delivered_before == 2 * 5  # posts at t=0, 2, 4
    # when the server goes down for five ticks
    server.stop()
    for now in times[5:10]:
        agent.tick(now)
    spooled = sorted(p.name for p in (tmp_path / "spool").glob("*.json"))
    # the posts of t=6 and t=8, each followed by that tick's progress event, in order
    assert spooled == [
        "000000000000-samples.json",
        "000000000001-events.json",
        "000000000002-samples.json",
        "000000000003-events.json",
    ]
    assert GpuSample.objects.count() == delivered_before
    # and comes back
    server.start()
    for now in times[10:]:
        agent.tick(now)
    agent.post_samples()
    # then every sample is stored exactly once and the spool is empty
    assert len(agent.client.spool) == 0
    stored = list(GpuSample.objects.filter(gpu=gpu0).order_by("ts").values_list("ts", flat=True))
    assert stored == times
    assert GpuSample.objects.count() == 2 * 14
    # and readings follow the perf model: busy GPU 0 at the model's power, GPU 1 idle
    model = load_catalog().get("resnet50", "A100")
    busy_w = model.power_w(GpuConfig(n_gpus=1, global_batch=256))
    idle_w = load_catalog().gpus["A100"].idle_power_w
    powers = dict(GpuSample.objects.filter(ts=times[7]).values_list("gpu__uuid", "power_w"))
    assert powers == {
        "GPU-sim-node-01-0": pytest.approx(busy_w, abs=1e-3),
        "GPU-sim-node-01-1": pytest.approx(idle_w, abs=1e-3),
    }
    # and accounting charges the job 13 s at the busy power, from the energy counter
    while process_dirty_hours():
        pass
    charged = sum(e.energy_j for e in EnergyLedgerEntry.objects.filter(job=job))
    assert charged == pytest.approx(13 * busy_w, rel=1e-6)
    # and the job's progress followed the perf model (13 s / iteration time)
    job.refresh_from_db()
    assert job.completed_iterations > 0
    assert backend.jobs[job.pk].done_iters == pytest.approx(13 / model.iter_time_s(
        GpuConfig(n_gpus=1, global_batch=256)
    ))  # fmt: skip


# The job writes the count it was told is all its work (``WATTFLOW_TOTAL_ITERATIONS``, at
# its allocation's batch), or another count (``WRITTEN``) for one that stops short.
JOB_SCRIPT = """
import os, signal, sys, time
progress = os.environ["WATTFLOW_PROGRESS_FILE"]
with open(progress, "w") as f:
    f.write(WRITTEN)
print("gpus", os.environ["CUDA_VISIBLE_DEVICES"], "batch", os.environ["WATTFLOW_BATCH_SIZE"],
      "count", os.environ["WATTFLOW_GPU_COUNT"], flush=True)
print("ckpt", os.environ["WATTFLOW_CHECKPOINT_DIR"], flush=True)
sys.exit(0)
"""


def test_a_real_job_process_runs_on_its_gpus_and_its_exit_completes_the_job(
    server, make_node, make_job, member, team, tmp_path
):
    # given an NVML agent (fake driver) and a job whose command is a real process
    job, agent, fake = _run_job_script(
        'os.environ["WATTFLOW_TOTAL_ITERATIONS"]', server, make_node, make_job, member, team,
        tmp_path,
    )  # fmt: skip
    # then the job completed with its log tail, and GPU 1 got its default limit back
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    assert job.exit_status == 0
    assert job.completed_iterations == 1000.0
    assert job.log_tail == (f"gpus 1 batch 128 count 1\nckpt {tmp_path}/ckpt/job-{job.pk}\n")
    # the limit it had before is back; no clock was locked, so none is reset
    assert fake.calls[-1] == ("set_power_limit", "GPU-r1", 400_000)
    assert not [c for c in fake.calls if c[0] == "reset_clocks"]
    kinds = list(
        JobEvent.objects.filter(job=job).order_by("ts", "id").values_list("kind", "reason")
    )
    assert kinds == [("started", ""), ("progress", ""), ("exited", "completed")]
    assert not Job.objects.filter(pk=job.pk, current_allocation__isnull=False).exists()


def _run_job_script(count, server, make_node, make_job, member, team, tmp_path):
    """A job whose process writes ``count`` (a Python expression) as its progress and exits
    0, run by an NVML agent (fake driver) on GPU 1 at batch 128 (its submitted batch 256)
    until the agent has seen it end."""
    script = tmp_path / "train.py"
    script.write_text(JOB_SCRIPT.replace("WRITTEN", count))
    node = make_node("node-01", gpus=0)
    fake = FakeNvml([_device(f"GPU-r{i}", energy_mj=0) for i in range(2)])
    agent = _agent(NvmlBackend(nvml=fake), server, node.issue_agent_token(), tmp_path)
    agent.register()
    job = make_job(owner=member, team=team, command=f"{sys.executable} {script}")
    gpu1 = Gpu.objects.get(uuid="GPU-r1")
    cluster_services.start_job(
        job, gpus=[gpu1], batch_size=128, power_limit_w=250, at=timezone.now()
    )
    # when the agent fetches its assignment and the process runs to its end
    agent.tick(timezone.now())
    assert fake.calls[0] == ("set_power_limit", "GPU-r1", 250_000)
    wait_for(
        lambda: _ticked(agent) and job.pk not in agent.jobs,
        timeout_s=30, what="the job to end on the agent", every_s=0.1,
    )  # fmt: skip
    return job, agent, fake


def test_a_real_job_process_that_exits_0_short_of_its_work_completes_with_a_note(
    server, make_node, make_job, member, team, tmp_path
):
    # given a job that reports 7 iterations (of about 2,000 at its batch) and exits 0
    job, _, _ = _run_job_script('"7"', server, make_node, make_job, member, team, tmp_path)
    # then it completes with its status 0, its count and a line saying how far it got
    job.refresh_from_db()
    assert (job.state, job.exit_status) == (JobState.COMPLETED, 0)
    # 7 iterations at the allocation's batch 128 are 3.5 at the submitted batch 256, times
    # the efficiency of the smaller batch (resnet50's learned curve: slightly above 1)
    assert job.completed_iterations == pytest.approx(
        7 * 128 * efficiency(job.noise_scale, 128, 256) / 256, abs=1e-6
    )
    assert 3.5 < job.completed_iterations < 3.6
    assert job.log_tail.startswith(f"gpus 1 batch 128 count 1\nckpt {tmp_path}/ckpt/")
    assert job.log_tail.endswith("of its 1000 iterations: ended early on its own.")


EXAMPLE = ROOT / "jobclient" / "train_logreg.py"


def test_the_example_training_script_reports_its_gradient_statistics_end_to_end(
    server, make_node, make_job, member, team, tmp_path
):
    # given the process agent (fake NVML driver) and a job running the shipped example
    node = make_node("node-01", gpus=0)
    fake = FakeNvml([_device(f"GPU-x{i}", energy_mj=0) for i in range(2)])
    agent = _agent(
        NvmlBackend(nvml=fake), server, node.issue_agent_token(), tmp_path, post_interval_s=0.5
    )
    agent.register()
    job = make_job(
        owner=member, team=team, workload="gpt2", total_iterations=400,
        command=f"exec {sys.executable} {EXAMPLE} --step-delay-s 0.005",
    )  # fmt: skip
    assert job.noise_scale is None  # gpt2 has no learned curve
    cluster_services.start_job(
        job, gpus=list(Gpu.objects.filter(node=node)), batch_size=256, at=timezone.now()
    )
    # when the agent runs it to its end
    agent.tick(timezone.now())
    wait_for(
        lambda: _ticked(agent) and job.pk not in agent.jobs,
        timeout_s=60, what="the example to end on the agent", every_s=0.1,
    )  # fmt: skip
    # then the job completed all its iterations and its log says so
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED, job.log_tail
    assert job.completed_iterations == 400.0
    assert "done at iteration 400 (batch 256)" in job.log_tail
    # and its gradient statistics went agent -> job-events -> the job, with their batch
    progress = JobEvent.objects.filter(job=job, kind="progress", grad_sqr__isnull=False)
    assert progress.exists()
    assert job.grad_sqr > 0 and job.grad_var > 0
    assert job.grad_batch_size == 256
    # so the scheduler now knows its noise scale: calibrated var x batch / sqr
    assert job.noise_scale == pytest.approx(
        load_curves().calibration * job.grad_var * 256 / job.grad_sqr
    )
    assert job.grad_stats_at == max(e.ts for e in progress)


def _agent_cli(server, token, tmp_path, *extra):
    """The agent command as a subprocess, its output in ``tmp_path / "agent.log"`` (a file,
    not a pipe nobody reads while it runs)."""
    with (tmp_path / "agent.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "telemetry.agent", "--server", server.url, "--token", token,
             "--name", "node-01", "--work-dir", str(tmp_path / "cli"), "--simulate", "--gpus",
             "2", "--post-interval-s", "1", *extra],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _agent_log(tmp_path) -> str:
    return (tmp_path / "agent.log").read_text(errors="replace")


def test_the_agent_command_reports_until_sigterm_and_exits_cleanly(server, make_node, tmp_path):
    node = make_node("node-01", gpus=0)
    agent = _agent_cli(server, node.issue_agent_token(), tmp_path)

    def six_samples() -> bool:
        if agent.poll() is not None:
            pytest.fail(f"the agent exited with {agent.returncode}:\n{_agent_log(tmp_path)}")
        return GpuSample.objects.count() >= 6

    try:
        # 120 s: the agent starts a Python with numpy and the perf models beside a busy
        # test run; once up it posts every second
        wait_for(six_samples, timeout_s=120, what="6 samples", every_s=0.5)
    except pytest.fail.Exception as exc:
        agent.kill()
        agent.wait(timeout=30)
        pytest.fail(
            f"{exc}\n--- the agent's log ---\n{_agent_log(tmp_path)[-4000:]}"
            f"\n--- the server's log ---\n{server.log.read_text(errors='replace')[-3000:]}"
        )
    agent.terminate()
    assert agent.wait(timeout=30) == 0, _agent_log(tmp_path)
    per_gpu = dict(
        Gpu.objects.filter(node=node).annotate(n=models.Count("samples")).values_list("uuid", "n")
    )
    assert set(per_gpu) == {"GPU-sim-node-01-0", "GPU-sim-node-01-1"}
    assert min(per_gpu.values()) >= 3
    # the buffered tail was flushed on exit: both GPUs have the same timestamps
    stamps = [
        list(GpuSample.objects.filter(gpu__uuid=u).order_by("ts").values_list("ts", flat=True))
        for u in sorted(per_gpu)
    ]
    assert stamps[0] == stamps[1]


def test_the_agent_command_stops_with_one_line_for_a_bad_token(server, tmp_path):
    agent = _agent_cli(server, "not-a-token", tmp_path)
    assert agent.wait(timeout=60) == 1
    assert (
        _agent_log(tmp_path)
        .strip()
        .splitlines()[-1]
        .startswith(
            f"agent: {server.url} refused the registration: POST {server.url}/api/agent/register/: "
            "HTTP 401"
        )
    )
    assert not GpuSample.objects.exists()


def test_a_sites_cap_changed_while_the_agent_runs_is_registered_again(server, make_node, tmp_path):
    # given an agent on real (fake NVML) A100s whose site capped GPU 0 at 300 W, registered
    fake = FakeNvml([_device("GPU-cap-0", energy_mj=0), _device("GPU-cap-1", energy_mj=0)])
    fake.devices[0]["limit_mw"] = 300_000
    node = make_node("node-01", gpus=0)
    backend = NvmlBackend(nvml=fake)
    agent = _agent(backend, server, node.issue_agent_token(), tmp_path)
    agent.register()
    assert Gpu.objects.get(uuid="GPU-cap-0").site_power_limit_w == 300
    # when the site lowers it to 200 W (nvidia-smi -pl) and a job's limit is set there
    fake.devices[0]["limit_mw"] = 200_000
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=280.0)
    assert fake.devices[0]["limit_mw"] == 200_000
    # then the next heartbeat's tick registers the cap the agent now holds limits to, so
    # rounds plan under it (they planned up to 300 W until the agent restarted)
    agent.tick(timezone.now())
    assert Gpu.objects.get(uuid="GPU-cap-0").site_power_limit_w == 200
    assert Gpu.objects.get(uuid="GPU-cap-1").site_power_limit_w == 400
    backend.close()
