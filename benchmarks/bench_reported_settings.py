"""What recording each GPU's reported clock and power limit adds to sample ingestion
(``telemetry.ingest.record_reported_settings``), against validating and storing the batch.

Creates (or empties) the scratch database ``--database`` on the DATABASE_URL server, migrates
it, registers one node of ``--gpus`` GPUs and times, in-process and in autocommit as the
endpoint runs them, ``--batches`` batches of ``--batch-seconds`` x GPUs samples: validation,
storage (``store_and_mark``) and the settings statement. The clock changes every
``--change-every`` batches (a retune); otherwise the values repeat, as they do between
retunes. Reported: median and p95 per step, and the settings statement's share.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python benchmarks/bench_reported_settings.py --batches 400
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_live_round import scratch_database_url  # noqa: E402


def _stats(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(values) * 1000:6.3f} ms  p95 {p95 * 1000:6.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default="wattflow_bench_reported_settings")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--batch-seconds", type=int, default=10)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--change-every", type=int, default=30)
    args = parser.parse_args()

    os.environ["DATABASE_URL"] = scratch_database_url(args.database)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command
    from django.utils import timezone

    from cluster.models import Gpu, Node
    from telemetry.ingest import record_reported_settings, store_and_mark, validate_batch

    call_command("migrate", verbosity=0)
    node = Node.objects.create(name="node-bench", switch_label="switch-0", gpu_model="A100")
    Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-bench-{i}", model="A100", memory_mb=40960,
            default_power_limit_w=400, min_power_limit_w=100, max_power_limit_w=400)
        for i in range(args.gpus)
    )  # fmt: skip
    uuids = [f"GPU-bench-{i}" for i in range(args.gpus)]
    now = timezone.now().replace(microsecond=0)
    start = now - timedelta(seconds=args.batches * args.batch_seconds + 60)
    steps: dict[str, list[float]] = {"validate": [], "store": [], "settings": []}
    for b in range(args.batches):
        clock = 1410 if (b // args.change_every) % 2 == 0 else 1200
        payload = {
            "samples": [
                {"gpu_uuid": u, "ts": (start + timedelta(seconds=b * args.batch_seconds + s))
                 .isoformat(), "power_w": 250.0, "energy_j": None, "util_pct": 90.0,
                 "mem_used_mib": 2048.0, "temp_c": 60.0, "sm_clock_mhz": clock,
                 "power_limit_w": 400.0}
                for s in range(args.batch_seconds)
                for u in uuids
            ]
        }  # fmt: skip
        t0 = time.perf_counter()
        rows = validate_batch(node, payload, now=now)
        t1 = time.perf_counter()
        store_and_mark(rows, now=now)
        t2 = time.perf_counter()
        record_reported_settings(rows)
        t3 = time.perf_counter()
        steps["validate"].append(t1 - t0)
        steps["store"].append(t2 - t1)
        steps["settings"].append(t3 - t2)
    warm = {k: v[20:] or v for k, v in steps.items()}
    per = args.gpus * args.batch_seconds
    sys.stdout.write(f"{args.batches} batches of {per} samples ({args.gpus} GPUs):\n")
    for name, values in warm.items():
        sys.stdout.write(f"  {name:9s} {_stats(values)}\n")
    total = sum(statistics.median(v) for v in warm.values())
    share = statistics.median(warm["settings"]) / total
    sys.stdout.write(f"  settings share of the in-process median: {share:.0%}\n")


if __name__ == "__main__":
    main()
