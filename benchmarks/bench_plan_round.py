"""Latency of one ``plan_round`` at service scale: 1,000 queued and running jobs on
1,024 A100 GPUs (8 switches x 16 nodes x 8 GPUs), with the fitted perf catalog.

Jobs are drawn (seeded) from the A100 workloads and from the job sizes and durations
of ``data/trace/elasticflow_philly_876.csv`` (model, global batch, GPU count,
iterations), about half of them running on valid GPUs, two teams with energy budgets
that bind and a cluster-wide one. Each repeat plans a fresh snapshot (new seed), so
no cache survives between rounds, as in the service; the policy's state (e.g. the
budget price's record of arrivals) is carried from one repeat to the next, as the
service carries it, unless ``--fresh-state``. The first repeat is always a first round.

``--waiting N`` adds N more jobs that wait (never running): the long-queue case of
issue 13, 10,000 waiting beside 1,000 running on 1,024 GPUs. ``--priors shared|per-job``
gives every job an online model at its catalog prior, as the service does once a workload
has a learned profile (one object per workload, or one per job as the service built them
until 27 Nov). ``--profile FILE`` writes
cProfile statistics of the repeats to FILE (and prints the top 25 by cumulative time).

    .venv/bin/python benchmarks/bench_plan_round.py --policy powerflow --repeats 30
    .venv/bin/python benchmarks/bench_plan_round.py --policy powerflow --running 1000 \
        --waiting 10000 --repeats 7
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import dataclasses
import pstats
import random
import statistics
import sys
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_args import non_negative_int, positive_int  # noqa: E402

from scheduling.core.online_model import N_PARAMS, OnlinePerfModel  # noqa: E402
from scheduling.core.perf_models import load_catalog  # noqa: E402
from scheduling.core.registry import get_policy, policy_names  # noqa: E402
from scheduling.core.round import plan_round  # noqa: E402
from scheduling.core.types import (  # noqa: E402
    Allocation,
    Budget,
    CarbonSignal,
    Cluster,
    Gpu,
    Job,
    Node,
    Snapshot,
)

TRACE = ROOT / "data" / "trace" / "elasticflow_philly_876.csv"
DAY_S = 86_400.0


def build_cluster(switches: int, nodes_per_switch: int, gpus_per_node: int) -> Cluster:
    nodes = []
    for s in range(switches):
        for k in range(nodes_per_switch):
            name = f"s{s}n{k:02d}"
            gpus = tuple(Gpu(f"{name}/{i}", name, i, "A100") for i in range(gpus_per_node))
            nodes.append(Node(name=name, switch=f"s{s}", gpus=gpus))
    return Cluster(nodes=tuple(nodes))


def trace_rows() -> list[dict[str, str]]:
    with TRACE.open(newline="") as fh:
        return list(csv.DictReader(fh))


def build_snapshot(
    seed: int,
    cluster: Cluster,
    rows,
    catalog,
    n_jobs: int,
    now: float,
    *,
    n_waiting: int = 0,
    all_running: bool = False,
) -> Snapshot:
    rng = random.Random(seed)
    free = [g.gpu_id for g in cluster.gpus]
    rng.shuffle(free)
    # Running jobs sit on whole aligned blocks, as a previous buddy round left them.
    by_node: dict[str, list[str]] = {}
    for g in cluster.gpus:
        by_node.setdefault(g.node, []).append(g.gpu_id)
    node_names = list(by_node)
    rng.shuffle(node_names)
    blocks: list[tuple[str, ...]] = []
    for name in node_names:
        ids = by_node[name]
        # all running: one GPU each, so that --running 1000 fits on 1,024 GPUs
        size = 1 if all_running else rng.choice((1, 2, 4, 8))
        blocks.extend(tuple(ids[i : i + size]) for i in range(0, len(ids), size))
    rng.shuffle(blocks)
    jobs = []
    gpus_running = 0
    for i in range(n_jobs):
        row = rng.choice(rows)
        n = int(row["num_gpu"])
        batch = int(row["batch_size"])
        total = float(row["iteration"])
        done = total * rng.random() * 0.5
        job = Job(
            job_id=f"j{i:05d}",
            workload=row["model_name"],
            team=rng.choice(("red", "blue")),
            submit_time_s=now - rng.uniform(0, DAY_S),
            total_iters=total,
            done_iters=done,
            global_batch=batch,
            requested_gpus=n,
            min_gpus=1,
            max_gpus=max(n, 1) * 4,
        )
        runs = all_running or i % 2 == 0
        if runs and blocks and (all_running or gpus_running < len(cluster.gpus) * 0.9):
            block = blocks.pop()
            gpus_running += len(block)
            job = Job(
                **{f: getattr(job, f) for f in job.__dataclass_fields__ if f != "allocation"},
                allocation=Allocation(block, batch),
            )
        jobs.append(job)
    for i in range(n_jobs, n_jobs + n_waiting):
        row = rng.choice(rows)
        n = int(row["num_gpu"])
        total = float(row["iteration"])
        jobs.append(
            Job(
                job_id=f"j{i:05d}",
                workload=row["model_name"],
                team=rng.choice(("red", "blue")),
                submit_time_s=now - rng.uniform(0, DAY_S),
                total_iters=total,
                done_iters=0.0,
                global_batch=int(row["batch_size"]),
                requested_gpus=n,
                min_gpus=1,
                max_gpus=max(n, 1) * 4,
            )
        )
    full_w = len(cluster.gpus) * 300.0
    budgets = (
        Budget("red", "red", 0.0, 7 * DAY_S, energy_limit_j=full_w * 7 * DAY_S * 0.25),
        Budget("blue", "blue", 0.0, 7 * DAY_S, energy_limit_j=full_w * 7 * DAY_S * 0.2),
        Budget("all", None, 0.0, 7 * DAY_S, energy_limit_j=full_w * 7 * DAY_S * 0.8),
    )
    return Snapshot(
        cluster=cluster,
        jobs=tuple(jobs),
        perf=catalog,
        round_length_s=300.0,
        budgets=budgets,
        carbon=CarbonSignal(ci_g_per_kwh=250.0),
    )


def prior_models(snap: Snapshot, catalog, how: str) -> dict[tuple[str, str], OnlinePerfModel]:
    """(job id, "A100") -> an online model at its workload's catalog prior (nothing learned
    yet): one per workload (``shared``), one per job (``per-job``), or one per workload for
    waiting jobs and one per running job (``running-own``)."""
    shared: dict[str, OnlinePerfModel] = {}
    out = {}
    for job in snap.jobs:
        own = how == "per-job" or (how == "running-own" and job.allocation is not None)
        model = None if own else shared.get(job.workload)
        if model is None:
            prior = catalog.get(job.workload, "A100")
            model = OnlinePerfModel(prior=prior, params=[0.0] * N_PARAMS, workload=job.workload)
            if not own:
                shared[job.workload] = model
        out[(job.job_id, "A100")] = model
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", choices=policy_names(), default="powerflow")
    p.add_argument("--jobs", type=positive_int, default=1000, help="jobs, about half running")
    p.add_argument(
        "--running",
        type=positive_int,
        default=None,
        help="instead of --jobs: this many jobs, all running while GPUs last",
    )
    p.add_argument("--waiting", type=non_negative_int, default=0, help="more jobs, all waiting")
    p.add_argument("--profile", default=None, help="write cProfile statistics here")
    p.add_argument(
        "--priors",
        choices=("none", "shared", "per-job", "running-own"),
        default="none",
        help="give every job an online model starting from its catalog prior, as the "
        "service does for a workload with a learned profile: one object per workload "
        "(shared, as the service builds them now) or one per job (as it did before); "
        "running-own: shared, but each running job its own (as a job that reported has)",
    )
    p.add_argument(
        "--fresh-state",
        action="store_true",
        help="plan every repeat as a policy's first round (no state carried over)",
    )
    p.add_argument("--switches", type=positive_int, default=8)
    p.add_argument("--nodes-per-switch", type=positive_int, default=16)
    p.add_argument("--gpus-per-node", type=positive_int, default=8)
    p.add_argument("--repeats", type=positive_int, default=30)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    catalog = load_catalog()
    cluster = build_cluster(args.switches, args.nodes_per_switch, args.gpus_per_node)
    rows = trace_rows()
    now = 2 * DAY_S
    times_ms: list[float] = []
    cpu_ms: list[float] = []  # the process's CPU time: what a busy shared host does not inflate
    last = None
    n_jobs = args.jobs if args.running is None else args.running
    get_policy(args.policy)  # import the policies once, outside the timing
    profiler = cProfile.Profile() if args.profile else None
    for r in tqdm(range(args.repeats), desc=args.policy, leave=False):
        snap = build_snapshot(
            args.seed + r,
            cluster,
            rows,
            catalog,
            n_jobs,
            now,
            n_waiting=args.waiting,
            all_running=args.running is not None,
        )
        if args.priors != "none":
            snap = dataclasses.replace(snap, job_perf=prior_models(snap, catalog, args.priors))
        if last is not None and not args.fresh_state:
            # as the service does: the policy's state of the previous round, whose
            # jobs (submitted before it) are no longer new arrivals
            snap = dataclasses.replace(snap, policy_state=last.policy_state)
        if profiler is not None:
            profiler.enable()
        t0, c0 = time.perf_counter(), time.process_time()
        last = plan_round(snap, policy=args.policy, now=now)
        times_ms.append((time.perf_counter() - t0) * 1e3)
        cpu_ms.append((time.process_time() - c0) * 1e3)
        if profiler is not None:
            profiler.disable()
    times_ms.sort()
    p95 = times_ms[min(len(times_ms) - 1, round(0.95 * (len(times_ms) - 1)))]
    used = sum(a.n_gpus for a in last.allocations.values())
    if profiler is not None:
        profiler.dump_stats(args.profile)
        pstats.Stats(args.profile, stream=sys.stdout).sort_stats("cumulative").print_stats(25)
    running = sum(1 for j in snap.jobs if j.allocation is not None)
    out = (
        f"policy={args.policy} jobs={len(snap.jobs)} running_before={running} "
        f"waiting_before={len(snap.jobs) - running} gpus={len(cluster.gpus)} "
        f"repeats={args.repeats} "
        f"median_ms={statistics.median(times_ms):.1f} p95_ms={p95:.1f} max_ms={times_ms[-1]:.1f} "
        f"cpu_median_ms={statistics.median(cpu_ms):.1f} "
        f"(last round: {len(last.allocations)} running on {used} GPUs, "
        f"{len(last.waiting)} waiting, {len(last.changes)} changes)\n"
    )
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
