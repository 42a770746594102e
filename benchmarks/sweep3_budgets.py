"""Check every budget's periods of simulator runs from what the engine drew, team budgets
included (the third sweep; ``sim_sweep_check.py`` sums a fixed *cluster* budget only).

    OPENBLAS_CORETYPE=Haswell PYTHONPATH=. nice .venv/bin/python \\
        benchmarks/sweep3_budgets.py CASES --work DIR

``CASES`` holds one simulator command a line (as ``sim_sweep_check.py`` reads them).
Each command runs once, in this process, through ``scheduling.simulator.cli.main``; every
``Simulator`` it builds is watched: the stretches the engine charges (their start, the
energy and carbon drawn, and per team what its jobs drew) are kept, and after the run,
for each budget the run had (a cluster's or a team's, fixed or matched), they are summed
here into the budget's periods by the period bounds recomputed from its spec, then:

* every period of a ``pause_jobs`` budget at most its energy and carbon limits (a
  cluster budget's period may be over only where its powered idle GPUs alone draw more
  than the limit over the period, which no plan can keep);
* no stretch crosses a period boundary of any budget;
* a team's stretches add up to what its jobs drew (``JobRecord.energy_j`` / ``co2_g``),
  and the cluster's to the run's energy and carbon: nothing drawn goes unbudgeted;
* every figure finite and not negative; every unfinished job of a run that exited 0
  named as never runnable.

Prints one line per command and a count (the command's own output is kept in
``DIR/cNNN/stdout.txt``); exits 1 if any broke.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import shlex
import sys
from pathlib import Path

from scheduling.simulator import cli, engine
from scheduling.simulator.budgets import BudgetLedger

REL = 1e-9


def _watch() -> list[dict]:
    """Patch the engine so that each run's ledger and charges are kept; returns the list
    the runs are appended to."""
    runs: list[dict] = []
    charge = BudgetLedger.charge
    run = engine.Simulator.run

    def charging(self, t0, energy_j, co2_g, by_team):
        self._sweep3_charges.append(
            (t0, energy_j, co2_g, {k: tuple(v) for k, v in by_team.items()})
        )
        return charge(self, t0, energy_j, co2_g, by_team)

    def running(self):
        self.budgets._sweep3_charges = []
        result = run(self)
        runs.append(
            {
                "specs": self.budgets.specs,
                "charges": self.budgets._sweep3_charges,
                "result": result,
                "idle_w": self._idle_all_w,
                "intensity": self.intensity,
            }
        )
        return result

    BudgetLedger.charge = charging
    engine.Simulator.run = running
    return runs


def _period(spec, t: float) -> int:
    k = math.floor((t - spec.period_start_s) / spec.period_s)
    # the bounds as the spec computes them (each start is the previous end)
    while t >= spec.bounds(k)[1]:
        k += 1
    while k > 0 and t < spec.bounds(k)[0]:
        k -= 1
    return k


def check_run(run: dict, problems: list[str], label: str) -> None:
    result = run["result"]
    for name, value in (
        ("energy_j", result.energy_j),
        ("co2_g", result.co2_g),
        ("idle_energy_j", result.idle_energy_j),
    ):
        if not math.isfinite(value) or value < 0:
            problems.append(f"{label}: {name} {value}")
    for rec in result.jobs:
        for name in ("energy_j", "co2_g", "attained_gpu_s"):
            value = getattr(rec, name)
            if not math.isfinite(value) or value < -1e-9:
                problems.append(f"{label}: job {rec.spec.job_id} {name} {value}")
        if rec.finish_s is not None and not (
            math.isfinite(rec.finish_s) and rec.finish_s >= rec.spec.submit_time_s
        ):
            problems.append(f"{label}: job {rec.spec.job_id} finish {rec.finish_s}")
    charges = run["charges"]
    timeline = result.timeline
    for spec in run["specs"]:
        spent: dict[int, list[float]] = {}
        for step in timeline:
            k = _period(spec, step.t0_s)
            end = spec.bounds(k)[1]
            if step.t0_s >= spec.period_start_s and step.t1_s > end + 1e-6 * max(1.0, end):
                problems.append(
                    f"{label}: {spec.budget_id} stretch [{step.t0_s:.3f}, {step.t1_s:.3f}] "
                    f"crosses its period end {end:.3f}"
                )
        for t0, e, c, by_team in charges:
            if t0 < spec.period_start_s:
                continue
            k = _period(spec, t0)
            if not spec.renews and k > 0:
                continue
            if spec.team is None:
                de, dc = e, c
            else:
                de, dc = by_team.get(spec.team, (0.0, 0.0))
            first = [spec.energy_used_j, spec.co2_used_g] if k == 0 else [0.0, 0.0]
            cell = spent.setdefault(k, first)
            cell[0] += de
            cell[1] += dc
        if spec.hard_limit_action.value != "pause_jobs":
            continue
        for k, (e, c) in sorted(spent.items()):
            start, end = spec.bounds(k)
            for used, limit, unit in (
                (e, spec.energy_limit_j, "J"),
                (c, spec.co2_limit_g, "g"),
            ):
                if limit is None or used <= limit * (1 + REL) + 1e-6:
                    continue
                if spec.team is None:
                    idle_w = run["idle_w"]
                    floor = (
                        idle_w * (end - start)
                        if unit == "J"
                        else run["intensity"].co2_g(idle_w, start, end)
                    )
                    if floor > limit:
                        continue  # the idle GPUs alone: no plan could keep it
                problems.append(
                    f"{label}: {spec.budget_id} period {k} [{start:.0f}, {end:.0f}) spent "
                    f"{used:.3f} {unit} of {limit:.3f} ({used / limit:.6f})"
                )
        if spec.team is not None:
            jobs = [r for r in result.jobs if r.spec.team == spec.team]
            want_e = sum(r.energy_j for r in jobs)
            got_e = sum(e for e, _ in spent.values()) - (spec.energy_used_j if 0 in spent else 0)
            if abs(want_e - got_e) > 1e-6 * max(want_e, 1.0) + 1e-3:
                problems.append(
                    f"{label}: team {spec.team} charged {got_e:.1f} J, its jobs drew {want_e:.1f} J"
                )
        else:
            got_e = sum(e for e, _ in spent.values()) - spec.energy_used_j
            if abs(result.energy_j - got_e) > 1e-6 * max(result.energy_j, 1.0) + 1e-3:
                problems.append(
                    f"{label}: cluster charged {got_e:.1f} J, the run drew {result.energy_j:.1f} J"
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases")
    parser.add_argument("--work", required=True)
    parser.add_argument("--only", type=int, help="run only case number N (1-based)")
    opts = parser.parse_args()
    lines = [
        ln.strip()
        for ln in Path(opts.cases).read_text(encoding="utf-8").splitlines()
        if ln.strip() and not ln.strip().startswith("#")
    ]
    runs = _watch()
    counts = {"clean": 0, "problems": 0}
    for n, line in enumerate(lines, start=1):
        if opts.only and n != opts.only:
            continue
        runs.clear()
        argv = [*shlex.split(line), "--no-progress", "--out", str(Path(opts.work) / f"c{n:03d}")]
        out, err = io.StringIO(), io.StringIO()
        problems: list[str] = []
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = cli.main(argv)
        except Exception as exc:  # noqa: BLE001 - a crash is what is looked for
            rc = "crash"
            problems.append(f"{type(exc).__name__}: {exc}")
        for k, run in enumerate(runs):
            check_run(run, problems, f"run {k}")
            result = run["result"]
            unnamed = [
                r.spec.job_id
                for r in result.jobs
                if r.finish_s is None and r.spec.job_id not in (result.never_runnable or {})
            ]
            if unnamed and rc == 0:
                problems.append(f"run {k}: {len(unnamed)} unfinished job(s) unnamed, exit 0")
        work = Path(opts.work) / f"c{n:03d}"
        work.mkdir(parents=True, exist_ok=True)
        (work / "stdout.txt").write_text(out.getvalue() + err.getvalue(), encoding="utf-8")
        counts["clean" if not problems else "problems"] += 1
        budgets = sum(len(r["specs"]) for r in runs)
        sys.stdout.write(
            f"[{n:03d}] exit {rc} {'ok' if not problems else 'PROBLEM'} "
            f"({len(runs)} runs, {budgets} budgets): {line}\n"
        )
        if rc not in (0, "crash"):
            sys.stdout.write(f"      stderr: {err.getvalue().strip()[:300]}\n")
        for p in problems:
            sys.stdout.write(f"      - {p}\n")
        sys.stdout.flush()
    sys.stdout.write(f"{counts['clean']} clean, {counts['problems']} with problems\n")
    return 0 if not counts["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
