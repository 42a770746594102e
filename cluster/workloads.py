"""Which workload classes and GPU models a job may ask for. Workloads: the keys of the
current performance catalog (``scheduling.perf_lookup.current_catalog``: the stored version,
else the shipped ``perf_catalog.json``). GPU models: any; where the catalog has no model of
the workload on it, the scheduler starts the job from an estimate (``perf_lookup.model_for``,
the lookup the rounds and predictions use) and learns the rest from the job's telemetry."""

from functools import lru_cache

from scheduling.core.perf_models import Catalog, load_catalog


@lru_cache(maxsize=1)
def perf_catalog() -> Catalog:
    """The shipped catalog (no database): for defaults and tests. Validation, rounds and
    predictions use ``scheduling.perf_lookup.current_catalog``."""
    return load_catalog()


def known_workloads() -> tuple[str, ...]:
    from scheduling.perf_lookup import current_catalog  # the scheduling app's models

    return current_catalog().workloads()


def workload_errors(workload: str, gpu_model: str = "") -> dict[str, str]:
    """Per-field messages for an unknown workload. Any GPU model is accepted (see above);
    ``gpu_model`` stays a parameter for the callers that pass it."""
    known = known_workloads()
    if workload not in known:
        return {"workload": f"Unknown workload {workload!r}; known: {', '.join(known)}."}
    return {}
