"""The contention-free lower bound on average JCT for the issue-4 scenarios, and the best
average-JCT ratio any policy could reach against each baseline at that baseline's energy.

    .venv/bin/python benchmarks/bench_jct_bound.py [--report docs/results/simulator/X_report.json]

Without ``--report`` it prints the bound for the scenarios of docs/benchmarks.md, each
with the baselines' average JCT and energy taken from the committed simulator reports
(their runs are what the bound is compared with). Pure: no database, no Django.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.simulator.bounds import scenario_bound  # noqa: E402
from scheduling.simulator.scenario import load_scenario  # noqa: E402

RESULTS = ROOT / "docs" / "results" / "simulator"
SCENARIOS = (
    # (report, trace, cluster, load_scenario options)
    ("a_powerflow_equal_energy_report.json", "elasticflow_philly_876.csv", "n16g8_a100.json", {}),
    (
        "a_powerflow_equal_energy_batch4_report.json",
        "elasticflow_philly_876.csv",
        "n16g8_a100.json",
        {"max_batch_factor": 4},
    ),
    (
        "a_powerflow_equal_energy_load4_report.json",
        "elasticflow_philly_876.csv",
        "n16g8_a100.json",
        {"arrival_scale": 0.25},
    ),
    ("c_speed_philly_week_powerflow_report.json", "philly_week.csv", "n64g8_t4.json", {}),
)
BASELINES = ("fifo", "tiresias", "elastic", "fifo_lowclock", "zeus")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    for report_name, trace, cluster, options in SCENARIOS:
        report = json.loads((RESULTS / report_name).read_text())
        scenario = load_scenario(
            ROOT / "data" / "trace" / trace, ROOT / "data" / "clusters" / cluster, **options
        )
        # the bound a budgeted candidate (at each baseline's energy) cannot beat
        bound = scenario_bound(scenario, budgeted=True)
        say(f"\n{report_name}: {trace} on {cluster} {options or ''}")
        say(
            f"  bound: avg JCT >= {bound.avg_jct_s / 3600:.3f} h with any energy; every job "
            f"needs >= {bound.min_energy_j / 3.6e6:.0f} kWh "
            f"(idle floor {bound.floor_energy_j / 3.6e6:.0f} kWh)"
        )
        say(
            "  | baseline | its avg JCT [h] | its energy [kWh] | bound at that energy [h] "
            "| best ratio possible |"
        )
        for name in BASELINES:
            run = report["runs"].get(name)
            if run is None:
                continue
            at = bound.avg_jct_at_energy_s(run["energy_kwh"] * 3.6e6)
            say(
                f"  | {name} | {run['avg_jct_s'] / 3600:.2f} | {run['energy_kwh']:.0f} | "
                f"{at / 3600:.3f} | {run['avg_jct_s'] / at:.3f}x |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
