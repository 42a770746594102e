"""Just-in-time power-limit exploration: the model's best, then its neighbours, within budget."""

from __future__ import annotations

import pytest

from scheduling.core.exploration import best_limit, limit_grid, next_step, predicted_energy_j
from scheduling.core.perf_models import load_catalog
from scheduling.core.types import GpuConfig

MODEL = load_catalog().get("resnet50", "A100")
CFG = GpuConfig(n_gpus=1, global_batch=64)
LIMITS = limit_grid(100.0, 400.0)


def test_limit_grid_steps_25_w_from_the_top_and_keeps_both_ends():
    assert LIMITS == tuple(100.0 + 25.0 * k for k in range(13))
    assert limit_grid(110.0, 160.0) == (110.0, 135.0, 160.0)
    with pytest.raises(ValueError):
        limit_grid(300.0, 200.0)


def test_exploration_tries_the_predicted_best_then_its_neighbours_then_stops():
    best = best_limit(MODEL, CFG, LIMITS)
    assert all(predicted_energy_j(MODEL, CFG, best) <= predicted_energy_j(MODEL, CFG, w)
               for w in LIMITS)  # fmt: skip
    assert 100.0 < best < 400.0  # an inner optimum: there are two neighbours to measure
    kwargs = {"step_iters": 100.0, "spent_s": 0.0, "predicted_jct_s": 1e9}

    first = next_step(MODEL, CFG, LIMITS, {400.0}, **kwargs)
    assert (first.limit_w, first.reason) == (best, "the model predicts it saves energy")
    second = next_step(MODEL, CFG, LIMITS, {400.0, best}, **kwargs)
    assert second.limit_w in (best - 25.0, best + 25.0)
    assert second.reason == "a neighbour of the best"
    done = next_step(MODEL, CFG, LIMITS, {400.0, best, best - 25.0, best + 25.0}, **kwargs)
    assert done.limit_w is None
    assert done.reason == "the predicted best limit and its neighbours are measured"


def test_exploration_stops_where_its_cost_would_pass_the_budget():
    best = best_limit(MODEL, CFG, LIMITS)
    slower_s = MODEL.iter_time_s(GpuConfig(1, 64, power_limit_w=best)) - MODEL.iter_time_s(
        GpuConfig(1, 64, power_limit_w=400.0)
    )
    assert slower_s > 0  # the energy-optimal limit runs slower than the default
    cost_s = 100.0 * slower_s
    # a budget just below the step's cost stops it, just above lets it run
    tight = next_step(MODEL, CFG, LIMITS, {400.0}, step_iters=100.0, spent_s=0.0,
                      predicted_jct_s=0.99 * cost_s / 0.03)  # fmt: skip
    assert (tight.limit_w, tight.reason) == (None, "trying it would exceed the exploration budget")
    assert tight.step_cost_s == pytest.approx(cost_s, rel=1e-9)
    room = next_step(MODEL, CFG, LIMITS, {400.0}, step_iters=100.0, spent_s=0.0,
                     predicted_jct_s=1.01 * cost_s / 0.03)  # fmt: skip
    assert room.limit_w == best
