"""PowerFlow or GreenFlow variants at baselines' energy or carbon, budgeted as the
simulator's ``--match-baseline`` budgets them (the idle floor to the period's end
included, oracle knowledge unless told): each baseline runs once per scenario, then the
policy with each set of parameters gets that baseline's spend as its budget. One line per
(baseline, variant): the ratio (the baseline's average JCT over the policy's), the
policy's average JCT, its spend in all and inside the first period as shares of the
budget, periods over budget and the worst period's share. Several traces may be given;
``--cache`` keeps the baselines' runs between calls. Issue 13, point 1 (the slow price).

    nice -n 19 .venv/bin/python benchmarks/budget_variants.py \\
        --trace data/trace/pollux_workload-3.csv --cluster data/clusters/n16g4_t4.json \\
        --policy greenflow --budget-kind carbon --carbon-zone ES \\
        --variants '{"base": {}, "slow": {"slow_price": 0.02}}'
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from dataclasses import replace
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

from scheduling.simulator.compare import budgets_from, in_period  # noqa: E402
from scheduling.simulator.metrics import summarise  # noqa: E402
from scheduling.simulator.scenario import powered_idle_w, run_policy  # noqa: E402


def cached_run(scenario, policy: str, cache: str | None, tag: str):
    """``run_policy(scenario, policy)``, kept in ``cache``/``tag``_``policy``.pkl (None: not
    kept) and read back from there when it is: a baseline's run is the same for every
    variant measured against it."""
    cached = Path(cache) / f"{tag}_{policy}.pkl" if cache else None
    if cached is not None and cached.exists():
        return pickle.loads(cached.read_bytes())
    result = run_policy(scenario, policy)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(pickle.dumps(result))
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", required=True, nargs="+")
    p.add_argument("--cluster", required=True)
    p.add_argument("--policy", default="powerflow", choices=("powerflow", "greenflow"))
    p.add_argument("--budget-kind", default="energy", choices=("energy", "carbon"))
    p.add_argument("--carbon-zone", default=None)
    p.add_argument("--knowledge", default="oracle", choices=("oracle", "learned"))
    p.add_argument("--arrival-scale", type=positive_float, default=None)
    p.add_argument("--max-jobs", type=positive_int, default=None)
    p.add_argument("--baselines", type=policy_list, default="elastic,fifo_lowclock")
    p.add_argument("--variants", default='{"base": {}}', help="name -> policy parameters")
    p.add_argument("--cache", default=None, help="folder to keep the baselines' runs in")
    args = p.parse_args(argv)
    if args.budget_kind == "carbon" and not args.carbon_zone:
        p.error("a carbon budget needs --carbon-zone")
    variants = policy_variants(p, args.variants, "--variants")
    for trace in args.trace:
        scenario = scenario_or_error(
            p,
            ROOT / trace,
            ROOT / args.cluster,
            carbon_zone=args.carbon_zone,
            arrival_scale=args.arrival_scale,
            max_jobs=args.max_jobs,
        )
        scenario = replace(scenario, config=replace(scenario.config, knowledge=args.knowledge))
        tag = (
            f"{Path(trace).stem}_{args.arrival_scale}_{args.max_jobs}_{args.knowledge}"
            f"_{args.carbon_zone}"
        )
        for base in args.baselines:
            base_result = cached_run(scenario, base, args.cache, tag)
            bs = summarise(base_result)
            budgets = budgets_from(
                base_result,
                args.budget_kind,
                idle_w=powered_idle_w(scenario),
                intensity=scenario.intensity,
            )
            limit = (
                budgets[0].energy_limit_j / 3.6e6
                if args.budget_kind == "energy"
                else budgets[0].co2_limit_g / 1000.0
            )
            for name, params in variants.items():
                t = time.perf_counter()
                result = run_policy(scenario, args.policy, budgets=budgets, policy_params=params)
                s, ip = summarise(result), in_period(result)
                spent = s["energy_kwh"] if args.budget_kind == "energy" else s["co2_kg"]
                inside = (
                    ip["candidate_energy_in_period_kwh"]
                    if args.budget_kind == "energy"
                    else ip["candidate_co2_in_period_kg"]
                )
                worst = ip["candidate_max_period_share"]
                sys.stdout.write(
                    f"{tag} {args.policy} {base:<14} {name:<10} "
                    f"ratio {_ratio(bs, s)}  "
                    f"avg JCT {_hours(s['avg_jct_s'])}  "
                    f"spent {spent / limit:.1%}  in the period {inside / limit:.1%}  "
                    f"over {ip['candidate_periods_over_budget']}  "
                    f"worst {worst if worst is None else f'{worst:.4f}'}  "
                    f"unfinished {s['n_unfinished']}  ({time.perf_counter() - t:.0f} s)\n"
                )
                sys.stdout.flush()
    return 0


def _ratio(base: dict, run: dict) -> str:
    """The baseline's average JCT over the run's, or n/a where either left a job
    unfinished: the averages are then over different jobs (and None where none finished)."""
    if base["n_unfinished"] or run["n_unfinished"]:
        return "n/a"
    return f"{base['avg_jct_s'] / run['avg_jct_s']:.3f}x"


def _hours(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds / 3600:.3f} h"


if __name__ == "__main__":
    raise SystemExit(main())
