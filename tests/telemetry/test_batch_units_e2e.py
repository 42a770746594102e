"""A simulated agent against a real daphne server: a job resized to twice its submitted batch
runs the remaining useful samples at the new batch and completes with exactly its submitted
work. (resnet50's learned efficiency curve makes batch 512 a little less efficient than
256: E(512) = 0.991, so the remaining work at 512 is 100.9 iterations, not 100.)"""

from datetime import timedelta

import pytest
from django.utils import timezone
from test_agent_e2e import _agent, server  # noqa: F401 (the daphne fixture)

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, Job
from scheduling.core.goodput import efficiency
from scheduling.core.perf_models import load_catalog
from scheduling.core.types import GpuConfig
from telemetry.agent.simulated import SimulatedBackend
from telemetry.models import JobEvent

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TICK_S = 5


def test_a_simulated_job_resized_to_another_batch_completes_after_exactly_its_samples(
    server,  # noqa: F811
    make_node,
    make_job,
    member,
    team,
    tmp_path,
):
    # given a simulated agent running a 200-iteration job at its submitted batch 256
    node = make_node("node-01", gpus=0)
    backend = SimulatedBackend(node_name="node-01", n_gpus=1, gpu_model="A100")
    agent = _agent(backend, server, node.issue_agent_token(), tmp_path)
    agent.register()
    gpu = Gpu.objects.get(uuid="GPU-sim-node-01-0")
    job = make_job(owner=member, team=team, total_iterations=200, max_gpus=1)
    start = timezone.now().replace(microsecond=0) - timedelta(minutes=10)
    cluster_services.start_job(job, gpus=[gpu], batch_size=256, at=start - timedelta(seconds=1))
    times = iter(start + timedelta(seconds=TICK_S * k) for k in range(200))
    for _ in range(7):  # 30 s at batch 256
        agent.tick(next(times))
    job.refresh_from_db()
    assert 0 < job.completed_iterations < 200

    # when the scheduler resizes it to batch 512 and the agent restarts it there
    cluster_services.set_allocation(
        job, gpus=[gpu], batch_size=512, at=start + timedelta(seconds=31)
    )
    resized_at = next(times)
    agent.tick(resized_at)
    job.refresh_from_db()
    stored_at_restart = job.completed_iterations
    sim = backend.jobs[job.pk]
    # the agent counts at 512 from the stored work recounted (useful samples kept)
    per_iter = 512 * efficiency(job.noise_scale, 512, 256) / 256  # submitted iterations
    total_512 = round(200 / per_iter, 6)
    assert 100.0 < total_512 < 101.0
    assert (sim.global_batch, sim.total_iters) == (512, total_512)
    assert sim.done_iters == pytest.approx(stored_at_restart / per_iter, abs=1e-5)
    finished_at = None
    for now in times:
        agent.tick(now)
        if job.pk not in backend.jobs:
            finished_at = now
            break

    # then it completed with exactly its 200 submitted iterations (51,200 useful samples) stored
    job.refresh_from_db()
    assert (job.state, job.completed_iterations) == (JobState.COMPLETED, 200.0)
    exit_event = JobEvent.objects.get(job=job, kind="exited", reason="completed")
    assert exit_event.iterations == total_512  # at batch 512, as the agent counted
    # after running just the remaining samples at 512's speed (within one tick)
    iter_512_s = (
        load_catalog().get("resnet50", "A100").iter_time_s(GpuConfig(n_gpus=1, global_batch=512))
    )
    needed_s = (total_512 - stored_at_restart / per_iter) * iter_512_s
    ran_s = (finished_at - resized_at).total_seconds()
    assert needed_s <= ran_s < needed_s + TICK_S
    assert Job.objects.filter(pk=job.pk, current_allocation__isnull=True).exists()
