"""Workload profiles learned under two forms of one name (``MyNet`` and fullwidth
``\uff2d\uff59\uff4e\uff45\uff54``, stored before submits folded names) become one: the
name's first learned spelling, the one its jobs take (scheduling 0014, ``cluster.workloads.
catalog_name``). Left apart, what the other spelling's jobs measured was found by no job.

Per GPU model, where only the other spelling learned on it, its versions take the first
spelling's name (their models too), history whole. Where both did, the two sets of
measurements are to be folded as the profiles fold a job (``profiles.fold``): that needs the
live fitting code, which a migration, run for good on every upgraded database, may not hold
(issue 12 moves it; scheduling 0014 was fixed for the same). So the pair is logged and left
as it is here, and ``manage.py merge_workload_spellings``
(``workload_profiles.merge_respelled_profiles``), run after ``migrate``, folds it. Nothing
is deleted; reversing the migration leaves the renamed rows as they are.
"""

import logging
import unicodedata
from collections import defaultdict

from django.db import migrations
from django.db.models import Min

logger = logging.getLogger("scheduling.migrations")


def _fold(name: str) -> str:
    # (as cluster.workloads.workload_fold folds names; frozen here)
    return unicodedata.normalize("NFKC", name).casefold()


def _renamed(params, old: str, new: str):
    """``params`` with its model (and its fit's base) named ``new`` where it named ``old``."""
    if not isinstance(params, dict):
        return params
    out = dict(params)
    model = out.get("model")
    if isinstance(model, dict) and model.get("workload") == old:
        out["model"] = {**model, "workload": new}
    fit = out.get("fit")
    if isinstance(fit, dict) and isinstance(fit.get("base"), dict):
        out["fit"] = {**fit, "base": _renamed(fit["base"], old, new)}
    return out


def _move(WorkloadProfile, other: str, kept: str, gpu_model: str) -> None:
    rows = WorkloadProfile.objects.filter(workload=other, gpu_model=gpu_model)
    for row in rows:
        row.workload, row.workload_key = kept, _fold(kept)
        row.params = _renamed(row.params, other, kept)
        row.save(update_fields=["workload", "workload_key", "params"])
    logger.info("workload profile %s@%s: its versions now named %s", other, gpu_model, kept)


def _left_for_the_command(other: str, kept: str, gpu_model: str) -> None:
    logger.warning(
        "workload profile %s@%s: %s learned on %s too; run `manage.py "
        "merge_workload_spellings` to fold the two (a migration holds no live fitting code)",
        other,
        gpu_model,
        kept,
        gpu_model,
    )


def forwards(apps, schema_editor):
    WorkloadProfile = apps.get_model("scheduling", "WorkloadProfile")
    spellings: dict[str, list[str]] = defaultdict(list)
    first = (
        WorkloadProfile.objects.values("workload")
        .annotate(first_at=Min("created_at"))
        .order_by("first_at", "workload")
        .values_list("workload", flat=True)
    )
    for name in first:
        spellings[_fold(name)].append(name)
    for names in spellings.values():
        kept, others = names[0], names[1:]
        for other in others:
            models = WorkloadProfile.objects.filter(workload=other).values_list(
                "gpu_model", flat=True
            )
            for gpu_model in sorted(set(models)):
                if WorkloadProfile.objects.filter(workload=kept, gpu_model=gpu_model).exists():
                    _left_for_the_command(other, kept, gpu_model)
                else:
                    _move(WorkloadProfile, other, kept, gpu_model)


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0014_job_workload_names_folded")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
