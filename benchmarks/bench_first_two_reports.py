"""Each node's first two progress reports of the round's running allocations
(``scheduling.observations.first_two_reports_of``): the index lookup against the window
over every report it replaced, at a real size (by default 200 allocations of 10,000
reports, on one node each or two), on a filled database (``scale_db.py fill``: its jobs
and nodes), in a transaction rolled back.

    DATABASE_URL=... nice .venv/bin/python benchmarks/bench_first_two_reports.py \
        [--allocations 200] [--reports 10000] [--nodes 1] [--repeat 3] [--explain]
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from bench_args import positive_int  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.db.models import F, Window  # noqa: E402
from django.db.models.functions import RowNumber  # noqa: E402

from scheduling import observations  # noqa: E402
from telemetry.models import JobEvent  # noqa: E402


def say(line) -> None:
    sys.stdout.write(f"{line}\n")
    sys.stdout.flush()


BASE_ID = 900_000_000  # allocation ids no real allocation has (rolled back)


def window_first_two(keys):
    """The read before: a window over every report of every allocation (fd24eea)."""
    keys = set(keys)
    firsts = (
        JobEvent.objects.filter(
            job_id__in={j for j, _ in keys},
            allocation_id__in={a for _, a in keys},
            kind="progress",
        )
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("job_id"), F("allocation_id"), F("node_id")],
                order_by=F("ts").asc(),
            )
        )
        .filter(rank__lte=2)
        .values_list("job_id", "allocation_id", "node_id", "rank", "ts")
    )
    ranked = {key: ({}, {}) for key in keys}
    for job_id, allocation_id, node_id, rank, ts in firsts:
        if (job_id, allocation_id) in ranked:
            ranked[job_id, allocation_id][rank - 1][node_id] = ts
    out = {}
    for key, (first, second) in ranked.items():
        if not first:
            out[key] = (None, None)
        else:
            warm = max(second.values()) if len(second) == len(first) else None
            out[key] = (max(first.values()), warm)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocations", type=positive_int, default=200)
    parser.add_argument("--reports", type=positive_int, default=10_000, help="per allocation")
    parser.add_argument(
        "--nodes", type=positive_int, default=1, help="reporting nodes an allocation"
    )
    parser.add_argument("--repeat", type=positive_int, default=3)
    parser.add_argument("--explain", action="store_true", help="print the new read's plan")
    args = parser.parse_args()
    table = JobEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM cluster_job ORDER BY id LIMIT %s", [args.allocations])
        jobs = [row[0] for row in cursor.fetchall()]
        cursor.execute("SELECT id FROM cluster_node ORDER BY id LIMIT %s", [args.nodes])
        nodes = [row[0] for row in cursor.fetchall()]
    if len(jobs) < args.allocations or len(nodes) < args.nodes:
        raise SystemExit("fill the database first (benchmarks/scale_db.py fill)")
    keys = [(job_id, BASE_ID + k) for k, job_id in enumerate(jobs)]
    with transaction.atomic():
        t0 = time.perf_counter()
        per_node = args.reports // args.nodes
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (event_id, node_id, job_id, allocation_id, kind, ts, "
                "iterations, received_at, reason, log_tail) "
                "SELECT gen_random_uuid(), n.id, w.job_id, w.allocation_id, 'progress', "
                "now() - interval '30 days' + (5 * g + n.k) * interval '1 s', g, now(), '', '' "
                "FROM unnest(%s::bigint[], %s::bigint[]) AS w (job_id, allocation_id), "
                "unnest(%s::bigint[]) WITH ORDINALITY AS n (id, k), generate_series(1, %s) g",
                [[j for j, _ in keys], [a for _, a in keys], nodes, per_node],
            )
            cursor.execute(f"ANALYZE {table}")
        say(
            f"{args.allocations} allocations x {per_node * args.nodes} reports "
            f"({args.nodes} node(s) each) inserted in {time.perf_counter() - t0:.1f} s"
        )
        found = {}
        given = dict.fromkeys(keys, nodes)
        for name, read in (
            ("window (before)", window_first_two),
            # the round's read: the allocations' GPU nodes given, as the round has them
            ("lookup (after)", lambda k: observations.first_two_reports_of(k, gpu_nodes=given)),
            # these allocations hold no GPUs: every one read by the recursive scan of its
            # reporting nodes, as one that a node without its GPUs reported is
            ("scan (fallback)", observations.first_two_reports_of),
        ):
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                found[name] = read(keys)
                times.append(time.perf_counter() - t0)
            say(f"{name:16s} " + "  ".join(f"{t:.3f} s" for t in times))
        if not found["window (before)"] == found["lookup (after)"] == found["scan (fallback)"]:
            say(found)
            raise SystemExit("the reads differ")
        say("same results: yes")
        if args.explain:
            with connection.cursor() as cursor:
                from django.test.utils import CaptureQueriesContext

                with CaptureQueriesContext(connection) as queries:
                    observations.first_two_reports_of(keys, gpu_nodes=given)
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + queries.captured_queries[0]["sql"])
                say("\n".join(row[0] for row in cursor.fetchall()))
        transaction.set_rollback(True)


if __name__ == "__main__":
    main()
