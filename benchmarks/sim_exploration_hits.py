"""How close simulated exploration lands to the ground truth's energy-optimal power limit.

    .venv/bin/python -m scheduling.simulator --trace data/trace/elasticflow_philly_876.csv \\
        --cluster data/clusters/n16g8_a100.json --policy zeus --knowledge learned \\
        --max-jobs 120 --no-progress --out OUT
    .venv/bin/python benchmarks/sim_exploration_hits.py OUT [--max-jobs 120]

Reads the run's per-job CSV (``exploration_result_w``) and, for each job that explored,
compares the limit it settled on with the energy-optimal limit of the catalog model that
advanced it (the simulator's truth) at its requested GPUs and batch, on the same 25 W grid.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.core.exploration import best_limit, limit_grid, predicted_energy_j  # noqa: E402
from scheduling.core.types import GpuConfig  # noqa: E402
from scheduling.simulator.scenario import load_scenario  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the simulator's --out folder")
    parser.add_argument("--trace", default="data/trace/elasticflow_philly_876.csv")
    parser.add_argument("--cluster", default="data/clusters/n16g8_a100.json")
    parser.add_argument("--gpu-model", default="A100")
    parser.add_argument("--max-jobs", type=int, default=120)
    args = parser.parse_args()
    scenario = load_scenario(Path(args.trace), Path(args.cluster), max_jobs=args.max_jobs)
    specs = {j.job_id: j for j in scenario.jobs}
    (jobs_csv,) = args.out.glob("*_jobs.csv")
    hits, excess = 0, []
    with jobs_csv.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if not row.get("exploration_result_w"):
                continue
            job = specs[row["job_id"]]
            truth = scenario.catalog.get(job.workload, args.gpu_model)
            cfg = GpuConfig(job.requested_gpus, job.global_batch)
            optimum = best_limit(truth, cfg, limit_grid(*truth.power_limits_w))
            chosen = float(row["exploration_result_w"])
            hits += abs(chosen - optimum) <= 25.0 + 1e-9
            ratio = predicted_energy_j(truth, cfg, chosen) / predicted_energy_j(truth, cfg, optimum)
            excess.append(ratio - 1.0)
    if not excess:
        sys.stdout.write("no job explored\n")
        return 1
    n = len(excess)
    sys.stdout.write(
        f"{n} jobs settled; within 25 W of the truth's optimum: {100 * hits / n:.0f}%; energy "
        f"above it mean {100 * sum(excess) / n:.2f}%, max {100 * max(excess):.1f}%\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
