"""Workload profiles stored before their names had a match key (scheduling 0012) get it
from the migration, so the learned spelling of "STRASSENET" is found in a profile learned
as "Stra\u00dfeNet" before the upgrade too (``cluster.workloads._learned_spelling``)."""

from datetime import UTC, datetime

import pytest
from support.migrations import stored_before

BEFORE = [("scheduling", "0011_gpu_model_catalog_spelling"), ("cluster", "0028_gpu_sm_clock_bound")]
T0 = datetime(2026, 12, 7, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_profiles_stored_before_get_their_names_match_key():
    with stored_before(BEFORE) as (apps, _user, _team):
        profile = apps.get_model("scheduling", "WorkloadProfile")
        kw = {"gpu_model": "A100", "prior": "p", "params": {}, "created_at": T0}
        sharp = profile.objects.create(workload="Stra\u00dfeNet", version=1, **kw)
        wide = profile.objects.create(workload="\uff2d\uff59\uff2e\uff45\uff54", version=1, **kw)

    from cluster.workloads import catalog_name
    from scheduling.models import WorkloadProfile

    assert WorkloadProfile.objects.get(pk=sharp.pk).workload_key == "strassenet"
    assert WorkloadProfile.objects.get(pk=wide.pk).workload_key == "mynet"
    assert catalog_name("STRASSENET", known=()) == "Stra\u00dfeNet"
    assert catalog_name("mynet", known=()) == "\uff2d\uff59\uff2e\uff45\uff54"
