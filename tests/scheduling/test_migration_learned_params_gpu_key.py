"""Profiles and fits moved to the catalog's spelling of their GPU model before their params
were renamed with them (scheduling 0011, or a registration's re-keying) name the row's key
after scheduling 0013; a model estimated from another GPU model keeps its name."""

import copy
from datetime import UTC, datetime

import pytest
from support.migrations import stored_before

from scheduling.core.perf_models import load_catalog
from scheduling.workload_profiles import model_to_params

BEFORE = [("scheduling", "0012_workload_profile_key"), ("cluster", "0028_gpu_sm_clock_bound")]
T0 = datetime(2026, 12, 7, tzinfo=UTC)
CATALOG = load_catalog()


def _params(gpu_model: str) -> dict:
    params = model_to_params(CATALOG.get("bert", "A100"))
    params["model"]["gpu_model"] = gpu_model
    params["fit"] = {
        "base": copy.deepcopy(params), "params": [1.0], "observations": [], "fitted_weight": 0.5
    }  # fmt: skip
    return params


@pytest.mark.django_db(transaction=True)
def test_stored_models_name_their_rows_gpu_model_spelling():
    with stored_before(BEFORE) as (apps, user, team):
        profile = apps.get_model("scheduling", "WorkloadProfile")
        kw = {"workload": "bert", "version": 1, "prior": "p", "created_at": T0}
        moved = profile.objects.create(gpu_model="A100", params=_params("a100"), **kw)
        spaced = profile.objects.create(gpu_model="RTX9090", params=_params("rtx 9090"), **kw)
        # a model on A40 rows estimated from the A100's: another model, not a spelling
        estimated = profile.objects.create(gpu_model="A40", params=_params("A100"), **kw)
        job = apps.get_model("cluster", "Job").objects.create(
            owner=user, team=team, name="j", workload="bert", global_batch_size=8,
            min_batch_size=8, max_batch_size=8, total_iterations=10, gpu_model="A100",
        )  # fmt: skip
        prior = model_to_params(CATALOG.get("bert", "A100"))
        prior["model"]["gpu_model"] = "a100"
        apps.get_model("scheduling", "JobSchedulingState").objects.create(
            job=job,
            online_params={
                "A100": {"params": [0.5], "prior": "x", "prior_params": prior},
                "A40": {"params": [0.5], "prior": "y", "prior_params": _params("A100")},
            },
        )

    from scheduling.models import JobSchedulingState, WorkloadProfile

    for row, key in ((moved, "A100"), (spaced, "RTX9090")):
        params = WorkloadProfile.objects.get(pk=row.pk).params
        assert params["model"]["gpu_model"] == key
        assert params["fit"]["base"]["model"]["gpu_model"] == key
        # nothing else changed
        params["model"]["gpu_model"] = params["fit"]["base"]["model"]["gpu_model"] = "x"
        assert params == _params("x")
    assert WorkloadProfile.objects.get(pk=estimated.pk).params == _params("A100")
    fits = JobSchedulingState.objects.get(job_id=job.pk).online_params
    assert fits["A100"]["prior_params"]["model"]["gpu_model"] == "A100"
    assert fits["A100"]["params"] == [0.5]
    assert fits["A40"]["prior_params"] == _params("A100")
