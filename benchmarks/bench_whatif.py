"""The budget what-if on small real queues: the unbudgeted average JCT against the one
predicted with twice the budget that run spent, for PowerFlow (energy) and GreenFlow
(carbon), through ``scheduling.simulator.whatif.replay_queue`` as the budget page calls it
(queue submitted now, a two-day period with one day left, constant grid intensity).

    nice .venv/bin/python benchmarks/bench_whatif.py

Prints one line per queue and budget kind.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.simulator.scenario import load_scenario  # noqa: E402
from scheduling.simulator.whatif import replay_queue  # noqa: E402

DAY_S = 86400.0
QUEUES = [("pollux_workload-1.csv", 0, 16), ("pollux_workload-3.csv", 40, 16),
          ("pollux_workload-6.csv", 100, 12)]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    # No options; --help says what it runs instead of running it.
    argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args(argv)
    data = ROOT / "data"
    for trace, first, n in QUEUES:
        scenario = load_scenario(data / "trace" / trace, data / "clusters" / "n16g4_t4.json")
        jobs = [replace(j, submit_time_s=0.0) for j in scenario.jobs[first : first + n]]
        for kind in ("energy", "carbon"):
            common = dict(
                cluster=scenario.cluster, catalog=scenario.catalog, kind=kind,
                period_start_s=-DAY_S, period_end_s=DAY_S, ci_g_per_kwh=250.0,
            )  # fmt: skip
            free = replay_queue(jobs, limit=1e9, **common)
            need = free.energy_kwh if kind == "energy" else free.co2_kg
            twice = replay_queue(jobs, limit=2 * need, **common)
            sys.stdout.write(
                f"{trace} jobs {first}-{first + n - 1} {kind}: unbudgeted "
                f"{free.avg_jct_s / 3600:.3f} h, twice the budget it used "
                f"({2 * need:.3f} {'kWh' if kind == 'energy' else 'kg'}) "
                f"{twice.avg_jct_s / 3600:.3f} h\n"
            )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
