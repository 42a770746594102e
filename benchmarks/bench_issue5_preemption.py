"""Where netdelay's network-sensitive preemption gains and loses: each job's JCT with
preemption minus without, on the issue-5 benchmark scenario (see docs/benchmarks.md).

    .venv/bin/python benchmarks/bench_issue5_preemption.py --congestion 4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.simulator.engine import SimConfig  # noqa: E402
from scheduling.simulator.scenario import load_scenario, run_policy  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(ROOT / "data/trace/elasticflow_philly_876.csv"))
    parser.add_argument("--cluster", default=str(ROOT / "benchmarks/clusters/n4g8_a100.json"))
    parser.add_argument("--max-jobs", type=int, default=200)
    parser.add_argument("--arrival-scale", type=float, default=0.2)
    parser.add_argument("--round-length-s", type=float, default=600.0)
    parser.add_argument("--congestion", type=float, default=4.0)
    args = parser.parse_args(argv)
    if args.congestion <= 0 or args.max_jobs <= 0 or args.arrival_scale <= 0:
        parser.error("--congestion, --max-jobs and --arrival-scale must be positive")
    scenario = load_scenario(
        args.trace,
        args.cluster,
        config=SimConfig(round_length_s=args.round_length_s, congestion=args.congestion),
        max_jobs=args.max_jobs,
        arrival_scale=args.arrival_scale,
    )
    runs = {}
    for preempt in tqdm((True, False), desc="netdelay runs"):
        params = {"congestion": args.congestion, "preempt": preempt}
        result = run_policy(scenario, "netdelay", policy_params=params)
        runs[preempt] = {r.spec.job_id: r for r in result.jobs}
    with_p, without = runs[True], runs[False]
    extra_h = {j: (with_p[j].jct_s - without[j].jct_s) / 3600.0 for j in with_p}
    victims = [j for j in with_p if with_p[j].n_preemptions]
    by_size: dict[int, list[float]] = {}
    for j, d in extra_h.items():
        by_size.setdefault(with_p[j].spec.requested_gpus, []).append(d)
    report = {
        "extra_job_hours": sum(extra_h.values()),
        "victims": len(victims),
        "victims_extra_job_hours": sum(extra_h[j] for j in victims),
        "mean_extra_h_by_gpus": {n: sum(v) / len(v) for n, v in sorted(by_size.items())},
        "largest_gain_h": min(extra_h.values()),
        "largest_loss_h": max(extra_h.values()),
    }
    sys.stdout.write(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
