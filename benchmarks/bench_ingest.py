"""Ingestion throughput: many concurrent simulated agents against real daphne on loopback.

Sets up a scratch database (dropped and re-created: ``--database``), registers
``--agents`` nodes with ``--gpus-per-agent`` GPUs each, starts ``--servers`` daphne processes
sharing one listening socket, then runs the agents for ``--duration-s`` seconds: each agent
posts batches of ``--batch-seconds`` x its GPUs samples (as the real agent does every few
seconds) in a closed loop over a keep-alive connection, from ``--clients`` client processes.
Reported: GPU samples stored per second over the window after ``--warmup-s``, the endpoint's
p50/p95 latency, the ratio to one raw PostgreSQL ``COPY`` of the very same rows into a table
with the same keys and indexes, and the storage methods compared in-process.

    .venv/bin/python benchmarks/bench_ingest.py --agents 32 --duration-s 30

Loopback only; bounded by ``--duration-s`` and ``--agents`` (at most 256).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--gpus-per-agent", type=int, default=8)
    parser.add_argument("--batch-seconds", type=int, default=10)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--servers", type=int, default=2, help="daphne processes")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--database", default="wattflow_bench_ingest")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--skip-methods", action="store_true")
    parser.add_argument(
        "--account", action="store_true", help="then time accounting of every marked GPU-hour"
    )
    parser.add_argument("--pool-size", type=int, default=4, help="DB pool per server process")
    parser.add_argument("--server-log", default="/tmp/bench_ingest_daphne.log")
    args = parser.parse_args()
    if not 1 <= args.agents <= 256 or not 0 < args.duration_s <= 300:
        parser.error("--agents must be 1..256 and --duration-s 0..300")
    return args


def reset_database(pg: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def setup_nodes(n_agents: int, n_gpus: int) -> list[tuple[str, list[str]]]:
    from cluster.models import Gpu, Node

    agents = []
    for a in range(n_agents):
        node = Node.objects.create(name=f"bench-{a:03d}", switch_label="s1", gpu_model="A100")
        uuids = [f"GPU-bench-{a:03d}-{i}" for i in range(n_gpus)]
        Gpu.objects.bulk_create(
            Gpu(
                node=node,
                index=i,
                uuid=u,
                model="A100",
                memory_mb=40960,
                default_power_limit_w=400,
                min_power_limit_w=100,
                max_power_limit_w=400,
            )  # fmt: skip
            for i, u in enumerate(uuids)
        )
        agents.append((node.issue_agent_token(), uuids))
    return agents


def start_servers(n: int, env: dict, log) -> tuple[list[subprocess.Popen], int, socket.socket]:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "daphne", "--fd", str(sock.fileno()), "config.asgi:application"],
            cwd=ROOT,
            env=env,
            pass_fds=[sock.fileno()],
            stdout=log,
            stderr=log,
        )  # fmt: skip
        for _ in range(n)
    ]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/api/agent/heartbeat/")
            conn.getresponse().read()
            return procs, port, sock
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("daphne did not answer")


def batch_body(uuids: list[str], base: datetime, k: int, seconds: int) -> bytes:
    samples = []
    for s in range(seconds):
        ts = (base + timedelta(seconds=k * seconds + s)).isoformat()
        for i, u in enumerate(uuids):
            samples.append(
                {
                    "gpu_uuid": u,
                    "ts": ts,
                    "power_w": 200.0 + i + s,
                    "energy_j": None,
                    "util_pct": 95.0,
                    "mem_used_mib": 30000.0,
                    "temp_c": 65.0,
                    "sm_clock_mhz": 1410,
                    "power_limit_w": 400.0,
                }  # fmt: skip
            )
    return json.dumps({"samples": samples}).encode()


def run_agent(port, token, uuids, base, seconds, start_at, stop_at, results) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    k = 0
    body = batch_body(uuids, base, k, seconds)
    while time.time() < start_at:
        time.sleep(0.01)
    while time.time() < stop_at:
        t0 = time.perf_counter()
        conn.request("POST", "/api/agent/samples/", body=body, headers=headers)
        response = conn.getresponse()
        answer = response.read()
        latency = time.perf_counter() - t0
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {answer[:300]!r}")
        results.append((time.time(), latency, json.loads(answer)["inserted"]))
        k += 1
        body = batch_body(uuids, base, k, seconds)  # built outside the timed request


def client_process(port, agents, base, seconds, start_at, stop_at, queue) -> None:
    results: list = []
    threads = [
        threading.Thread(
            target=run_agent, args=(port, tok, uuids, base, seconds, start_at, stop_at, results)
        )
        for tok, uuids in agents
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    queue.put(results)


def copy_baseline(dsn: str) -> tuple[int, float]:
    """Raw COPY of the rows the benchmark stored into an identical scratch table."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT gpu_id, ts, power_w, energy_j, util_pct, mem_used_mib, temp_c, sm_clock_mhz, "
            "power_limit_w FROM telemetry_gpusample"
        ).fetchall()
        conn.execute(
            "CREATE TABLE bench_copy (LIKE telemetry_gpusample INCLUDING ALL)"
        )  # same PK (gpu_id, ts) and BRIN index
        conn.commit()
        t0 = time.perf_counter()
        with conn.cursor() as cur:
            with cur.copy(
                "COPY bench_copy (gpu_id, ts, power_w, energy_j, util_pct, mem_used_mib, temp_c, "
                "sm_clock_mhz, power_limit_w) FROM STDIN"
            ) as copy:
                for row in rows:
                    copy.write_row(row)
        conn.commit()
        elapsed = time.perf_counter() - t0
        conn.execute("DROP TABLE bench_copy")
        conn.commit()
    return len(rows), elapsed


def store_rows(rows: list[tuple], *, method: str) -> int:
    """Storage alone, by each method compared (``unnest``: the production statement's insert
    without the dirty-hour marks, ``copy`` through a temporary table, ``bulk_create``);
    returns rows inserted. Run inside a transaction."""
    from django.db import connection

    from telemetry.ingest import _COLS, _TABLE, _UNNEST, COLUMNS, _binding_cursor, _columns
    from telemetry.models import GpuSample

    if method == "unnest":
        with _binding_cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {_TABLE} ({_COLS}) {_UNNEST} ON CONFLICT DO NOTHING", _columns(rows)
            )
            return cursor.rowcount
    if method == "copy":
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE TEMP TABLE IF NOT EXISTS ingest_stage "
                f"(LIKE {_TABLE}) ON COMMIT DELETE ROWS"
            )
            with cursor.copy(f"COPY ingest_stage ({_COLS}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(
                f"INSERT INTO {_TABLE} ({_COLS}) SELECT {_COLS} FROM ingest_stage "
                "ON CONFLICT DO NOTHING"
            )
            return cursor.rowcount
    if method == "bulk_create":
        before = GpuSample.objects.count()
        GpuSample.objects.bulk_create(
            [GpuSample(**dict(zip(COLUMNS, row, strict=True))) for row in rows],
            ignore_conflicts=True,
            batch_size=5000,
        )
        # bulk_create with ignore_conflicts cannot report inserted rows: count before and after
        # (acceptable in a benchmark, never in production).
        return GpuSample.objects.count() - before
    raise ValueError(f"unknown storage method {method!r}")


def compare_methods(agents, batches: int = 100) -> dict[str, float]:
    """Rows/s of each storage method in-process (no HTTP), fresh timestamps for each."""
    from django.db import transaction

    from cluster.models import Gpu

    gpu_ids = list(Gpu.objects.filter(uuid__in=agents[0][1]).values_list("pk", flat=True))
    out = {}
    for m, method in enumerate(("unnest", "copy", "bulk_create")):
        base = datetime.now(UTC) - timedelta(days=2, hours=m)
        all_rows = [
            [
                (g, base + timedelta(seconds=b * 10 + s), 250.0, None, 90.0, 1.0, 60.0, 1410, 400.0)
                for s in range(10)
                for g in gpu_ids
            ]
            for b in range(batches)
        ]
        t0 = time.perf_counter()
        for rows in all_rows:
            with transaction.atomic():
                store_rows(rows, method=method)
        out[method] = sum(len(r) for r in all_rows) / (time.perf_counter() - t0)
    return out


def account_all(stored: int) -> None:
    """Time ``process_dirty_hours`` over everything the run marked (one process, as beat's
    task runs it)."""
    from telemetry.accounting import process_dirty_hours
    from telemetry.models import DirtyHour, EnergyLedgerEntry

    marks = DirtyHour.objects.count()
    t0 = time.perf_counter()
    done = 0
    while step := process_dirty_hours(limit=500):
        done += step
    elapsed = time.perf_counter() - t0
    say(
        f"accounting: {done} GPU-hours ({marks} marks, {stored:,} samples) in {elapsed:.1f} s "
        f"= {done / elapsed:,.1f} GPU-hours/s, {stored / elapsed:,.0f} samples/s; "
        f"{EnergyLedgerEntry.objects.count()} ledger rows"
    )


def main() -> int:
    args = parse_args()
    dsn = f"{args.pg}/{args.database}"
    os.environ["DATABASE_URL"] = dsn
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    load_before = os.getloadavg()
    say(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    reset_database(args.pg, args.database)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True, env=dict(os.environ)
    )
    import django

    django.setup()
    from django.db import connection

    agents = setup_nodes(args.agents, args.gpus_per_agent)
    connection.close()

    env = dict(os.environ, DJANGO_DEBUG="false", DJANGO_SECRET_KEY="bench-" + os.urandom(16).hex())
    # One pooled connection set per server process (see DATABASE_POOL_MAX_SIZE in settings).
    env["DATABASE_POOL_MAX_SIZE"] = str(args.pool_size)
    log_path = Path(args.server_log)
    log = log_path.open("w")
    procs, port, sock = start_servers(args.servers, env, log)
    try:
        base = datetime.now(UTC) - timedelta(days=1)
        start_at = time.time() + 2.0
        stop_at = start_at + args.duration_s
        queue: mp.Queue = mp.Queue()
        workers = [
            mp.Process(
                target=client_process,
                args=(
                    port,
                    agents[c :: args.clients],
                    base,
                    args.batch_seconds,
                    start_at,
                    stop_at,
                    queue,
                ),
            )  # fmt: skip
            for c in range(args.clients)
        ]
        for w in workers:
            w.start()
        results = [r for _ in workers for r in queue.get()]
        for w in workers:
            w.join()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)
        sock.close()
    load_after = os.getloadavg()

    window_start = start_at + args.warmup_s
    in_window = [r for r in results if window_start <= r[0] <= stop_at]
    window_s = stop_at - window_start
    samples = sum(r[2] for r in in_window)
    latencies = sorted(r[1] for r in results)
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    total_inserted = sum(r[2] for r in results)

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM telemetry_gpusample")
        stored = cur.fetchone()[0]
    connection.close()
    copy_rows, copy_s = copy_baseline(dsn)
    copy_rate = copy_rows / copy_s
    rate = samples / window_s

    batch = args.batch_seconds * args.gpus_per_agent
    say(
        f"agents={args.agents} gpus/agent={args.gpus_per_agent} batch={batch} samples "
        f"servers={args.servers} clients={args.clients} duration={args.duration_s}s "
        f"warmup={args.warmup_s}s"
    )
    say(f"requests: {len(results)} ({len(in_window)} in window), stored rows: {stored} "
          f"(responses said {total_inserted} inserted)")  # fmt: skip
    say(f"ingest: {rate:,.0f} GPU samples/s sustained ({len(in_window) / window_s:,.1f} req/s)")
    say(f"latency: p50 {statistics.median(latencies) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms")
    say(f"raw COPY of the same {copy_rows:,} rows: {copy_rate:,.0f} rows/s; "
          f"ingest / COPY = {rate / copy_rate:.2f}")  # fmt: skip
    say(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    if not args.skip_methods:
        django.db.connections.close_all()
        for method, rows_s in compare_methods(agents).items():
            say(f"store method {method}: {rows_s:,.0f} rows/s in-process")
    if args.account:
        django.db.connections.close_all()
        account_all(stored)
    if stored != total_inserted:
        sys.stderr.write("MISMATCH: stored rows differ from inserted counts\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
