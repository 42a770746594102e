"""netdelay's auto-tuner replay, run in the simulator.

The core's tuner (``scheduling/core/netdelay_tuner.py``) takes what runs a replay as a
callable, because the core must not import the simulator. This module is that callable
for the simulator and the live service alike, and importing it installs it as the
tuner's default (``scheduling/simulator/__init__.py`` and the Django app's ``ready``
import it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduling.core.netdelay_tuner import install_replay
from scheduling.core.types import Cluster, Job, PerfCatalog
from scheduling.simulator.engine import SimConfig, Simulator
from scheduling.simulator.metrics import summarise
from scheduling.simulator.scenario import core_planner


def replay_netdelay(
    jobs: Sequence[Job],
    *,
    cluster: Cluster,
    catalog: PerfCatalog,
    policy_params: Mapping[str, Any],
    congestion: float,
    round_length_s: float,
    restart_cost_s: float,
) -> tuple[float | None, float]:
    """Simulate ``jobs`` under ``netdelay`` with ``policy_params``: (avg JCT, makespan)."""
    config = SimConfig(
        round_length_s=round_length_s, restart_cost_s=restart_cost_s, congestion=congestion
    )
    sim = Simulator(
        jobs,
        cluster=cluster,
        catalog=catalog,
        planner=core_planner("netdelay", **policy_params),
        config=config,
    )
    summary = summarise(sim.run())
    return summary["avg_jct_s"], summary["makespan_s"]


install_replay(replay_netdelay)
