"""Just-in-time exploration of power limits with a bounded cost (as Zeus profiles a new job).

A new job starts at its default power limit. After each observation its online model
(``online_model``) predicts the energy per iteration at every power limit the GPU accepts;
the job next tries the limit the model now predicts best. Once that limit has been
measured, it tries the best's untried neighbours on the grid (one step either side), so
the choice is a measured minimum; exploration ends when both are measured, or when the
next step would take the time spent exploring past ``budget_frac`` of the job's predicted
completion time. The cost of a step is the time it runs slower than the fastest limit
measured so far.

Pure functions: the caller keeps the set of tried limits and the cost spent so far.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from scheduling.core.types import GpuConfig, PerfModel

LIMIT_STEP_W = 25.0  # Zeus' sweeps step the limit by 25 W


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


@dataclass(frozen=True, slots=True)
class Step:
    limit_w: float | None  # the limit to try next; None: exploration is over
    best_w: float  # the limit the model now predicts best
    step_cost_s: float  # predicted extra seconds of trying ``limit_w`` for ``step_iters``
    reason: str


def next_step(
    model: PerfModel,
    cfg: GpuConfig,
    limits: Sequence[float],
    tried: Collection[float],
    *,
    step_iters: float,
    spent_s: float,
    predicted_jct_s: float,
    budget_frac: float = 0.03,
) -> Step:
    """What to try next (see the module docstring). ``step_iters`` iterations run at each
    tried limit; ``spent_s`` is the cost of the steps so far."""
    best = best_limit(model, cfg, limits)
    target = best
    if best in tried:
        # The model's best has been measured: confirm it is a minimum by measuring its
        # untried neighbours on the grid (the energy curve has one valley), best first.
        grid = sorted(limits)
        i = grid.index(best)
        around = [w for w in grid[max(i - 1, 0) : i + 2] if w not in tried]
        if not around:
            return Step(None, best, 0.0, "the predicted best limit and its neighbours are measured")
        target = min(around, key=lambda w: predicted_energy_j(model, cfg, w))
    at_target_s = model.iter_time_s(replace(cfg, power_limit_w=target, sm_clock_mhz=None))
    known = [w for w in limits if w in tried] or [max(limits)]
    fastest_known_s = min(
        model.iter_time_s(replace(cfg, power_limit_w=w, sm_clock_mhz=None)) for w in known
    )
    cost_s = max(at_target_s - fastest_known_s, 0.0) * step_iters
    if spent_s + cost_s > budget_frac * predicted_jct_s:
        return Step(None, best, cost_s, "trying it would exceed the exploration budget")
    why = "the model predicts it saves energy" if target == best else "a neighbour of the best"
    return Step(target, best, cost_s, why)
