"""How steady a job's measured speed is when the agent stamps progress with its own clock,
and when it sends the time the job reached its count (``ts`` in the progress file).

    nice .venv/bin/python benchmarks/bench_progress_times.py [--iterations 2500] [--runs 2]

Runs the numpy example (``jobclient/train_logreg.py``, a fixed sleep per step, so its true
speed is constant) under the real agent's process runner on a simulated GPU, with the
agent's cadence (a tick every ``--tick-s``, progress events at most every
``--post-interval-s``), twice per run: once as the agent now stamps progress, once with the
job's ``ts`` ignored (every event at the time the agent read the file, as before). The
server is not reachable, so every event lands in the agent's spool, read back here. Prints
the seconds per iteration of each interval after the first (the warm-up, which the service
leaves out), their median and spread, and the last interval against the median (the last
report comes after the job's checkpoint save).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from telemetry.agent import jobs as agent_jobs  # noqa: E402
from telemetry.agent.client import AgentClient  # noqa: E402
from telemetry.agent.loop import Agent, AgentConfig  # noqa: E402
from telemetry.agent.runners import ProcessRunner  # noqa: E402
from telemetry.agent.simulated import SimulatedBackend  # noqa: E402
from telemetry.agent.spool import Spool  # noqa: E402

EXAMPLE = ROOT / "jobclient" / "train_logreg.py"


def out(line: str) -> None:
    sys.stdout.write(line + "\n")


def run_once(args, work: Path, *, job_times: bool) -> list[tuple[float, float]]:
    """(iterations, event time in s) of every progress event of one run of the example."""
    backend = SimulatedBackend(node_name="bench", n_gpus=1, gpu_model="A100")
    # port 9 (discard) on localhost: nothing answers, so every message is spooled
    client = AgentClient("http://127.0.0.1:9", "t", Spool(work / "spool"))
    config = AgentConfig(node_name="bench", work_dir=work, post_interval_s=args.post_interval_s)
    runner = ProcessRunner(work_dir=work, stop_grace_s=30.0)
    agent = Agent(backend, client, config, runner=runner)
    original = agent_jobs.parse_progress
    if not job_times:
        agent_jobs.parse_progress = lambda text: _without_ts(original(text))
    try:
        agent.start_job(
            {
                "allocation_id": 1, "job_id": 1, "workload": "logreg",
                "command": f"exec {sys.executable} {EXAMPLE} --step-delay-s {args.step_s}",
                "gpu_uuids": [backend.gpus()[0].uuid], "gpu_count": 1, "batch_size": 64,
                "sm_clock_mhz": None, "power_limit_w": None,
                "checkpoint_dir": str(work / "ckpt"), "total_iterations": args.iterations,
                "completed_iterations": 0.0,
                "env": {"WATTFLOW_TOTAL_ITERATIONS": repr(args.iterations),
                        "WATTFLOW_COMPLETED_ITERATIONS": "0.0"},
            },
            datetime.now(UTC),
        )  # fmt: skip
        while agent.running_job_ids():
            started = time.monotonic()
            agent.send_events(agent.watch_jobs(datetime.now(UTC)))
            time.sleep(max(0.0, args.tick_s - (time.monotonic() - started)))
    finally:
        agent_jobs.parse_progress = original
    events = []
    for path in sorted((work / "spool").glob("*-events.json")):
        events.extend(json.loads(path.read_text())["body"]["events"])
    return [
        (float(e["iterations"]), datetime.fromisoformat(e["ts"]).timestamp())
        for e in events
        if e["kind"] == "progress"
    ]


def _without_ts(progress):
    return None if progress is None else progress._replace(at=None)


def per_iteration(points: list[tuple[float, float]]) -> list[float]:
    """Seconds per iteration of each interval between progress events, the first (the
    warm-up) left out."""
    out = [
        (t1 - t0) / (i1 - i0)
        for (i0, t0), (i1, t1) in zip(points, points[1:], strict=False)
        if i1 > i0
    ]
    return out[1:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=float, default=2500.0)
    parser.add_argument("--step-s", type=float, default=0.01, help="the example's sleep a step")
    parser.add_argument("--tick-s", type=float, default=1.0, help="the agent's tick")
    parser.add_argument("--post-interval-s", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    if not (args.iterations > 0 and args.step_s >= 0 and args.tick_s > 0 and args.runs > 0):
        parser.error("--iterations, --tick-s and --runs must be positive, --step-s not negative")
    out(
        f"example: {args.iterations:g} iterations, {args.step_s * 1e3:g} ms sleep a step; agent: "
        f"tick {args.tick_s:g} s, progress at most every {args.post_interval_s:g} s"
    )
    header = f"{'event time':<22}{'intervals':>10}{'median ms/it':>14}{'spread':>9}"
    out(header + f"{'min/med':>9}{'max/med':>9}{'last/med':>10}")
    for run in range(args.runs):
        for job_times in (False, True):
            with tempfile.TemporaryDirectory(prefix="wf-progress-") as tmp:
                times = per_iteration(run_once(args, Path(tmp), job_times=job_times))
            if len(times) < 3:
                sys.stderr.write("too few progress intervals: raise --iterations\n")
                return 1
            med = statistics.median(times)
            spread = statistics.pstdev(times) / statistics.fmean(times)
            label = ("the job's ts" if job_times else "the agent's read") + f", run {run + 1}"
            out(
                f"{label:<22}{len(times):>10}{med * 1e3:>14.3f}{spread:>9.1%}"
                f"{min(times) / med:>9.3f}{max(times) / med:>9.3f}{times[-1] / med:>10.3f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
