"""Statistical efficiency (issue 12, point 5): the figures in docs/benchmarks.md.

1. Leave one workload out on Pollux's validation curves: for each workload, calibrate
   the noise-scale model on the other five, predict from the workload's own reported
   gradient statistics the samples it needs to reach the target at each batch, and
   compare with the measured runs (target: median error within 15%).
2. The learned curves (in sample): the per-workload noise scale the core uses for jobs
   that report no statistics, and how well it fits.
3. The simulator before/after: one Pollux workload with batches allowed to grow 4x,
   every policy named on the command line with batch free (the old model) and with the
   learned efficiency curves; PowerFlow at ``elastic``'s energy in each.

    .venv/bin/python benchmarks/bench_goodput.py [--trace pollux_workload-1] [--policies ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_args import positive_int  # noqa: E402

from scheduling.core.goodput import load_curves  # noqa: E402
from scheduling.core.registry import policy_names  # noqa: E402
from scheduling.core.types import J_PER_KWH  # noqa: E402
from scheduling.fitting import goodput_fit  # noqa: E402
from scheduling.simulator.bounds import scenario_bound  # noqa: E402
from scheduling.simulator.compare import budget_from  # noqa: E402
from scheduling.simulator.metrics import summarise  # noqa: E402
from scheduling.simulator.scenario import core_planner, load_scenario, run_policy  # noqa: E402

# Energy-budgeted policies run at elastic's energy (as simulate --match-baseline elastic);
# the others without a budget.
BUDGETED = ("powerflow", "greenflow")


def out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def leave_one_out() -> None:
    workloads = goodput_fit.read_workloads()
    points = goodput_fit.leave_one_out(workloads)
    out("## Leave one workload out: samples to the target, relative to the smallest batch")
    out()
    out("| workload | calibration (fitted on the others) | batch | measured | predicted | error |")
    out("|---|---:|---:|---:|---:|---:|")
    for p in points:
        out(
            f"| {p.workload} | {p.calibration:.2f} | {p.batch} | x{p.measured_ratio:.3f} "
            f"| x{p.predicted_ratio:.3f} | {100 * p.error:.1f}% |"
        )
    out()
    out("| workload | points | median error | max error |")
    out("|---|---:|---:|---:|")
    for w in workloads:
        errs = [p.error for p in points if p.workload == w.name]
        out(
            f"| {w.name} | {len(errs)} | {100 * goodput_fit.median(errs):.1f}% "
            f"| {100 * max(errs):.1f}% |"
        )
    errs = [p.error for p in points]
    out(
        f"| **all** | {len(errs)} | **{100 * goodput_fit.median(errs):.1f}%** "
        f"| {100 * max(errs):.1f}% |"
    )
    out()
    curves = load_curves()
    out(f"## Learned curves (shipped, {curves.version}; calibration {curves.calibration:.3f})")
    out()
    out("| workload | noise scale [samples] | ref batch | E at largest batch | median / max err |")
    out("|---|---:|---:|---:|---:|")
    for name, c in sorted(curves.workloads.items()):
        e = (c.noise_scale + c.ref_batch) / (c.noise_scale + c.batches[-1])
        out(
            f"| {name} | {c.noise_scale:,.0f} | {c.ref_batch} | {e:.3f} at {c.batches[-1]} "
            f"| {100 * c.median_error:.1f}% / {100 * c.max_error:.1f}% |"
        )
    out()


def before_after(trace: str, cluster: str, policies: list[str], factor: int) -> None:
    out(f"## {trace} on {Path(cluster).stem}, batch up to {factor}x: free vs learned")
    out()
    out(
        "| policy | batch model | avg JCT [h] | p99 JCT [h] | energy [kWh] | makespan [h] "
        "| mean batch / submitted |"
    )
    out("|---|---|---:|---:|---:|---:|---:|")
    runs = [(p, m) for m in ("free", "learned") for p in policies]
    bar = tqdm(total=len(runs), desc="simulations", file=sys.stderr)
    bounds = {}
    for model in ("free", "learned"):
        scenario = load_scenario(
            ROOT / "data" / "trace" / f"{trace}.csv",
            ROOT / "data" / "clusters" / f"{cluster}.json",
            max_batch_factor=factor,
            batch_efficiency=model,
        )
        bounds[model] = scenario_bound(
            scenario,
            ones_batches="ones" in policies,
            budgeted=any(p in BUDGETED for p in policies),
        ).avg_jct_s
        baseline = None
        for policy in policies:
            budget = None
            if policy in BUDGETED and baseline is not None:
                budget = budget_from(baseline, "energy")  # as simulate --match-baseline
            largest: dict[str, int] = {}
            planner = _recording(core_planner(policy), largest)
            started = time.perf_counter()
            result = run_policy(scenario, policy, budget=budget, planner=planner)
            wall = time.perf_counter() - started
            if policy == "elastic":
                baseline = result
            s = summarise(result)
            out(
                f"| {policy}{' at elastic energy' if budget else ''} | {model} "
                f"| {s['avg_jct_s'] / 3600:.3f} | {s['p99_jct_s'] / 3600:.2f} "
                f"| {result.energy_j / J_PER_KWH:.1f} | {s['makespan_s'] / 3600:.2f} "
                f"| {_batch_growth(result, largest):.2f} |"
            )
            bar.set_postfix_str(f"{policy}/{model} {wall:.1f} s")
            bar.update()
    bar.close()
    out()
    out(
        f"Contention-free bound on avg JCT: {bounds['free'] / 3600:.3f} h with batch free, "
        f"{bounds['learned'] / 3600:.3f} h with the learned curves."
    )
    out()


def _recording(planner, largest: dict[str, int]):
    """``planner`` that also notes the largest batch each job was planned at."""

    def plan(snapshot, now):
        result = planner(snapshot, now)
        for job_id, alloc in result.allocations.items():
            largest[job_id] = max(largest.get(job_id, 0), alloc.global_batch)
        return result

    return plan


def _batch_growth(result, largest: dict[str, int]) -> float:
    """Mean over jobs of (largest batch the job ran at / submitted batch)."""
    ratios = [
        largest[rec.spec.job_id] / rec.spec.global_batch
        for rec in result.jobs
        if rec.spec.job_id in largest
    ]
    return sum(ratios) / len(ratios) if ratios else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="pollux_workload-1")
    parser.add_argument("--cluster", default="n16g4_t4")
    parser.add_argument(
        "--policies", nargs="+", choices=policy_names(), default=["elastic", "powerflow", "zeus"]
    )
    parser.add_argument("--max-batch-factor", type=positive_int, default=4)
    args = parser.parse_args()
    if "elastic" not in args.policies:
        args.policies.insert(0, "elastic")
    args.policies.sort(key=lambda p: p != "elastic")
    leave_one_out()
    before_after(args.trace, args.cluster, args.policies, args.max_batch_factor)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
