"""Run the simulator's command line and count, at its end, how many workload-profile folds
the bound on one job's move cut (``profiles.fold``'s ``job_scale`` below 1), on stderr.

    OPENBLAS_CORETYPE=Haswell nice .venv/bin/python benchmarks/profile_cuts.py \\
        --trace data/trace/pollux_workload-3.csv --cluster data/clusters/n16g4_t4.json \\
        --policy powerflow --match-baseline fifo_lowclock,elastic --knowledge learned \\
        --no-progress --out OUT
"""

from __future__ import annotations

import atexit
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduling.core import profiles  # noqa: E402

folds: list[float] = []
_fold = profiles.fold


def counted(*args, **kwargs):
    fit = _fold(*args, **kwargs)
    folds.append(fit.job_scale)
    return fit


def report() -> None:
    cut = sorted(s for s in folds if s < 1.0)
    shown = ", ".join(f"{s:.3g}" for s in cut[:20])
    sys.stderr.write(f"profile folds {len(folds)}, cut {len(cut)}: [{shown}]\n")


if __name__ == "__main__":
    profiles.fold = counted  # the simulator's knowledge calls it as ``profiles.fold``
    atexit.register(report)
    sys.argv = ["scheduling.simulator", *sys.argv[1:]]
    runpy.run_module("scheduling.simulator", run_name="__main__")
