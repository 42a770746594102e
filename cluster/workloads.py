"""Which workload classes and GPU models a job may ask for: the keys of the performance
catalog (``scheduling/core/perf_catalog.json``). A job whose workload has no performance model
could never be planned, so the API and the submit form refuse it up front."""

from functools import lru_cache

from scheduling.core.perf_models import Catalog, load_catalog


@lru_cache(maxsize=1)
def perf_catalog() -> Catalog:
    return load_catalog()


def workload_errors(workload: str, gpu_model: str = "") -> dict[str, str]:
    """Per-field messages for an unknown workload, or a GPU model it has no model for."""
    catalog = perf_catalog()
    known = catalog.workloads()
    if workload not in known:
        return {"workload": f"Unknown workload {workload!r}; known: {', '.join(known)}."}
    if gpu_model:
        gpu_models = catalog.gpu_models_for(workload)
        if gpu_model not in gpu_models:
            return {
                "gpu_model": f"No performance model for {workload} on {gpu_model!r}; "
                f"known: {', '.join(gpu_models)}."
            }
    return {}
