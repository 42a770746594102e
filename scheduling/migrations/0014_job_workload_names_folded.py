"""Jobs stored under a workload name in compatibility forms or another case, from before
submits folded names (fullwidth "\uff42\uff45\uff52\uff54" for bert; a learned workload's
name in another form), take the name a submit gives it now (``cluster.workloads.
catalog_name``): the catalog's spelling of a catalog workload, else the spelling of the
first learned workload profile, both matched on NFKC then Python's full case folding;
any other name stays as typed. Left as they were, the jobs never met their workload's
catalog model or profile: predicted from an estimate, folded into a profile of their own.

Every job is renamed, ended ones too (as scheduling 0011 respelled every job's GPU model):
a finished job not yet folded folds under its name, and the reports group by it. Profiles
learned under another form of a name already learned stay as they are (the name's first
learned spelling is the one jobs take)."""

import unicodedata

from django.db import migrations
from django.db.models import Min


def _fold(name: str) -> str:
    # (as cluster.workloads.workload_fold folds names; frozen here)
    return unicodedata.normalize("NFKC", name).casefold()


# The shipped catalog's workloads, aliases included, when this migration was written
# (``scheduling/core/perf_catalog.json``, v2): frozen here, as a migration holds only what it
# was written with. Read from the live catalog module, the migration, run on every new
# database, would break once that module moves or changes (issue 12 moves the catalog's
# code), and it would fold names by a catalog this migration never knew.
SHIPPED_WORKLOADS = (
    "bert", "cifar10", "deepspeech2", "gpt2", "imagenet", "inception3", "ncf", "resnet50",
    "resnet50_cifar10", "vgg16", "yolov3",
)  # fmt: skip


def _catalog_workloads(apps) -> list[str]:
    """The workloads (aliases included) of the newest stored perf-profile version, else
    the shipped catalog's (as ``scheduling.perf_lookup.current_catalog`` read them)."""
    PerfProfile = apps.get_model("scheduling", "PerfProfile")
    version = (
        PerfProfile.objects.order_by("-fitted_at", "-version")
        .values_list("version", flat=True)
        .first()
    )
    if version is None:
        return list(SHIPPED_WORKLOADS)
    names = set()
    for workload, params in PerfProfile.objects.filter(version=version).values_list(
        "workload", "params"
    ):
        names.add(workload)
        names.update((params or {}).get("aliases", []))
    return sorted(names)


def forwards(apps, schema_editor):
    Job = apps.get_model("cluster", "Job")
    WorkloadProfile = apps.get_model("scheduling", "WorkloadProfile")
    catalog = {_fold(w): w for w in _catalog_workloads(apps)}
    learned: dict[str, str] = {}
    first = (
        WorkloadProfile.objects.values("workload")
        .annotate(first_at=Min("created_at"))
        .order_by("first_at", "workload")
        .values_list("workload", flat=True)
    )
    for name in first:
        learned.setdefault(_fold(name), name)
    for name in set(Job.objects.values_list("workload", flat=True)):
        folded = _fold(name.strip())
        new = catalog.get(folded) or learned.get(folded) or name
        if new != name:
            Job.objects.filter(workload=name).update(workload=new)


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0028_gpu_sm_clock_bound"),
        ("scheduling", "0013_learned_params_name_their_gpu_key"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
