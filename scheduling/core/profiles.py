"""Workload profiles: what the finished jobs of a workload taught about it on one GPU model,
fitted over all of their measurements (issue 12, point 3).

A profile keeps the measurements of every job folded into it, pooled by configuration
(``online_model.pooled_observations``), and its model is one fit of those measurements
from the profile's base (the first job's prior), refitted whenever a fold would matter
(``fold``): the next job of the workload starts from that model. Each job's measurements
enter with a bounded share: a job whose measurements would be more than
``max_job_weight`` of the profile's after the fold enters scaled down to exactly that
share, so one job cannot take a shared profile over.

Why the measurements and not each job's fitted parameters: a job that ran at one
configuration says nothing about how its time splits into fixed and per-sample compute,
and its fit keeps its prior's split. Moving a profile by a bounded share of each job's
parameter moves averaged those guesses, so jobs that ran at 8, 16 and 32 GPUs still
left a profile that knew none of the split: a learned ncf on T4 was given 16-32 GPUs for
every job, where it runs fastest on four and nearly as fast on one (docs/benchmarks.md,
"Workload profiles fitted over their jobs' measurements"). Pooled, their configurations
together measure it.

A profile kept before profiles held their measurements (a live database's older versions)
has only its model. It is the base of the next fold, and its predictions at that job's
configurations enter as measurements weighing what it learned from (``unpooled_weight``,
its observation count), so the job's share is bounded as for any other profile (a fit's
prior speaks for the shape only, not the level, so the base alone would bound nothing).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from scheduling.core import online_fit
from scheduling.core.online_model import FitSettings, Observation, apply_params, pooled_observations
from scheduling.core.perf_models import FittedPerfModel

# A finished job's measurements are at most this share of its profile's after it is folded
# in (``bounded``; below the cap they enter as they are).
MAX_JOB_WEIGHT = 0.25
# A fold refits the profile when the job brings a configuration the profile has not
# measured, when its measurements would move the profile's predictions at their
# configurations by more than REFIT_MOVE (in log), or when the profile's measurements have
# grown REFIT_GROWTH-fold since its last fit (``fold``); otherwise the measurements are
# kept and the model stands.
REFIT_MOVE = 0.01
REFIT_GROWTH = 2.0
# A finished job moves its profile's predictions at the configurations that the profile
# had measured before it (other jobs, or a measured prior) by at most this factor, in
# iteration time and in draw (``fold``). The weight cap alone bounds a job's share, not
# its effect: the fit is in logs, so a job e-fold off moves a measured configuration by
# about its error to the power MAX_JOB_WEIGHT (1,000x off: 5.6x), and a job that alone
# measured 8 GPUs bent the model's scaling to it and moved 4 GPUs, which three other jobs
# measured, 11.9x (docs/benchmarks.md, "Independent probes of the live service, fourth
# pass"). 2 is what the weight cap gives a job 16x off: honest jobs (and a workload whose
# real speed is several times its prior's) stay below it and are not slowed; past it a
# job's share shrinks until its effect is the bound. Configurations that only the job
# measured are not bounded: there it teaches the profile.
MAX_JOB_MOVE = 2.0
# How finely the shrunk share is searched (``_within_move``): halvings of the log of the
# share between 1 and MIN_JOB_SCALE of what the weight cap let in.
MIN_JOB_SCALE = 1e-4
MOVE_SEARCH_STEPS = 8


@dataclass(frozen=True, slots=True)
class ProfileFit:
    """A profile's fitted state: the ``model`` the next job starts from, and what it is
    fitted from (module docstring)."""

    base: FittedPerfModel
    observations: tuple[Observation, ...]  # pooled by configuration, each job's share bounded
    params: tuple[float, ...]  # the fit's moves from ``base``
    model: FittedPerfModel
    # what a profile without measurements learned from (module docstring); 0 otherwise
    unpooled_weight: float = 0.0
    # the measurements' weight when ``params`` were fitted (0: unknown, refit at the next fold)
    fitted_weight: float = 0.0
    # the share of its capped weight that the last folded job kept under ``MAX_JOB_MOVE``
    # (1: not shrunk); not stored, for the caller to log
    job_scale: float = 1.0


def unpooled(model: FittedPerfModel, n_observations: float) -> ProfileFit:
    """A profile kept as its model alone, learned from ``n_observations`` measurements."""
    return ProfileFit(model, (), (), model, unpooled_weight=max(n_observations, 1.0))


def _as_measured(model: FittedPerfModel, at: Sequence[Observation], weight: float) -> list:
    """``model``'s predictions at the configurations of ``at``, ``weight`` measurements in
    all, shared as ``at``'s own weights are."""
    total = sum(o.weight for o in at)
    return [
        replace(
            o,
            iter_time_s=model.iter_time_s(o.config()),
            power_w=model.power_w(o.config()),
            weight=weight * o.weight / total,
            log_t_ss=0.0,
            log_p_ss=0.0,
        )
        for o in at
    ]


def _time_weight(observations: Sequence[Observation]) -> float:
    """The measurements behind ``observations``: their iteration times' weight (their
    draws' where none has a time)."""
    t = sum(o.weight for o in observations if o.iter_time_s is not None)
    return t if t > 0 else sum(o.weight for o in observations if o.power_w is not None)


def bounded(
    observations: Sequence[Observation], held: float, max_job_weight: float
) -> list[Observation]:
    """A job's ``observations`` scaled so that they are at most ``max_job_weight`` of
    the measurements after they join ``held`` measurements (unchanged when they are less)."""
    n_job = _time_weight(observations)
    if n_job <= 0:
        return list(observations)
    cap = max_job_weight / (1.0 - max_job_weight) * held
    if n_job <= cap:
        return list(observations)
    return _scaled(observations, cap / n_job)


def _scaled(observations: Sequence[Observation], f: float) -> list[Observation]:
    """``observations`` weighing ``f`` times as much."""
    return [
        replace(o, weight=o.weight * f, log_t_ss=o.log_t_ss * f, log_p_ss=o.log_p_ss * f)
        for o in observations
    ]


def _largest_shift(
    before: FittedPerfModel, after: FittedPerfModel, held: Sequence[Observation]
) -> float:
    """How far (in log) ``after`` predicts from ``before`` at the configurations of
    ``held``: the largest, over them, of the iteration time where they hold one and of the
    draw where they hold one."""
    out = 0.0
    for o in held:
        cfg = o.config()
        t0, p0 = before.time_and_power(cfg)
        t1, p1 = after.time_and_power(cfg)
        if o.iter_time_s is not None:
            out = max(out, abs(math.log(t1 / t0)))
        if o.power_w is not None:
            out = max(out, abs(math.log(p1 / p0)))
    return out


def _move(model: FittedPerfModel, joining: Sequence[Observation], pooled: Sequence[Observation]):
    """Roughly how far (in log) ``joining`` would move ``model``'s predictions at its
    configurations once among ``pooled``: at each configuration, its weighted log error
    times its share of the measurements there; the largest, of iteration time and draw
    (configurations are not netted against each other: a job faster at one GPU count and
    slower at another teaches how the workload scales)."""
    held: dict[tuple, list[float]] = {}
    for o in pooled:
        w = held.setdefault(o.key, [0.0, 0.0])
        w[0] += o.weight if o.iter_time_s is not None else 0.0
        w[1] += o.weight if o.power_w is not None else 0.0
    moved: dict[tuple, list[float]] = {}
    for o in joining:
        t, p = model.time_and_power(o.config())
        e = moved.setdefault(o.key, [0.0, 0.0])
        e[0] += o.weight * math.log(o.iter_time_s / t) if o.iter_time_s is not None else 0.0
        e[1] += o.weight * math.log(o.power_w / p) if o.power_w is not None else 0.0
    shares = (
        abs(e) / w
        for key, errs in moved.items()
        for e, w in zip(errs, held[key], strict=True)
        if w > 0
    )
    return max(shares, default=0.0)


def knows_split(observations: Sequence[Observation]) -> bool:
    """True where ``observations`` hold iteration times at two per-GPU batches or more: they
    tell how the compute time splits into fixed and per-sample parts, which measurements at
    one per-GPU batch cannot (a job's upgrade to more GPUs is a smaller per-GPU batch). A
    job whose prior is such a profile is not a prior alone (``OnlinePerfModel
    .prior_measured``): a budget policy prices its upgrades before it reports, where a
    profile taught at one per-GPU batch kept the first prior's split, and priced upgrades
    as cheap and fast that were neither (docs/benchmarks.md, "Trusting a workload's own
    profile before a job is observed")."""
    return batches_tell_split(o.local_batch for o in observations if o.iter_time_s is not None)


def batches_tell_split(timed_batches: Iterable[float]) -> bool:
    """``knows_split`` on the per-GPU batches of the measured iteration times alone."""
    return len(set(timed_batches)) >= 2


def fold(
    profile: ProfileFit | None,
    prior: FittedPerfModel,
    observations: Sequence[Observation],
    *,
    workload: str,
    max_job_weight: float = MAX_JOB_WEIGHT,
    settings: FitSettings = FitSettings(),  # noqa: B008 - frozen, never mutated
    job_params: Sequence[float] | None = None,
    refit_growth: float = REFIT_GROWTH,
    refit_move: float = REFIT_MOVE,
    measured_prior: bool = False,
    max_job_move: float = MAX_JOB_MOVE,
) -> ProfileFit:
    """``profile`` with a finished job's ``observations`` folded in (a new profile from
    the job's ``prior`` where there is none). ``job_params``: the job's own fit from
    ``prior`` over the same observations with ``settings``, where the caller has it (the
    first fold is that fit, so it is not repeated). Observations must have passed
    ``online_model.refusal_reason``.

    The profile is refitted when the job measured a configuration it had not, when its
    measurements would move the profile's prediction at one of their configurations by
    more than ``refit_move`` (in log, ``_move``), or when the measurements reach
    ``refit_growth`` times their weight at the last fit; else they join and the model
    stands. A refit moves the profile's predictions at the configurations it had measured
    by at most ``max_job_move`` (a factor, ``_within_move``): past it the job's share
    shrinks, and ``job_scale`` on the result says by how much. A workload's thousandth
    job, measured where its profile was and as predicted, moves the fit by a thousandth,
    and a refit per job was half of a learned simulation's fitting (docs/benchmarks.md,
    "The simulator on philly_week, learned").

    ``measured_prior``: the prior is a measured model of this very workload on this GPU
    (the catalog's). The first job then joins it as it would join a profile, with a
    bounded share (the prior weighs ``(1 - max_job_weight) / max_job_weight`` times the
    job's measurements): taken whole, one job's report (a live probe's, 2,800x faster than
    resnet50 on the A100) became the workload's profile and the next team's submit was
    judged by it."""
    if profile is None and measured_prior:
        n_job = _time_weight(observations)
        if n_job > 0:
            profile = unpooled(prior, n_job * (1.0 - max_job_weight) / max_job_weight)
    if profile is None:
        pooled = tuple(pooled_observations(observations, prior.gpu.gpus_per_node))
        if job_params is None:
            job_params = online_fit.fit_params(prior, pooled, settings=settings)
        params, base, scale = tuple(job_params), prior, 1.0
    else:
        base, held = profile.base, profile.observations
        new_config = not {o.key for o in observations} <= {o.key for o in held}
        if profile.unpooled_weight > 0:
            held = (*held, *_as_measured(profile.model, observations, profile.unpooled_weight))
        joining = bounded(observations, _time_weight(held), max_job_weight)
        pooled = tuple(pooled_observations([*held, *joining], base.gpu.gpus_per_node))
        if not (
            new_config
            or _time_weight(pooled) >= refit_growth * profile.fitted_weight  # 0: unpooled
            or not _move(profile.model, joining, pooled) <= refit_move  # NaN: refit
        ):
            # Configurations the profile has measured, and measurements that would
            # barely move it: they join, the model stands (as a job's does between refits).
            return replace(profile, observations=pooled)
        pooled, params, scale = _within_move(
            profile.model,
            base,
            held,
            joining,
            workload=workload,
            settings=settings,
            start=profile.params or None,
            max_job_move=max_job_move,
        )
    model = apply_params(base, params, workload=workload)
    return ProfileFit(
        base, pooled, params, model, fitted_weight=_time_weight(pooled), job_scale=scale
    )


def _within_move(
    before: FittedPerfModel,
    base: FittedPerfModel,
    held: Sequence[Observation],
    joining: Sequence[Observation],
    *,
    workload: str,
    settings: FitSettings,
    start: Sequence[float] | None,
    max_job_move: float,
) -> tuple[tuple[Observation, ...], tuple[float, ...], float]:
    """The refit of ``held`` with ``joining`` (a job's measurements, already within their
    weight cap) at the largest share of them, ``scale``, that moves ``before``'s
    predictions at ``held``'s configurations by at most ``max_job_move`` (a factor):
    (pooled measurements, params, scale). The share is searched by halving its log
    between 1 and ``MIN_JOB_SCALE`` (the move grows with it); a job that moves them too
    far even at the smallest enters at that. Only a job past the bound costs more than
    one fit."""
    per_node = base.gpu.gpus_per_node
    limit = math.log(max_job_move)

    def refit(scale: float) -> tuple[tuple[Observation, ...], tuple[float, ...], bool]:
        pooled = tuple(pooled_observations([*held, *_scaled(joining, scale)], per_node))
        params = tuple(online_fit.fit_params(base, pooled, settings=settings, start=start))
        after = apply_params(base, params, workload=workload)
        shift = _largest_shift(before, after, held)
        return pooled, params, shift <= limit  # NaN: past the bound

    pooled, params, within = refit(1.0)
    if within:
        return pooled, params, 1.0
    lo, hi = math.log(MIN_JOB_SCALE), 0.0  # hi is past the bound
    best = None
    for _ in range(MOVE_SEARCH_STEPS):
        mid = 0.5 * (lo + hi)
        pooled, params, within = refit(math.exp(mid))
        if within:
            lo, best = mid, (pooled, params, math.exp(mid))
        else:
            hi = mid
    if best is None:
        pooled, params, _ = refit(MIN_JOB_SCALE)
        best = (pooled, params, MIN_JOB_SCALE)
    return best
