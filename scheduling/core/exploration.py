"""Just-in-time exploration of power limits with a bounded cost (as Zeus profiles a new job).

A new job starts at its default (highest) power limit. After each measured step its online
model (``online_model``) predicts the energy per iteration at every limit the GPU accepts,
and the job next tries, in this order:

1. the limit the model now predicts best, if it is not measured yet;
2. the untried grid neighbours (one 25 W step either side) of the limit with the least
   *known* energy, where known means measured for a tried limit and predicted elsewhere:
   a local search that the measurements steer, so a model that ranks a flat valley wrongly
   is corrected by what the job shows;
3. the untried neighbours of the model's best.

A measured minimum is reached when the limit of least known energy and the model's best are
measured with both neighbours. Measured energy curves are flat and noisy near their optimum
(Zeus' sweeps move by a few per cent from one 25 W step to the next, not always in one
direction), so with ``fill_budget`` (what rounds use) the job then goes on measuring, while the
bound allows, the untried limit the model ranks best among those whose cost still fits. It
stops when every limit is measured, or when no step fits in the bound: the time spent
exploring may not pass ``budget_frac`` of the job's predicted completion time. The cost of a
step is the time the job loses by running slower than the fastest limit measured so far.
The limit then chosen (``chosen_limit``) is the one of least known energy.

Measurements are noisy (iteration times and NVML draws move by a few per cent from one
report to the next, as much as neighbouring 25 W steps differ near the optimum), so what a
round takes as a tried limit's energy is noise-aware (``estimate``, ``KNOWN_ENERGY``):

* where there is another limit to try, the job first measures its fastest limit (the
  default) three times in all: that costs nothing against the bound, and the spread of
  repeated measurements of a limit (pooled over all limits measured more than once;
  ``online_model`` keeps each configuration's sum of squared log deviations) is the
  measurement noise;
* a tried limit's energy is the model's fitted curve (one fit over every measurement, each
  configuration weighted by its count) plus the limit's own mean deviation from the curve,
  shrunk by ``misfit / (misfit + noise of that mean)``: exact measurements (Zeus' sweeps)
  are taken as measured, noisy ones where the curve fits (the simulator's truth has the
  curve's form) lean on the curve;
* the curve is fitted to the same noisy measurements, so where an estimate leans on it,
  it carries the curve's own error there: the noise of the limit's mean times its leverage
  in a quadratic in the limit over the limits measured (``_leverage``: the curve's local
  shape, a level, a slope and a bend), largest at the edge of what was measured. Without
  it, an estimate that leaned on a curve that fits looked exact and the search stopped
  before the optimum was decided (measured on Zeus' sweeps with noise: docs/benchmarks.md,
  "Exploration: the curve's own error");
* where the search would stop, it goes on while the bound allows until the optimum is
  decided: no limit more than one 25 W step from the limit of least estimated energy may
  still draw less at ``CONFIDENCE_Z`` standard errors (a tried limit by its estimate's
  variance, an untried one by the curve's misfit); an undecided candidate is measured, or
  measured again, the least sure first (``_decide``; at most ``MAX_PROBES_PER_LIMIT``
  probes of one limit). A step's cost is known only once it ran (the model, hence the time
  lost and the predicted JCT, move with what it measured), so a step is taken only while
  its predicted cost and ``COST_MARGIN`` more fit the bound.

``next_step`` and ``chosen_limit`` are pure functions of a model and what was tried.
``explore_round`` is the round's hook (``round.plan_round`` calls it between the policy's
allocation and placement, only where the snapshot turns exploration on, i.e. the jobs'
models are learned, and the policy ``explores``): it keeps one JSON-safe record per job in
the snapshot/plan (``Snapshot.exploration`` -> ``Plan.exploration``), overrides the power
limit of a new job's grant while it explores, and for an elastic job ends with one probe at
half its GPU count if the bound still allows. What a record holds is in ``new_record``.

The batch probe (``BATCH_PROBE``, off by default; issue 12 points 2 and 4): a job seen at
one per-GPU batch has a time model that is a guess at every other batch (docs/benchmarks.md,
"A batch probe among a job's first five observations"). A job that may change its batch
(its statistical efficiency known, its range allowing twice its batch ``b0``) and whose
model has not measured two per-GPU batches runs one round at ``2 b0`` on the same GPUs at
the default limit, once its limit search reached its measured minimum and before the fill
stage and the probe of another GPU count. Its cost is the useful samples it loses
(``_remaining_s`` counts statistical efficiency), taken only with ``BATCH_COST_MARGIN``
to spare in the bound; the job then goes back to ``b0`` while it explores. A job that ran
the probe and made no progress (the batch did not fit in memory, say) loses the round,
and the batch is marked not runnable (``other_batch``): the hook gives it ``b0`` instead
(per GPU: on more GPUs, a grant at the probe's per-GPU batch or more is scaled down).
No progress is judged only after ``BATCH_PROBE_WAIT_S`` at the probe (live, a job restarts
at a new batch and reports seconds later; rounds may be 10 s apart): until then the probe
goes on.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from scheduling.core.perf_models import unset_tops
from scheduling.core.types import GpuConfig, Grant, PerfModel, PolicyDecision

LIMIT_STEP_W = 25.0  # Zeus' sweeps step the limit by 25 W
DEFAULT_BUDGET_FRAC = 0.03  # of the job's predicted completion time
# What a round takes for the energy of a tried limit: "noise-aware" (``estimate``), the
# fitted curve plus the limit's own measured deviation from it, shrunk by how noisy the
# measurements are against how far the curve misses; "model", the job's model there when
# the probe ended (its fitted curve plus most of what the probe measured); "fitted", the
# model's fitted curve now, pooled over every probe (noise in one probe is averaged out).
KNOWN_ENERGY = "noise-aware"
# A difference between two limits' energies counts once it passes this many standard
# errors (one-sided 95 %); below it, both stay candidates for the optimum.
CONFIDENCE_Z = 1.645
# The measurement noise is estimated from repeated measurements of one limit; a job
# repeats its fastest limit (no cost against the bound) until this many degrees of freedom.
NOISE_DOF = 2
# No limit is probed more often than this (a limit that costs nothing, the fastest, could
# otherwise be repeated without end).
MAX_PROBES_PER_LIMIT = 6
# With ``fill_budget``, limits predicted to draw more than this share above the least energy
# known are not worth a probe.
FILL_MARGIN = float("inf")
# A step is taken only if its predicted cost, this share more, still fits the bound.
COST_MARGIN = 0.1
# Terms of the polynomial in the limit that stands in for the curve's local shape (level,
# slope, bend) in the curve's own error at a limit (``_leverage``); 0: the curve taken as
# exact, as before that error was counted.
CURVE_PARAMS = 3
# The batch probe (module docstring, "The batch probe"): one round at twice the job's
# global batch, after the limit search and before its fill stage, for a job that may
# change its batch. Off unless set (docs/benchmarks.md, "The batch probe, built").
BATCH_PROBE = False
# The probe's predicted cost is the model's prediction at a batch it never measured (what
# the probe is for), so it is taken only if that cost, this share more, fits the bound.
BATCH_COST_MARGIN = 1.0
# A batch probe that shows no progress is judged (the batch marked not runnable) only once
# it has run this long: live, a job restarts at a new batch (the agent starts it with
# ``WATTFLOW_BATCH_SIZE``) and its first reports come seconds later, while a round may come
# every 10 s. Until then, where the policy keeps its GPU count, the probe goes on.
BATCH_PROBE_WAIT_S = 120.0


def fitted_energy_j(model: PerfModel, cfg: GpuConfig, limit_w: float) -> float:
    """Energy per iteration on the model's fitted curve alone (an online model's equations
    without its per-configuration corrections; any other model as it predicts)."""
    at = replace(cfg, power_limit_w=limit_w)
    fitted = getattr(model, "fitted_energy_per_iter_j", None)
    return fitted(at) if fitted is not None else model.energy_per_iter_j(at)


@dataclass(frozen=True, slots=True)
class Estimate:
    """What the measurements say about the energy per iteration of each tried limit.

    ``known_j``: the estimate at each tried limit; ``log_var``: its variance (in log
    space; missing where the noise is not known yet); ``counts``: measurements behind each;
    ``noise_var``: variance of the log energy of one measurement (time and draw), pooled
    over the limits measured more than once (None: not enough repeats yet, see
    ``NOISE_DOF``); ``misfit_var``: how far, beyond the noise, the measured limits sit
    from the model's fitted curve (the variance of the curve's error at a limit)."""

    known_j: dict[float, float]
    log_var: dict[float, float] = field(default_factory=dict)
    counts: dict[float, float] = field(default_factory=dict)
    noise_var: float | None = None
    misfit_var: float = 0.0


def estimate(model: PerfModel, cfg: GpuConfig, tried: Collection[float]) -> Estimate | None:
    """Noise-aware energies of the ``tried`` limits (None: the model keeps no measurements,
    e.g. a catalog model).

    The noise of one measurement is the pooled within-limit variance of the logs of the
    repeated measurements (time and draw apart; a limit measured once adds nothing). The
    fitted curve's misfit at a limit is what the limits' mean deviations from the curve
    show beyond that noise: ``mean(r^2 - v (1 - h))``, with ``r`` a limit's mean log
    deviation, ``v`` the noise of its mean and ``h`` its leverage (``_leverage``: the part
    of its noise the curve, fitted to the same measurements, took; the misfit is taken as
    not absorbed by the curve). A limit's estimate is then the curve plus its deviation
    shrunk by ``misfit / (misfit + v)``: where measurements are exact (``v = 0``) the
    measurement itself, where they are noisy and the curve fits, the curve, which pools
    every limit's measurements. Its variance is the shrunk deviation's plus the curve's
    own error there, ``h v``. Until the noise is known, a limit's estimate is the model's
    prediction there (its curve plus most of what was measured)."""
    measured_at = getattr(model, "measured", None)
    if measured_at is None:
        return None
    stats = {}
    for w in tried:
        m = measured_at(replace(cfg, power_limit_w=w))
        if m is not None:
            stats[w] = m
    if not stats:
        return None
    n = max(cfg.n_gpus, 1)
    dof_t = sum(max(m.w_t - 1.0, 0.0) for m in stats.values())
    dof_p = sum(max(m.w_p - 1.0, 0.0) for m in stats.values())
    var_t = sum(m.ss_t for m in stats.values()) / dof_t if dof_t > 0 else None
    var_p = sum(m.ss_p for m in stats.values()) / dof_p if dof_p > 0 else None
    counts = {w: min(m.w_t, m.w_p) for w, m in stats.items()}
    if max(dof_t, dof_p) < NOISE_DOF:
        known = {w: predicted_energy_j(model, cfg, w) for w in stats}
        return Estimate(known_j=known, counts=counts)
    var_t = var_p if var_t is None else var_t
    var_p = var_t if var_p is None else var_p
    assert var_t is not None and var_p is not None
    res, v = {}, {}
    for w, m in stats.items():
        measured = math.log(n) + m.log_t + m.log_p
        res[w] = measured - math.log(fitted_energy_j(model, cfg, w))
        v[w] = var_t / m.w_t + var_p / m.w_p
    lev = _leverage(v)
    # A deviation from a curve fitted to the same measurements has the variance of their
    # noise less the part the curve took (its leverage); what is left beyond is misfit.
    misfit = max(sum(res[w] ** 2 - v[w] * (1.0 - lev.get(w, 0.0)) for w in stats) / len(stats), 0.0)
    known, log_var = {}, {}
    for w in stats:
        total = misfit + v[w]
        shrink = misfit / total if total > 0 else 1.0
        known[w] = fitted_energy_j(model, cfg, w) * math.exp(shrink * res[w])
        # The curve's own error at ``w`` (``_leverage``), plus the shrunk deviation's. It
        # is added whole, also where the estimate leans on the measurement (strictly,
        # ``lev * v * (1 - shrink**2)``): the misfit itself is estimated from a handful
        # of limits, and on Zeus' sweeps with 5 % noise the whole term settled 86 % of
        # them within 25 W against 84 % (three seeds; docs/benchmarks.md, "Exploration:
        # the curve's own error").
        curve_var = lev.get(w, 0.0) * v[w]
        log_var[w] = curve_var + (misfit * v[w] / total if total > 0 else 0.0)
    return Estimate(
        known_j=known,
        log_var=log_var,
        counts=counts,
        noise_var=var_t + var_p,
        misfit_var=misfit,
    )


def _leverage(var: Mapping[float, float]) -> dict[float, float]:
    """How much of its own noise the fitted curve takes from each measured limit: the
    leverage of the limit in a weighted polynomial of ``CURVE_PARAMS`` terms in the limit
    (3: a level, a slope and a bend) over the limits measured, weighted by the inverse
    noise ``var``. The curve is fitted to every measurement, so where the estimate leans
    on it the measurements' noise reaches it; the polynomial stands in for the curve's
    local shape (the online model's own equations have more parameters, most of them held
    by its prior), and a limit at the edge of those measured, or measured more often, moves
    it more. ``var x leverage`` is then the variance of the curve at the limit: without it
    the estimate of a limit that leans on the curve looked exact, and a search over noisy
    measurements stopped before the optimum was decided.

    {} (the curve taken as exact, as before this term) with exact measurements, or with
    no more limits than the polynomial has terms, where it would pass through every one
    (leverage 1): that early the search is still measuring the model's best and its
    neighbours, which it does whatever the variances; not measured otherwise."""
    limits = sorted(var)
    if CURVE_PARAMS <= 0 or len(limits) <= CURVE_PARAMS or min(var[w] for w in limits) <= 0.0:
        return {}
    lo, hi = limits[0], limits[-1]
    x = np.array([2.0 * (w - lo) / (hi - lo) - 1.0 for w in limits])
    X = np.column_stack([x**k for k in range(CURVE_PARAMS)])
    W = np.array([1.0 / var[w] for w in limits])
    try:
        inv = np.linalg.inv(X.T @ (W[:, None] * X))
    except np.linalg.LinAlgError:
        return {}
    lev = np.clip(np.einsum("ij,jk,ik->i", X, inv, X) * W, 0.0, 1.0)
    return {w: float(h) for w, h in zip(limits, lev, strict=True)}


def limit_grid(low_w: float, high_w: float, step_w: float = LIMIT_STEP_W) -> tuple[float, ...]:
    """Power limits from ``high_w`` down to ``low_w`` in ``step_w`` steps (both ends in)."""
    if not (0 < low_w <= high_w and step_w > 0):
        raise ValueError("need 0 < low_w <= high_w and a positive step")
    out = []
    w = high_w
    while w > low_w + 1e-9:
        out.append(w)
        w -= step_w
    out.append(low_w)
    return tuple(sorted(set(out)))


def predicted_energy_j(model: PerfModel, cfg: GpuConfig, limit_w: float) -> float:
    return model.energy_per_iter_j(replace(cfg, power_limit_w=limit_w))


def best_limit(model: PerfModel, cfg: GpuConfig, limits: Sequence[float]) -> float:
    """The limit with the least predicted energy per iteration (ties: the higher, faster)."""
    return min(limits, key=lambda w: (predicted_energy_j(model, cfg, w), -w))


def _known(
    model: PerfModel, cfg: GpuConfig, measured: Mapping[float, float] | None
):  # -> Callable[[float], float]
    def energy(w: float) -> float:
        if measured is not None and w in measured:
            return measured[w]
        return predicted_energy_j(model, cfg, w)

    return energy


def chosen_limit(
    model: PerfModel,
    cfg: GpuConfig,
    limits: Sequence[float],
    tried: Collection[float],
    measured: Mapping[float, float] | None = None,
) -> float:
    """The limit of least known energy: measured where ``measured`` has it, else predicted
    (ties: the higher, faster limit). Without measurements, the model's best."""
    energy = _known(model, cfg, measured)
    pool = set(limits) if measured is None else set(limits) | set(tried)
    return min(pool, key=lambda w: (energy(w), -w))


def _neighbours(grid: Sequence[float], w: float) -> list[float]:
    i = grid.index(w)
    return [grid[j] for j in (i - 1, i + 1) if 0 <= j < len(grid)]


@dataclass(frozen=True, slots=True)
class Step:
    limit_w: float | None  # the limit to try next; None: exploration is over
    best_w: float  # the limit the model now predicts best
    step_cost_s: float  # predicted seconds lost by trying ``limit_w`` for ``step_s``
    reason: str


def next_step(
    model: PerfModel,
    cfg: GpuConfig,
    limits: Sequence[float],
    tried: Collection[float],
    *,
    step_s: float,
    spent_s: float,
    predicted_jct_s: float,
    budget_frac: float = DEFAULT_BUDGET_FRAC,
    measured: Mapping[float, float] | None = None,
    fill_budget: bool = False,
    fill_margin: float = FILL_MARGIN,
    estimate: Estimate | None = None,
    probes: Mapping[float, int] | None = None,
    confidence_z: float = CONFIDENCE_Z,
) -> Step:
    """What to try next (see the module docstring). A step runs ``step_s`` seconds at the
    limit it tries; ``spent_s`` is the cost of the steps so far; ``measured`` the energy
    per iteration observed at tried limits (None: the model's predictions there, which
    an online model keeps close to what it observed).

    With an ``estimate`` (noise-aware energies of the tried limits, ``estimate``) the
    search first repeats its fastest limit, at no cost against the bound, until the
    measurement noise is known, takes ``estimate.known_j`` as what was measured, and where
    the search would stop, goes on while the bound allows until the optimum is decided
    within one 25 W step (``_decide``). ``probes``: how many probes each tried limit had
    (a limit is probed at most ``MAX_PROBES_PER_LIMIT`` times)."""
    grid = sorted(limits)
    best = best_limit(model, cfg, grid)
    if measured is None and estimate is not None:
        measured = estimate.known_j
    known = [w for w in grid if w in tried] or [grid[-1]]
    fastest_known_s = min(model.iter_time_s(replace(cfg, power_limit_w=w)) for w in known)
    room_s = _room_s(budget_frac * predicted_jct_s, spent_s)
    probes = probes or {}

    def cost(w: float) -> float:
        at_s = model.iter_time_s(replace(cfg, power_limit_w=w))
        return step_s * max(1.0 - fastest_known_s / at_s, 0.0) if at_s > 0 else 0.0

    step = _search(model, cfg, grid, tried, best, measured, cost, room_s, fill_budget, fill_margin)
    if (
        step.limit_w is not None
        and estimate is not None
        and estimate.noise_var is None
        and estimate.counts
    ):
        # There is more to measure and the noise is not known yet: measure the fastest
        # limit again first (no time lost against the bound).
        fastest = min(
            estimate.counts,
            key=lambda w: (model.iter_time_s(replace(cfg, power_limit_w=w)), -w),
        )
        if probes.get(fastest, 1) <= NOISE_DOF and cost(fastest) <= room_s:
            return Step(fastest, best, cost(fastest), "a repeat to estimate the measurement noise")
    if step.limit_w is not None or estimate is None or estimate.noise_var is None:
        return step
    return _decide(model, cfg, grid, best, estimate, cost, room_s, probes, confidence_z, step)


def _room_s(budget_s: float, spent_s: float) -> float:
    """The most a step's predicted cost may be: what the bound has left, less
    ``COST_MARGIN`` of the step for the part of its cost known only once it ran (the job's
    model, hence the time it lost and its predicted JCT, move with what it measured)."""
    return (budget_s - spent_s) / (1.0 + COST_MARGIN)


def _search(
    model, cfg, grid, tried, best, measured, cost, room_s, fill_budget, fill_margin
) -> Step:
    """The search of the module docstring: the model's best, then a local search, then
    (``fill_budget``) the untried limit the model ranks best among those that fit."""
    energy = _known(model, cfg, measured)
    if best not in tried:
        target, why = best, "the model predicts it saves energy"
    else:
        anchor = min((w for w in grid if w in tried), key=lambda w: (energy(w), -w))
        around = [w for w in _neighbours(grid, anchor) if w not in tried]
        why = "a neighbour of the least energy measured"
        if not around:
            around = [w for w in _neighbours(grid, best) if w not in tried]
            why = "a neighbour of the predicted best"
        if not around and fill_budget:
            # A measured minimum; measured energy curves are flat and noisy near their
            # optimum, so while the bound allows, measure the untried limit the model
            # ranks best among those that still fit.
            untried = [w for w in grid if w not in tried]
            if not untried:
                return Step(None, best, 0.0, "every limit is measured")
            # Only limits that could plausibly be the optimum: predicted within
            # ``fill_margin`` of the least energy known (the others cost energy to try).
            floor_j = min(energy(w) for w in grid if w in tried)
            untried = [
                w
                for w in untried
                if predicted_energy_j(model, cfg, w) <= (1 + fill_margin) * floor_j
            ]
            if not untried:
                return Step(None, best, 0.0, "no other limit is predicted near the least energy")
            fits = [w for w in untried if cost(w) <= room_s]
            if not fits:
                cheapest = min(cost(w) for w in untried)
                return Step(None, best, cheapest, "no other limit fits in the exploration budget")
            w = min(fits, key=lambda w: (predicted_energy_j(model, cfg, w), -w))
            return Step(w, best, cost(w), "the budget allows another limit")
        if not around:
            return Step(None, best, 0.0, "a measured minimum: its neighbours are measured")
        target = min(around, key=lambda w: (predicted_energy_j(model, cfg, w), -w))
    cost_s = cost(target)
    if cost_s > room_s:
        return Step(None, best, cost_s, "trying it would exceed the exploration budget")
    return Step(target, best, cost_s, why)


def contenders(
    model: PerfModel,
    cfg: GpuConfig,
    limits: Sequence[float],
    est: Estimate,
    *,
    confidence_z: float = CONFIDENCE_Z,
) -> tuple[float, dict[float, float]]:
    """(the limit of least estimated energy, every other limit that may still draw less
    at confidence ``confidence_z`` -> the variance of its estimate). A tried limit is
    compared by its estimate and variance; an untried one by the model's fitted curve,
    whose error at a limit is ``est.misfit_var``."""
    best = min(est.known_j, key=lambda w: (est.known_j[w], -w))
    best_log = math.log(est.known_j[best])
    best_var = est.log_var.get(best, 0.0)
    out = {}
    for w in limits:
        if w == best:
            continue
        if w in est.known_j:
            gap, var = math.log(est.known_j[w]) - best_log, est.log_var.get(w, 0.0)
        else:
            gap, var = math.log(fitted_energy_j(model, cfg, w)) - best_log, est.misfit_var
        if gap < confidence_z * math.sqrt(var + best_var):
            out[w] = var
    return best, out


def _decide(model, cfg, grid, best_predicted, est, cost, room_s, probes, z, stop) -> Step:
    """Where the search stops: go on until no limit more than one 25 W step from the
    limit of least estimated energy may still draw less (at confidence ``z``), measuring
    (or measuring again) the uncertain candidate whose estimate is the least sure, while
    the bound allows. ``stop``: the search's own verdict, kept when the optimum is
    decided or nothing more can be measured."""
    best, rivals = contenders(model, cfg, grid, est, confidence_z=z)
    far = {w: v for w, v in rivals.items() if abs(w - best) > LIMIT_STEP_W + 1e-9}
    if not far:
        return replace(stop, reason=f"{stop.reason}; the optimum is decided within 25 W")
    # Measuring the best again sharpens every comparison with it. A tried limit whose
    # estimate is exact gains nothing from another probe.
    candidates = {**far, best: est.log_var.get(best, 0.0)}
    fits = [
        w
        for w in candidates
        if (w not in est.known_j or candidates[w] > 0.0)
        and probes.get(w, 1 if w in est.known_j else 0) < MAX_PROBES_PER_LIMIT
        and cost(w) <= room_s
    ]
    if not fits:
        return replace(
            stop, reason=f"{stop.reason}; undecided ({len(far)} limits more than 25 W away "
            "may still draw less), and no further probe fits"
        )  # fmt: skip
    w = max(fits, key=lambda w: (candidates[w], -cost(w), w))
    what = "measure again" if w in est.known_j else "measure"
    return Step(w, best_predicted, cost(w), f"{what}: the optimum is not decided within 25 W")


# --- the round's hook -------------------------------------------------------------------

EXPLORING, DONE = "exploring", "done"


def new_record(*, gpu_model: str, n_gpus: int, now_s: float, budget_frac: float) -> dict:
    """A job's exploration record (JSON-safe; the service stores it on the job):

    ``status`` exploring/done; ``n_gpus`` the GPU count the limits are explored at;
    ``tried`` the finished probes ({limit_w, n_gpus, seconds, cost_s, energy_j}); ``probe``
    the one running now; ``spent_s`` seconds lost so far; ``budget_s`` the bound as last
    computed (``budget_frac`` x predicted completion time); ``result_w`` the limit chosen;
    ``other_gpus`` the other GPU count tried (elastic jobs); ``other_batch`` the batch
    probe (``BATCH_PROBE``; absent until tried or judged: {batch, from_batch, n_gpus,
    limit_w, since_s, seconds, cost_s, energy_j, runnable, reason}, ``runnable`` None where
    it did not run); ``reason`` why it stopped; ``layout`` (once the job runs) its GPUs per
    node, largest first."""
    return {
        "status": EXPLORING,
        "gpu_model": gpu_model,
        "n_gpus": n_gpus,
        "started_s": now_s,
        "budget_frac": budget_frac,
        "budget_s": 0.0,
        "spent_s": 0.0,
        "tried": [],
        "probe": None,
        "other_gpus": None,
        "result_w": None,
        "reason": "",
    }


def explore_round(
    ctx: Any, decision: PolicyDecision, *, explores: bool
) -> tuple[PolicyDecision, dict[str, dict]]:
    """The round's exploration stage (module docstring): the decision with the grants of
    exploring jobs retuned, and every active job's record. Off (the decision unchanged,
    records passed through) unless the snapshot sets ``exploration_budget_frac`` and the
    policy ``explores``."""
    snapshot = ctx.snapshot
    before = snapshot.exploration
    records = (
        {j.job_id: before[j.job_id] for j in snapshot.jobs if j.job_id in before} if before else {}
    )
    frac = snapshot.exploration_budget_frac
    if frac is None or not explores or not decision.grants:
        return decision, records
    views = {jv.job.job_id: jv for jv in ctx.jobs}
    node_of: dict[str, str] = {}  # GPU id -> node, built once a running explorer needs it
    grants = []
    for g in decision.grants:
        jv = views[g.job_id]
        rec = records.get(g.job_id)
        g = _runnable(g, rec, jv.job)
        if rec is None and jv.job.allocation is None and jv.job.done_iters <= 0 and not g.gpu_ids:
            rec = new_record(gpu_model=g.gpu_model, n_gpus=g.n_gpus, now_s=ctx.now_s,
                             budget_frac=frac)  # fmt: skip
        if rec is None or rec["status"] != EXPLORING:
            grants.append(g)
            continue
        a = jv.job.allocation
        if a is not None and a.gpu_ids:
            # Where the job runs, GPUs per node: a job spread over nodes is observed (and
            # its measurements kept) under its node count, which its GPU count does not give.
            if not node_of:
                node_of = {gpu.gpu_id: gpu.node for gpu in snapshot.cluster.gpus}
            per_node = Counter(node_of.get(gid) for gid in a.gpu_ids)
            rec = {**rec, "layout": sorted(per_node.values(), reverse=True)}
        rec, g2 = _advance(ctx, jv, g, dict(rec))
        records[g.job_id] = rec
        grants.append(g2)
    return replace(decision, grants=tuple(grants)), records


def _advance(ctx: Any, jv: Any, g: Grant, rec: dict) -> tuple[dict, Grant]:
    job, model = jv.job, jv.perf
    lo_hi = getattr(model, "power_limits_w", None)
    if g.gpu_model != rec["gpu_model"] or not lo_hi:
        rec.update(status=DONE, probe=None, reason="no power-limit range to explore")
        return rec, g
    limits = limit_grid(*lo_hi)
    n, batch = rec["n_gpus"], g.global_batch
    now = ctx.now_s
    clock = _clock(ctx, jv)
    tried = [dict(t) for t in rec["tried"]]
    rec["tried"] = tried
    # Close the probe that ran since the last round, if the job ran it.
    probe, rec["probe"] = rec["probe"], None
    a = job.allocation
    shape = rec.get("layout")
    if probe is not None and "batch" in probe:
        if _close_batch_probe(ctx, jv, g, rec, probe, shape):
            return rec, _retune(g, probe["n_gpus"], probe["limit_w"], probe["batch"])
        probe = None
    # After a batch probe the job goes back to the batch its limits were explored at.
    pin = _pinned_batch(rec)
    if pin is not None:
        batch = pin
    if probe is not None and a is not None and a.n_gpus == probe["n_gpus"]:
        ran_at = a.power_limit_w
        if ran_at is not None and abs(ran_at - probe["limit_w"]) < 0.5 and now > probe["since_s"]:
            seconds = now - probe["since_s"]
            t_probe = _remaining_s(ctx, jv, probe["n_gpus"], batch, probe["limit_w"])
            t_ref = min(
                _remaining_s(ctx, jv, t["n_gpus"], batch, t["limit_w"]) for t in tried or [probe]
            )
            cost = seconds * max(1.0 - t_ref / t_probe, 0.0) if t_probe > 0 else 0.0
            energy = predicted_energy_j(
                model, _cfg(probe["n_gpus"], batch, shape, clock), probe["limit_w"]
            )
            tried.append({**probe, "seconds": seconds, "cost_s": cost, "energy_j": energy})
            rec["spent_s"] += cost
    if not tried:
        rec["n_gpus"] = n = g.n_gpus  # nothing measured yet: explore where the policy puts it
    if g.n_gpus != n and rec["other_gpus"] is None:
        # The policy resized the job: explore no further (its limits were at ``n``).
        return _finish(rec, model, limits, batch, "the policy resized the job", clock), g
    # The bound: budget_frac x (time explored so far + what remains at the default limit).
    jct = (now - rec["started_s"]) + _remaining_s(ctx, jv, n, batch, limits[-1])
    rec["budget_s"] = rec["budget_frac"] * jct
    at_n = [t for t in tried if t["n_gpus"] == n]
    if not at_n and not any(t["n_gpus"] != n for t in tried):
        return _probe(rec, g, n, limits[-1], now), _retune(g, n, limits[-1], pin)
    if rec["other_gpus"] is None:
        measured, est = _measured(model, rec, batch, clock)
        probes: dict[float, int] = {}
        for t in at_n:
            probes[t["limit_w"]] = probes.get(t["limit_w"], 0) + 1
        # The limit search's step at the job's configuration; the batch probe asks it too,
        # without the fill stage.
        search = functools.partial(
            next_step,
            model,
            _cfg(n, batch, shape, clock),
            limits,
            set(measured),
            step_s=ctx.round_length_s,
            spent_s=rec["spent_s"],
            predicted_jct_s=jct,
            budget_frac=rec["budget_frac"],
            measured=measured,
        )
        if _batch_probe_on(ctx) and rec.get("other_batch") is None and g.n_gpus == n:
            other = _batch_probe(ctx, jv, g, rec, limits, batch, search)
            if other is not None:
                return rec, other
        step = search(
            fill_budget=True,
            fill_margin=FILL_MARGIN,
            estimate=est,
            probes=probes,
        )
        if step.limit_w is not None:
            return _probe(rec, g, n, step.limit_w, now), _retune(g, n, step.limit_w, pin)
        rec["reason"] = step.reason
        other = _other_count(job, n)
        chosen = chosen_limit(model, _cfg(n, batch, shape, clock), limits, set(measured), measured)
        if other is not None and g.n_gpus == n and not g.gpu_ids:
            t_ref = _remaining_s(ctx, jv, n, batch, chosen)
            t_other = _remaining_s(ctx, jv, other, batch, chosen)
            cost = _lost_round_s(ctx.round_length_s, t_ref, t_other)
            if cost <= _room_s(rec["budget_s"], rec["spent_s"]):
                rec["other_gpus"] = other
                return _probe(rec, g, other, chosen, now), _retune(g, other, chosen, pin)
            rec["reason"] += "; another GPU count would exceed the exploration budget"
        return _finish(rec, model, limits, batch, rec["reason"], clock), g
    return _finish(rec, model, limits, batch, rec["reason"] or "explored", clock), g


def _lost_round_s(round_s: float, t_ref: float, t_other: float) -> float:
    """What one round in another configuration costs a job whose remaining time is
    ``t_ref`` where it is and ``t_other`` there: the share of the round's useful work lost."""
    return round_s * max(1.0 - t_ref / t_other, 0.0) if t_other > 0 else 0.0


def _batch_probe_on(ctx: Any) -> bool:
    on = getattr(ctx.snapshot, "exploration_batch_probe", None)
    return BATCH_PROBE if on is None else bool(on)


def _probe_batch(job: Any, model: PerfModel, batch: int) -> int | None:
    """The global batch of a batch probe for ``job`` now running at ``batch``: twice it,
    where the job may change its batch (its statistical efficiency is known, its per-GPU
    batch is not fixed, its range allows twice ``batch``) and its model has not measured
    two per-GPU batches at the default limit already (a profile pooled from earlier jobs
    may have). None: no probe."""
    if job.noise_scale is None or job.per_gpu_batch is not None or job.max_batch is None:
        return None
    if 2 * batch > job.max_batch:
        return None
    seen = getattr(model, "measured_batches", None)
    if seen is None or len(seen()) >= 2:
        return None
    return 2 * batch


def _batch_probe(
    ctx: Any,
    jv: Any,
    g: Grant,
    rec: dict,
    limits: Sequence[float],
    batch: int,
    search: Callable[..., Step],
) -> Grant | None:
    """Start the batch probe (``BATCH_PROBE``) where it is due: the grant that runs it,
    or None (the limit search goes on; where the probe will never run, ``other_batch``
    says why). Due once the limit search, without its fill stage, has reached its
    measured minimum (the fill stage would spend the room the probe needs). It runs one
    round at ``2 x batch`` on the same GPUs at the default limit, if its cost (the useful
    samples it loses: ``round x (1 - T(batch) / T(2 batch))`` with ``T`` the remaining
    time, which counts statistical efficiency) with ``BATCH_COST_MARGIN`` fits the room
    left in the bound."""
    job, model = jv.job, jv.perf
    b2 = _probe_batch(job, model, batch)
    if b2 is None:
        return None
    n, now, top = rec["n_gpus"], ctx.now_s, limits[-1]
    # ``search``: the caller's limit search, asked here without its fill stage
    if search().limit_w is not None:
        return None  # the limit search is not over
    t_ref = _remaining_s(ctx, jv, n, batch, top)
    t_probe = _remaining_s(ctx, jv, n, b2, top)
    cost = _lost_round_s(ctx.round_length_s, t_ref, t_probe)
    entry = {
        "batch": b2,
        "from_batch": batch,
        "n_gpus": n,
        "limit_w": top,
        "since_s": now,
        "seconds": 0.0,
        "cost_s": cost,
        "energy_j": None,
        "runnable": None,
        "reason": "",
    }
    if cost * (1.0 + BATCH_COST_MARGIN) > rec["budget_s"] - rec["spent_s"]:
        rec["other_batch"] = {**entry, "reason": "it would exceed the exploration budget"}
        return None
    rec["probe"] = {**entry, "done_iters": job.done_iters}
    return _retune(g, n, top, b2)


def _close_batch_probe(ctx: Any, jv: Any, g: Grant, rec: dict, probe: dict, shape) -> bool:
    """Record the batch probe that ran since the last round in ``other_batch``: its
    measured configuration's predicted energy, and its cost (the useful samples lost at
    the rates the model now predicts, with what the probe measured). A job that ran the
    probe and made no progress (its count did not move and its model has no measurement
    there: out of memory at the larger batch, say) lost the whole
    round: the batch is marked not runnable, and no later grant of the round's hook gives
    the job that per-GPU batch or more (``_runnable``). A probe the job did not run (stopped,
    resized or given another batch) is not tried again. A probe that ran less than
    ``BATCH_PROBE_WAIT_S`` with no progress yet is not judged: True, it stays open
    (``rec["probe"]``) where the policy's grant ``g`` keeps its GPU count; otherwise it
    ends unjudged, its seconds charged."""
    job, model = jv.job, jv.perf
    a = job.allocation
    n, b0, b2, w = probe["n_gpus"], probe["from_batch"], probe["batch"], probe["limit_w"]
    entry = {k: v for k, v in probe.items() if k != "done_iters"}
    seconds = ctx.now_s - probe["since_s"]
    ran = (
        a is not None
        and a.n_gpus == n
        and a.global_batch == b2
        and a.power_limit_w is not None
        and abs(a.power_limit_w - w) < 0.5
        and seconds > 0
    )
    clock = _clock(ctx, jv)
    at = replace(_cfg(n, b2, shape, clock), power_limit_w=w)
    measured_at = getattr(model, "measured", None)
    # Progress: the job's count moved, or its reports there reached its model (live, the
    # count the snapshot carries may lag the reports the model is fitted from).
    progressed = job.done_iters > probe["done_iters"] or (
        measured_at is not None and measured_at(at) is not None
    )
    if not ran:
        entry.update(cost_s=0.0, reason="the job did not run the probe")
    elif not progressed and seconds < BATCH_PROBE_WAIT_S:
        if g.n_gpus == n:
            rec["probe"] = probe
            return True
        entry.update(seconds=seconds, cost_s=seconds,
                     reason="the probe ended before it could show progress")  # fmt: skip
    elif progressed:
        t_ref = _remaining_s(ctx, jv, n, b0, w)
        t_probe = _remaining_s(ctx, jv, n, b2, w)
        cost = seconds * max(1.0 - t_ref / t_probe, 0.0) if t_probe > 0 else 0.0
        energy = predicted_energy_j(model, _cfg(n, b2, shape, clock), w)
        entry.update(seconds=seconds, cost_s=cost, energy_j=energy, runnable=True)
    else:
        entry.update(seconds=seconds, cost_s=seconds, runnable=False,
                     reason=f"no progress at batch {b2}")  # fmt: skip
    rec["spent_s"] += entry["cost_s"]
    rec["other_batch"] = entry
    return False


def _pinned_batch(rec: dict | None) -> int | None:
    """The batch an exploring job runs at after its batch probe ran (the one its limits
    were explored at); None before, or where the probe did not run."""
    other = rec.get("other_batch") if rec else None
    if not other or other.get("runnable") is None:
        return None
    return int(other["from_batch"])


def _runnable(g: Grant, rec: dict | None, job: Any) -> Grant:
    """``g`` back at the per-GPU batch the job's batch probe started from where that probe
    made no progress and the grant asks for its per-GPU batch or more (what did not fit
    is a GPU's share: on more GPUs the same global batch may), not below ``min_batch``."""
    other = rec.get("other_batch") if rec else None
    if not other or other.get("runnable") is not False:
        return g
    n = max(int(other["n_gpus"]), 1)
    if g.global_batch * n < int(other["batch"]) * g.n_gpus:
        return g
    b = max(int(other["from_batch"]) * g.n_gpus // n, job.min_batch or 1)
    return replace(g, global_batch=b)


def _measured(
    model: PerfModel, rec: dict, batch: int, clock: int | None = None
) -> tuple[dict[float, float], Estimate | None]:
    """(tried limit -> its known energy per iteration (``KNOWN_ENERGY``), the noise-aware
    estimate behind it, None where the energies are not noise-aware), at ``clock``
    (``_clock``)."""
    n = rec["n_gpus"]
    at_n = [t for t in rec["tried"] if t["n_gpus"] == n]
    cfg = _cfg(n, batch, rec.get("layout"), clock)
    if KNOWN_ENERGY == "fitted":
        return {t["limit_w"]: fitted_energy_j(model, cfg, t["limit_w"]) for t in at_n}, None
    last = {t["limit_w"]: t["energy_j"] for t in at_n}
    if KNOWN_ENERGY == "noise-aware":
        est = estimate(model, cfg, set(last))
        if est is not None:  # a probe the job was not measured in keeps its prediction
            return {**last, **est.known_j}, est
    return last, None


def _finish(
    rec: dict, model: PerfModel, limits, batch: int, reason: str, clock: int | None = None
) -> dict:
    measured, _ = _measured(model, rec, batch, clock)
    rec.update(
        status=DONE,
        probe=None,
        reason=reason,
        result_w=chosen_limit(
            model,
            _cfg(rec["n_gpus"], batch, rec.get("layout"), clock),
            limits,
            set(measured),
            measured or None,
        ),
    )
    return rec


def _other_count(job: Any, n: int) -> int | None:
    """For an elastic job that may shrink, one other GPU count: half as many (at least its
    minimum). Only shrinking: fewer GPUs always fit where the job runs, where more might
    find no block and stop the job for a round."""
    if job.max_gpus <= job.min_gpus or n <= job.min_gpus:
        return None
    return max(job.min_gpus, n // 2)


def _probe(rec: dict, g: Grant, n: int, limit_w: float, now: float) -> dict:
    rec["probe"] = {"limit_w": limit_w, "n_gpus": n, "since_s": now}
    return rec


def _retune(g: Grant, n: int, limit_w: float, batch: int | None = None) -> Grant:
    ids = g.gpu_ids if n == g.n_gpus else ()
    b = g.global_batch if batch is None else batch
    return replace(
        g, n_gpus=n, global_batch=b, power_limit_w=limit_w, sm_clock_mhz=None, gpu_ids=ids
    )


def _cfg(
    n: int, batch: int, layout: list[int] | None = None, clock: int | None = None
) -> GpuConfig:
    """``n`` GPUs at ``batch``, laid out as the job last ran (``layout``, GPUs per node)
    when that was ``n`` GPUs; otherwise packed, as the model assumes; at ``clock``, the
    clock its limits are explored at (``_clock``)."""
    if layout and sum(layout) == n:
        return GpuConfig(
            n_gpus=n, global_batch=batch, sm_clock_mhz=clock, gpus_per_node=tuple(layout)
        )
    return GpuConfig(n_gpus=n, global_batch=batch, sm_clock_mhz=clock)


def _clock(ctx: Any, jv: Any) -> int | None:
    """The clock a job's limits are explored at: none (its probes set no clock), which
    its GPUs run at their own top; recorded as that top where it is below the top clock
    the job's model predicts no clock at (``ClockSteps.unset_for``, as ``round.place``
    records a grant without a clock), so that its probes are measured, looked up and
    predicted at the clock they run at."""
    steps = getattr(ctx.snapshot, "clock_steps", {}).get(jv.gpu_model)
    return steps.unset_for(unset_tops(jv.perf)[0]) if steps is not None else None


def _remaining_s(ctx: Any, jv: Any, n: int, batch: int, limit_w: float) -> float:
    s = ctx.remaining_and_power(jv, n, batch, _clock(ctx, jv), limit_w)[0]
    return s if math.isfinite(s) else 0.0
