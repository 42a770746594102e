"""Tabulate `simulate --knowledge both` runs: learned against oracle, per policy and per workload.

    .venv/bin/python benchmarks/knowledge_table.py /tmp/s12/fifo /tmp/s12/powerflow ...

Each folder is one ``--out`` of ``python -m scheduling.simulator ... --knowledge both``.
The first table has one row per policy run (a matched run such as ``powerflow@fifo-energy``
is the policy's row; its baseline is skipped when the baseline has its own folder). The
second, with ``--workloads``, gives avg JCT learned / oracle per workload from the per-job
CSVs, to see which jobs slow down when the policy sees learned models.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path


def _h(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds / 3600:.3f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.3f}"


class Refused(Exception):
    """A folder the table cannot read; the message is one line."""


def _runs(folder: Path) -> list[tuple[str, str, dict]]:
    """(stem, run name, learned entry with its oracle beside it) for the folder's policy.

    Refuses a report that is not of ``--knowledge both`` (an oracle-only run's entry was
    printed as the learned one) and a folder with no run of its policy (it printed a
    header and nothing else)."""
    policy = folder.name
    found = []
    for report in sorted(folder.glob("*_report.json")):
        stem = report.name.removesuffix("_report.json")
        data = json.loads(report.read_text(encoding="utf-8"))
        modes = data.get("scenario", {}).get("knowledge")
        for name, entry in data["runs"].items():
            if name == policy or name.startswith(policy + "@"):
                if modes != ["learned", "oracle"]:
                    raise Refused(
                        f"{report}: knowledge {modes}, not a --knowledge both run (learned "
                        "first, oracle beside it)"
                    )
                found.append((stem, name, entry))
    if not found:
        raise Refused(
            f"{folder}: no run of {policy} (a folder is one --out of the simulator, named "
            "after its policy)"
        )
    return found


def _jobs(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return {row["job_id"]: row for row in csv.DictReader(handle)}


def _per_workload(folder: Path, stem: str, name: str) -> list[str]:
    learned = _jobs(folder / f"{stem}_{name}_jobs.csv")
    oracle = _jobs(folder / f"{stem}_{name}_oracle_jobs.csv")
    by_workload: dict[str, list[tuple[float, float]]] = {}
    for job_id, row in learned.items():
        other = oracle.get(job_id)
        if other is None or not row["jct_s"] or not other["jct_s"]:
            continue
        by_workload.setdefault(row["workload"], []).append(
            (float(row["jct_s"]), float(other["jct_s"]), row, other)
        )
    lines = []
    for workload, pairs in sorted(by_workload.items()):
        lo = [p[0] for p in pairs]
        or_ = [p[1] for p in pairs]
        slower = sum(1 for p in pairs if p[0] > 1.05 * p[1])
        gpu_l = statistics.mean(float(p[2]["attained_gpu_s"]) for p in pairs)
        gpu_o = statistics.mean(float(p[3]["attained_gpu_s"]) for p in pairs)
        wait_l = statistics.mean(float(p[2]["queueing_delay_s"] or 0) for p in pairs)
        wait_o = statistics.mean(float(p[3]["queueing_delay_s"] or 0) for p in pairs)
        resize_l = statistics.mean(int(p[2]["n_resizes"]) for p in pairs)
        resize_o = statistics.mean(int(p[3]["n_resizes"]) for p in pairs)
        lines.append(
            f"| {name} | {workload} | {len(pairs)} | {_h(statistics.mean(or_))} | "
            f"{_h(statistics.mean(lo))} | {_ratio(statistics.mean(lo), statistics.mean(or_))} | "
            f"{slower} | {_h(gpu_l)} / {_h(gpu_o)} | {_h(wait_l)} / {_h(wait_o)} | "
            f"{resize_l:.1f} / {resize_o:.1f} |"
        )
    return lines


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--workloads", action="store_true", help="per-workload table too")
    parser.add_argument(
        "--summary",
        action="store_true",
        help="one row per policy over all folders: median, min, max of avg JCT and energy l/o",
    )
    args = parser.parse_args()
    try:
        found = [(folder, _runs(folder)) for folder in args.folders]
    except Refused as exc:
        sys.stderr.write(f"knowledge_table.py: error: {exc}\n")
        sys.exit(2)
    _emit(
        "| policy | avg JCT learned (h) | oracle (h) | l/o | p99 JCT learned / oracle (h) | "
        "energy learned / oracle (kWh) | makespan learned / oracle (h) | "
        "unfinished l, o | wall s l / o |"
    )
    _emit("|---|---|---|---|---|---|---|---|---|")
    details = []
    ratios: dict[str, list[tuple[float, float]]] = {}
    for folder, runs in found:
        for stem, name, learned in runs:
            oracle = learned.get("oracle", {})
            _emit(
                f"| {name} | {_h(learned['avg_jct_s'])} | {_h(oracle.get('avg_jct_s'))} | "
                f"{_ratio(learned['avg_jct_s'], oracle.get('avg_jct_s'))} | "
                f"{_h(learned['p99_jct_s'])} / {_h(oracle.get('p99_jct_s'))} | "
                f"{learned['energy_kwh']:.1f} / {oracle.get('energy_kwh', float('nan')):.1f} | "
                f"{_h(learned['makespan_s'])} / {_h(oracle.get('makespan_s'))} | "
                f"{learned['n_unfinished']}, {oracle.get('n_unfinished')} | "
                f"{learned['wall_s']:.0f} / {oracle.get('wall_s', float('nan')):.0f} |"
            )
            if oracle.get("avg_jct_s") and oracle.get("energy_kwh"):
                ratios.setdefault(folder.name, []).append(
                    (
                        learned["avg_jct_s"] / oracle["avg_jct_s"],
                        learned["energy_kwh"] / oracle["energy_kwh"],
                    )
                )
            if args.workloads:
                details.extend(_per_workload(folder, stem, name))
    if args.summary:
        _emit("")
        _emit("| policy | runs | avg JCT l/o median | min | max | energy l/o median | min | max |")
        _emit("|---|---|---|---|---|---|---|---|")
        for policy, pairs in sorted(ratios.items()):
            jct = [a for a, _ in pairs]
            energy = [b for _, b in pairs]
            _emit(
                f"| {policy} | {len(pairs)} | {statistics.median(jct):.3f} | {min(jct):.3f} | "
                f"{max(jct):.3f} | {statistics.median(energy):.3f} | {min(energy):.3f} | "
                f"{max(energy):.3f} |"
            )
    if details:
        _emit("")
        _emit(
            "| run | workload | jobs | avg JCT oracle (h) | learned (h) | l/o | jobs >5% slower | "
            "GPU-h per job l / o | queueing h l / o | resizes per job l / o |"
        )
        _emit("|---|---|---|---|---|---|---|---|---|---|")
        _emit("\n".join(details))


if __name__ == "__main__":
    main()
