"""What one round at another batch would cost a job, on Zeus' sweeps at each GPU's default
(highest) power limit (docs/benchmarks.md, "A batch probe among a job's first five
observations"): for each (GPU, workload), its median batch ``b0`` and the probe at half or
double it, the share of the probe's time lost in useful samples,
``max(1 - G(b) / G(b0), 0)`` with ``G(b) = b / T(b) x efficiency(noise scale, b, b0)``
(``goodput.efficiency``), at noise scales b0 / 4, b0, 4 b0 and unknown.

    nice .venv/bin/python benchmarks/batch_probe_cost.py
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.core.goodput import efficiency  # noqa: E402
from scheduling.fitting import perf_data  # noqa: E402


def say(line: str) -> None:
    sys.stdout.write(line + "\n")


NOISE = (("b0/4", 0.25), ("b0", 1.0), ("4 b0", 4.0), ("unknown", None))


def main() -> int:
    rows = perf_data.read_zeus()
    top: dict[str, float] = defaultdict(float)
    for r in rows:
        top[r.gpu] = max(top[r.gpu], r.power_limit_w)
    epoch: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r.power_limit_w == top[r.gpu]:
            epoch[(r.gpu, r.workload)][r.batch_size] = r.time_per_epoch_s
    for rule, factor in (("half", 0.5), ("double", 2.0)):
        ratios, costs = [], defaultdict(list)
        for times in epoch.values():
            batches = sorted(times)
            b0 = batches[len(batches) // 2]
            b = round(b0 * factor)
            if b not in times:
                continue
            ratio = times[b0] / times[b]  # samples a second at b over at b0 (a fixed epoch)
            ratios.append(ratio)
            for name, scale in NOISE:
                noise = None if scale is None else scale * b0
                costs[name].append(max(1.0 - ratio * efficiency(noise, b, b0), 0.0))
        say(
            f"{rule}: {len(ratios)} sweeps, samples a second at the probe over at b0: median "
            f"{statistics.median(ratios):.2f}, {min(ratios):.2f}-{max(ratios):.2f}"
        )
        for name, _ in NOISE:
            c = costs[name]
            say(
                f"  noise scale {name:8} share of the probe's time lost: median "
                f"{statistics.median(c):.2f}, max {max(c):.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
