"""What PowerFlow does each round, against a baseline at that baseline's energy: jobs
and GPUs a round, the share of job-rounds on one GPU and below the top clock, and
resizes, for the baseline (``elastic`` only; other baselines print their summary) and
for PowerFlow at its energy. Issue 13 used it to see why PowerFlow lost under load.

    nice .venv/bin/python benchmarks/instrument_rounds.py --arrival-scale 0.25 \\
        --max-jobs 300 --baselines elastic
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_args import policy_list, positive_float, positive_int, scenario_or_error  # noqa: E402

from scheduling.core.policies.budget_greedy import BudgetGreedy  # noqa: E402
from scheduling.core.policies.elastic import Elastic  # noqa: E402
from scheduling.simulator.compare import budget_from  # noqa: E402
from scheduling.simulator.metrics import summarise  # noqa: E402
from scheduling.simulator.scenario import run_policy  # noqa: E402

STATS: dict[str, list[tuple]] = {"powerflow": [], "elastic": []}


def _count_rounds(cls, tag: str) -> None:
    """Wrap ``cls.allocate`` to record each round's grants (this process only)."""
    plain = cls.allocate

    def allocate(self, ctx):
        decision = plain(self, ctx)
        top = {jv.job.job_id: (jv.perf.clocks_mhz or (None,))[-1] for jv in ctx.jobs}
        ran = {
            jv.job.job_id: jv.job.allocation.n_gpus if jv.job.allocation else 0 for jv in ctx.jobs
        }
        g = decision.grants
        STATS[tag].append(
            (
                len(g),
                sum(x.n_gpus for x in g),
                sum(1 for x in g if x.n_gpus == 1),
                sum(
                    1
                    for x in g
                    if x.sm_clock_mhz and top[x.job_id] and x.sm_clock_mhz < top[x.job_id]
                ),
                sum(1 for x in g if ran[x.job_id] and ran[x.job_id] != x.n_gpus),
            )
        )
        return decision

    cls.allocate = allocate


def _line(name: str, result, wall_s: float, rounds: list[tuple]) -> str:
    s = summarise(result)
    out = (
        f"{name:<28} avg JCT {s['avg_jct_s'] / 3600:.2f} h  p99 {s['p99_jct_s'] / 3600:.1f} h  "
        f"energy {s['energy_kwh']:.0f} kWh  resizes {s['n_resizes']}  ({wall_s:.0f} s)"
    )
    busy = [r for r in rounds if r[0]]
    if busy:
        grants = sum(r[0] for r in busy)
        out += (
            f"\n{'':<28} jobs a round {statistics.mean(r[0] for r in busy):.1f}  "
            f"GPUs {statistics.mean(r[1] for r in busy):.1f}  "
            f"on 1 GPU {sum(r[2] for r in busy) / grants:.0%}  "
            f"below top clock {sum(r[3] for r in busy) / grants:.0%}  "
            f"planned resizes {sum(r[4] for r in busy)}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", default="data/trace/elasticflow_philly_876.csv")
    p.add_argument("--cluster", default="data/clusters/n16g8_a100.json")
    p.add_argument("--arrival-scale", type=positive_float, default=None)
    p.add_argument("--max-jobs", type=positive_int, default=None)
    p.add_argument("--baselines", type=policy_list, default="elastic")
    p.add_argument("--params", default="{}", help="PowerFlow parameters as JSON")
    args = p.parse_args(argv)
    try:
        params = json.loads(args.params)
    except ValueError as exc:
        p.error(f"--params is not JSON: {exc}")
    _count_rounds(BudgetGreedy, "powerflow")
    _count_rounds(Elastic, "elastic")
    scenario = scenario_or_error(
        p,
        ROOT / args.trace,
        ROOT / args.cluster,
        arrival_scale=args.arrival_scale,
        max_jobs=args.max_jobs,
    )
    for base in args.baselines:
        for v in STATS.values():
            v.clear()
        t = time.perf_counter()
        base_result = run_policy(scenario, base)
        sys.stdout.write(_line(base, base_result, time.perf_counter() - t, STATS["elastic"]) + "\n")
        t = time.perf_counter()
        result = run_policy(
            scenario, "powerflow", budget=budget_from(base_result, "energy"), policy_params=params
        )
        sys.stdout.write(
            _line(f"powerflow@{base}-energy", result, time.perf_counter() - t, STATS["powerflow"])
            + "\n"
        )
        ratio = summarise(base_result)["avg_jct_s"] / summarise(result)["avg_jct_s"]
        spent = summarise(result)["energy_kwh"] / summarise(base_result)["energy_kwh"]
        sys.stdout.write(f"  ratio {ratio:.3f}x, spent {spent:.1%}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
