"""Jobs stored under a workload name in compatibility forms or another case before submits
folded names (fullwidth "\uff42\uff45\uff52\uff54" for bert, before e27542f; a learned
workload's name in another form, before 0a8c12f) kept it: their telemetry and their fold
never met their workload's catalog model or profile. The migration (scheduling 0014)
names them as a submit names them now (``cluster.workloads.catalog_name``)."""

from datetime import UTC, datetime

import pytest
from support.migrations import stored_before

from cluster.workloads import workload_fold

BEFORE = [
    ("scheduling", "0013_learned_params_name_their_gpu_key"),
    ("cluster", "0028_gpu_sm_clock_bound"),
]
T0 = datetime(2026, 12, 7, tzinfo=UTC)

# stored name -> the name a submit stores for it now
NAMES = {
    "\uff42\uff45\uff52\uff54": "bert",  # fullwidth catalog workload
    "\uff32\uff25\uff33\uff2e\uff25\uff34\uff15\uff10": "resnet50",
    "BERT": "bert",  # a catalog workload in another case (stored so before c4c69f5)
    "\uff4d\uff59\uff4e\uff45\uff54": "MyNet",  # the first learned spelling
    "mynet": "MyNet",
    "STRASSENET": "Stra\u00dfeNet",  # a full case folding of a learned name
    "\uff46\uff4f\uff4f": "\uff46\uff4f\uff4f",  # a name nothing learned: stored as typed
    "bert": "bert",
    "MyNet": "MyNet",
}


@pytest.mark.django_db(transaction=True)
def test_jobs_stored_under_another_form_of_a_workload_take_its_name():
    with stored_before(BEFORE) as (apps, user, team):
        model = apps.get_model("scheduling", "WorkloadProfile")

        def profile(workload, at):
            # (its match key as ``WorkloadProfile.save`` sets it; a historical model's
            # save does not)
            model.objects.create(
                workload=workload, workload_key=workload_fold(workload), created_at=at,
                gpu_model="A100", prior="p", params={}, version=1,
            )  # fmt: skip

        profile("MyNet", T0)
        # learned later under a fullwidth name: the first learned spelling stays the name
        profile("\uff2d\uff59\uff2e\uff45\uff54", T0.replace(hour=5))
        profile("Stra\u00dfeNet", T0)
        job = apps.get_model("cluster", "Job")
        ids = {
            name: job.objects.create(
                owner=user, team=team, name="j", workload=name, global_batch_size=8,
                min_batch_size=8, max_batch_size=8, total_iterations=10,
            ).pk
            for name in NAMES
        }  # fmt: skip

    from cluster.models import Job
    from cluster.workloads import catalog_name

    stored = dict(Job.objects.filter(pk__in=ids.values()).values_list("pk", "workload"))
    assert {name: stored[pk] for name, pk in ids.items()} == NAMES
    # the name a submit gives each now, so a job stored before is named as one submitted now
    assert {name: catalog_name(name) for name in NAMES} == NAMES


@pytest.mark.django_db(transaction=True)
def test_the_migration_does_not_read_the_live_catalog_module(monkeypatch):
    # A migration runs on every new database for good, so it holds what it needs: read from
    # the catalog module of the day, it breaks once that module moves or changes (issue 12
    # moves the catalog's code); the shipped catalog's names are frozen in it.
    from scheduling.core import perf_models

    def moved():
        raise ImportError("scheduling.core.perf_models.load_catalog has moved")

    with stored_before(BEFORE) as (apps, user, team):
        monkeypatch.setattr(perf_models, "load_catalog", moved)
        job = apps.get_model("cluster", "Job")
        ids = {
            name: job.objects.create(
                owner=user, team=team, name="j", workload=name, global_batch_size=8,
                min_batch_size=8, max_batch_size=8, total_iterations=10,
            ).pk
            for name in ("\uff42\uff45\uff52\uff54", "IMAGENET", "Yolov3")
        }  # fmt: skip

    from cluster.models import Job

    stored = dict(Job.objects.filter(pk__in=ids.values()).values_list("pk", "workload"))
    assert [stored[pk] for pk in ids.values()] == ["bert", "imagenet", "yolov3"]
