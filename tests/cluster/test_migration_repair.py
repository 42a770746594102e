"""Rows stored while NaN and Infinity were accepted are repaired by the migrations that add
the CHECKs refusing them (cluster 0004 and 0005), not dropped (issue 16)."""

import math
from datetime import UTC, datetime

import pytest
from support.migrations import stored_before

BEFORE = [("cluster", "0003_agent_node_spool_health")]


@pytest.mark.django_db(transaction=True)
def test_non_finite_rows_are_repaired_and_kept():
    with stored_before(BEFORE) as (apps, user, team):
        job = apps.get_model("cluster", "Job").objects.create(
            owner=user,
            team=team,
            name="j",
            workload="bert",
            global_batch_size=8,
            min_batch_size=8,
            max_batch_size=8,
            total_iterations=10,
            base_lr=math.nan,
            max_lr=math.inf,
            slowdown_tolerance=math.nan,
            completed_iterations=math.nan,
        )
        budget = apps.get_model("cluster", "Budget").objects.create(
            team=team,
            period_start=datetime(2026, 1, 1, tzinfo=UTC),
            period_end=datetime(2026, 2, 1, tzinfo=UTC),
            energy_limit_kwh=math.inf,
            carbon_limit_kg=math.nan,
        )

    from cluster.models import Budget, Job

    job = Job.objects.get(pk=job.pk)
    assert (job.base_lr, job.max_lr) == (None, None)
    assert (job.slowdown_tolerance, job.completed_iterations) == (0.1, 0.0)
    budget = Budget.objects.get(pk=budget.pk)
    assert (budget.energy_limit_kwh, budget.carbon_limit_kg) == (1e9, 1e9)
