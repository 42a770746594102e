"""The demo's stand-in for a training job when it runs on Slurm (``WATTFLOW_DEMO_SLURM=1``).

Under the built-in agent a simulated agent "runs" replayed jobs itself; under Slurm the job is
a real process that Slurm starts and stops, and a replayed job has no training code. This
script is that process: it advances at the perf model's iteration time for its workload, batch
and GPU count on the demo's GPU model (``WATTFLOW_DEMO_GPU_MODEL``, default A100), reports its
iterations every second through the job client (``jobclient/wattflow_client.py``, into
``WATTFLOW_PROGRESS_FILE``, set by Wattflow's TaskProlog, with the time it reached them), and
exits 0 when ``WATTFLOW_TOTAL_ITERATIONS`` are done. On SIGTERM (a pause or a move) it exits 0
at once: Wattflow has its progress, and the next run starts from
``WATTFLOW_COMPLETED_ITERATIONS``. Imports only the pure scheduling core and the job client,
not Django.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "jobclient"))

import wattflow_client  # noqa: E402

from scheduling.core.perf_models import load_catalog  # noqa: E402
from scheduling.core.types import GpuConfig  # noqa: E402


def say(line: str) -> None:
    """One line of the job's output (Slurm appends it to the Wattflow job's output file)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    try:
        workload = os.environ["WATTFLOW_WORKLOAD"]
        batch = int(os.environ["WATTFLOW_BATCH_SIZE"])
        gpus = int(os.environ["WATTFLOW_GPU_COUNT"])
        total = float(os.environ["WATTFLOW_TOTAL_ITERATIONS"])
        done = float(os.environ.get("WATTFLOW_COMPLETED_ITERATIONS") or 0.0)
    except (KeyError, ValueError) as exc:
        sys.stderr.write(f"demo_slurm_job: missing or bad Wattflow variable: {exc}\n")
        return 2
    gpu_model = os.environ.get("WATTFLOW_DEMO_GPU_MODEL", "A100")
    try:
        iter_s = load_catalog().get(workload, gpu_model).iter_time_s(GpuConfig(gpus, batch))
    except KeyError:
        sys.stderr.write(f"demo_slurm_job: no perf model for {workload} on {gpu_model}\n")
        return 2
    job = wattflow_client.connect(handle_signals=False)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    say(f"{workload} batch {batch} on {gpus} GPUs: {done:.0f}/{total:.0f} iterations, "
        f"{iter_s * 1000:.1f} ms each")  # fmt: skip
    last = time.monotonic()
    while done < total:
        time.sleep(min(1.0, max(0.05, (total - done) * iter_s)))
        now = time.monotonic()
        done = min(total, done + (now - last) / iter_s)
        last = now
        job.report(round(done), force=True)
    say(f"done: {done:.0f} iterations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
