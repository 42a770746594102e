"""The one co-location module: pair ratios with the unmeasured fallback, the shared draw
and its split, as the simulator, the simulated agent and the round use them."""

from __future__ import annotations

import pytest

from scheduling.core.colocation import (
    PAIR_IDLE_SHARE,
    UNMEASURED_PAIR_RATIO,
    ColocationModel,
    gpu_power_w,
    gpu_ratios,
    pair_member_power_w,
    shared_power_w,
    slowdown_of,
    slowed_power_w,
)

R18 = "ResNet-18 (batch size 64)"
R50 = "ResNet-50 (batch size 64)"


def _table() -> ColocationModel:
    # A ResNet-18 pair measured at 0.7 / 0.6, a ResNet-50 pair measured as stalled.
    return ColocationModel(
        gpu="t",
        ratios={(R18, R18, 1): (0.7, 0.6), (R50, R50, 1): (0.0, 0.8)},
        batches={"ResNet-18": (64,), "ResNet-50": (64,)},
    )


def test_a_measured_pair_runs_at_its_ratios():
    assert _table().shared_ratios("cifar10", 64, "cifar10", 64, 1) == (0.7, 0.6)


def test_an_unmeasured_pair_alternates_and_a_stalled_ratio_falls_back_alone():
    model = _table()
    assert model.shared_ratios("cifar10", 64, "bert", 64, 1) == (0.5, 0.5)
    assert model.shared_ratios("resnet50", 64, "resnet50", 64, 1) == (UNMEASURED_PAIR_RATIO, 0.8)


def test_ratios_on_one_gpu_alone_in_a_pair_and_crowded():
    model = _table()
    assert gpu_ratios(model, [("cifar10", 64.0, 1)]) == [1.0]
    assert gpu_ratios(model, [("cifar10", 64.0, 1), ("cifar10", 64.0, 1)]) == [0.7, 0.6]
    assert gpu_ratios(model, [("cifar10", 64.0, 1)] * 4) == [0.25] * 4


def test_the_two_members_draws_add_up_to_the_shared_gpus_draw():
    # 50 W idle; 250 W and 300 W alone; at 0.7 and 0.6: 50 + 140 + 150 = 340 W.
    a = pair_member_power_w(50.0, 250.0, 0.7)
    b = pair_member_power_w(50.0, 300.0, 0.6)
    assert a == pytest.approx(PAIR_IDLE_SHARE * 50.0 + 140.0)
    assert a + b == pytest.approx(shared_power_w(50.0, 250.0, 300.0, 0.7, 0.6)) == 340.0
    assert gpu_power_w(50.0, [250.0, 300.0], [0.7, 0.6]) == pytest.approx(340.0)
    assert gpu_power_w(50.0, [], []) == 50.0
    assert gpu_power_w(50.0, [250.0], [1.0]) == 250.0


def test_the_rounds_slowed_draw_is_the_same_physics_by_slowdown():
    # A job at ratio 0.7 has slowdown 1/0.7 - 1; the host pays idle, the guest does not.
    s = slowdown_of(0.7)
    host = slowed_power_w(250.0, 50.0, s, pays_idle=True)
    guest = slowed_power_w(300.0, 50.0, slowdown_of(0.6), pays_idle=False)
    assert host == pytest.approx(50.0 + 0.7 * 200.0)
    assert host + guest == pytest.approx(shared_power_w(50.0, 250.0, 300.0, 0.7, 0.6))
