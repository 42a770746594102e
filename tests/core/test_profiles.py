"""Workload profiles fitted over their jobs' measurements (``scheduling.core.profiles``)."""

from __future__ import annotations

import math
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


def _fold(profile, observations, **kw):
    return profiles.fold(profile, PRIOR, observations, workload="ncf", **kw)


def test_jobs_at_different_gpu_counts_teach_the_profile_what_neither_showed_alone():
    # given a first ncf job measured on one T4 alone: its profile keeps the prior's split,
    # and predicts four GPUs a quarter faster than they are (ncf is 1/20 of cifar10's
    # time there, and the all-reduce keeps half that level in log: NETWORK_LEVEL)
    first = _fold(None, [_measured(1)])
    assert abs(_error(first.model, 1)) < 0.01
    assert _error(first.model, 4) < -0.2

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


def test_a_profile_is_refitted_where_a_job_would_move_it_or_its_measurements_double():
    profile = _fold(None, [_measured(1, weight=100.0)])
    assert profile.fitted_weight == 100.0

    # a job at a configuration the profile knows, about as predicted (2% slower, a sixth
    # of the measurements: a move of 0.3%), short of doubling them: they join, the model
    # stands
    same = _fold(profile, [_measured(1, weight=20.0, slower=1.02)])
    assert same.model is profile.model and same.params == profile.params
    assert sum(o.weight for o in same.observations) == pytest.approx(120.0)
    assert same.fitted_weight == 100.0

    # one twice as slow there would move it by 11%: refitted
    slow = _fold(profile, [_measured(1, weight=20.0, slower=2.0)])
    assert _error(slow.model, 1) > _error(profile.model, 1) + 0.05
    assert slow.fitted_weight == pytest.approx(120.0)

    # a job at a configuration it has not measured: refitted over everything
    new = _fold(same, [_measured(4, weight=5.0)])
    assert new.params != profile.params
    assert new.fitted_weight == pytest.approx(125.0)

    # measurements that reach twice those of the last fit: refitted, and the small moves
    # the model stood through are in it
    grown = same
    while grown.model is profile.model:
        before = sum(o.weight for o in grown.observations)
        grown = _fold(grown, [_measured(1, weight=20.0, slower=1.02)])
    assert before < 200.0 <= sum(o.weight for o in grown.observations)
    assert _error(grown.model, 1) > _error(profile.model, 1) + 0.005


def test_a_job_that_would_move_one_configuration_refits_however_the_rest_weigh():
    # given a profile measured mostly on one GPU and a little on four
    profile = _fold(_fold(None, [_measured(1, weight=1000.0)]), [_measured(4, weight=10.0)])

    # a job 40% slower on four GPUs is a share of the few measurements there, not of all
    slow_at_four = _fold(profile, [_measured(4, weight=10.0, slower=1.4)])
    assert slow_at_four.model is not profile.model
    assert _error(slow_at_four.model, 4) > _error(profile.model, 4) + 0.1

    # and a job slower on one GPU and faster on four is not netted to nothing
    scaling = [_measured(1, weight=200.0, slower=1.3), _measured(4, weight=2.0, slower=0.8)]
    assert _fold(profile, scaling).model is not profile.model


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


def test_a_first_job_joins_a_measured_prior_of_its_workload_with_a_bounded_share():
    # given the catalog's own, measured, model of ncf on the T4 as the prior, and a first
    # job that reports itself 100 times faster (a live probe: a job whose timestamps made
    # it 2,800x faster than resnet50 became the workload's profile, and the next team's
    # submit was judged by it)
    fast = replace(
        _measured(1, weight=50.0), iter_time_s=TRUTH.iter_time_s(config_of(1, 1, 256.0)) / 100
    )
    taken = profiles.fold(None, TRUTH, [fast], workload="ncf")
    joined = profiles.fold(None, TRUTH, [fast], workload="ncf", measured_prior=True)
    # then without the flag it is the profile (100x); with it, it moves it by its share
    # (100 ** 0.25: 3.2x) cut to the bound on one job's move where the prior measured
    assert 1.0 + _error(taken.model, 1) == pytest.approx(0.01, rel=0.05)
    assert 1.0 / (1.0 + _error(joined.model, 1)) == pytest.approx(profiles.MAX_JOB_MOVE, rel=0.05)
    assert joined.job_scale < 1.0
    # and from there it is a profile like any other: the measured prior weighs 3 jobs' worth,
    # the job what the bound left of its share
    assert sum(o.weight for o in joined.observations) == pytest.approx(
        150.0 + 50.0 * joined.job_scale
    )


def _honest_profile(prior, jobs: int = 3):
    """A profile of ``prior``'s workload (its measured model) and ``jobs`` jobs measured as it
    predicts at 1, 2 and 4 GPUs."""
    profile = None
    for _ in range(jobs):
        honest = [_at(prior, n) for n in (1, 2, 4)]
        profile = profiles.fold(
            profile, prior, honest, workload="ncf", measured_prior=profile is None
        )
    return profile


def _at(model, n_gpus: int, *, slower: float = 1.0, weight: float = 20.0) -> Observation:
    cfg = config_of(n_gpus, 1, GLOBAL_BATCH / n_gpus)
    return Observation(
        n_gpus=n_gpus,
        n_nodes=1,
        local_batch=GLOBAL_BATCH / n_gpus,
        iter_time_s=model.iter_time_s(cfg) * slower,
        power_w=model.power_w(cfg),
        weight=weight,
    )


def _moved(before, after, n_gpus: int) -> float:
    cfg = config_of(n_gpus, 1, GLOBAL_BATCH / n_gpus)
    return after.iter_time_s(cfg) / before.iter_time_s(cfg)


@pytest.mark.parametrize("slower", [1000.0, 1e-3])
def test_one_job_far_off_moves_configurations_the_profile_measured_at_most_the_bound(slower):
    # given ncf's profile on the T4 from its catalog model and three honest jobs at 1, 2
    # and 4 GPUs
    profile = _honest_profile(TRUTH)
    bound = profiles.MAX_JOB_MOVE

    # when one job 1,000 times off there, with 1,000 measurements a configuration, is
    # folded in (its weight is capped at a quarter; 1000 ** 0.25 moved it 5.6x)
    job = [_at(TRUTH, n, slower=slower, weight=1000.0) for n in (1, 2, 4)]
    after = profiles.fold(profile, TRUTH, job, workload="ncf")

    # then each of them moves by at most the bound, and towards the job, up to it
    for n in (1, 2, 4):
        move = _moved(profile.model, after.model, n) ** (1 if slower > 1 else -1)
        assert bound / 1.1 < move <= bound * 1.001
    assert after.job_scale < 1.0


def test_a_job_first_at_a_configuration_teaches_it_but_pulls_the_others_at_most_the_bound():
    # given the same profile, measured at 1, 2 and 4 GPUs only
    profile = _honest_profile(TRUTH)

    # when one job measured only at 8 GPUs, 1,000 times slower than ncf, is folded in
    job = [_at(TRUTH, 8, slower=1000.0, weight=1000.0)]
    after = profiles.fold(profile, TRUTH, job, workload="ncf")

    # then 1, 2 and 4 GPUs, which the other jobs measured, move by at most the bound (4 GPUs
    # moved 11.9x on resnet50@A100), and 8 GPUs, which only it measured, moves further
    moves = [_moved(profile.model, after.model, n) for n in (1, 2, 4)]
    assert max(max(m, 1.0 / m) for m in moves) <= profiles.MAX_JOB_MOVE * 1.001
    assert _moved(profile.model, after.model, 8) > profiles.MAX_JOB_MOVE
    assert sorted({o.n_gpus for o in after.observations}) == [1, 2, 4, 8]


def test_a_job_within_the_bound_moves_its_profile_as_its_share_says():
    # a job 10x slower at the profile's configurations is not cut: its quarter share moves
    # the profile 10 ** 0.25 = 1.78x, as before the bound
    profile = _honest_profile(TRUTH)
    job = [_at(TRUTH, n, slower=10.0, weight=1000.0) for n in (1, 2, 4)]
    after = profiles.fold(profile, TRUTH, job, workload="ncf")
    assert after.job_scale == 1.0
    assert _moved(profile.model, after.model, 2) == pytest.approx(
        10**profiles.MAX_JOB_WEIGHT, rel=0.02
    )


@pytest.mark.parametrize("slower", [10.0, 100.0])
def test_consistent_jobs_of_a_slower_workload_move_the_profile_over_a_few_jobs(slower):
    # given ncf's catalog model as the profile's measured prior, and a workload of that
    # name that really runs ``slower`` times slower (a bigger model under the same name)
    profile, moves = None, []
    for _ in range(6):
        job = [_at(TRUTH, n, slower=slower, weight=60.0) for n in (1, 2, 4)]
        before = TRUTH if profile is None else profile.model
        profile = profiles.fold(profile, TRUTH, job, workload="ncf", measured_prior=profile is None)
        moves.append(_moved(before, profile.model, 2))

    # then no job moves it past the bound, yet consistent jobs keep moving it: each
    # job's move stays large (the jobs agree with each other, so the later ones are
    # nearer the profile and are not cut), and after three jobs the profile is more than
    # 3x slower, after six most of the way in log
    assert all(1.0 < m <= profiles.MAX_JOB_MOVE * 1.001 for m in moves)
    after3 = math.prod(moves[:3])
    after6 = math.prod(moves)
    assert after3 > 3.0
    assert math.log(after6) > 0.6 * math.log(slower)
