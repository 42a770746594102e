"""Workload profiles keep their name as names are matched (``workload_key``: NFKC, then
Python's full case folding), so the lookup of a learned spelling filters on the same rule
it compares with. Rows stored before get their key here."""

import unicodedata

from django.db import migrations, models


def _fold(name: str) -> str:
    # (as cluster.workloads.workload_fold folds names; frozen here)
    return unicodedata.normalize("NFKC", name).casefold()


def forwards(apps, schema_editor):
    WorkloadProfile = apps.get_model("scheduling", "WorkloadProfile")
    for name in set(WorkloadProfile.objects.values_list("workload", flat=True)):
        WorkloadProfile.objects.filter(workload=name).update(workload_key=_fold(name))


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0028_gpu_sm_clock_bound"),
        ("scheduling", "0011_gpu_model_catalog_spelling"),
    ]

    operations = [
        migrations.AddField(
            model_name="workloadprofile",
            name="workload_key",
            field=models.TextField(default="", editable=False),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="workloadprofile",
            index=models.Index(fields=["workload_key"], name="workload_profile_key_idx"),
        ),
    ]
