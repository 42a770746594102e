"""How much average JCT a carbon-matched run with team budgets could have had if its jobs
could choose when to start: an estimate that reads one simulator run's output
(``--match-baseline fifo_lowclock --team-budgets``) and, per team, lets each job pick one
of the two (energy, run time) pairs the run saw for it (the baseline's and the
candidate's) and a start time (every ``--step-s`` from its arrival to the period's end,
or the next period's start), minimising the team's summed JCT with the carbon it draws
inside the period at most the team's budget (what its jobs drew under the baseline).

The choice is a Lagrangian relaxation solved per team: each job takes the start and pair
minimising ``JCT + lambda * carbon``, and ``lambda`` (seconds per gram) is bisected to
the lowest at which the team's carbon fits its budget; the printed lambda is that price.
It is an estimate, not a bound: the jobs share no GPUs (optimistic), a job may only run
as one of the two runs ran it (pessimistic), and its draw is spread evenly over its run.
docs/benchmarks.md ("Team carbon budgets: when to start, not how fast") compares it with
GreenFlow's own prices::

    PYTHONPATH=. .venv/bin/python benchmarks/team_carbon_bound.py OUT ES

where ``OUT`` holds ``*_fifo_lowclock_jobs.csv`` and ``*greenflow*_jobs.csv`` of one
trace, and the period is the baseline's makespan (the simulator's matched period).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.core.carbon_data import carbon_file, read_electricity_maps_csv  # noqa: E402
from scheduling.simulator.carbon import HourlyIntensity  # noqa: E402

Option = tuple[float, float]  # (energy_j, run_s)


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as fh:
        return {row["job_id"]: row for row in csv.DictReader(fh)}


def _one(out: Path, pattern: str) -> Path:
    found = sorted(out.glob(pattern))
    if len(found) != 1:
        raise SystemExit(f"expected one {pattern} in {out}, found {len(found)}")
    return found[0]


def choose(
    jobs: list[tuple[float, list[Option]]],
    lam: float,
    *,
    intensity: HourlyIntensity,
    period_end_s: float,
    step_s: float,
) -> tuple[float, float]:
    """Summed JCT and in-period carbon of every job's choice at price ``lam``."""
    total_s = total_g = 0.0
    for arrival_s, options in jobs:
        best: tuple[float, float, float] | None = None
        for energy_j, run_s in options:
            # the next period: no carbon of this one, the wait to its start
            late = period_end_s - arrival_s + run_s
            if best is None or late < best[0]:
                best = (late, late, 0.0)
            start = arrival_s
            while start < period_end_s:
                end = min(start + run_s, period_end_s)
                grams = intensity.co2_g(energy_j / run_s, start, end) if run_s > 0 else 0.0
                jct = start - arrival_s + run_s
                value = jct + lam * grams
                if value < best[0]:
                    best = (value, jct, grams)
                start += step_s
        assert best is not None
        total_s += best[1]
        total_g += best[2]
    return total_s, total_g


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the simulator's --out folder of one trace")
    p.add_argument("zone", help="the run's --carbon-zone")
    p.add_argument("--start", default="2022-06-01", help="the run's start date (UTC)")
    p.add_argument("--step-s", type=float, default=300.0, help="start times' spacing")
    args = p.parse_args(argv)
    if not args.step_s > 0:
        raise SystemExit("--step-s must be positive")
    base = _rows(_one(args.out, "*_fifo_lowclock_jobs.csv"))
    cand = _rows(_one(args.out, "*greenflow*_jobs.csv"))
    start = datetime.fromisoformat(args.start).replace(tzinfo=UTC)
    points = read_electricity_maps_csv(
        carbon_file(ROOT / "data", args.zone), kind="direct", zone=args.zone
    )
    intensity = HourlyIntensity(points, start=start)
    period_end_s = max(float(r["finish_s"]) for r in base.values())
    teams: dict[str, list[tuple[float, list[Option]]]] = defaultdict(list)
    budget_g: dict[str, float] = defaultdict(float)
    base_jct: dict[str, float] = defaultdict(float)
    cand_jct: dict[str, float] = defaultdict(float)
    for job_id, b in base.items():
        c = cand[job_id]
        options = [
            (float(r["energy_j"]), float(r["finish_s"]) - float(r["first_start_s"])) for r in (b, c)
        ]
        teams[b["team"]].append((float(b["submit_s"]), options))
        budget_g[b["team"]] += float(b["co2_g"])
        base_jct[b["team"]] += float(b["jct_s"])
        cand_jct[b["team"]] += float(c["jct_s"])
    kw = {"intensity": intensity, "period_end_s": period_end_s, "step_s": args.step_s}
    out = sys.stdout
    out.write(
        "team          jobs  budget g  lambda s/g  sum JCT h: baseline  candidate  estimate\n"
    )
    est_total = 0.0
    for team, jobs in sorted(teams.items()):
        lam = 0.0
        jct_s, grams = choose(jobs, 0.0, **kw)
        if grams > budget_g[team]:
            lo, hi = 0.0, 1.0
            while choose(jobs, hi, **kw)[1] > budget_g[team] and hi < 1e12:
                hi *= 4.0
            for _ in range(40):
                mid = (lo + hi) / 2.0
                if choose(jobs, mid, **kw)[1] > budget_g[team]:
                    lo = mid
                else:
                    hi = mid
            lam = hi
            jct_s, grams = choose(jobs, lam, **kw)
        est_total += jct_s
        out.write(
            f"{team:12s} {len(jobs):5d} {budget_g[team]:9.1f} {lam:11.4g}"
            f"  {base_jct[team] / 3600:18.1f} {cand_jct[team] / 3600:10.1f}"
            f" {jct_s / 3600:9.1f}\n"
        )
    base_total = sum(base_jct.values())
    ratio = base_total / sum(cand_jct.values())
    out.write(
        f"avg JCT ratio against the baseline: candidate {ratio:.3f}x,"
        f" estimate {base_total / est_total:.3f}x\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
