"""Traces and clusters the benchmarks do not use, derived from the shipped ones, for a
sweep of the simulator on shapes an independent reviewer could try (docs/benchmarks.md,
"A sweep of derived traces and clusters").

Writes into OUT (default /tmp/wattflow_derived), seeded and so the same on every run:

- ``elasticflow_sub120.csv``: 120 jobs of ``elasticflow_philly_876.csv`` drawn at random
  (seed 1), by submit time: the same arrivals, thinned to about one in seven;
- ``elasticflow_t0_80.csv``: 80 other jobs, all submitted at time 0;
- ``elasticflow_hugetiny.csv``: one job of 20 times its iterations on 64 GPUs at time 0,
  and 100 jobs of 1/200 of their iterations on one GPU, a minute apart;
- ``elasticflow_bursts.csv``: four bursts of 25 jobs, 10 s apart within a burst, the
  bursts 10 days apart;
- ``elasticflow_dups.csv``: 100 jobs in ten groups of ten, one submit time per group,
  two hours apart;
- ``n2g8_a100.json``: the 16 x 8 A100 cluster cut to 2 nodes of 8 GPUs.

    .venv/bin/python benchmarks/derived_traces.py --out /tmp/wattflow_derived
    nice .venv/bin/python -m scheduling.simulator \\
        --trace /tmp/wattflow_derived/elasticflow_bursts.csv \\
        --cluster data/clusters/n16g8_a100.json --policy powerflow \\
        --match-baseline fifo_lowclock,elastic --knowledge oracle --no-progress --out OUT
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT / "data" / "trace" / "elasticflow_philly_876.csv"
A100 = ROOT / "data" / "clusters" / "n16g8_a100.json"
DAY_S = 86_400


def _write(path: Path, rows: list[dict[str, str]], header: list[str]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


def derive(out: Path) -> list[Path]:
    """Write the derived traces and cluster into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    with PHILLY.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    header = list(rows[0])
    rng = random.Random(1)
    by_time = sorted(rng.sample(rows, 120), key=lambda r: float(r["submit_time"]))
    at_zero = [dict(r, submit_time="0") for r in rng.sample(rows, 80)]
    huge = dict(rows[1], job_id="huge", num_gpu="64", submit_time="0")
    huge["iteration"] = str(int(float(huge["iteration"]) * 20))
    tiny = [
        dict(r, job_id=f"t{i}", num_gpu="1", submit_time=str(60 * i))
        | {"iteration": str(max(1, int(float(r["iteration"]) // 200)))}
        for i, r in enumerate(rng.sample(rows, 100))
    ]
    bursts = [
        dict(r, job_id=f"b{k}_{i}", submit_time=str(k * 10 * DAY_S + i * 10))
        for k in range(4)
        for i, r in enumerate(rng.sample(rows, 25))
    ]
    grouped = sorted(rng.sample(rows, 100), key=lambda r: float(r["submit_time"]))
    groups = [dict(r, submit_time=str((i // 10) * 7200)) for i, r in enumerate(grouped)]
    written = []
    for name, subset in (
        ("elasticflow_sub120.csv", by_time),
        ("elasticflow_t0_80.csv", at_zero),
        ("elasticflow_hugetiny.csv", [huge, *tiny]),
        ("elasticflow_bursts.csv", bursts),
        ("elasticflow_dups.csv", groups),
    ):
        _write(out / name, subset, header)
        written.append(out / name)
    spec = json.loads(A100.read_text(encoding="utf-8"))
    spec.update(name="n2g8_a100", nodes_per_switch=2, description="2 nodes x 8 A100")
    (out / "n2g8_a100.json").write_text(json.dumps(spec) + "\n", encoding="utf-8")
    written.append(out / "n2g8_a100.json")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/wattflow_derived", help="folder to write into")
    args = parser.parse_args(argv)
    for path in derive(Path(args.out)):
        sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
