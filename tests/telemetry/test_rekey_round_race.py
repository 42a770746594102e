"""A registration that re-keys a GPU model ("a100" -> the catalog's "A100") while a round
is under way. The round reads each running job's fits (``JobSchedulingState``) without a
lock, folds the job's new telemetry in under the GPU model it read, and writes the whole
fits back at its end (``StateWrites``: a bulk update). A re-key committed in between
(``follow_respelled_gpu_model`` moved the fits to "A100") was overwritten: the job's fits
were back under "a100", a key no GPU had any longer, and its next rounds started it from
its prior again. Against the real PostgreSQL, two threads, two connections: the round
paused after its read, the registration beside it."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from support.nodes import registered_gpu
from support.races import Gate, beside_paused, in_thread

from cluster import services as cluster_services
from cluster.models import Gpu, Node
from scheduling import adapters, services
from scheduling.models import JobSchedulingState
from telemetry import services as telemetry_services
from telemetry.models import GpuSample, JobEvent

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 12, 7, 20, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=2)


def _training_on_a100_stored_lower_case(make_node, make_job, member, team):
    """A live node whose GPUs are stored as "a100" (registered before the catalog's
    spelling), a job running on one of them with 40 s of progress reports and samples."""
    node = make_node("node-01", gpus=2)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=NOW)
    Gpu.objects.filter(node=node).update(model="a100")
    gpu = Gpu.objects.get(node=node, index=0)
    job = make_job(owner=member, team=team, workload="resnet50", min_gpus=1, max_gpus=1,
                   global_batch_size=256, min_batch_size=256, max_batch_size=256,
                   total_iterations=1_000_000)  # fmt: skip
    cluster_services.start_job(job, gpus=[gpu], batch_size=256, at=T0)
    job.refresh_from_db()
    start = T0 + timedelta(seconds=1)
    for k in range(0, 41, 5):
        JobEvent.objects.create(
            event_id=uuid.uuid4(), node=node, job=job, allocation_id=job.current_allocation_id,
            kind="progress", ts=start + timedelta(seconds=k), iterations=k / 0.1,
            received_at=start + timedelta(seconds=k),
        )  # fmt: skip
    GpuSample.objects.bulk_create(
        GpuSample(gpu=gpu, ts=start + timedelta(seconds=k), power_w=300.0 + k % 3)
        for k in range(41)
    )
    return node, job


def test_a_round_under_way_does_not_write_back_fits_a_registration_rekeyed(
    make_node, make_job, member, team, scheduler_settings, monkeypatch
):
    # given a job training on GPUs stored as "a100", and a round paused after it read the
    # job's fits and telemetry, before it writes them
    scheduler_settings("fifo", round_interval_s=1)
    node, job = _training_on_a100_stored_lower_case(make_node, make_job, member, team)
    gate = Gate()
    read = adapters.observed_measurements_of

    def read_then_pause(*args, **kwargs):
        found = read(*args, **kwargs)
        gate.pause()
        return found

    monkeypatch.setattr(adapters, "observed_measurements_of", read_then_pause)
    round_ = in_thread(lambda: services.run_scheduling_round(now=NOW))
    gpus = [registered_gpu(g.uuid, g.index, "A100") for g in Gpu.objects.filter(node=node)]

    # when the node's agent registers its GPUs again, as the catalog's "A100", beside it
    result, stored = beside_paused(
        gate, round_, lambda: telemetry_services.register_gpus(node, gpus, now=NOW)
    )

    # then the round ran, the GPUs are "A100", and the job's fits, the telemetry the round
    # folded in included, are under "A100" alone
    assert result.ran
    assert {g.model for g in stored} == {"A100"}
    state = JobSchedulingState.objects.get(job=job)
    assert set(state.online_params) == {"A100"}
    assert set(state.observations) == {"A100"}
    assert state.observations["A100"]
