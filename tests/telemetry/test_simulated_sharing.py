"""The simulated agent time-slices two jobs on one GPU as the scheduling simulator does:
each at its throughput ratio from Gavel's measured pairs, the GPU at the shared power."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.core.colocation import load_colocation, shared_power_w
from scheduling.core.perf_models import catalog_stand_in, load_catalog
from telemetry.agent.simulated import (
    PerfModelUnavailable,
    SimJob,
    SimulatedBackend,
    gpu_spec,
    perf_model_for,
)

NOW = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)


def _job(job_id, workload, indices):
    return SimJob(
        job_id=job_id, workload=workload, gpu_indices=indices, global_batch=32,
        sm_clock_mhz=None, power_limit_w=None,
    )  # fmt: skip


def test_two_jobs_on_one_gpu_run_at_their_measured_ratios_and_shared_power():
    # given ResNet-50 and BERT sharing GPU 0, and a job alone on GPU 1
    backend = SimulatedBackend(node_name="n", n_gpus=2, gpu_model="A100")
    resnet, bert, alone = _job(1, "resnet50", (0,)), _job(2, "bert", (0,)), _job(3, "bert", (1,))
    for job in (resnet, bert, alone):
        backend.start_job(job)

    # when 100 s pass
    backend.read(NOW)
    readings = backend.read(NOW + timedelta(seconds=100))

    # then each shared job did its Gavel ratio of its solo work, the lone job all of it
    x_resnet, x_bert = load_colocation().pair_ratio("resnet50", 32, "bert", 32, 1)
    assert (round(x_resnet, 3), round(x_bert, 3)) == (0.485, 0.181)

    def solo(job):
        return 100.0 / job.model.iter_time_s(job.config())

    assert resnet.done_iters == pytest.approx(x_resnet * solo(resnet))
    assert bert.done_iters == pytest.approx(x_bert * solo(bert))
    assert alone.done_iters == pytest.approx(solo(alone))
    # and the shared GPU draws idle once plus each job's dynamic part at its ratio
    idle_w = float(gpu_spec("A100").idle_power_w)
    shared_w = shared_power_w(
        idle_w,
        resnet.model.power_w(resnet.config()),
        bert.model.power_w(bert.config()),
        x_resnet,
        x_bert,
    )
    assert readings[0].power_w == pytest.approx(shared_w)
    assert readings[0].energy_j == pytest.approx(100.0 * shared_w)
    assert readings[0].power_w < resnet.model.power_w(resnet.config()) + bert.model.power_w(
        bert.config()
    )
    assert readings[1].power_w == pytest.approx(alone.model.power_w(alone.config()))


def test_when_one_of_the_pair_stops_the_other_runs_at_full_speed_again():
    backend = SimulatedBackend(node_name="n", n_gpus=1, gpu_model="A100")
    resnet, bert = _job(1, "resnet50", (0,)), _job(2, "bert", (0,))
    backend.start_job(resnet)
    backend.start_job(bert)
    backend.read(NOW)
    backend.stop_job(2)
    before = resnet.done_iters
    readings = backend.read(NOW + timedelta(seconds=50))
    assert before == 0.0
    assert resnet.done_iters == pytest.approx(50.0 / resnet.model.iter_time_s(resnet.config()))
    assert readings[0].power_w == pytest.approx(resnet.model.power_w(resnet.config()))


def test_a_workload_the_catalog_does_not_know_runs_as_the_one_it_resembles():
    # given a llama-3b job that resembles gpt2, and one with no hint
    backend = SimulatedBackend(node_name="n", n_gpus=2, gpu_model="A100")
    hinted = SimJob(
        job_id=1, workload="llama-3b", resembles="gpt2", gpu_indices=(0,), global_batch=32,
        sm_clock_mhz=None, power_limit_w=None,
    )  # fmt: skip

    # when the simulated agent starts them
    backend.start_job(hinted)

    # then the hinted one advances by gpt2's model
    assert hinted.model is perf_model_for("gpt2", "A100")
    # and one without a hint, or whose hint has no model on the GPU (cifar10 is measured on
    # the T4 only), runs as the model the service predicts it from: the nearest in its
    # parameter count, else the first on the GPU (it failed, "no perf model", though the
    # service had accepted it on that estimate)
    catalog = load_catalog()
    sized = SimJob(
        job_id=3, workload="llama-3b", resembles="cifar10", param_count=3_000_000_000,
        gpu_indices=(1,), global_batch=32, sm_clock_mhz=None, power_limit_w=None,
    )  # fmt: skip
    backend.start_job(sized)
    stand_in = catalog_stand_in(catalog, "llama-3b", "A100", param_count=3e9)
    assert (sized.model.workload, sized.model.gpu_model) == (stand_in.workload, "A100")
    assert stand_in.workload != "cifar10"
    bare = _job(2, "my-net", (1,))
    backend.start_job(bare)
    assert bare.model.workload == catalog_stand_in(catalog, "my-net", "A100").workload
    assert set(backend.jobs) == {1, 2, 3}
    # and a GPU model the catalog has nothing on still says why
    with pytest.raises(PerfModelUnavailable, match="the perf catalog does not know GPU model"):
        SimulatedBackend(node_name="n", n_gpus=1, gpu_model="L40S")
