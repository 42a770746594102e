"""Replay a carbon-matched run's first period and ask, for causal bounds of the grid's
intensity, when a rule that keeps the cluster's idle floor to the period's end at that
bound would have had to stop every job, and whether the period would then have been kept
(docs/benchmarks.md, "The idle floor's last days").

At each stretch of the run's timeline (``OUT/*@*_timeline.csv``, the period from
``OUT/*_report.json``) the floor's carbon to the period's end is reserved as: the next
24 h at the grid's real intensity (the simulator's forecast), the rest at the mean of the
last 168 hours, except the last ``final`` days of the period at the bound: the dirtiest
24 h mean or the dirtiest hour, of the last week or since the run's start (the forecast's
hours included). The first stretch where what is left no longer pays that reserve, with
jobs still to run in the period, is where the rule stops them; the period then ends at
what was spent plus the floor's real carbon to its end. A crude bound of a rule's cost
(every job stopped at once; a policy would lower its allowances first)::

    PYTHONPATH=. .venv/bin/python benchmarks/idle_floor_replay.py OUT \\
        data/trace/elasticflow_philly_876.csv data/clusters/n16g8_a100.json US-CAL-CISO 6400

(6,400 W: 128 idle A100s at 50 W.)
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduling.core.pacing import dirtiest_mean  # noqa: E402
from scheduling.simulator.scenario import load_scenario  # noqa: E402

HOUR_S = 3600.0
DAY_S = 86400.0


RULES = {
    "dirtiest day, last week": lambda seen, fc: dirtiest_mean(seen[-168:] + fc, 24),
    "dirtiest hour, last week": lambda seen, fc: max(seen[-168:] + fc),
    "dirtiest day since the start": lambda seen, fc: dirtiest_mean(seen + fc, 24),
    "dirtiest hour since the start": lambda seen, fc: max(seen + fc),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the simulator's --out of a matched carbon run")
    parser.add_argument("trace")
    parser.add_argument("cluster")
    parser.add_argument("zone")
    parser.add_argument("floor_w", type=float, help="the cluster's idle draw, W")
    args = parser.parse_args()
    ci = load_scenario(args.trace, args.cluster, carbon_zone=args.zone).intensity
    report = json.loads(next(args.out.glob("*_report.json")).read_text())["comparisons"][0]
    end, limit = report["budget_period_end_s"], report["budget_co2_kg"] * 1000.0
    with next(args.out.glob("*@*_timeline.csv")).open() as handle:
        rows = list(csv.DictReader(handle))
    stretches = []  # (t0, t1, spent before t0, busy GPUs)
    used = 0.0
    for r in rows:
        t0, t1 = float(r["t0_s"]), float(r["t1_s"])
        if t0 >= end:
            break
        stretches.append((t0, t1, used, int(r["busy_gpus"])))
        used += float(r["co2_g"])
    out = sys.stdout.write
    out(f"period: {end / DAY_S:.3f} d, {limit / 1000:.3f} kg, spent {100 * used / limit:.4f}%\n")
    last = max((s for s in stretches if s[3] > 0), key=lambda s: s[0])
    out(f"jobs last ran at day {last[1] / DAY_S:.2f} ({(end - last[1]) / DAY_S:.2f} d before)\n")
    seen_all = [ci.ci_at(h * HOUR_S) for h in range(int(end // HOUR_S) + 1)]
    for final_d in (1.0, 3.0, 7.0, float("inf")):
        for name, rule in RULES.items():
            stop = None
            for k, (t0, _t1, spent, _busy) in enumerate(stretches):
                if not any(s[3] for s in stretches[k:]):
                    break
                seen = seen_all[: int(t0 // HOUR_S) + 1]
                fc = [ci.ci_at(t0 + h * HOUR_S) for h in range(1, 25)]
                fc_end = min(t0 + 24 * HOUR_S, end)
                beyond = max(end - fc_end, 0.0)
                final = min(final_d * DAY_S, beyond)
                mean = sum(seen[-168:]) / len(seen[-168:])
                keep = (
                    ci.co2_g(args.floor_w, t0, fc_end)
                    + args.floor_w * (rule(seen, fc) * final + mean * (beyond - final)) / 3.6e6
                )
                if limit - spent - keep <= 0.0:
                    stop = (t0, spent)
                    break
            label = f"last {final_d:g} d at the {name}"
            if stop is None:
                out(f"{label}: never stops the jobs\n")
                continue
            t, spent = stop
            total = spent + ci.co2_g(args.floor_w, t, end)
            lost = sum(s[3] * (s[1] - s[0]) for s in stretches if s[0] >= t) / HOUR_S
            out(
                f"{label}: stops them at day {t / DAY_S:.2f} ({(end - t) / DAY_S:.2f} d before); "
                f"the period then {100 * total / limit:.4f}%; {lost:.0f} GPU-hours of jobs moved\n"
            )


if __name__ == "__main__":
    main()
