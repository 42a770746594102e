"""PNG plots of one or more runs: JCT CDF, and power and cumulative energy over time.

Power is averaged over equal spans of the run (exact energy in the span divided by its
length), so long runs stay readable; the cumulative energy is exact at every stretch end.
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
    ax.legend(fontsize="small")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _binned_power_w(result: SimResult, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Average power per bin from the exact cumulative energy (bin edges interpolated)."""
    t = np.array([result.timeline[0].t0_s] + [s.t1_s for s in result.timeline])
    cum = np.concatenate([[0.0], np.cumsum([s.energy_j for s in result.timeline])])
    edges = np.linspace(t[0], t[-1], bins + 1)
    energy = np.diff(np.interp(edges, t, cum))
    return edges, energy / np.maximum(np.diff(edges), 1e-9)


def plot_power_energy(
    results: Mapping[str, SimResult], path: str | Path, *, title: str = "", bins: int = 300
) -> Path:
    """Cluster power (averaged over ``bins`` equal spans of the run) and cumulative energy."""
    fig, (ax_p, ax_e) = plt.subplots(2, 1, figsize=(8.0, 7.0), sharex=True)
    for name, result in results.items():
        if not result.timeline:
            continue
        edges, power_w = _binned_power_w(result, bins)
        ax_p.stairs(power_w / 1e3, edges / HOUR_S, label=name, linewidth=0.9, baseline=None)
        t1 = np.array([s.t1_s for s in result.timeline])
        energy = np.array([s.energy_j for s in result.timeline])
        ax_e.plot(t1 / HOUR_S, np.cumsum(energy) / J_PER_KWH, label=name)
    ax_p.set_ylabel("cluster power [kW]")
    ax_p.set_title(title or "Power and cumulative energy")
    ax_p.grid(True, alpha=0.3)
    ax_e.set_xlabel("simulated time [h]")
    ax_e.set_ylabel("cumulative energy [kWh]")
    ax_e.grid(True, alpha=0.3)
    ax_e.legend(fontsize="small", ncol=2, loc="upper left")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
