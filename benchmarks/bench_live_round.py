"""Wall time of the live round (``scheduling.services.run_scheduling_round``) against the
real PostgreSQL: lock, liveness, telemetry refinement, snapshot from rows, ``plan_round``,
apply through ``cluster.services`` and the records, for a cluster and queue of a given size.

Creates (or empties) the scratch database ``--database`` on the DATABASE_URL server,
migrates it, builds ``--nodes`` x 8 A100 nodes (2 nodes per switch, all heart-beating) and
submits ``--jobs`` jobs drawn (seeded) from ``data/trace/elasticflow_philly_876.csv``
(model, global batch, GPU count, iterations), then runs ``--rounds`` rounds one simulated
interval apart. The first round starts many jobs; later ones are the steady state.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python benchmarks/bench_live_round.py --nodes 4 --jobs 200 --policy powerflow
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_args import positive_int  # noqa: E402

from scheduling.core.registry import policy_names  # noqa: E402

TRACE = ROOT / "data" / "trace" / "elasticflow_philly_876.csv"


def scratch_database_url(database: str) -> str:
    """A fresh, empty database named ``database`` beside ``DATABASE_URL``'s; its URL."""
    base = urlparse(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"))
    import psycopg

    admin = urlunparse(base._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')
    return urlunparse(base._replace(path=f"/{database}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default="wattflow_bench_live_round")
    parser.add_argument("--nodes", type=positive_int, default=4)
    parser.add_argument("--jobs", type=positive_int, default=200)
    parser.add_argument("--rounds", type=positive_int, default=6)
    parser.add_argument("--policy", choices=policy_names(), default="powerflow")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    os.environ["DATABASE_URL"] = scratch_database_url(args.database)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from cluster import services as cluster_services
    from cluster.models import Gpu, Node, Team
    from scheduling import services
    from scheduling.models import SchedulerSettings

    call_command("migrate", verbosity=0)
    now = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)
    for n in range(args.nodes):
        node = Node.objects.create(
            name=f"node-{n:03d}", switch_label=f"switch-{n // 2}", gpu_model="A100",
            last_heartbeat_at=now + timedelta(days=1),  # alive through every round
        )  # fmt: skip
        Gpu.objects.bulk_create(
            Gpu(node=node, index=i, uuid=f"GPU-bench-{n}-{i}", model="A100", memory_mb=40960,
                default_power_limit_w=400, min_power_limit_w=100, max_power_limit_w=400)
            for i in range(8)
        )  # fmt: skip
    team = Team.objects.create(name="Bench", slug="bench")
    user = get_user_model().objects.create_user("bench")
    rng = random.Random(args.seed)
    with TRACE.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for k in range(args.jobs):
        row = rng.choice(rows)
        gpus = min(int(row["num_gpu"]), 8)
        cluster_services.submit_job(
            owner=user, team=team, name=f"bench-{k}", workload=row["model_name"],
            total_iterations=max(1, int(float(row["iteration"]))),
            global_batch_size=int(row["batch_size"]), min_gpus=1, max_gpus=gpus,
            at=now - timedelta(seconds=args.jobs - k),
        )  # fmt: skip
    config = SchedulerSettings.load()
    config.policy, config.round_interval_s = args.policy, 60
    config.save()

    times = []
    for r in range(args.rounds):
        t0 = time.perf_counter()
        result = services.run_scheduling_round(now=now + timedelta(seconds=60 * r), force=True)
        times.append(time.perf_counter() - t0)
        sys.stdout.write(
            f"round {r + 1}: {times[-1] * 1000:7.1f} ms  running {len(result.plan.allocations):4d}"
            f"  waiting {len(result.plan.waiting):4d}  applied {result.applied:3d}"
            f"  failed {result.failed}\n"
        )
    steady = times[1:] or times
    sys.stdout.write(
        f"{args.policy}, {args.nodes * 8} GPUs, {args.jobs} jobs: first round "
        f"{times[0] * 1000:.0f} ms, later rounds median {statistics.median(steady) * 1000:.0f} ms\n"
    )


if __name__ == "__main__":
    main()
