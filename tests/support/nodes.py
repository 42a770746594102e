"""Rows for a node of a GPU model the catalog lacks, as an agent would register it."""

from __future__ import annotations

from datetime import datetime

from cluster.models import Gpu, Node


def make_a40_node(*, heartbeat: datetime, gpus: int = 2) -> Node:
    """A node of ``gpus`` NVIDIA A40s (not in the perf catalog) with what NVML reports of
    them: 100-300 W power limits (300 W default) and three lockable clocks."""
    node = Node.objects.create(
        name="a40-01",
        switch_label="s1",
        rack_label="r1",
        gpu_model="A40",
        last_heartbeat_at=heartbeat,
    )
    for index in range(gpus):
        Gpu.objects.create(
            node=node, index=index, uuid=f"GPU-a40-{index}", model="A40", memory_mb=46068,
            default_power_limit_w=300, min_power_limit_w=100, max_power_limit_w=300,
            supported_sm_clocks_mhz=[1740, 1500, 1200],
        )  # fmt: skip
    return node


def registered_gpu(uuid_: str, index: int, model: str = "A100", **overrides) -> dict:
    """One GPU of a registration body (``POST /api/agent/register/``) as an agent on an
    A100 reports it through NVML; ``overrides`` replace or add fields."""
    return {
        "uuid": uuid_,
        "index": index,
        "model": model,
        "memory_mb": 40960,
        "default_power_limit_w": 400.0,
        "min_power_limit_w": 100.0,
        "max_power_limit_w": 400.0,
        "max_sm_clock_mhz": 1410,
        **overrides,
    }
