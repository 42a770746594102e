"""Numbers the end-to-end tests derive from the shipped perf catalog (what the simulated
agent runs by), so that expected times and energies are computed, not typed in."""

from scheduling.core.perf_models import load_catalog
from scheduling.core.types import GpuConfig

WORKLOAD, GPU_MODEL, BATCH = "resnet50", "A100", 64
JOB_GPUS = (1, 1, 2)


def _model():
    return load_catalog().get(WORKLOAD, GPU_MODEL)


def iterations_for(n_gpus: int, *, work_s: float) -> int:
    """Iterations that take about ``work_s`` seconds on ``n_gpus`` GPUs at batch 64."""
    return max(1, round(work_s / _model().iter_time_s(GpuConfig(n_gpus, BATCH))))


def expected_busy_energy_j(n_gpus: int, iterations: float) -> float:
    """Joules the job's GPUs draw busy for its iterations: n x P x iterations x T."""
    cfg = GpuConfig(n_gpus, BATCH)
    model = _model()
    return n_gpus * model.power_w(cfg) * iterations * model.iter_time_s(cfg)
