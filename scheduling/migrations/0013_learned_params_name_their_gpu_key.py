"""Workload profiles and jobs' per-model fits moved to another spelling of their GPU model
(scheduling 0011, and registrations' re-keyings before ``follow_respelled_gpu_model``
renamed their params) kept the old spelling inside what they store: a profile's model and
the base it was fitted from, a fit's prior. The model read back from them named the old
key on a row of the new one. Where a stored model names the row's GPU model in another
case or spacing, it names the row's spelling now; any other name (a model estimated from
another GPU model) is left as it is."""

import re

from django.db import migrations


def _fold(key: str) -> str:
    # (as cluster.workloads.same_gpu_model compares keys; frozen here)
    return re.sub(r"\s+", "", key.casefold())


def _named(params, key: str):
    """``params`` with each stored model that names ``key`` spelled otherwise naming
    ``key``; None where nothing changes."""
    if not isinstance(params, dict):
        return None
    out, changed = dict(params), False
    model = out.get("model")
    name = model.get("gpu_model") if isinstance(model, dict) else None
    if isinstance(name, str) and name != key and _fold(name) == _fold(key):
        out["model"], changed = {**model, "gpu_model": key}, True
    fit = out.get("fit")
    if isinstance(fit, dict):
        base = _named(fit.get("base"), key)
        if base is not None:
            out["fit"], changed = {**fit, "base": base}, True
    return out if changed else None


def forwards(apps, schema_editor):
    WorkloadProfile = apps.get_model("scheduling", "WorkloadProfile")
    JobSchedulingState = apps.get_model("scheduling", "JobSchedulingState")
    for profile in WorkloadProfile.objects.only("pk", "gpu_model", "params").iterator():
        params = _named(profile.params, profile.gpu_model)
        if params is not None:
            WorkloadProfile.objects.filter(pk=profile.pk).update(params=params)
    for state in JobSchedulingState.objects.exclude(online_params={}).iterator():
        fits, changed = dict(state.online_params or {}), False
        for key, entry in fits.items():
            if isinstance(entry, dict):
                prior = _named(entry.get("prior_params"), key)
                if prior is not None:
                    fits[key], changed = {**entry, "prior_params": prior}, True
        if changed:
            JobSchedulingState.objects.filter(pk=state.pk).update(online_params=fits)


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0012_workload_profile_key")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
