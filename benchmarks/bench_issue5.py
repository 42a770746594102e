"""Issue 5 benchmarks: EaCO, ONES and netdelay against their baselines in the simulator.

Every run replays a real trace from ``data/trace/`` through the core's ``plan_round`` on
a cluster spec from ``data/clusters/`` (``scheduling.simulator.scenario``), so the
numbers come from the same code the service runs.

    .venv/bin/python benchmarks/bench_issue5.py eaco --max-jobs 300 --arrival-scale 0.5
    .venv/bin/python benchmarks/bench_issue5.py ones --max-jobs 200
    .venv/bin/python benchmarks/bench_issue5.py netdelay --congestion 1 2 4

Each prints one JSON object per run and a comparison table, and writes them to
``--out`` (JSON). Bad arguments exit with status 2 and one line.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.simulator.engine import SimConfig  # noqa: E402
from scheduling.simulator.metrics import summarise  # noqa: E402
from scheduling.simulator.scenario import load_scenario, run_policy  # noqa: E402

TRACE = ROOT / "data" / "trace" / "elasticflow_philly_876.csv"
CLUSTER = ROOT / "data" / "clusters" / "n16g8_a100.json"
KEYS = (
    "n_finished",
    "avg_jct_s",
    "makespan_s",
    "energy_kwh",
    "idle_energy_kwh",
    "comm_overhead_gpu_h",
    "n_colocated_jobs",
    "n_preemptions",
    "avg_queueing_delay_s",
)


def _run(
    args,
    label: str,
    policy: str,
    params: dict[str, Any],
    *,
    tolerance: float | None = None,
    lr_ratio: float | None = None,
    **config,
) -> dict[str, Any]:
    cfg = SimConfig(
        round_length_s=args.round_length_s,
        power_off_idle_nodes=args.power_off_idle_nodes,
        colocation_noise=args.colocation_noise,
        seed=args.seed,
        **config,
    )
    scenario = load_scenario(
        args.trace,
        args.cluster,
        config=cfg,
        max_jobs=args.max_jobs,
        arrival_scale=args.arrival_scale,
    )
    if tolerance is not None:
        jobs = tuple(replace(j, slowdown_tolerance=tolerance) for j in scenario.jobs)
        scenario = replace(scenario, jobs=jobs)
    if lr_ratio is not None:
        # The trace has no learning rates: base 0.1 at the requested size and a cap of
        # lr_ratio x that, so ONES' global batch stops at lr_ratio x the request.
        jobs = tuple(replace(j, base_lr=0.1, max_lr=0.1 * lr_ratio) for j in scenario.jobs)
        scenario = replace(scenario, jobs=jobs)
    bar = tqdm(total=len(scenario.jobs), desc=label, unit="job", leave=False, disable=args.quiet)

    def progress(done: int, _t: float) -> None:
        bar.update(done - bar.n)

    result = run_policy(scenario, policy, policy_params=params, progress=progress)
    bar.close()
    summary = summarise(result)
    row = {"label": label, "policy": policy, "params": params, "tolerance": tolerance}
    row.update(config, lr_ratio=lr_ratio)
    row.update({k: summary[k] for k in KEYS})
    # Every job finishes in these runs, so mean JCT - mean queueing = mean running time.
    row["avg_run_s"] = summary["avg_jct_s"] - summary["avg_queueing_delay_s"]
    return row


def _pct(new: float, old: float) -> float:
    return 100.0 * (new - old) / old if old else float("nan")


def bench_eaco(args) -> list[dict[str, Any]]:
    rows = [
        _run(args, "fifo (exclusive)", "fifo", {}),
        _run(args, "tiresias (exclusive)", "tiresias", {}),
    ]
    for tol in args.tolerances:
        # The trace carries no tolerance: every job gets the same one in this run.
        rows.append(_run(args, f"eaco tol={tol:g}", "eaco", {}, tolerance=tol))
    fifo = rows[0]
    for r in rows:
        r["energy_vs_fifo_pct"] = _pct(r["energy_kwh"], fifo["energy_kwh"])
        r["avg_jct_vs_fifo_pct"] = _pct(r["avg_jct_s"], fifo["avg_jct_s"])
        r["makespan_vs_fifo_pct"] = _pct(r["makespan_s"], fifo["makespan_s"])
        r["avg_run_vs_fifo_pct"] = _pct(r["avg_run_s"], fifo["avg_run_s"])
    return rows


def bench_ones(args) -> list[dict[str, Any]]:
    rows = [
        _run(args, "tiresias", "tiresias", {}),
        _run(args, "elastic", "elastic", {}),
        _run(args, "ones", "ones", {"seed": args.seed}),
    ]
    for epochs in args.ones_epochs:
        params = {"seed": args.seed, "epochs_per_job": epochs}
        rows.append(_run(args, f"ones epochs/job={epochs}", "ones", params))
    for ratio in args.lr_ratios:
        rows.append(
            _run(args, f"ones lr cap {ratio:g}x", "ones", {"seed": args.seed}, lr_ratio=ratio)
        )
    base = rows[0]
    for r in rows:
        r["avg_jct_vs_tiresias_pct"] = _pct(r["avg_jct_s"], base["avg_jct_s"])
    return rows


def bench_netdelay(args) -> list[dict[str, Any]]:
    rows = []
    for c in args.congestion:
        group = [
            _run(
                args,
                f"consolidation-first c={c:g}",
                "fifo",
                {"backfill": True, "placement": "buddy"},
                congestion=c,
            ),
            _run(
                args,
                f"spread c={c:g}",
                "fifo",
                {"backfill": True, "placement": "first_fit"},
                congestion=c,
            ),
            _run(args, f"netdelay c={c:g}", "netdelay", {"congestion": c}, congestion=c),
            _run(
                args,
                f"netdelay no-preempt c={c:g}",
                "netdelay",
                {"congestion": c, "preempt": False},
                congestion=c,
            ),
        ]
        if args.tune:
            group.append(
                _run(
                    args,
                    f"netdelay+tuner c={c:g}",
                    "netdelay",
                    {"congestion": c, "tune_every_s": args.tune},
                    congestion=c,
                )
            )
        base = group[0]
        for r in group:
            r["avg_jct_vs_consolidation_pct"] = _pct(r["avg_jct_s"], base["avg_jct_s"])
            r["makespan_vs_consolidation_pct"] = _pct(r["makespan_s"], base["makespan_s"])
        rows.extend(group)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=("eaco", "ones", "netdelay"))
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--cluster", default=str(CLUSTER))
    parser.add_argument("--max-jobs", type=int, default=None)
    parser.add_argument("--arrival-scale", type=float, default=None)
    parser.add_argument("--round-length-s", type=float, default=300.0)
    parser.add_argument("--power-off-idle-nodes", action="store_true")
    parser.add_argument("--colocation-noise", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerances", type=float, nargs="+", default=[0.1])
    parser.add_argument("--lr-ratios", type=float, nargs="*", default=[2.0])
    parser.add_argument(
        "--ones-epochs", type=int, nargs="*", default=[], help="ONES epochs_per_job variants"
    )
    parser.add_argument("--congestion", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--tune", type=float, default=None, help="netdelay: tune every N s")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    for name in ("max_jobs", "arrival_scale"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if any(c <= 0 for c in args.congestion):
        parser.error("--congestion values must be positive")
    if any(t < 0 for t in args.tolerances) or args.colocation_noise < 0:
        parser.error("--tolerances and --colocation-noise must not be negative")
    if any(e < 1 for e in args.ones_epochs):
        parser.error("--ones-epochs must be at least 1")
    if any(r < 1 for r in args.lr_ratios):
        parser.error("--lr-ratios must be at least 1")
    bench = {"eaco": bench_eaco, "ones": bench_ones, "netdelay": bench_netdelay}[args.bench]
    rows = bench(args)
    for r in rows:
        sys.stdout.write(json.dumps(r, sort_keys=True) + "\n")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
