"""Iteration units when an allocation runs another batch than the job was submitted with.

The job's work is counted at its submitted batch; the agent counts at its allocation's batch.
Useful samples (iterations x batch x statistical efficiency) are what must add up. The live
tests make the job report gradient statistics whose noise scale is 256 samples, so that
E(512) = (256 + 256) / (256 + 512) = 2/3 and E(128) = 4/3 relative to batch 256.
"""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, Job, JobAllocation
from scheduling.core.goodput import load_curves
from telemetry.models import JobEvent
from telemetry.services import iterations_at_batch


def test_iterations_convert_by_samples_between_batches():
    # given 1,000 iterations at batch 256 (256,000 samples)
    # when recounted at batch 512 and at 768, and back
    at_512 = iterations_at_batch(1000, from_batch=256, to_batch=512)
    at_768 = iterations_at_batch(1000, from_batch=256, to_batch=768)

    # then the samples are the same and the round trip is exact
    assert at_512 == 500.0
    assert at_768 == 333.333333
    assert iterations_at_batch(at_512, from_batch=512, to_batch=256) == 1000.0
    assert iterations_at_batch(1000 / 3, from_batch=768, to_batch=256) == 1000.0
    assert iterations_at_batch(420.0, from_batch=256, to_batch=256) == 420.0


def test_iterations_convert_by_useful_samples_with_a_noise_scale():
    # given a noise scale of 256 samples and a job submitted at batch 256
    units = {"submitted_batch": 256, "noise_scale": 256.0}
    # then an iteration at 512 does 512 x 2/3 useful samples, one at 128 does 128 x 4/3
    assert iterations_at_batch(1000, from_batch=256, to_batch=512, **units) == 750.0
    assert iterations_at_batch(1000, from_batch=256, to_batch=128, **units) == 1500.0
    assert iterations_at_batch(750.0, from_batch=512, to_batch=256, **units) == 1000.0
    # and an unknown efficiency counts at most the submitted batch's samples per iteration
    unknown = {"submitted_batch": 256, "noise_scale": None}
    assert iterations_at_batch(1000, from_batch=256, to_batch=512, **unknown) == 1000.0
    assert iterations_at_batch(1000, from_batch=256, to_batch=128, **unknown) == 2000.0


def test_a_nonpositive_batch_is_refused():
    with pytest.raises(ValueError, match="batch sizes must be positive"):
        iterations_at_batch(10, from_batch=0, to_batch=256)


def _event(job, kind, allocation_id, **extra):
    return {
        "event_id": str(uuid.uuid4()),
        "job_id": job.pk,
        "allocation_id": allocation_id,
        "kind": kind,
        "ts": timezone.now().isoformat(),
        **extra,
    }


def _stats():
    """Gradient statistics at batch 256 whose calibrated noise scale is 256 samples."""
    return {"grad_sqr": 1.0, "grad_var": 1.0 / load_curves().calibration}


def _assignment(client, job):
    answer = client.get("/api/agent/assignments/").json()
    (assignment,) = [a for a in answer["assignments"] if a["job_id"] == job.pk]
    return assignment


def test_a_job_resized_to_another_batch_completes_after_exactly_its_samples(
    agent_node, agent_client, make_job, member, team
):
    # given a job of 1,000 iterations at batch 256 running at batch 256 on this node
    node, token = agent_node
    client = agent_client(token)
    job = make_job(owner=member, team=team, max_gpus=2, total_iterations=1000)
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    t0 = timezone.now() - timedelta(minutes=10)
    first = cluster_services.start_job(job, gpus=gpus, batch_size=256, at=t0)
    assert _assignment(client, job)["total_iterations"] == 1000.0
    client.post(
        "/api/agent/job-events/",
        {"events": [_event(job, "progress", first.pk, iterations=400.0, **_stats())]},
        format="json",
    )
    job.refresh_from_db()
    assert job.completed_iterations == 400.0
    assert (job.grad_sqr, job.grad_batch_size) == (1.0, 256)
    assert job.noise_scale == pytest.approx(256.0)

    # when a round resizes it to batch 512 (the agent must now count at 512)
    job.refresh_from_db()
    second = cluster_services.set_allocation(
        job, gpus=gpus, batch_size=512, at=t0 + timedelta(minutes=5)
    )
    assignment = _assignment(client, job)

    # then the agent is told the work at batch 512, where an iteration does 2/3 of its
    # samples' worth: 750 in all, 300 of them done (not 500 and 200: a bigger batch is not free)
    assert (assignment["allocation_id"], assignment["batch_size"]) == (second.pk, 512)
    assert (assignment["total_iterations"], assignment["completed_iterations"]) == (750.0, 300.0)
    assert assignment["env"]["WATTFLOW_TOTAL_ITERATIONS"] == "750.0"
    assert assignment["env"]["WATTFLOW_COMPLETED_ITERATIONS"] == "300.0"

    # when it reports 749 iterations at batch 512: 998.67 at 256, short of done
    client.post(
        "/api/agent/job-events/",
        {"events": [_event(job, "progress", second.pk, iterations=749.0)]},
        format="json",
    )
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert job.completed_iterations == pytest.approx(749 * 512 * 2 / 3 / 256, abs=1e-6)

    # when it exits complete at 750 iterations at batch 512
    client.post(
        "/api/agent/job-events/",
        {
            "events": [
                _event(
                    job, "exited", second.pk, reason="completed", exit_status=0, iterations=750.0
                )  # fmt: skip
            ]
        },
        format="json",
    )

    # then exactly the submitted work is stored (256,000 useful samples), the event keeps the raw
    job.refresh_from_db()
    assert (job.state, job.completed_iterations) == (JobState.COMPLETED, 1000.0)
    assert job.completed_iterations * job.global_batch_size == pytest.approx(750.0 * 512 * 2 / 3)
    assert JobEvent.objects.get(job=job, kind="exited").iterations == 750.0


def _started_with_statistics(agent_node, agent_client, make_job, member, team, *, done):
    """A job of 1,000 iterations at batch 256 started on this node's GPUs ten minutes ago,
    which reported ``done`` iterations with statistics whose noise scale is 256: (client,
    job as stored, GPUs, start time)."""
    node, token = agent_node
    client = agent_client(token)
    job = make_job(owner=member, team=team, max_gpus=2, total_iterations=1000)
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    t0 = timezone.now() - timedelta(minutes=10)
    first = cluster_services.start_job(job, gpus=gpus, batch_size=256, at=t0)
    client.post(
        "/api/agent/job-events/",
        {"events": [_event(job, "progress", first.pk, iterations=done, **_stats())]},
        format="json",
    )
    job.refresh_from_db()
    return client, job, gpus, t0, first


def test_a_late_report_of_the_old_allocation_converts_at_its_own_batch(
    agent_node, agent_client, make_job, member, team
):
    # given a job resized from batch 256 to 128 after 300 iterations were stored
    client, job, gpus, t0, first = _started_with_statistics(
        agent_node, agent_client, make_job, member, team, done=300.0
    )
    cluster_services.set_allocation(job, gpus=gpus, batch_size=128, at=t0 + timedelta(minutes=1))
    # (at 128 an iteration does 128 x 4/3 useful samples: 300 x 256 / (512 / 3) = 450)
    assert _assignment(client, job)["completed_iterations"] == 450.0

    # when the old allocation's exit arrives late with 350 iterations (at 256)
    client.post(
        "/api/agent/job-events/",
        {
            "events": [
                _event(
                    job, "exited", first.pk, reason="resized", exit_status=0, iterations=350.0
                )  # fmt: skip
            ]
        },
        format="json",
    )

    # then it counts at 256 (350 stored, not 175), and the job keeps running
    job.refresh_from_db()
    assert (job.state, job.completed_iterations) == (JobState.RUNNING, 350.0)


def test_a_noise_scale_learned_mid_allocation_changes_neither_its_work_nor_its_progress(
    agent_node, agent_client, make_job, member, team
):
    # given a job of 1,000 iterations at batch 256 whose noise scale is 256, moved to batch
    # 512 after 400 iterations: told 750 iterations in all, 300 done (E(512) = 2/3)
    client, job, gpus, t0, _ = _started_with_statistics(
        agent_node, agent_client, make_job, member, team, done=400.0
    )
    second = cluster_services.set_allocation(
        job, gpus=gpus, batch_size=512, at=t0 + timedelta(minutes=1)
    )
    assert second.iterations_per_submitted == pytest.approx(0.75)
    told = _assignment(client, job)
    assert (told["total_iterations"], told["completed_iterations"]) == (750.0, 300.0)

    # when the job, at 450 of its 750, reports statistics whose noise scale is 1,024
    # (E(512) = 5/6: had it started now it would have been told 600 in all)
    grown = {"grad_sqr": 1.0, "grad_var": 2.0 / load_curves().calibration}
    client.post(
        "/api/agent/job-events/",
        {"events": [_event(job, "progress", second.pk, iterations=450.0, **grown)]},
        format="json",
    )
    job.refresh_from_db()
    assert job.noise_scale == pytest.approx(1024.0)

    # then its progress counts in the units it was told: 600 of 1,000 (at the new noise
    # scale it read 750, and its count jumped by 150 iterations nobody ran), and the work
    # it is told stays 750 while it runs
    assert job.completed_iterations == pytest.approx(600.0)
    told = _assignment(client, job)
    assert (told["total_iterations"], told["completed_iterations"]) == (750.0, 450.0)

    # when a round retunes it in place (same GPUs and batch, another power limit), the job
    # keeps running and counting as it did: its new allocation keeps the units
    third = cluster_services.set_allocation(
        job, gpus=gpus, batch_size=512, power_limit_w=250, at=t0 + timedelta(minutes=2)
    )
    assert third.iterations_per_submitted == pytest.approx(0.75)
    assert _assignment(client, job)["total_iterations"] == 750.0

    # and its exit at 750 (the agent names the allocation it ran under) stores all its work
    client.post(
        "/api/agent/job-events/",
        {"events": [_event(job, "exited", third.pk, reason="completed", exit_status=0,
                           iterations=750.0)]},
        format="json",
    )  # fmt: skip
    job.refresh_from_db()
    assert (job.state, job.completed_iterations) == (JobState.COMPLETED, 1000.0)

    # while a job moved to another batch now is told its work at the noise scale known now
    other = make_job(owner=member, team=team, max_gpus=2, total_iterations=1000)
    Job.objects.filter(pk=other.pk).update(
        grad_sqr=1.0, grad_var=2.0 / load_curves().calibration, grad_batch_size=512
    )
    other.refresh_from_db()
    moved = cluster_services.start_job(
        other, gpus=gpus, batch_size=512, at=t0 + timedelta(minutes=3)
    )
    assert moved.iterations_per_submitted == pytest.approx(0.6)


def test_a_job_that_completes_stores_all_its_work_whatever_the_units_round_to(
    agent_node, agent_client, make_job, member, team
):
    # given a job of 8,313,021 iterations running in units whose round trip comes back a
    # millionth short (told 6,361,994.027683 at 0.7653... iterations per submitted one)
    node, token = agent_node
    client = agent_client(token)
    job = make_job(owner=member, team=team, max_gpus=2, total_iterations=8_313_021)
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    alloc = cluster_services.start_job(job, gpus=gpus, batch_size=256, at=timezone.now())
    JobAllocation.objects.filter(pk=alloc.pk).update(iterations_per_submitted=0.7653046982178211)
    told = _assignment(client, job)["total_iterations"]
    assert told == 6_361_994.027683

    # when it exits complete at what it was told
    exited = _event(job, "exited", alloc.pk, reason="completed", exit_status=0, iterations=told)
    client.post("/api/agent/job-events/", {"events": [exited]}, format="json")

    # then it is complete with all its work (it stored 8,313,020.999999)
    job.refresh_from_db()
    assert (job.state, job.completed_iterations) == (JobState.COMPLETED, 8_313_021.0)
