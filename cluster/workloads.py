"""Which workload classes and GPU models a job may ask for. Workloads: the keys of the
performance catalog (``scheduling/core/perf_catalog.json``). GPU models: any; where the
catalog has no model of the workload on it, the scheduler starts the job from an estimate
(a catalog model carried onto what NVML reports of that GPU, ``scheduling.workload_profiles``)
and learns the rest from the job's telemetry."""

from functools import lru_cache

from scheduling.core.perf_models import Catalog, load_catalog


@lru_cache(maxsize=1)
def perf_catalog() -> Catalog:
    return load_catalog()


def workload_errors(workload: str, gpu_model: str = "") -> dict[str, str]:
    """Per-field messages for an unknown workload. Any GPU model is accepted (see above);
    ``gpu_model`` stays a parameter for the callers that pass it."""
    known = perf_catalog().workloads()
    if workload not in known:
        return {"workload": f"Unknown workload {workload!r}; known: {', '.join(known)}."}
    return {}
