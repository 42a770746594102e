"""Workload profiles fitted over their jobs' measurements (``scheduling.core.profiles``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.core import profiles
from scheduling.core.online_model import N_PARAMS, Observation, OnlinePerfModel, config_of
from scheduling.core.perf_models import load_catalog

CATALOG = load_catalog()
# ncf's time on a T4 is nearly all fixed; cifar10's, the prior, is mostly per-sample.
TRUTH = CATALOG.get("ncf", "T4")
PRIOR = CATALOG.get("cifar10", "T4")
GLOBAL_BATCH = 256.0


def _measured(n_gpus: int, *, weight: float = 20.0, slower: float = 1.0) -> Observation:
    cfg = config_of(n_gpus, 1, GLOBAL_BATCH / n_gpus)
    return Observation(
        n_gpus=n_gpus,
        n_nodes=1,
        local_batch=GLOBAL_BATCH / n_gpus,
        iter_time_s=TRUTH.iter_time_s(cfg) * slower,
        power_w=TRUTH.power_w(cfg),
        weight=weight,
    )


def _error(model, n_gpus: int) -> float:
    cfg = config_of(n_gpus, 1, GLOBAL_BATCH / n_gpus)
    return model.iter_time_s(cfg) / TRUTH.iter_time_s(cfg) - 1.0


def _fold(profile, observations):
    return profiles.fold(profile, PRIOR, observations, workload="ncf")


def test_jobs_at_different_gpu_counts_teach_the_profile_what_neither_showed_alone():
    # given a first ncf job measured on one T4 alone: its profile keeps the prior's split,
    # and predicts four GPUs five times faster than they are
    first = _fold(None, [_measured(1)])
    assert abs(_error(first.model, 1)) < 0.01
    assert _error(first.model, 4) < -0.5

    # when a second job, measured on four GPUs alone, is folded in
    second = _fold(first, [_measured(4)])

    # then the profile predicts both jobs' configurations about as measured (the prior's
    # pseudo-observations still pull the shape a little)
    assert abs(_error(second.model, 1)) < 0.03
    assert abs(_error(second.model, 4)) < 0.06
    # and it holds both jobs' measurements, pooled by configuration
    assert sorted(o.n_gpus for o in second.observations) == [1, 4]
    assert second.base is PRIOR


def test_a_job_enters_a_profile_with_a_bounded_share_of_its_measurements():
    # given a profile learned from 1,000 measurements at ncf's speed
    profile = _fold(None, [_measured(1, weight=1000.0)])

    # when a job with as many measurements, ten times slower, is folded in
    after = _fold(profile, [_measured(1, weight=1000.0, slower=10.0)])

    # then it counts as its bounded share (a quarter) of the measurements: the profile moves
    # that share of the way (in log) towards it, not half or all of it
    share = profiles.MAX_JOB_WEIGHT
    assert 1.0 + _error(after.model, 1) == pytest.approx(10**share, rel=0.02)
    assert sum(o.weight for o in after.observations) == pytest.approx(1000.0 / (1 - share))


def test_a_job_below_its_share_enters_as_measured():
    few = [_measured(1, weight=10.0)]
    assert profiles.bounded(few, 100.0, 0.25) == few
    (scaled,) = profiles.bounded([_measured(1, weight=300.0)], 100.0, 0.25)
    assert scaled.weight == pytest.approx(100.0 / 3.0)


def test_a_profile_kept_without_measurements_weighs_as_what_it_learned_from():
    # given a profile version kept as its model alone, learned from 300 measurements
    old = profiles.unpooled(_fold(None, [_measured(1)]).model, 300.0)

    # when a job with 300 measurements, twice as slow, is folded in
    after = _fold(old, [_measured(1, weight=300.0, slower=2.0)])

    # then the old model weighs as its 300 measurements, and the job as its share of all
    assert 1.0 + _error(after.model, 1) == pytest.approx(2**profiles.MAX_JOB_WEIGHT, rel=0.02)
    # and from now on the profile holds measurements like any other
    assert after.unpooled_weight == 0.0
    assert sum(o.weight for o in after.observations) == pytest.approx(400.0)


def test_a_profile_measured_at_two_per_gpu_batches_knows_the_split_and_backs_its_jobs():
    # a profile measured at one per-GPU batch does not tell the split, at any clock
    one = _fold(None, [_measured(1), replace(_measured(1), sm_clock_mhz=900)])
    assert not profiles.knows_split(one.observations)
    assert OnlinePerfModel(prior=one.model, params=[0.0] * N_PARAMS).estimated
    # two per-GPU batches do: a job starting from it is not known by a prior alone
    two = _fold(one, [_measured(4)])
    assert profiles.knows_split(two.observations)
    backed = OnlinePerfModel(prior=two.model, params=[0.0] * N_PARAMS, prior_measured=True)
    assert not backed.estimated
    assert backed.iter_time_s(config_of(4, 1, 64.0)) == two.model.iter_time_s(config_of(4, 1, 64.0))
