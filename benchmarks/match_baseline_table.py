"""Markdown table rows from a simulator report written with ``--match-baseline``.

Usage: ``.venv/bin/python benchmarks/match_baseline_table.py OUT/<stem>_report.json``

One row per matched baseline, in the columns of docs/benchmarks.md's section "Issue 13,
point 1 (B)": the baseline's average JCT / p99 / energy (carbon, for a carbon match), the
candidate's ratio at that energy or carbon (baseline / candidate, above 1: the candidate
is faster), its p99, its energy (carbon) inside the budget's period with the worst
period's share, periods over budget, resizes
(candidate / baseline) and the share of the contention-free bound's gain reached:
(baseline's average JCT - candidate's) / (baseline's - the bound's at that energy).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

H = 3600.0


def _h(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds / H:.2f}"


def rows(report: dict) -> list[str]:
    runs = report["runs"]
    comparisons = report["comparisons"]
    # An energy match (PowerFlow) counts kWh, a carbon match (GreenFlow) kg CO2e.
    carbon = bool(comparisons) and comparisons[0]["kind"] == "carbon"
    unit, spent, in_period, budget = (
        ("kg", "co2_kg", "co2_in_period_kg", "budget_co2_kg")
        if carbon
        else ("kWh", "energy_kwh", "energy_in_period_kwh", "budget_energy_kwh")
    )
    who = comparisons[0]["candidate"] if comparisons else "candidate"
    lines = [
        f"| baseline | its avg JCT [h] / p99 [h] / {'carbon' if carbon else 'energy'} [{unit}] "
        f"| {who} avg JCT [h] | ratio | {who} p99 [h] "
        f"| {unit} in the period / budget (worst period) "
        f"| periods over budget | resizes {who} / baseline "
        "| share of the bound's gain (best possible) |",
        "|---|---|---:|---:|---:|---|---:|---|---|",
    ]
    for c in comparisons:
        base_name = c["baseline"]
        base = runs[base_name]
        cand = runs[f"{c['candidate']}@{base_name}-{c['kind']}"]
        ratio = c["avg_jct_ratio"]
        ratio_s = "n/a" if ratio is None else f"**{ratio:.3f}x**"
        worst = c["candidate_max_period_share"]
        inside = (
            f"{c['candidate_' + in_period]:,.1f} / {c[budget]:,.1f} "
            f"({'n/a' if worst is None else f'{100 * worst:.1f}%'})"
        )
        if not c["candidate_finished_in_period"]:
            inside += f", past the period: {c['candidate_' + spent]:,.1f} in all"
        if c["candidate_unfinished_jobs"]:
            inside += f"; {c['candidate_unfinished_jobs']} unfinished"
        b_jct, k_jct, bound = (
            c["baseline_avg_jct_s"],
            c["candidate_avg_jct_s"],
            c.get("bound_avg_jct_s"),
        )
        share = "n/a"
        # Averages over different sets of jobs do not compare (the ratio is n/a then too).
        finished = not c["candidate_unfinished_jobs"] and not c.get("baseline_unfinished_jobs")
        if finished and b_jct and k_jct and bound is not None and b_jct > bound:
            possible = c.get("best_possible_ratio")
            share = f"{100 * (b_jct - k_jct) / (b_jct - bound):.0f}% of {possible:.3f}x"
        lines.append(
            f"| {base_name} | {_h(base['avg_jct_s'])} / {_h(base['p99_jct_s'])} / "
            f"{base[spent]:,.1f} | {_h(k_jct)} | {ratio_s} | {_h(cand['p99_jct_s'])} | "
            f"{inside} | {c['candidate_periods_over_budget']} | "
            f"{cand['n_resizes']} / {base['n_resizes']} | {share} |"
        )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="match_baseline_table.py", description=__doc__.strip().splitlines()[0]
    )
    parser.add_argument("report", type=Path, help="OUT/<stem>_report.json of --match-baseline")
    path = parser.parse_args(argv).report
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return _refuse(f"cannot read {path}: {exc}")
    if not isinstance(report, dict) or not {"runs", "comparisons"} <= set(report):
        return _refuse(f"{path} is not a simulator report (no 'runs' and 'comparisons')")
    if not report["comparisons"]:
        return _refuse(f"{path} has no comparison: it was written without --match-baseline")
    sys.stdout.write("\n".join(rows(report)) + "\n")
    return 0


def _refuse(line: str) -> int:
    sys.stderr.write(f"match_baseline_table.py: error: {line}\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
