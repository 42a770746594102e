"""The Slurm executor against a real local Slurm 22.05 (``scripts/slurm.sh``, two nodes of 8
placeholder GPUs): how fast a committed round becomes a RUNNING Slurm job, how fast a stop
decision makes the job gone, and what the reconciler costs per round with 1,000 Slurm jobs.

1. ``--jobs`` times: queue one 1-GPU job, run a round (fifo) and time from the round's commit
   (the moment the executor's after-commit step starts) until ``squeue`` shows the job
   RUNNING; then pause it (what a round's stop writes), carry that out and time until the
   job has left Slurm (its script traps SIGTERM and exits, as a checkpointing job does).
   ``squeue`` is polled every ``--poll-ms``, so each figure is late by up to that much plus
   one ``squeue`` call.
2. ``--reconcile-jobs`` held Slurm jobs with Wattflow comments are submitted for as many
   running Wattflow jobs (their allocations on placeholder GPUs in the database only: the
   reconciler reads Slurm and the SlurmJob rows, not the GPUs), and ``reconcile`` is timed:
   the first pass (records 1,000 states) and ``--reconcile-rounds`` steady passes.

Creates (or empties) the scratch database ``--database`` on the DATABASE_URL server and brings
up its own Slurm under ``var/slurm-bench`` (ports from 16920), taken down at the end.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        nice .venv/bin/python benchmarks/bench_slurm.py --jobs 150 --reconcile-jobs 1000
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_live_round import scratch_database_url  # noqa: E402

JOB_SCRIPT = "trap 'exit 0' TERM\nsleep 600 & wait\n"


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _summary(name: str, values_s: list[float]) -> str:
    ms = [v * 1000 for v in values_s]
    return (
        f"{name}: n={len(ms)} median={statistics.median(ms):.0f} ms p95={_p95(ms):.0f} ms "
        f"min={min(ms):.0f} ms max={max(ms):.0f} ms"
    )


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default="wattflow_bench_slurm")
    parser.add_argument("--state-dir", default=str(ROOT / "var" / "slurm-bench"))
    parser.add_argument("--port-base", type=int, default=16920)
    parser.add_argument("--jobs", type=int, default=150)
    parser.add_argument("--poll-ms", type=int, default=20)
    parser.add_argument("--reconcile-jobs", type=int, default=1000)
    parser.add_argument("--reconcile-rounds", type=int, default=10)
    args = parser.parse_args()
    for name in ("jobs", "poll_ms", "reconcile_rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")

    env = {**os.environ, "WATTFLOW_SLURM_PORT_BASE": str(args.port_base)}
    up = subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm.sh"), "up", args.state_dir],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    if up.returncode != 0:
        sys.exit(f"bench_slurm: Slurm did not come up: {up.stderr.strip().splitlines()[-1]}")
    slurm_env = dict(line.split("=", 1) for line in up.stdout.splitlines() if "=" in line)
    try:
        _run(args, slurm_env)
    finally:
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "slurm.sh"), "down", args.state_dir],
            capture_output=True, env=env,
        )  # fmt: skip


def _run(args, slurm_env: dict[str, str]) -> None:
    os.environ["DATABASE_URL"] = scratch_database_url(args.database)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_LOG_LEVEL", "WARNING")
    os.environ["WATTFLOW_EXECUTOR"] = "slurm"
    for key in ("WATTFLOW_SLURM_CONF", "WATTFLOW_SLURM_PARTITION", "WATTFLOW_SLURM_ACCOUNT",
                "WATTFLOW_SLURM_OUTPUT_DIR"):  # fmt: skip
        os.environ[key] = slurm_env[key]
    os.environ["TELEMETRY_CHECKPOINT_ROOT"] = str(Path(args.state_dir) / "checkpoints")
    import django

    django.setup()
    from django.core.management import call_command
    from tqdm import tqdm

    from scheduling.executors.slurm import SlurmExecutor

    call_command("migrate", verbosity=0)
    executor = SlurmExecutor.from_settings()
    _say(f"bench_slurm: {executor.capabilities()[0]}")
    start_s, stop_s = _latencies(args, executor, tqdm)
    _say(_summary("committed round -> RUNNING in Slurm", start_s))
    _say(_summary("stop decision -> job gone from Slurm", stop_s))
    first, steady, squeue_s = _reconcile_cost(args, executor, tqdm)
    _say(f"reconcile with {args.reconcile_jobs} Slurm jobs: first pass {first * 1000:.0f} ms")
    _say(_summary(f"reconcile with {args.reconcile_jobs} Slurm jobs, steady", steady))
    _say(_summary(f"squeue --states=all alone ({args.reconcile_jobs} jobs)", squeue_s))


def _setup_cluster():
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from cluster.models import Gpu, Node, Team
    from scheduling.models import SchedulerSettings

    for name in ("n1", "n2"):
        alive_until = timezone.now() + timedelta(days=1)
        node = Node.objects.create(
            name=name, switch_label="s1", gpu_model="A100", last_heartbeat_at=alive_until
        )
        Gpu.objects.bulk_create(
            Gpu(node=node, index=i, uuid=f"GPU-{name}-{i}", model="A100", memory_mb=40960,
                default_power_limit_w=400, min_power_limit_w=100, max_power_limit_w=400)
            for i in range(8)
        )  # fmt: skip
    team = Team.objects.create(name="Bench", slug="bench")
    user = get_user_model().objects.create_user("bench")
    config = SchedulerSettings.load()
    config.policy = "fifo"
    config.save()
    return team, user


def _latencies(args, executor, tqdm) -> tuple[list[float], list[float]]:
    from django.utils import timezone

    from cluster import services as cluster_services
    from cluster.choices import JobState
    from scheduling import services
    from scheduling.models import SlurmJob

    team, user = _setup_cluster()
    committed_at: list[float] = []
    real_carry_out = services.carry_out

    def timed_carry_out(executor=None):
        # The round's after-commit step: its start is the moment the round committed.
        committed_at.append(time.perf_counter())
        return real_carry_out(executor)

    services.carry_out = timed_carry_out
    poll_s = args.poll_ms / 1000
    start_s, stop_s = [], []
    for i in tqdm(range(args.jobs), desc="start/stop", unit="job"):
        job = cluster_services.submit_job(
            owner=user, team=team, name=f"bench-{i}", workload="resnet50",
            total_iterations=1000, global_batch_size=128, command=JOB_SCRIPT,
        )  # fmt: skip
        result = services.run_scheduling_round(now=timezone.now(), force=True)
        if result.applied != 1:
            sys.exit(f"bench_slurm: round {result.round_id} applied {result.applied} changes")
        slurm_id = SlurmJob.objects.get(job=job).slurm_job_id
        while _state(executor, slurm_id) != "RUNNING":
            time.sleep(poll_s)
        start_s.append(time.perf_counter() - committed_at[-1])
        # Let the script set its trap (slurmd launches it just after Slurm says RUNNING).
        time.sleep(0.3)
        job.refresh_from_db()
        cluster_services.transition_job(job, to=JobState.PAUSED)
        decided = time.perf_counter()
        services.carry_out(executor)
        while _state(executor, slurm_id) in _ACTIVE:
            time.sleep(poll_s)
        stop_s.append(time.perf_counter() - decided)
        cluster_services.cancel_job(job)
    return start_s, stop_s


_ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"}


def _state(executor, slurm_id: int) -> str:
    for info in executor.cli.jobs():
        if info.job_id == slurm_id:
            return info.state
    return ""


def _reconcile_cost(args, executor, tqdm) -> tuple[float, list[float], list[float]]:
    from django.utils import timezone

    from cluster.choices import JobState
    from cluster.models import Gpu, Job, JobAllocation, Node, Team
    from scheduling.executors.slurm_cli import Submission
    from scheduling.models import SlurmJob
    from telemetry.agent.slurm_handoff import SlurmJobTag

    now = timezone.now()
    team = Team.objects.get(slug="bench")
    owner = Job.objects.first().owner
    per_node = 8
    nodes = Node.objects.bulk_create(
        Node(name=f"db-only-{n}", switch_label="s2", gpu_model="A100")
        for n in range((args.reconcile_jobs + per_node - 1) // per_node)
    )
    gpus = Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-db-{node.pk}-{i}", model="A100", memory_mb=40960,
            default_power_limit_w=400, min_power_limit_w=100, max_power_limit_w=400)
        for node in nodes for i in range(per_node)
    )  # fmt: skip
    jobs = Job.objects.bulk_create(
        Job(owner=owner, team=team, name=f"rec-{i}", workload="resnet50", total_iterations=1000,
            global_batch_size=128, min_batch_size=128, max_batch_size=128,
            state=JobState.RUNNING, started_at=now)
        for i in range(args.reconcile_jobs)
    )  # fmt: skip
    allocations = JobAllocation.objects.bulk_create(
        JobAllocation(job=job, batch_size=128, started_at=now) for job in jobs
    )
    JobAllocation.gpus.through.objects.bulk_create(
        JobAllocation.gpus.through(joballocation_id=a.pk, gpu_id=g.pk)
        for a, g in zip(allocations, gpus, strict=False)
    )
    for job, alloc in zip(jobs, allocations, strict=True):
        Job.objects.filter(pk=job.pk).update(current_allocation=alloc)
    rows = []
    for job, alloc in tqdm(
        list(zip(jobs, allocations, strict=True)), desc="sbatch --hold", unit="job"
    ):
        slurm_id = executor.cli.submit_held(
            Submission(script="#!/bin/bash\n" + JOB_SCRIPT, name=f"wattflow-{job.pk}",
                       comment=SlurmJobTag(job.pk, alloc.pk).comment(), nodelist=["n1"],
                       gpus_per_node=1, output="/dev/null", export={"PATH": "/usr/bin:/bin"},
                       partition=executor.partition)
        )  # fmt: skip
        rows.append(SlurmJob(slurm_job_id=slurm_id, job=job, allocation=alloc, nodes="n1",
                             gpus_per_node=1, submitted_at=now, released_at=now))  # fmt: skip
    SlurmJob.objects.bulk_create(rows)
    try:
        t0 = time.perf_counter()
        report = executor.reconcile(now=timezone.now())
        first = time.perf_counter() - t0
        if report.errors or report.changes:
            sys.exit(f"bench_slurm: the reconciler should change nothing here: {report}")
        steady = []
        for _ in tqdm(range(args.reconcile_rounds), desc="reconcile", unit="round"):
            t0 = time.perf_counter()
            executor.reconcile(now=timezone.now())
            steady.append(time.perf_counter() - t0)
        squeue = []
        for _ in range(args.reconcile_rounds):
            t0 = time.perf_counter()
            executor.cli.jobs()
            squeue.append(time.perf_counter() - t0)
    finally:
        executor.cli.run("scancel", f"--partition={executor.partition}")
    return first, steady, squeue


if __name__ == "__main__":
    main()
