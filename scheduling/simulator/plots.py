"""PNG plots of one or more runs: JCT CDF, and power and cumulative energy over time.

Power is the average over each stretch between planning instants (exact energy of the
stretch divided by its length), so the curve is the round-resolution power profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from scheduling.core.types import J_PER_KWH  # noqa: E402
from scheduling.simulator.engine import SimResult  # noqa: E402

HOUR_S = 3600.0


def plot_jct_cdf(results: Mapping[str, SimResult], path: str | Path, *, title: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, result in results.items():
        jcts = np.sort([r.jct_s for r in result.jobs if r.jct_s is not None]) / HOUR_S
        if len(jcts) == 0:
            continue
        ax.plot(jcts, np.arange(1, len(jcts) + 1) / len(jcts), label=name, drawstyle="steps-post")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time [h]")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title or "JCT CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_power_energy(
    results: Mapping[str, SimResult], path: str | Path, *, title: str = ""
) -> Path:
    fig, (ax_p, ax_e) = plt.subplots(2, 1, figsize=(7.2, 6.0), sharex=True)
    for name, result in results.items():
        if not result.timeline:
            continue
        t0 = np.array([s.t0_s for s in result.timeline])
        t1 = np.array([s.t1_s for s in result.timeline])
        energy = np.array([s.energy_j for s in result.timeline])
        span = np.maximum(t1 - t0, 1e-9)
        ax_p.step(t0 / HOUR_S, energy / span / 1e3, where="post", label=name, linewidth=0.8)
        ax_e.plot(t1 / HOUR_S, np.cumsum(energy) / J_PER_KWH, label=name)
    ax_p.set_ylabel("cluster power [kW]")
    ax_p.set_title(title or "Power and cumulative energy")
    ax_p.grid(True, alpha=0.3)
    ax_p.legend()
    ax_e.set_xlabel("simulated time [h]")
    ax_e.set_ylabel("cumulative energy [kWh]")
    ax_e.grid(True, alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
