"""The hulls PowerFlow's price is computed on (``_Round.hull_of``) are each job's own
configurations' lower hull (``lower_hull(_Round.points(j))``), whatever shortcut builds
them: a waiting job's is one iteration's hull shared by jobs of one shape and scaled, a
running job's the union of two shared hulls (its own GPU count's, and the other counts'
moved by the restart). The waiting jobs' shortcut once left statistical efficiency out:
a bigger batch was free progress in the price of every job that had not started yet."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduling.core.pricing import lower_hull
from scheduling.core.round import plan_round
from scheduling.core.types import Budget
from tests.core.corekit import (
    WORKLOADS,
    Catalog,
    RoundSpy,
    job,
    make_cluster,
    random_snapshot,
    running,
    snapshot,
)

BUDGET = Budget("b", None, 0.0, 86_400.0, energy_limit_j=1e9)


def _round(jobs, **kw):
    spy = RoundSpy(**kw)
    snap = snapshot(make_cluster(1, 2, 8), jobs, Catalog(*WORKLOADS), budgets=(BUDGET,))
    plan_round(snap, policy=spy, now=0.0)
    return spy.rnd


def _assert_same_hull(rnd, j):
    hull, scale, _ = rnd.hull_of(j)
    direct = lower_hull(rnd.points(j))
    assert [tag for _, _, tag in hull] == [tag for _, _, tag in direct]
    for (c, t, _), (dc, dt, _) in zip(hull, direct, strict=True):
        assert c * scale == pytest.approx(dc, rel=1e-12)
        assert t * scale == pytest.approx(dt, rel=1e-12)


@pytest.mark.parametrize("noise_scale", [None, 64.0, 4096.0, float("inf")])
def test_a_waiting_jobs_shared_hull_counts_what_a_bigger_batch_is_worth(noise_scale):
    elastic = {
        "workload": "elastic",
        "min_gpus": 1,
        "max_gpus": 8,
        "global_batch": 64,
        "min_batch": 32,
        "max_batch": 128,
        "noise_scale": noise_scale,
    }
    rnd = _round([job("a", iters=5000.0, **elastic), job("b", iters=700.0, **elastic)])
    assert len(rnd.opts[0][2]) == (1 if noise_scale is None else 3)
    for j in (0, 1):
        _assert_same_hull(rnd, j)
    # the two jobs share one iteration's hull
    assert rnd.hull_of(0)[2] == rnd.hull_of(1)[2]
    if noise_scale == 64.0:
        # at a noise scale of the submitted batch, batch 128 makes 1.33 iterations' progress
        # at batch 64 for the time of two: never as fast as 64 on the same GPUs and clock
        hull, _, _ = rnd.hull_of(0)
        t = {tag: t for _, t, tag in rnd._unit_points(0, rnd.hull_of(0)[2])}
        assert t[(0, 2, 2)] == pytest.approx(t[(0, 2, 1)] * 2.0 / (128 / 64 * 128 / 192))


@pytest.mark.parametrize("restart_s", [0.0, 30.0, 600.0])
def test_a_running_jobs_hull_is_its_configurations_hull_with_the_restart(restart_s):
    cluster = make_cluster(1, 2, 8)
    gpus = tuple(g.gpu_id for g in cluster.gpus)
    jobs = [
        running(job("r", workload="sub", iters=900.0, min_gpus=1, max_gpus=8), gpus[:2]),
        running(job("s", workload="flat", iters=50.0, min_gpus=1, max_gpus=8), gpus[2:6]),
        job("w", workload="sub", iters=900.0, min_gpus=1, max_gpus=8),
    ]
    rnd = _round(jobs, restart_s=restart_s)
    for j in range(len(rnd.jobs)):
        _assert_same_hull(rnd, j)


@pytest.mark.parametrize("seed", range(6))
def test_every_jobs_hull_on_random_rounds(seed):
    cluster = make_cluster(2, 2, 8)
    snap = random_snapshot(seed, cluster, n_jobs=40, budgets=(BUDGET,))
    # some with gradient statistics and work done
    rng = random.Random(seed)
    snap = replace(
        snap,
        jobs=tuple(
            replace(j, noise_scale=rng.choice((None, 50.0, 900.0)), done_iters=j.total_iters / 3)
            if rng.random() < 0.6
            else j
            for j in snap.jobs
        ),
    )
    spy = RoundSpy()
    plan_round(snap, policy=spy, now=3600.0)
    rnd = spy.rnd
    assert any(rnd.running_n) and not all(rnd.running_n)
    for j in range(len(rnd.jobs)):
        _assert_same_hull(rnd, j)


@pytest.mark.parametrize("first_known", [True, False], ids=["known first", "unknown first"])
def test_jobs_of_one_shape_get_batches_by_whether_their_efficiency_is_known(first_known):
    # Options are shared by jobs of one shape within a round; whether a job's noise
    # scale is known is part of its shape: without it a job keeps its submitted batch.
    shape = {"workload": "elastic", "global_batch": 64, "min_batch": 32, "max_batch": 128}
    known = job("known", noise_scale=900.0, **shape)
    unknown = job("unknown", **shape)
    rnd = _round([known, unknown] if first_known else [unknown, known])
    batches = {jv.job.job_id: rnd.opts[j][2] for j, jv in enumerate(rnd.jobs)}
    assert batches == {"known": (32, 64, 128), "unknown": (64,)}
