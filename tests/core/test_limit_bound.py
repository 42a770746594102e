"""A job's draw read against the power limits it ran at (``online_model.uncut_limit_w``,
``LIMIT_BOUND``): a limit that did not cut the job's draw at its batch bounds the draw its
per-sample work reaches (docs/benchmarks.md, "The first jobs on a new GPU model: what the
job's own limits say")."""

from __future__ import annotations

import pytest

from scheduling.core import online_model
from scheduling.core.online_model import (
    Observation,
    config_of,
    draw_shaped_prior,
    uncut_limit_w,
)
from scheduling.core.perf_models import load_catalog

PRIOR = load_catalog().get("resnet50", "A100")  # an A100: limits up to 400 W
GPU = PRIOR.gpu
IDLE_W, BUSY_MAX_W = 50.0, 350.0


def ran(power_w, limit_w=None, *, batch=64.0, iter_time_s=0.1, n=1):
    return Observation(
        n_gpus=n,
        n_nodes=1,
        local_batch=batch,
        iter_time_s=iter_time_s,
        power_w=power_w,
        power_limit_w=limit_w,
    )


def test_the_lowest_limit_that_left_the_draw_alone_is_found():
    # 90 W at 400 (the default), 350, 300 and 250 W; cut at 200 W: the draw fell and the job
    # slowed.
    seen = [ran(90.0), ran(91.0, 350.0), ran(89.0, 300.0), ran(88.5, 250.0)]
    seen.append(ran(80.0, 200.0, iter_time_s=0.11))
    assert uncut_limit_w(GPU, seen, 64.0) == 250.0
    # Only the limits from the default down, in order: one below a cut does not count.
    assert uncut_limit_w(GPU, [*seen, ran(90.0, 150.0)], 64.0) == 250.0


def test_a_lower_draw_at_a_faster_time_is_noise_not_a_cut():
    # A limit that lowers the clock cannot make the job faster (the Zeus V100's ncf: 40.1 W
    # at 250 W, 37.9 W at 225 W and 5% faster).
    seen = [ran(40.1, iter_time_s=0.1), ran(37.9, 350.0, iter_time_s=0.095)]
    assert uncut_limit_w(GPU, seen, 64.0) == 350.0
    # A draw reported without a time is judged by the draw alone.
    assert uncut_limit_w(GPU, [ran(40.1), ran(37.9, 350.0, iter_time_s=None)], 64.0) is None


def test_nothing_is_bounded_without_a_lower_limit_at_the_batch():
    assert uncut_limit_w(GPU, [ran(90.0)], 64.0) is None
    assert uncut_limit_w(GPU, [ran(90.0), ran(90.0, 300.0, batch=128.0)], 64.0) is None
    assert uncut_limit_w(GPU, [ran(300.0), ran(250.0, 300.0, iter_time_s=0.12)], 64.0) is None
    assert uncut_limit_w(GPU, [ran(90.0, 300.0)], 64.0) is None  # no default-limit draw


@pytest.mark.parametrize("rule", ["shape", "floor"])
def test_the_draw_rises_no_higher_than_the_limit_that_did_not_cut_it(rule, monkeypatch):
    b0 = 64.0
    t0 = PRIOR.iter_time_s(config_of(1, 1, b0))
    # A job drawing 90 W at 400 W and at 200 W alike: no phase of it draws near 350 W.
    seen = [ran(90.0, iter_time_s=t0), ran(90.0, 200.0, iter_time_s=t0)]

    def shaped():
        return draw_shaped_prior(PRIOR, seen, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W, draw_shape=True)

    big, small = config_of(1, 1, 32 * b0), config_of(1, 1, b0 / 8)
    before = shaped()
    assert before.power_w(big) > 250.0  # rises towards the busy maximum
    monkeypatch.setattr(online_model, "LIMIT_BOUND", rule)
    after = shaped()
    assert after.power_w(config_of(1, 1, b0)) == pytest.approx(90.0, rel=1e-6)
    assert after.power_w(big) <= 200.0 * (1 + 1e-9)
    assert after.power_w(big) < before.power_w(big)
    # The time's batch shape is not the draw's to change.
    for cfg in (big, small):
        assert after.iter_time_s(cfg) == pytest.approx(before.iter_time_s(cfg), rel=1e-12)
    if rule == "floor":
        # Busy a share u of the time at no more than 200 W, the rest must draw at least
        # (90 - u 200) / (1 - u) for the job's 90 W at b0: the small batch draws that much.
        u = (90.0 - IDLE_W) / (BUSY_MAX_W - IDLE_W)
        assert after.power_w(small) > before.power_w(small)
        assert after.power_w(small) >= (90.0 - u * 200.0) / (1.0 - u) * (1 - 1e-9)


def test_off_by_default_and_nothing_moves_without_a_lower_limit(monkeypatch):
    assert online_model.LIMIT_BOUND is None
    seen = [ran(90.0)]
    before = draw_shaped_prior(PRIOR, seen, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W, draw_shape=True)
    monkeypatch.setattr(online_model, "LIMIT_BOUND", "floor")
    after = draw_shaped_prior(PRIOR, seen, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W, draw_shape=True)
    for b in (8.0, 64.0, 2048.0):
        cfg = config_of(1, 1, b)
        assert after.power_w(cfg) == before.power_w(cfg)
