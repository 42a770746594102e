"""Workload profiles learned under two forms of one name (``MyNet`` and fullwidth
``\uff2d\uff59\uff4e\uff45\uff54``, stored before submits folded names) become one: the
name's first learned spelling, the one its jobs take (scheduling 0014, ``cluster.workloads.
catalog_name``). Left apart, what the other spelling's jobs measured was found by no job.

Per GPU model, where only the other spelling learned on it, its versions take the first
spelling's name (their models too), history whole. Where both did, the two sets of
measurements are folded as the profiles fold a job (``profiles.fold``): the set with fewer
measurements joins the other with a bounded share (``MAX_JOB_WEIGHT`` of the whole, and
moving what the larger set measured by at most ``MAX_JOB_MOVE``; configurations only it
measured teach the profile), into a new version of the first spelling counting both sets'
measurements and jobs. The other spelling's rows stay as they were (nothing is deleted),
and each merge is logged. A set stored before profiles kept their measurements (its model
alone) has nothing to fold, and one whose model cannot be read is not folded: each is
logged and left, and the first spelling's profile stands.
"""

import logging
import unicodedata
from collections import defaultdict

from django.db import migrations
from django.db.models import Min
from django.utils import timezone

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


def _merge(WorkloadProfile, other: str, kept: str, gpu_model: str) -> None:
    from scheduling.core import profiles
    from scheduling.workload_profiles import _median_error, profile_fit, profile_params

    def newest(name):
        return (
            WorkloadProfile.objects.filter(workload=name, gpu_model=gpu_model)
            .order_by("-version")
            .first()
        )

    mine, theirs = newest(kept), newest(other)
    # The set with more measurements is the profile; the other joins it as a job would.
    larger, smaller = (
        (theirs, mine) if theirs.n_observations > mine.n_observations else (mine, theirs)
    )
    try:
        held, joining = profile_fit(larger), profile_fit(smaller)
        previous = profile_fit(mine).model
    except (KeyError, TypeError, ValueError) as exc:
        logger.warning(
            "workload profile %s@%s not merged into %s: a stored model cannot be read (%r)",
            other,
            gpu_model,
            kept,
            exc,
        )
        return
    if not joining.observations:
        logger.warning(
            "workload profile %s@%s not merged into %s: %s v%d holds its model alone, no "
            "measurements to fold",
            other,
            gpu_model,
            kept,
            smaller.workload,
            smaller.version,
        )
        return
    fit = profiles.fold(held, joining.base, joining.observations, workload=kept)
    # (as a fold records: the previous version's error where the joining set measured)
    measured = list((held if theirs is larger else joining).observations)
    if "fit" in mine.params:
        # The measurements move to the newest version; older ones keep their model.
        WorkloadProfile.objects.filter(pk=mine.pk).update(
            params={k: v for k, v in mine.params.items() if k != "fit"}
        )
    last = max((mine, theirs), key=lambda p: (p.created_at, p.pk))
    merged = WorkloadProfile.objects.create(
        workload=kept,
        workload_key=_fold(kept),
        gpu_model=gpu_model,
        version=mine.version + 1,
        prior=larger.prior,
        # (a fold whose model stands keeps the larger set's, named as it was)
        params=_renamed(profile_params(fit), other, kept),
        n_observations=mine.n_observations + theirs.n_observations,
        jobs=mine.jobs + theirs.jobs,
        iter_time_error=_median_error(previous, measured, "iter_time_s"),
        power_error=_median_error(previous, measured, "power_w"),
        last_job_id=last.last_job_id,
        created_at=timezone.now(),
    )
    logger.info(
        "workload profile %s@%s v%d (%g measurements) merged with %s v%d (%g) into %s v%d, "
        "%s's joining with a bounded share; its rows are kept under their spelling",
        other,
        gpu_model,
        theirs.version,
        theirs.n_observations,
        kept,
        mine.version,
        mine.n_observations,
        kept,
        merged.version,
        smaller.workload,
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
                    _merge(WorkloadProfile, other, kept, gpu_model)
                else:
                    _move(WorkloadProfile, other, kept, gpu_model)


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0014_job_workload_names_folded")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
