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

``next_step`` and ``chosen_limit`` are pure functions of a model and what was tried.
``explore_round`` is the round's hook (``round.plan_round`` calls it between the policy's
allocation and placement, only where the snapshot turns exploration on, i.e. the jobs'
models are learned, and the policy ``explores``): it keeps one JSON-safe record per job in
the snapshot/plan (``Snapshot.exploration`` -> ``Plan.exploration``), overrides the power
limit of a new job's grant while it explores, and for an elastic job ends with one probe at
half its GPU count if the bound still allows. What a record holds is in ``new_record``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduling.core.types import GpuConfig, Grant, PerfModel, PolicyDecision

LIMIT_STEP_W = 25.0  # Zeus' sweeps step the limit by 25 W
DEFAULT_BUDGET_FRAC = 0.03  # of the job's predicted completion time
# What a round takes for the energy of a tried limit: "model", the job's model there when
# the probe ended (its fitted curve plus most of what the probe measured); "fitted", the
# model's fitted curve now, pooled over every probe (noise in one probe is averaged out).
KNOWN_ENERGY = "model"
# With ``fill_budget``, limits predicted to draw more than this share above the least energy
# known are not worth a probe.
FILL_MARGIN = float("inf")


def fitted_energy_j(model: PerfModel, cfg: GpuConfig, limit_w: float) -> float:
    """Energy per iteration on the model's fitted curve alone (an online model's equations
    without its per-configuration corrections; any other model as it predicts)."""
    base = getattr(model, "base", model)
    return base.energy_per_iter_j(replace(cfg, power_limit_w=limit_w, sm_clock_mhz=None))


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
    return model.energy_per_iter_j(replace(cfg, power_limit_w=limit_w, sm_clock_mhz=None))


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
) -> Step:
    """What to try next (see the module docstring). A step runs ``step_s`` seconds at the
    limit it tries; ``spent_s`` is the cost of the steps so far; ``measured`` the energy
    per iteration observed at tried limits (None: the model's predictions there, which
    an online model keeps close to what it observed)."""
    grid = sorted(limits)
    best = best_limit(model, cfg, grid)
    energy = _known(model, cfg, measured)
    known = [w for w in grid if w in tried] or [grid[-1]]
    fastest_known_s = min(
        model.iter_time_s(replace(cfg, power_limit_w=w, sm_clock_mhz=None)) for w in known
    )
    room_s = budget_frac * predicted_jct_s - spent_s

    def cost(w: float) -> float:
        at_s = model.iter_time_s(replace(cfg, power_limit_w=w, sm_clock_mhz=None))
        return step_s * max(1.0 - fastest_known_s / at_s, 0.0) if at_s > 0 else 0.0

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


# --- the round's hook -------------------------------------------------------------------

EXPLORING, DONE = "exploring", "done"


def new_record(*, gpu_model: str, n_gpus: int, now_s: float, budget_frac: float) -> dict:
    """A job's exploration record (JSON-safe; the service stores it on the job):

    ``status`` exploring/done; ``n_gpus`` the GPU count the limits are explored at;
    ``tried`` the finished probes ({limit_w, n_gpus, seconds, cost_s, energy_j}); ``probe``
    the one running now; ``spent_s`` seconds lost so far; ``budget_s`` the bound as last
    computed (``budget_frac`` x predicted completion time); ``result_w`` the limit chosen;
    ``other_gpus`` the other GPU count tried (elastic jobs); ``reason`` why it stopped."""
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
    records = {j.job_id: before[j.job_id] for j in snapshot.jobs if j.job_id in before}
    frac = snapshot.exploration_budget_frac
    if frac is None or not explores or not decision.grants:
        return decision, records
    views = {jv.job.job_id: jv for jv in ctx.jobs}
    grants = []
    for g in decision.grants:
        jv = views[g.job_id]
        rec = records.get(g.job_id)
        if rec is None and jv.job.allocation is None and jv.job.done_iters <= 0 and not g.gpu_ids:
            rec = new_record(gpu_model=g.gpu_model, n_gpus=g.n_gpus, now_s=ctx.now_s,
                             budget_frac=frac)  # fmt: skip
        if rec is None or rec["status"] != EXPLORING:
            grants.append(g)
            continue
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
    tried = [dict(t) for t in rec["tried"]]
    rec["tried"] = tried
    # Close the probe that ran since the last round, if the job ran it.
    probe, rec["probe"] = rec["probe"], None
    a = job.allocation
    if probe is not None and a is not None and a.n_gpus == probe["n_gpus"]:
        ran_at = a.power_limit_w
        if ran_at is not None and abs(ran_at - probe["limit_w"]) < 0.5 and now > probe["since_s"]:
            seconds = now - probe["since_s"]
            t_probe = _remaining_s(ctx, jv, probe["n_gpus"], batch, probe["limit_w"])
            t_ref = min(
                _remaining_s(ctx, jv, t["n_gpus"], batch, t["limit_w"]) for t in tried or [probe]
            )
            cost = seconds * max(1.0 - t_ref / t_probe, 0.0) if t_probe > 0 else 0.0
            energy = predicted_energy_j(model, _cfg(probe["n_gpus"], batch), probe["limit_w"])
            tried.append({**probe, "seconds": seconds, "cost_s": cost, "energy_j": energy})
            rec["spent_s"] += cost
    if not tried:
        rec["n_gpus"] = n = g.n_gpus  # nothing measured yet: explore where the policy puts it
    if g.n_gpus != n and rec["other_gpus"] is None:
        # The policy resized the job: explore no further (its limits were at ``n``).
        return _finish(rec, model, limits, batch, "the policy resized the job"), g
    # The bound: budget_frac x (time explored so far + what remains at the default limit).
    jct = (now - rec["started_s"]) + _remaining_s(ctx, jv, n, batch, limits[-1])
    rec["budget_s"] = rec["budget_frac"] * jct
    at_n = [t for t in tried if t["n_gpus"] == n]
    if not at_n and not any(t["n_gpus"] != n for t in tried):
        return _probe(rec, g, n, limits[-1], now), _retune(g, n, limits[-1])
    if rec["other_gpus"] is None:
        measured = _measured(model, rec, batch)
        step = next_step(
            model,
            _cfg(n, batch),
            limits,
            set(measured),
            step_s=ctx.round_length_s,
            spent_s=rec["spent_s"],
            predicted_jct_s=jct,
            budget_frac=rec["budget_frac"],
            measured=measured,
            fill_budget=True,
            fill_margin=FILL_MARGIN,
        )
        if step.limit_w is not None:
            return _probe(rec, g, n, step.limit_w, now), _retune(g, n, step.limit_w)
        rec["reason"] = step.reason
        other = _other_count(job, n)
        chosen = chosen_limit(model, _cfg(n, batch), limits, set(measured), measured)
        if other is not None and g.n_gpus == n and not g.gpu_ids:
            t_ref = _remaining_s(ctx, jv, n, batch, chosen)
            t_other = _remaining_s(ctx, jv, other, batch, chosen)
            cost = ctx.round_length_s * max(1.0 - t_ref / t_other, 0.0) if t_other > 0 else 0.0
            if rec["spent_s"] + cost <= rec["budget_s"]:
                rec["other_gpus"] = other
                return _probe(rec, g, other, chosen, now), _retune(g, other, chosen)
            rec["reason"] += "; another GPU count would exceed the exploration budget"
        return _finish(rec, model, limits, batch, rec["reason"]), g
    return _finish(rec, model, limits, batch, rec["reason"] or "explored"), g


def _measured(model: PerfModel, rec: dict, batch: int) -> dict[float, float]:
    """Tried limit -> its known energy per iteration (``KNOWN_ENERGY``)."""
    n = rec["n_gpus"]
    at_n = [t for t in rec["tried"] if t["n_gpus"] == n]
    if KNOWN_ENERGY == "fitted":
        return {t["limit_w"]: fitted_energy_j(model, _cfg(n, batch), t["limit_w"]) for t in at_n}
    return {t["limit_w"]: t["energy_j"] for t in at_n}


def _finish(rec: dict, model: PerfModel, limits, batch: int, reason: str) -> dict:
    measured = _measured(model, rec, batch)
    rec.update(
        status=DONE,
        probe=None,
        reason=reason,
        result_w=chosen_limit(
            model, _cfg(rec["n_gpus"], batch), limits, set(measured), measured or None
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


def _retune(g: Grant, n: int, limit_w: float) -> Grant:
    ids = g.gpu_ids if n == g.n_gpus else ()
    return replace(g, n_gpus=n, power_limit_w=limit_w, sm_clock_mhz=None, gpu_ids=ids)


def _cfg(n: int, batch: int) -> GpuConfig:
    return GpuConfig(n_gpus=n, global_batch=batch)


def _remaining_s(ctx: Any, jv: Any, n: int, batch: int, limit_w: float) -> float:
    s = ctx.remaining_and_power(jv, n, batch, None, limit_w)[0]
    return s if math.isfinite(s) else 0.0
