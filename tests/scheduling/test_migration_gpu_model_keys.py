"""GPUs registered under NVML's product name before names were mapped to model keys: the
migration (scheduling 0008) moves the GPU rows, the jobs' requested models, the workload
profiles and each job's per-model fits to the key, so what was learned is found again."""

from datetime import UTC, datetime

import pytest
from support.migrations import stored_before

BEFORE = [("scheduling", "0007_round_replan_at"), ("cluster", "0016_allocation_ended_at_index")]
T0 = datetime(2026, 11, 28, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_product_names_stored_before_move_to_their_model_keys():
    with stored_before(BEFORE) as (apps, user, team):
        node = apps.get_model("cluster", "Node").objects.create(name="n1")
        limits = {"default_power_limit_w": 700, "min_power_limit_w": 200, "max_power_limit_w": 700}
        gpu = apps.get_model("cluster", "Gpu").objects.create(
            node=node, index=0, uuid="GPU-1", model="NVIDIA H200", memory_mb=1, **limits
        )
        job = apps.get_model("cluster", "Job").objects.create(
            owner=user, team=team, name="j", workload="bert", global_batch_size=8,
            min_batch_size=8, max_batch_size=8, total_iterations=10, gpu_model="NVIDIA H200",
        )  # fmt: skip
        profile = apps.get_model("scheduling", "WorkloadProfile")
        kw = {"version": 1, "prior": "p", "params": {}, "created_at": T0}
        moved = profile.objects.create(workload="bert", gpu_model="NVIDIA H200", **kw)
        # an H100 profile under both names: the key's versions stay the profile
        kept_old = profile.objects.create(workload="bert", gpu_model="NVIDIA H100 80GB HBM3", **kw)
        profile.objects.create(workload="bert", gpu_model="H100", **kw)
        apps.get_model("scheduling", "JobSchedulingState").objects.create(
            job=job,
            observations={"NVIDIA H200": [{"w": 1}], "H200": [{"w": 2}], "A100": [{"w": 3}]},
            online_params={"NVIDIA H200": {"params": "old"}, "H200": {"params": "new"}},
        )

    from cluster.models import Gpu, Job
    from scheduling.models import JobSchedulingState, WorkloadProfile

    assert Gpu.objects.get(pk=gpu.pk).model == "H200"
    assert Job.objects.get(pk=job.pk).gpu_model == "H200"
    assert WorkloadProfile.objects.get(pk=moved.pk).gpu_model == "H200"
    assert WorkloadProfile.objects.get(pk=kept_old.pk).gpu_model == "NVIDIA H100 80GB HBM3"
    state = JobSchedulingState.objects.get(job_id=job.pk)
    assert state.observations == {"H200": [{"w": 2}, {"w": 1}], "A100": [{"w": 3}]}
    assert state.online_params == {"H200": {"params": "new"}}
