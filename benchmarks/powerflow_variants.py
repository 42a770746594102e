"""PowerFlow variants at baselines' energy: each baseline runs once, then PowerFlow
with each set of parameters gets that baseline's energy as its budget. One line per
(baseline, variant): the ratio (the baseline's average JCT over PowerFlow's), PowerFlow's
average JCT, its energy in all and inside the period as shares of the budget, periods
over budget, the worst period's share and resizes (PowerFlow / baseline). Issue 13,
point 1 (C) used it to compare budget-price variants.

    nice .venv/bin/python benchmarks/powerflow_variants.py \\
        --trace data/trace/pollux_workload-3.csv --cluster data/clusters/n16g4_t4.json \\
        --variants '{"base": {}, "raf": {"reserve_at_fast": true}}'
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_args import (  # noqa: E402
    policy_list,
    policy_variants,
    positive_float,
    positive_int,
    scenario_or_error,
)
from budget_variants import cached_run  # noqa: E402

from scheduling.simulator.compare import budget_from, in_period  # noqa: E402
from scheduling.simulator.metrics import summarise  # noqa: E402
from scheduling.simulator.scenario import run_policy  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", required=True)
    p.add_argument("--cluster", required=True)
    p.add_argument("--arrival-scale", type=positive_float, default=None)
    p.add_argument("--max-jobs", type=positive_int, default=None)
    p.add_argument("--baselines", type=policy_list, default="elastic,fifo_lowclock")
    p.add_argument("--variants", default='{"base": {}}', help="name -> PowerFlow parameters")
    p.add_argument("--cache", default=None, help="folder to keep the baselines' runs in")
    args = p.parse_args(argv)
    variants = policy_variants(p, args.variants, "--variants")
    scenario = scenario_or_error(
        p,
        ROOT / args.trace,
        ROOT / args.cluster,
        arrival_scale=args.arrival_scale,
        max_jobs=args.max_jobs,
    )
    tag = f"{Path(args.trace).stem}_{args.arrival_scale}_{args.max_jobs}"
    for base in args.baselines:
        base_result = cached_run(scenario, base, args.cache, tag)
        bs = summarise(base_result)
        for name, params in variants.items():
            t = time.perf_counter()
            result = run_policy(
                scenario,
                "powerflow",
                budget=budget_from(base_result, "energy"),
                policy_params=params,
            )
            s, ip = summarise(result), in_period(result)
            sys.stdout.write(
                f"{tag} {base:<14} {name:<10} ratio {bs['avg_jct_s'] / s['avg_jct_s']:.3f}x  "
                f"avg JCT {s['avg_jct_s'] / 3600:.2f} h  p99 {s['p99_jct_s'] / 3600:.2f} h  "
                f"spent {s['energy_kwh'] / bs['energy_kwh']:.1%}  "
                f"in the period {ip['candidate_energy_in_period_kwh'] / bs['energy_kwh']:.1%}  "
                f"over {ip['candidate_periods_over_budget']}  "
                f"worst {ip['candidate_max_period_share']:.3f}  "
                f"resizes {s['n_resizes']}/{bs['n_resizes']}  ({time.perf_counter() - t:.0f} s)\n"
            )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
