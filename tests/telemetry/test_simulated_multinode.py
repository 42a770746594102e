"""A job on several nodes runs, on each node's simulated agent, at its whole allocation's
speed: 4 + 4 GPUs is an 8-GPU job on two nodes, not a 4-GPU job with the 8-GPU batch (which
ran BERT 41% and ResNet-50 58% slow and drew 9-19% more, and which the online model would
have learned as a network penalty; found by a live-service probe). A process job is told
the same count (``WATTFLOW_GPU_COUNT``, its GPUs on all nodes)."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.core.types import GpuConfig
from telemetry.agent.jobs import ProcessJob
from telemetry.agent.runners import SimulatedRunner
from telemetry.agent.simulated import SimulatedBackend

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def _assignment(**kw):
    base = {"job_id": 5, "workload": "resnet50", "batch_size": 256, "sm_clock_mhz": None,
            "power_limit_w": None, "completed_iterations": 0.0, "total_iterations": 1e6,
            "gpu_count": 8, "gpus_per_node": [4, 4]}  # fmt: skip
    return base | kw


@pytest.mark.parametrize("workload", ["resnet50", "bert"])
def test_a_two_node_job_advances_at_its_eight_gpu_speed_on_each_node(workload):
    backend = SimulatedBackend(node_name="n1", n_gpus=4, gpu_model="A100")
    runner = SimulatedRunner(backend)
    runner.start(_assignment(workload=workload), [0, 1, 2, 3])
    job = backend.jobs[5]
    cfg = GpuConfig(n_gpus=8, global_batch=256, gpus_per_node=(4, 4))
    assert job.config() == cfg
    backend.read(NOW)
    readings = backend.read(NOW + timedelta(seconds=100))
    assert job.done_iters == pytest.approx(100.0 / job.model.iter_time_s(cfg))
    # far faster than 4 GPUs at the whole batch, as it ran before
    four = job.model.iter_time_s(GpuConfig(n_gpus=4, global_batch=256))
    assert job.model.iter_time_s(cfg) < 0.8 * four
    assert [r.power_w for r in readings] == [pytest.approx(job.model.power_w(cfg))] * 4


def test_a_new_allocation_with_the_same_gpus_here_but_fewer_elsewhere_is_a_restart():
    backend = SimulatedBackend(node_name="n1", n_gpus=4, gpu_model="A100")
    runner = SimulatedRunner(backend)
    runner.start(_assignment(), [0, 1, 2, 3])
    assert runner.same_shape(5, _assignment(), [0, 1, 2, 3])
    assert not runner.same_shape(5, _assignment(gpu_count=4, gpus_per_node=[4]), [0, 1, 2, 3])


def test_a_process_job_is_told_its_gpus_on_all_nodes(tmp_path):
    job = ProcessJob(_assignment(command="true", checkpoint_dir=str(tmp_path / "ck")),
                     [2, 3], tmp_path)  # fmt: skip
    env = job.environment()
    assert (env["WATTFLOW_GPU_COUNT"], env["CUDA_VISIBLE_DEVICES"]) == ("8", "2,3")
    # CUDA counts the GPUs as NVML does (by default it puts the fastest first)
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_a_simulated_job_says_when_it_reached_its_last_count():
    # given a job that reaches its total 37.5 s into a 40 s interval (the agent's tick found
    # it finished at 40 s and stamped the last report then: its last interval read up to
    # 17% slow, and the profiles learned that; found by a live-service probe)
    backend = SimulatedBackend(node_name="n1", n_gpus=4, gpu_model="A100")
    runner = SimulatedRunner(backend)
    runner.start(_assignment(gpu_count=4, gpus_per_node=[4]), [0, 1, 2, 3])
    job = backend.jobs[5]
    iter_s = job.model.iter_time_s(job.config())
    job.total_iters = 37.5 / iter_s
    backend.read(NOW)
    backend.read(NOW + timedelta(seconds=10))
    assert runner.progress(5).at == pytest.approx((NOW + timedelta(seconds=10)).timestamp())
    backend.read(NOW + timedelta(seconds=40))
    # then its progress says the total, reached at 37.5 s
    progress = runner.progress(5)
    assert progress.iterations == job.total_iters
    assert progress.at == pytest.approx((NOW + timedelta(seconds=37.5)).timestamp())
