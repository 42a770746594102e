"""What the agent's NVML calls cost on a real GPU: registering (``NvmlBackend()``: the
device handles and what each GPU reports, its lockable clocks included) and one sample of
every GPU (``NvmlBackend.read``, which the agent makes every ``--sample-interval-s``).

    python3 benchmarks/device/nvml_read_cost.py [--reads 500]

Read-only: nothing is set. Prints the median and 99th percentile of each, per GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from telemetry.agent.backends import NvmlBackend  # noqa: E402


def quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=500)
    parser.add_argument("--inits", type=int, default=5)
    args = parser.parse_args()
    inits = []
    for _ in range(args.inits):
        t0 = time.perf_counter()
        backend = NvmlBackend()
        inits.append(time.perf_counter() - t0)
        n_gpus = len(backend.gpus())
        backend.close()
    backend = NvmlBackend()
    reads = []
    for _ in range(args.reads):
        t0 = time.perf_counter()
        backend.read(datetime.now(UTC))
        reads.append(time.perf_counter() - t0)
    backend.close()
    for name, values in (("register (NvmlBackend())", inits), ("one sample (read)", reads)):
        med, p99 = quantiles(values)
        sys.stdout.write(
            f"{name:26} {len(values):4d} runs, {n_gpus} GPU(s): median {med * 1e3:.2f} ms, "
            f"p99 {p99 * 1e3:.2f} ms, per GPU {med * 1e3 / n_gpus:.2f} ms\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
