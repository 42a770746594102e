"""GPU model keys stored in another case or spacing than the catalog's ("a100" for A100),
from before registrations, submits and the GPU API took the catalog's spelling (7 Dec
evening): the GPU rows, the models jobs asked for, the workload profiles learned on them
and each job's per-model fits move to the catalog's spelling (a spelling the catalog lacks,
to the first registered GPU's), as those now store it.

Left as they were, a job submitted after the upgrade asked for "A100" while the GPUs were
still "a100" and waited until every agent had registered again (an agent registers when it
starts); the models learned on "a100" were no longer found once it had."""

import re

from django.db import migrations


def _fold(key: str) -> str:
    # (as cluster.workloads.same_gpu_model compares keys; frozen here)
    return re.sub(r"\s+", "", key.casefold())


# The shipped catalog's GPU models when this migration was written
# (``scheduling/core/perf_catalog.json``): frozen here, as a migration holds only what it was
# written with. Read from the live catalog module, the migration, run on every new database,
# would break once that module moves or changes (issue 12 moves the catalog's code).
SHIPPED_GPU_MODELS = ("A100", "T4")


def _catalog_gpus(apps) -> list[str]:
    """The GPU models of the newest stored perf-profile version, else the shipped catalog's
    (as ``scheduling.perf_lookup.current_catalog`` read them)."""
    PerfProfile = apps.get_model("scheduling", "PerfProfile")
    newest = PerfProfile.objects.order_by("-fitted_at", "-version").values_list(
        "version", flat=True
    )
    version = newest.first()
    if version is None:
        return sorted(SHIPPED_GPU_MODELS)
    return sorted(
        set(PerfProfile.objects.filter(version=version).values_list("gpu_model", flat=True))
    )


def _spellings(apps) -> dict[str, str]:
    """{fold: the one spelling}: the catalog's first, then the earliest registered GPU's."""
    Gpu = apps.get_model("cluster", "Gpu")
    chosen: dict[str, str] = {}
    for name in _catalog_gpus(apps):
        chosen.setdefault(_fold(name), name)
    for name in Gpu.objects.order_by("pk").values_list("model", flat=True):
        if name:
            chosen.setdefault(_fold(name), name)
    return chosen


def _rekeyed(by_model: dict, spelling, *, merge_lists: bool) -> dict:
    out: dict = {}
    for name in sorted(by_model, key=lambda n: spelling(n) != n):  # the spelling's own first
        key = spelling(name)
        if key not in out:
            out[key] = by_model[name]
        elif merge_lists:
            out[key] = out[key] + by_model[name]
    return out


def forwards(apps, schema_editor):
    Gpu = apps.get_model("cluster", "Gpu")
    Job = apps.get_model("cluster", "Job")
    WorkloadProfile = apps.get_model("scheduling", "WorkloadProfile")
    JobSchedulingState = apps.get_model("scheduling", "JobSchedulingState")
    chosen = _spellings(apps)

    def spelling(name: str) -> str:
        return chosen.get(_fold(name), name) if name else name

    for old in set(Gpu.objects.values_list("model", flat=True)):
        if spelling(old) != old:
            Gpu.objects.filter(model=old).update(model=spelling(old))
    for old in set(Job.objects.values_list("gpu_model", flat=True)):
        if spelling(old) != old:
            Job.objects.filter(gpu_model=old).update(gpu_model=spelling(old))
    for workload, old in set(WorkloadProfile.objects.values_list("workload", "gpu_model")):
        new = spelling(old)
        # a workload with versions under the spelling already keeps those (its history)
        if new == old or WorkloadProfile.objects.filter(workload=workload, gpu_model=new).exists():
            continue
        WorkloadProfile.objects.filter(workload=workload, gpu_model=old).update(gpu_model=new)
    for state in JobSchedulingState.objects.iterator():
        names = set(state.observations or {}) | set(state.online_params or {})
        if all(spelling(n) == n for n in names):
            continue
        state.observations = _rekeyed(state.observations or {}, spelling, merge_lists=True)
        state.online_params = _rekeyed(state.online_params or {}, spelling, merge_lists=False)
        state.save(update_fields=["observations", "online_params"])


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0028_gpu_sm_clock_bound"),
        ("scheduling", "0010_schedstate_unfolded_index"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
