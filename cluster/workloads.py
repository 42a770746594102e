"""Which workloads and GPU models a job may ask for: any (issue 12 point 1). A workload the
current performance catalog (``scheduling.perf_lookup.current_catalog``: the stored version,
else the shipped ``perf_catalog.json``) knows is predicted from its measured model; any other
name, and any GPU model the catalog lacks, from an estimate (``perf_lookup.model_for``, the
lookup the rounds and predictions use: the catalog workload the job says it ``resembles``,
else the first one on that GPU model), marked ``estimated`` wherever it is shown, which the
job's telemetry then corrects. The one rule here: a ``resembles`` hint must name a catalog
workload, since it is what the estimate is taken from."""

from collections.abc import Sequence
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


def catalog_name(workload: str, known: Sequence[str] | None = None) -> str:
    """``workload`` as the catalog spells it where it names a catalog workload in another
    case (``RESNET50`` is ``resnet50``), else unchanged: read as a new, unknown workload,
    it was predicted from an estimate and skipped the submit checks a catalog workload
    gets (the longest job allowed, budgets that could never pay for it), as GPU model
    names in any case were already read as the catalog's. ``known``: the catalog's
    workloads, where the caller has them (``known_workloads``)."""
    by_fold = {w.casefold(): w for w in (known_workloads() if known is None else known)}
    return by_fold.get(workload.strip().casefold(), workload)


def workload_errors(
    workload: str,
    gpu_model: str = "",
    *,
    resembles: str = "",
    known: Sequence[str] | None = None,
) -> dict[str, str]:
    """Per-field messages for the workload and its hint. Any workload name and any GPU model
    are accepted (see above); ``workload`` and ``gpu_model`` stay parameters for the callers
    that pass them. ``known`` as for ``catalog_name``."""
    if resembles:
        known = known_workloads() if known is None else known
        if resembles not in known:
            return {
                "resembles": f"Not a catalog workload: {resembles!r}; known: {', '.join(known)}."
            }
    return {}
