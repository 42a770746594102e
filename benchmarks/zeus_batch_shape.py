"""Diagnostics of the Zeus never-observed misses after 5 observations (docs/benchmarks.md,
"The energy a batch needs"): what part of a job's batch shape its first observations, one
batch at five power limits, cannot show.

    nice .venv/bin/python benchmarks/zeus_batch_shape.py sharpness
    nice .venv/bin/python benchmarks/zeus_batch_shape.py pools --gpu rtx6000 --floor-pool 2 \
        [--explore-batch half|double]

``sharpness``: at each Zeus GPU's top limit, the time at every batch predicted from the time at
the job's first batch ``b0`` and the busy share ``u`` its draw reads there (against the live
service's idle estimate and the most the other workloads draw), for a compute time that is a
soft maximum of sharpness ``q`` (``beta b0 = u T0``, ``alpha = T0 (1 - u^q)^(1/q)``; q = 1 is
the model's sum): the median error over the other batches, per workload and pooled.

``pools``: ``bench_online_model.py --floor-pool K``'s Zeus cases on one GPU, after 5
observations, a row per (measured pool, held-out workload): each held-out workload's own
median never-observed error, and the prior it was given. ``--explore-batch``: the fifth
observation is the job at half / double its first batch (``bench_online_model.batch_probe``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_online_model as bom  # noqa: E402

from scheduling.fitting import perf_data  # noqa: E402

SHARPNESS = (1.0, 1.5, 2.0, 3.0)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")


def sharpness() -> None:
    rows = perf_data.read_zeus()
    by: dict[tuple[str, str], list] = defaultdict(list)
    for r in rows:
        by[(r.gpu, r.workload)].append(r)
    pooled: dict[tuple[str, float], list[float]] = defaultdict(list)
    for gpu in perf_data.ZEUS_GPUS:
        top = max(r.power_limit_w for r in rows if r.gpu == gpu)
        idle_w, _ = bom.service_draw_range_w(top)
        pts = {
            w: sorted(
                (r.batch_size, r.time_per_epoch_s * r.batch_size / bom.NOMINAL_EPOCH_SAMPLES)
                + (r.average_power_w,)
                for r in rs
                if r.power_limit_w == top
            )
            for (g, w), rs in by.items()
            if g == gpu
        }
        for w, p in sorted(pts.items()):
            busy_w = max(x[2] for v, ps in pts.items() if v != w for x in ps)
            batches = [x[0] for x in p]
            b0 = sorted(batches)[len(batches) // 2]
            t0, p0 = next((x[1], x[2]) for x in p if x[0] == b0)
            u = min(max((p0 - idle_w) / (busy_w - idle_w), 1e-4), 1 - 1e-4)
            line = f"{gpu:8} {w:18} b0={b0:5} u={u:.2f}"
            for q in SHARPNESS:
                beta, alpha = u * t0 / b0, t0 * (1 - u**q) ** (1 / q)
                errs = [
                    abs((alpha**q + (beta * b) ** q) ** (1 / q) / t - 1) for b, t, _ in p if b != b0
                ]
                pooled[(gpu, q)] += errs
                pooled[("all", q)] += errs
                line += f"  q={q:g} {100 * statistics.median(errs):5.1f}%"
            say(line)
    for gpu in (*perf_data.ZEUS_GPUS, "all"):
        say(
            f"{gpu:8} pooled  "
            + "  ".join(
                f"q={q:g} {100 * statistics.median(pooled[(gpu, q)]):5.1f}%" for q in SHARPNESS
            )
        )


def pools(gpu: str, k: int, explore_batch: str | None = None) -> None:
    cases = [c for c in bom._zeus_cases(gpu_out=False) if c.dataset == f"zeus_{gpu}"]
    for case in bom._floor_pools(cases, k):
        if explore_batch is not None:  # the batch probe of bench_online_model --explore-batch
            case = bom.batch_probe(case, explore_batch)
        seen = case.configs[:5]
        model = bom.fit_case(case, seen)
        et, ee = [], []
        for obs, (t, e) in list(zip(case.configs, case.truth, strict=True))[5:]:
            cfg = obs.config()
            et.append(abs(model.iter_time_s(cfg) / t - 1))
            ee.append(abs(model.energy_per_iter_j(cfg) / e - 1))
        say(
            f"{'+'.join(case.pool):36} {case.workload:18} time {100 * statistics.median(et):5.1f}%"
            f"  energy {100 * statistics.median(ee):5.1f}%  prior {model.prior.workload}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("sharpness", help="a fixed compute-time sharpness read from one draw")
    p = sub.add_parser("pools", help="a row per (measured pool, held-out workload)")
    p.add_argument("--gpu", choices=perf_data.ZEUS_GPUS, required=True)
    p.add_argument("--floor-pool", type=int, default=2)
    p.add_argument("--explore-batch", choices=bom.EXPLORE_RULES, help="the fifth at another batch")
    args = parser.parse_args()
    if args.what == "sharpness":
        sharpness()
    else:
        pools(args.gpu, args.floor_pool, args.explore_batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
