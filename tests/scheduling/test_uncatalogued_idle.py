"""The idle draw of a GPU model the catalog has no model on: the catalog prices it at 0 W,
while telemetry charges what the GPUs really draw. The snapshot carries it instead, as the
GPUs' samples show it, else as estimated from what NVML reported."""

from datetime import UTC, datetime, timedelta

import pytest

from cluster.models import Gpu, Node
from scheduling import adapters
from telemetry.models import GpuSample

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


@pytest.fixture
def h100s(db, make_node):
    make_node("a100-node", gpus=2)  # a catalog model: the catalog's idle stands
    node = Node.objects.create(name="h100-node", switch_label="s1", rack_label="r1")
    return [
        Gpu.objects.create(
            node=node,
            index=i,
            uuid=f"GPU-h100-{i}",
            model="H100",
            memory_mb=81559,
            default_power_limit_w=700,
            min_power_limit_w=200,
            max_power_limit_w=700,
            supported_sm_clocks_mhz=[1980, 1500, 345],
        )  # fmt: skip
        for i in range(2)
    ]


def _idle_map():
    return dict(adapters.build_snapshot(now=NOW, round_length_s=60.0).snapshot.idle_power_w)


def test_without_samples_an_h100_idles_as_the_a100s_idle_carried_over(h100s):
    # 50 W (the A100's) x 700 / 400 W (the highest limits NVML reported)
    assert _idle_map() == {"H100": pytest.approx(87.5)}


def test_with_enough_idle_samples_it_idles_as_measured(h100s):
    # given an hour of samples: at rest 70-72 W, a few with a job's context open at 120 W,
    # busy ones at 400 W (not idle) and old ones (outside the window) at 10 W
    rows = []
    for k in range(40):
        ts = NOW - timedelta(seconds=60 * k + 30)
        gpu = h100s[k % 2]
        rows.append(GpuSample(gpu=gpu, ts=ts, power_w=70.0 + k % 3, util_pct=0.0))
        rows.append(GpuSample(gpu=gpu, ts=ts + timedelta(seconds=1), power_w=400.0, util_pct=90.0))
    rows += [
        GpuSample(gpu=h100s[0], ts=NOW - timedelta(seconds=10 + k), power_w=120.0, util_pct=0.0)
        for k in range(4)
    ]
    rows += [
        GpuSample(gpu=h100s[1], ts=NOW - timedelta(hours=2, seconds=k), power_w=10.0, util_pct=0.0)
        for k in range(40)
    ]
    GpuSample.objects.bulk_create(rows)

    idle = _idle_map()

    # then the low tenth of the idle samples: the rest draw, not the open context's
    assert idle.keys() == {"H100"}
    assert 70.0 <= idle["H100"] <= 71.0


def test_too_few_idle_samples_keep_the_estimate(h100s):
    GpuSample.objects.bulk_create(
        GpuSample(gpu=h100s[0], ts=NOW - timedelta(seconds=k + 1), power_w=70.0, util_pct=0.0)
        for k in range(10)
    )
    assert _idle_map() == {"H100": pytest.approx(87.5)}
