"""The live telemetry summary pushed to open dashboards (``frontend.broadcast``).

Beat runs ``broadcast_telemetry_task`` every ``TELEMETRY_BROADCAST_INTERVAL_S``: the latest
reading of every GPU heard from in the last ``LIVE_WINDOW_S`` seconds, summed per node and for
the cluster. It is pushed on a timer, not per ingested batch, so dashboards see a steady update
rate whatever the number of agents and ingestion pays nothing for it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from telemetry.models import GpuSample

LIVE_WINDOW_S = 30


def live_summary(now: datetime) -> dict[str, Any]:
    latest = (
        GpuSample.objects.filter(ts__gte=now - timedelta(seconds=LIVE_WINDOW_S), ts__lte=now)
        .order_by("gpu_id", "-ts")
        .distinct("gpu_id")
        .values_list("gpu__node__name", "gpu__index", "util_pct", "power_w")
    )
    gpus = sorted(latest)
    nodes: dict[str, float] = {}
    for node, _, _, power_w in gpus:
        nodes[node] = nodes.get(node, 0.0) + power_w
    return {
        "at": now.isoformat(),
        "cluster_power_w": sum(nodes.values()),
        "nodes": [{"node": n, "power_w": p} for n, p in sorted(nodes.items())],
        "gpus": [{"node": n, "index": i, "util_pct": u, "power_w": p} for n, i, u, p in gpus],
    }
