"""A long queue's waiting jobs cost a round as little as the plan allows: shared reasons
where a reason depends on a job's shape alone, and no per-job sort key where no job has
a priority, with the plans those shortcuts make the same as without them."""

from __future__ import annotations

import random

from scheduling.core.context import JobView
from scheduling.core.policies.base import by_priority
from scheduling.core.round import plan_round
from scheduling.core.types import Allocation, WaitCode
from tests.core.corekit import AnalyticModel, job, make_cluster, snapshot


def test_elastic_gives_blocked_jobs_of_one_shape_one_reason():
    # given two 8-GPU nodes and a queue of 60 one-GPU jobs and 20 two-GPU jobs
    cluster = make_cluster(nodes_per_switch=2, gpus_per_node=8)
    jobs = [job(f"a{i:02d}", submit=float(i), n=1) for i in range(60)]
    jobs += [job(f"b{i:02d}", submit=100.0 + i, n=2) for i in range(20)]

    # when elastic plans the round
    plan = plan_round(snapshot(cluster, jobs), policy="elastic", now=1000.0)

    # then the 16 GPUs go to the first 16 jobs and every other job waits behind them,
    # with the sentence for its GPU count: one reason object per count, not per job
    assert len(plan.allocations) == 16
    assert len(plan.waiting) == 80 - 16
    by_count: dict[int, set[int]] = {}
    for j in jobs:
        reason = plan.waiting.get(j.job_id)
        if reason is None:
            continue
        assert reason.code == WaitCode.BEHIND_IN_QUEUE
        assert reason.message == (
            "Waiting: every A100 GPU already runs an earlier job at its smallest size; "
            f"it needs {j.min_gpus}."
        )
        by_count.setdefault(j.min_gpus, set()).add(id(reason))
    assert {n: len(ids) for n, ids in by_count.items()} == {1: 1, 2: 1}


def _reference(items, job_of, keep_running_ahead):
    """``by_priority`` as a plain stable sort on its key (what it must equal)."""

    def key(item):
        j = job_of(item)
        if keep_running_ahead and j.allocation is not None:
            return (0, 0)
        return (1, -j.priority)

    return sorted(items, key=key)


def test_by_priority_equals_the_stable_sort_with_and_without_priorities():
    model = AnalyticModel("w")
    for seed in range(40):
        rng = random.Random(seed)
        views = []
        for i in range(rng.randint(0, 30)):
            j = job(f"j{i:02d}", submit=rng.uniform(0, 100))
            if rng.random() < 0.3:
                j = j.__class__(**{**_fields(j), "allocation": Allocation((f"g{i}",), 64)})
            if seed % 2 and rng.random() < 0.2:
                j = j.__class__(**{**_fields(j), "priority": rng.choice((-1, 1, 2))})
            views.append(JobView(j, "A100", model))
        rng.shuffle(views)
        for keep in (False, True):
            # running jobs first, as ``keep_running_ahead`` requires; and not, where no
            # job runs ahead of the waiting ones by rule
            items = (
                [v for v in views if v.job.allocation is not None]
                + [v for v in views if v.job.allocation is None]
                if keep
                else views
            )
            got = by_priority(iter(items), keep_running_ahead=keep)
            assert got == _reference(items, lambda v: v.job, keep)
            # and the same with a caller's own mapping to the job
            pairs = [(v.job.job_id, v) for v in items]
            got = by_priority(pairs, lambda p: p[1].job, keep_running_ahead=keep)
            assert got == _reference(pairs, lambda p: p[1].job, keep)


def _fields(j):
    return {name: getattr(j, name) for name in j.__dataclass_fields__}
