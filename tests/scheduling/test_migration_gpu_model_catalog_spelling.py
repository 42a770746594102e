"""GPU model keys stored in another case than the catalog's ("a100", registered by an agent
before registrations took the catalog's spelling): the migration (scheduling 0011) moves
the GPU rows, the jobs' requested models, the workload profiles and each job's per-model
fits to the catalog's spelling, as registrations and submits now store them.

Left as stored, a job submitted after the upgrade asked for "A100" (``gpu_model_spelling``:
the catalog's first) while the GPUs were still "a100", and waited until every agent had
registered again; the models learned on "a100" were not found after."""

from datetime import UTC, datetime

import pytest
from support.migrations import stored_before

BEFORE = [("scheduling", "0010_schedstate_unfolded_index"), ("cluster", "0028_gpu_sm_clock_bound")]
T0 = datetime(2026, 12, 7, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_gpu_model_keys_in_another_case_move_to_the_catalogs_spelling():
    with stored_before(BEFORE) as (apps, user, team):
        node = apps.get_model("cluster", "Node").objects.create(name="n1")
        limits = {"default_power_limit_w": 400, "min_power_limit_w": 100, "max_power_limit_w": 400}
        gpu = apps.get_model("cluster", "Gpu").objects.create(
            node=node, index=0, uuid="GPU-1", model="a100", memory_mb=1, **limits
        )
        job = apps.get_model("cluster", "Job").objects.create(
            owner=user, team=team, name="j", workload="bert", global_batch_size=8,
            min_batch_size=8, max_batch_size=8, total_iterations=10, gpu_model="a100",
        )  # fmt: skip
        profile = apps.get_model("scheduling", "WorkloadProfile")
        kw = {"version": 1, "prior": "p", "params": {}, "created_at": T0}
        moved = profile.objects.create(workload="bert", gpu_model="a100", **kw)
        # a resnet50 profile under both spellings: the catalog spelling's versions stay it
        kept_old = profile.objects.create(workload="resnet50", gpu_model="a100", **kw)
        profile.objects.create(workload="resnet50", gpu_model="A100", **kw)
        apps.get_model("scheduling", "JobSchedulingState").objects.create(
            job=job,
            observations={"a100": [{"w": 1}], "A100": [{"w": 2}], "V100": [{"w": 3}]},
            online_params={"a100": {"params": "old"}, "A100": {"params": "new"}},
        )

    from cluster.models import Gpu, Job
    from cluster.workloads import gpu_model_spelling
    from scheduling.models import JobSchedulingState, WorkloadProfile

    assert Gpu.objects.get(pk=gpu.pk).model == "A100"
    assert Job.objects.get(pk=job.pk).gpu_model == "A100"
    # a job submitted now asks for what the GPUs are stored as
    assert gpu_model_spelling("a100") == Gpu.objects.get(pk=gpu.pk).model
    assert WorkloadProfile.objects.get(pk=moved.pk).gpu_model == "A100"
    assert WorkloadProfile.objects.get(pk=kept_old.pk).gpu_model == "a100"
    state = JobSchedulingState.objects.get(job_id=job.pk)
    assert state.observations == {"A100": [{"w": 2}, {"w": 1}], "V100": [{"w": 3}]}
    assert state.online_params == {"A100": {"params": "new"}}


@pytest.mark.django_db(transaction=True)
def test_the_migration_does_not_read_the_live_catalog_module(monkeypatch):
    # With no perf-profile version stored (every new database), the migration read the
    # shipped catalog's GPU models from the live catalog module: once that module moves or
    # changes (issue 12 moves the catalog's code), every new database failed to migrate, as
    # scheduling 0014 did before its fix. The names it was written with are frozen in it.
    from scheduling.core import perf_models

    def moved():
        raise ImportError("scheduling.core.perf_models.load_catalog has moved")

    with stored_before(BEFORE) as (apps, user, team):
        monkeypatch.setattr(perf_models, "load_catalog", moved)
        node = apps.get_model("cluster", "Node").objects.create(name="n1")
        limits = {"default_power_limit_w": 70, "min_power_limit_w": 60, "max_power_limit_w": 70}
        gpu = apps.get_model("cluster", "Gpu").objects.create(
            node=node, index=0, uuid="GPU-1", model="t4", memory_mb=1, **limits
        )

    from cluster.models import Gpu

    assert Gpu.objects.get(pk=gpu.pk).model == "T4"
