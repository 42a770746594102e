"""The one lookup of "the performance model a job of workload W would be sized by on GPU
model G" (issue 12 point 8). Submit validation (``scheduling.feasibility``,
``cluster.workloads``), the rounds (``adapters.build_snapshot``), the prediction on the job
form and API, and the budget what-if (``frontend.predictions``) all go through
:func:`model_for`, so none of them can call a job runnable that another calls unknown, or
size it by another model. The chain (``workload_profiles.prior_for`` implements it):

1. the newest workload profile of (W, G): what earlier jobs taught (``learned``);
2. the current catalog's model of (W, G) (``catalog``);
3. an estimate (``estimated``): the catalog model on G of the workload the job resembles,
   else that workload's newest profile on G, else another catalog workload on G, or, for a
   GPU model the catalog lacks, W's (or another workload's) model on the catalog GPU
   nearest to what NVML reports of G. The job's own online model then corrects it
   (``job_models`` says, for the API and the job page, whether it has).

A job's own learned model (``workload_profiles.job_models``) comes before all three once it
has reported; the rounds add it, the other callers size jobs that have not started. Its fit
starts from this lookup's model, except that an estimate from another workload then takes
its batch shape from the job's own draw (``workload_profiles.fit_prior``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import F

from cluster.models import Gpu
from scheduling import workload_profiles
from scheduling.choices import PerfModelKind
from scheduling.core.perf_models import Catalog, FittedPerfModel, load_catalog
from scheduling.models import PerfProfile
from scheduling.workload_profiles import NO_HINTS, JobHints, NvmlGpu


def current_catalog() -> Catalog:
    """The newest stored perf-profile version (``fit_perf_models``), else the shipped one."""
    latest = PerfProfile.objects.order_by("-fitted_at", "-version").values_list(
        "version", flat=True
    )
    version = latest.first()
    if version is None:
        return load_catalog()
    return PerfProfile.objects.catalog(version)


@dataclass(frozen=True)
class Found:
    """A looked-up model, where it came from (``source``, shown to people) and its kind."""

    model: FittedPerfModel
    source: str

    @property
    def kind(self) -> PerfModelKind:
        return kind_of(self.source)


def kind_of(source: str) -> PerfModelKind:
    """The kind of a ``prior_for`` source label ("profile v2", "catalog W@G", "estimated ...")."""
    if source.startswith("profile"):
        return PerfModelKind.LEARNED
    if source.startswith("catalog"):
        return PerfModelKind.CATALOG
    return PerfModelKind.ESTIMATED


def nvml_by_model(gpu_models: Iterable[str] | None = None) -> dict[str, NvmlGpu]:
    """GPU model -> what NVML reported of it (one ``Gpu`` row per model); all models
    registered, or only ``gpu_models``.

    The row is a GPU in service (the first registered) where the model has one: its power
    range and clocks are what jobs of that model run with now. A retired GPU's figures are
    of a board that left (another revision, an older driver's range), and the oldest row,
    which this took before, was often one. A model known only from retired GPUs keeps the
    most recently retired one's figures: a job that names it still gets a prior."""
    rows = Gpu.objects.order_by("model", F("retired_at").desc(nulls_first=True), "pk").distinct(
        "model"
    )
    if gpu_models is not None:
        rows = rows.filter(model__in=list(gpu_models))
    return workload_profiles.nvml_gpus(rows)


def model_for(
    workload: str,
    gpu_model: str,
    *,
    catalog: Catalog | None = None,
    nvml: NvmlGpu | None = None,
    hints: JobHints = NO_HINTS,
) -> Found | None:
    """The model a job of ``workload`` would start from on ``gpu_model`` (see the module
    docstring); None when nothing gives one. ``nvml``: what NVML reports of the GPU model
    (needed only for one the catalog lacks); ``catalog``: the current one unless given;
    ``hints``: what the job's submitter said of its workload (``JobHints``)."""
    found = workload_profiles.prior_for(
        workload, gpu_model, catalog=catalog or current_catalog(), nvml=nvml, hints=hints
    )
    return None if found is None else Found(*found)


def models_on(
    workload: str,
    gpu_models: Iterable[str],
    *,
    catalog: Catalog,
    nvml: Mapping[str, NvmlGpu],
    hints: JobHints = NO_HINTS,
) -> dict[str, Found]:
    """GPU model -> ``model_for`` of each of ``gpu_models`` that has one."""
    out = {}
    for gpu_model in gpu_models:
        found = model_for(
            workload, gpu_model, catalog=catalog, nvml=nvml.get(gpu_model), hints=hints
        )
        if found is not None:
            out[gpu_model] = found
    return out


class LookupCatalog:
    """``model_for`` as the core's ``PerfCatalog`` (``get``, ``workloads``), for code that
    takes a catalog, such as the simulator's what-if: it then sizes jobs by the same models as
    the rounds. ``hints``: workload -> the hints its jobs give (``JobHints``). Memoised per
    (workload, GPU model): build one per request."""

    def __init__(
        self,
        catalog: Catalog,
        nvml: Mapping[str, NvmlGpu],
        hints: Mapping[str, JobHints] | None = None,
    ) -> None:
        self.catalog = catalog
        self.nvml = dict(nvml)
        self.hints = dict(hints or {})
        self._found: dict[tuple[str, str], Found | None] = {}

    def found(self, workload: str, gpu_model: str) -> Found | None:
        key = (workload, gpu_model)
        if key not in self._found:
            self._found[key] = model_for(
                workload,
                gpu_model,
                catalog=self.catalog,
                nvml=self.nvml.get(gpu_model),
                hints=self.hints.get(workload, NO_HINTS),
            )
        return self._found[key]

    def get(self, workload: str, gpu_model: str) -> FittedPerfModel:
        found = self.found(workload, gpu_model)
        if found is None:
            return self.catalog.get(workload, gpu_model)  # raises, naming what exists
        return found.model

    def has(self, workload: str, gpu_model: str) -> bool:
        return self.found(workload, gpu_model) is not None

    def workloads(self) -> tuple[str, ...]:
        return self.catalog.workloads()


def job_models(state: Any) -> list[dict[str, Any]]:
    """What a job's own performance model is, per GPU model it ran on (a
    ``JobSchedulingState``; None: nothing yet): ``kind`` "own" once it has measured its own
    iteration times there (``observations``, weights summed; its draws alone do not
    make its speed known, as ``OnlinePerfModel.estimated`` reads it), else "prior";
    ``prior``, what it started from (a ``prior_for`` label) and ``prior_kind`` (catalog,
    a learned workload profile, or estimated from another workload or GPU model). The
    API and the job page show it, so a prediction that is still a prior says so (issue
    12, point 1)."""
    if state is None:
        return []
    rows = []
    for gpu_model, entry in sorted((state.online_params or {}).items()):
        prior = str(entry.get("prior") or "")
        timed = sum(
            float(o.get("weight", 1.0))
            for o in (state.observations or {}).get(gpu_model, ())
            if o.get("iter_time_s") is not None
        )
        rows.append(
            {
                "gpu_model": gpu_model,
                "kind": "own" if timed > 0 else "prior",
                "observations": timed,
                "prior": prior,
                "prior_kind": kind_of(prior).value if prior else None,
            }
        )
    return rows
