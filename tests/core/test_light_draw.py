"""A job measured at one batch whose draw the lower power limits left alone, far below
them, read as light work throughout (``online_model.reads_as_light_work``,
``LIGHT_DRAW_SHARE``): its draw flat in batch at what it drew, its time's split still read
from its draw (docs/benchmarks.md, "The first jobs' draw: light work the limits did not
touch")."""

from __future__ import annotations

import pytest

from scheduling.core import online_model
from scheduling.core.online_model import (
    Observation,
    config_of,
    draw_shaped_prior,
    reads_as_light_work,
)
from scheduling.core.perf_models import load_catalog

PRIOR = load_catalog().get("resnet50", "A100")  # an A100: limits up to 400 W
GPU = PRIOR.gpu
IDLE_W, BUSY_MAX_W = 50.0, 350.0
B0 = 64.0
T0 = PRIOR.iter_time_s(config_of(1, 1, B0))


def ran(power_w, limit_w=None, *, batch=B0, iter_time_s=T0):
    return Observation(
        n_gpus=1,
        n_nodes=1,
        local_batch=batch,
        iter_time_s=iter_time_s,
        power_w=power_w,
        power_limit_w=limit_w,
    )


def limits(power_w, *lower_w):
    """The job at ``B0`` at the default limit, then at each of ``lower_w`` drawing the same."""
    return [ran(power_w)] + [ran(power_w, w) for w in lower_w]


def shaped(seen):
    return draw_shaped_prior(PRIOR, seen, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W, draw_shape=True)


BIG, SMALL = config_of(1, 1, 32 * B0), config_of(1, 1, B0 / 8)


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setattr(online_model, "LIGHT_DRAW_SHARE", 0.4)


def test_off_by_default_the_draw_climbs_towards_the_busy_maximum():
    # ncf on a Zeus A40: 84 W at every limit from 300 to 200 W, and at every batch
    assert online_model.LIGHT_DRAW_SHARE is None
    seen = limits(90.0, 350.0, 300.0, 250.0)
    assert not reads_as_light_work(GPU, seen, B0, 90.0, idle_w=IDLE_W)
    model = shaped(seen)
    assert model.power_w(BIG) > 200.0
    assert model.power_w(SMALL) < 60.0
    assert "light_work_draw" not in model.sources


def test_a_draw_far_below_the_limits_that_left_it_alone_is_flat_in_batch(on):
    # 90 W: 40 W above idle, 0.2 of the 200 W from idle to the 250 W limit that left it alone
    seen = limits(90.0, 350.0, 300.0, 250.0)
    assert reads_as_light_work(GPU, seen, B0, 90.0, idle_w=IDLE_W)
    model = shaped(seen)
    for cfg in (SMALL, config_of(1, 1, B0), BIG):
        assert model.power_w(cfg) == pytest.approx(90.0, rel=1e-6)
    assert model.sources["light_work_draw"] == "90 W at every batch"
    # the time's batch shape is still the draw's reading: the same as with the rule off
    online_model.LIGHT_DRAW_SHARE = None
    before = shaped(seen)
    for cfg in (SMALL, config_of(1, 1, B0), BIG):
        assert model.iter_time_s(cfg) == before.iter_time_s(cfg)
    assert model.sources["draw_busy_fraction"] == before.sources["draw_busy_fraction"]


def test_a_draw_that_uses_much_of_what_the_limit_leaves_still_climbs(on):
    # shufflenetv2 on a Zeus P100: 93 W at every limit down to 150 W (0.52 of the span
    # above its idle estimate), 40 W at batch 8 and 137 W at 1024. Here 154 W is 0.52 of the
    # span to 250 W: read as before, identical to the rule off.
    seen = limits(154.0, 350.0, 300.0, 250.0)
    assert not reads_as_light_work(GPU, seen, B0, 154.0, idle_w=IDLE_W)
    model = shaped(seen)
    online_model.LIGHT_DRAW_SHARE = None
    before = shaped(seen)
    for cfg in (SMALL, BIG):
        assert model.power_w(cfg) == before.power_w(cfg)
    assert model.power_w(BIG) > 1.5 * 154.0


def test_nothing_changes_without_a_lower_limit_that_left_the_draw_alone(on):
    # only the default limit; or cut at the first lower limit (the draw fell, the job slowed)
    for seen in (
        [ran(90.0)],
        [ran(90.0), ran(80.0, 350.0, iter_time_s=1.1 * T0)],
    ):
        assert not reads_as_light_work(GPU, seen, B0, 90.0, idle_w=IDLE_W)
        assert "light_work_draw" not in shaped(seen).sources
        assert shaped(seen).power_w(BIG) > 200.0


def test_a_second_batch_hands_the_shape_to_the_fit(on):
    # a draw at another per-GPU batch (any limit) says how the draw moves with the batch:
    # the prior is read as before
    seen = [*limits(90.0, 350.0, 300.0, 250.0), ran(92.0, batch=2 * B0)]
    assert not reads_as_light_work(GPU, seen, B0, 90.0, idle_w=IDLE_W)
    model = shaped(seen)
    online_model.LIGHT_DRAW_SHARE = None
    assert model.power_w(BIG) == shaped(seen).power_w(BIG)
    assert "light_work_draw" not in model.sources


def test_the_share_is_the_threshold(monkeypatch):
    seen = limits(90.0, 350.0, 300.0, 250.0)  # 0.2 of the span
    monkeypatch.setattr(online_model, "LIGHT_DRAW_SHARE", 0.2)
    assert not reads_as_light_work(GPU, seen, B0, 90.0, idle_w=IDLE_W)
    monkeypatch.setattr(online_model, "LIGHT_DRAW_SHARE", 0.21)
    assert reads_as_light_work(GPU, seen, B0, 90.0, idle_w=IDLE_W)
