"""Run simulator commands twice and check what their outputs promise (a reviewer's sweep).

    PYTHONPATH=. .venv/bin/python benchmarks/sim_sweep_check.py CASES --work DIR

``CASES`` holds one simulator command line a line (the arguments after ``python -m
scheduling.simulator``; ``#`` starts a comment; ``--out`` and ``--no-progress`` are
added). Each command runs twice, with ``PYTHONHASHSEED`` 1 and 2, and is checked for:

* its exit: 0, or 1 / 2 with one ``error:`` line on stderr and no traceback;
* determinism: both runs' stdout (wall times aside) and every file they wrote agree;
* per job (``*_jobs.csv``): submit <= first start <= finish, JCT and queueing delay as
  those differences, energy and carbon not negative, GPU-seconds held no more than its
  ``max_gpus`` allow, and JCT no shorter than the job's
  contention-free time (``scenario_bound``: its wait for a first plan plus its fastest
  configuration alone on the cluster), recomputed here from the same arguments;
* the accounting: the jobs' energy plus the idle energy is the run's energy, the
  timeline's stretches add up to the run's energy and carbon, are contiguous, never busy
  more GPUs than the cluster has, and carry carbon at an intensity the zone's data has
  (none without a zone);
* a fixed cluster budget: the timeline's energy (carbon) inside each period, summed here,
  at most the limit, unless the command's output names the idle floor; the CLI's
  ``worst spent`` agrees with that sum;
* a matched comparison: the ratio no better than ``best_possible_ratio``; a period over
  only beside the idle-floor words;
* ``--knowledge both``: each run has its ``learned`` and ``oracle`` entries and their
  ratios are the quotients of the two;
* every unfinished job named as never runnable, or the command exited 1.

Prints one line per command (``ok`` or what broke) and a count. Pure Python; no Django.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from scheduling.simulator.bounds import scenario_bound
from scheduling.simulator.cli import build_parser, scenario_of

REL = 1e-6
WALL = re.compile(r"\(\d+\.\d s\)")


def run_twice(argv: list[str], work: Path, timeout_s: float) -> list[dict]:
    runs = []
    for seed in ("1", "2"):
        out = work / f"h{seed}"
        cmd = [sys.executable, "-m", "scheduling.simulator", *argv, "--no-progress"]
        cmd += ["--out", str(out)]
        env = {**os.environ, "PYTHONHASHSEED": seed}
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=timeout_s, check=False
            )
            rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired:
            rc, stdout, stderr = "timeout", "", ""
        files = {}
        if out.is_dir():
            for path in sorted(out.iterdir()):
                text = path.read_text(encoding="utf-8", errors="replace")
                if path.name.endswith(".json"):
                    text = re.sub(r'"wall_s": [0-9.e+-]+', '"wall_s": 0', text)
                files[path.name] = text
        runs.append(
            {
                "rc": rc,
                "stdout": WALL.sub("(t)", stdout.replace(str(out), "OUT")),
                "stderr": stderr.replace(str(out), "OUT"),
                "files": files,
            }
        )
    return runs


def scenario_and_bound(argv: list[str]):
    args = build_parser().parse_args([*argv, "--out", "/nonexistent"])
    scenario = scenario_of(args)
    baselines = [b.strip() for b in (args.match_baseline or "").split(",") if b.strip()]
    bound = scenario_bound(
        scenario,
        ones_batches="ones" in [args.policy, *baselines],
        budgeted=bool(args.energy_budget_kwh or args.carbon_budget_kg or args.match_baseline),
    )
    return args, scenario, bound


def close(a: float, b: float, rel: float = REL, abs_: float = 1e-6) -> bool:
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_)


def check_run(name: str, files: dict, args, scenario, bound, problems: list[str]) -> None:
    """Check one run's ``<stem>_<name>_{jobs.csv,timeline.csv,summary.json}``."""
    summary = json.loads(files[f"{name}_summary.json"])["summary"]
    jobs = list(csv.DictReader(files[f"{name}_jobs.csv"].splitlines()))
    timeline = list(csv.DictReader(files[f"{name}_timeline.csv"].splitlines()))
    frontier = {f.job_id: f for f in bound.jobs}
    submit = {j.job_id: j.submit_time_s for j in scenario.jobs}
    max_gpus = {j.job_id: max(j.max_gpus, j.requested_gpus) for j in scenario.jobs}
    tag = name.split("_", 2)[-1] if "_" in name else name

    def num(row, key):
        value = row[key]
        return None if value == "" else float(value)

    job_energy = 0.0
    for row in jobs:
        jid = row["job_id"]
        sub, start, fin = num(row, "submit_s"), num(row, "first_start_s"), num(row, "finish_s")
        e, c = num(row, "energy_j"), num(row, "co2_g")
        job_energy += e
        if e < -1e-9 or c < -1e-9:
            problems.append(f"{tag}: job {jid} energy {e} J / co2 {c} g negative")
        if not close(sub, submit[jid]):
            problems.append(f"{tag}: job {jid} submit {sub} against the trace's {submit[jid]}")
        if start is not None and start < sub - 1e-6:
            problems.append(f"{tag}: job {jid} started at {start} before its submit {sub}")
        held = num(row, "attained_gpu_s")
        until = fin if fin is not None else float(summary["makespan_s"]) + min(submit.values())
        if start is not None and held > max_gpus[jid] * (until - start) * (1 + 1e-9) + 1e-6:
            problems.append(
                f"{tag}: job {jid} held {held:.0f} GPU-s from {start:.0f} to {until:.0f} s, "
                f"more than its max_gpus {max_gpus[jid]} allow"
            )
        if fin is None:
            continue
        if start is None or fin < start - 1e-6:
            problems.append(f"{tag}: job {jid} finished at {fin}, first start {start}")
        jct = num(row, "jct_s")
        if not close(jct, fin - sub):
            problems.append(f"{tag}: job {jid} jct {jct} != finish - submit {fin - sub}")
        floor = frontier[jid].wait_s + frontier[jid].time_s[0]
        if jct < floor * (1 - 1e-9) - 1e-6:
            problems.append(
                f"{tag}: job {jid} JCT {jct:.1f} s below its contention-free {floor:.1f} s"
            )
        if num(row, "shared_s") == 0 and e < frontier[jid].least_gpu_energy_j * (1 - 1e-6):
            problems.append(
                f"{tag}: job {jid} drew {e:.0f} J, below its least "
                f"{frontier[jid].least_gpu_energy_j:.0f} J"
            )
    energy_j = summary["energy_kwh"] * 3.6e6
    idle_j = summary["idle_energy_kwh"] * 3.6e6
    if not close(job_energy + idle_j, energy_j, 1e-6, 1.0):
        problems.append(
            f"{tag}: jobs {job_energy:.0f} J + idle {idle_j:.0f} J != total {energy_j:.0f} J"
        )
    if summary["gpu_utilisation"] > 1 + 1e-9:
        problems.append(f"{tag}: utilisation {summary['gpu_utilisation']}")
    # The timeline begins where the run did: the round of the first arrival
    # (``state.run_start_s``), not time 0.
    t_prev = float(timeline[0]["t0_s"]) if timeline else 0.0
    if timeline and submit and t_prev > min(submit.values()) + 1e-6:
        problems.append(f"{tag}: the timeline begins at {t_prev}, after the first arrival")
    tl_e, tl_c = 0.0, 0.0
    n_gpus = summary["n_gpus"]
    intensities = list(getattr(scenario.intensity, "_ci", ())) if scenario.zone else []
    for k, step in enumerate(timeline):
        t0, t1 = float(step["t0_s"]), float(step["t1_s"])
        e, c = float(step["energy_j"]), float(step["co2_g"])
        if not close(t0, t_prev) or t1 < t0:
            problems.append(f"{tag}: timeline row {k} [{t0}, {t1}] after {t_prev}")
            break
        if int(step["busy_gpus"]) > n_gpus:
            problems.append(f"{tag}: timeline row {k} busy {step['busy_gpus']} of {n_gpus}")
        if e < -1e-9 or c < -1e-9:
            problems.append(f"{tag}: timeline row {k} energy {e} co2 {c}")
        if scenario.zone is None and c != 0:
            problems.append(f"{tag}: timeline row {k} carbon {c} g without a zone")
        if intensities and e > 1.0:
            ci = c / (e / 3.6e6)
            if not (min(intensities) * (1 - 1e-6) <= ci <= max(intensities) * (1 + 1e-6)):
                problems.append(
                    f"{tag}: timeline row {k} at {ci:.1f} g/kWh, outside the zone's "
                    f"{min(intensities):.1f}-{max(intensities):.1f}"
                )
        tl_e += e
        tl_c += c
        t_prev = t1
    if not close(tl_e, energy_j, 1e-6, 1.0):
        problems.append(f"{tag}: timeline {tl_e:.0f} J != total {energy_j:.0f} J")
    if not close(tl_c, summary["co2_kg"] * 1000, 1e-6, 1e-3):
        problems.append(f"{tag}: timeline {tl_c:.3f} g != total {summary['co2_kg'] * 1000:.3f} g")
    if summary["n_unfinished"] == 0 and jobs:
        end_s = summary["makespan_s"] + min(submit.values())  # makespan runs from the first
        if end_s < bound.min_makespan_s * (1 - 1e-9) - 1e-6:
            problems.append(f"{tag}: last finish {end_s:.0f} s before {bound.min_makespan_s:.0f} s")


def check_command(argv: list[str], runs: list[dict]) -> list[str]:
    problems: list[str] = []
    a, b = runs
    for run in runs:
        if run["rc"] == "timeout":
            return ["timed out"]
        if "Traceback" in run["stderr"]:
            problems.append("traceback: " + run["stderr"].strip().splitlines()[-1])
        if run["rc"] not in (0, 1, 2):
            problems.append(f"exit {run['rc']}")
        if run["rc"] != 0:
            lines = run["stderr"].strip().splitlines()
            if len(lines) != 1 or not lines[0].startswith("error: "):
                problems.append(f"exit {run['rc']} with stderr {run['stderr'][:200]!r}")
    if a["rc"] != b["rc"] or a["stdout"] != b["stdout"]:
        problems.append("the two runs' exit or stdout differ")
    if a["files"].keys() != b["files"].keys():
        problems.append("the two runs wrote different files")
    else:
        diff = [n for n in a["files"] if a["files"][n] != b["files"][n]]
        if diff:
            problems.append(f"the two runs' files differ: {diff[:3]}")
    if a["rc"] not in (0, 1) or problems:
        return problems
    args, scenario, bound = scenario_and_bound(argv)
    files = a["files"]
    report_name = next(n for n in files if n.endswith("_report.json"))
    report = json.loads(files[report_name])
    stem = report_name[: -len("_report.json")]
    stdout = a["stdout"]
    modes = report["scenario"]["knowledge"]
    for run_name, entry in report["runs"].items():
        for mode in modes:
            suffix = "" if mode == modes[0] else f"_{mode}"
            name = f"{stem}_{run_name}{suffix}"
            if f"{name}_summary.json" not in files:
                problems.append(f"{run_name} [{mode}]: no files")
                continue
            check_run(name, files, args, scenario, bound, problems)
            summary = json.loads(files[f"{name}_summary.json"])["summary"]
            if summary["n_unfinished"] and not summary["never_runnable"] and a["rc"] != 1:
                problems.append(f"{run_name} [{mode}]: unfinished jobs but exit {a['rc']}")
            if f"{run_name} [{mode}]" not in stdout:
                problems.append(f"{run_name} [{mode}] not printed")
        if len(modes) == 2:
            other = entry.get(modes[1])
            if other is None:
                problems.append(f"{run_name}: no {modes[1]} entry")
                continue
            ratios = entry["learned_vs_oracle"]
            for key, field in (("avg_jct", "avg_jct_s"), ("energy", "energy_kwh")):
                want = entry[field] / other[field] if entry[field] and other[field] else None
                got = ratios[key]
                if (want is None) != (got is None) or (want and not close(want, got)):
                    problems.append(f"{run_name}: learned_vs_oracle {key} {got} != {want}")
    for comp in report["comparisons"]:
        for mode_line in [comp, *(comp.get(m) for m in modes[1:])]:
            if not mode_line:
                continue
            ratio, best = mode_line["avg_jct_ratio"], mode_line["best_possible_ratio"]
            if ratio is not None and best is not None and ratio > best * (1 + 1e-9):
                problems.append(
                    f"{mode_line['candidate']}@{mode_line['baseline']} [{mode_line['knowledge']}]"
                    f": ratio {ratio:.4f} above the best possible {best:.4f}"
                )
    # Budget lines on stdout: over 100% only beside the idle-floor words.
    for line in stdout.splitlines():
        m = re.search(r"worst (?:spent|period) ([0-9.]+)%", line)
        if m and float(m.group(1)) > 100.0 and "idle GPUs alone" not in line:
            problems.append("over budget: " + line.strip()[:160])
    if (args.energy_budget_kwh or args.carbon_budget_kg) and not args.team_budgets:
        for mode in modes:
            suffix = "" if mode == modes[0] else f"_{mode}"
            name = f"{stem}_{args.policy}{suffix}"
            summary_tl = _worst(files[f"{name}_timeline.csv"], args, scenario)
            m = re.search(rf"\[{mode}\] \d+ budget period\(s\); worst spent ([0-9.]+)%(.*)", stdout)
            if m is None:
                problems.append(f"[{mode}] no budget line")
                continue
            printed = float(m.group(1)) / 100
            if abs(printed - summary_tl) > 0.0015 and abs(printed - summary_tl) > 1e-3 * printed:
                problems.append(
                    f"[{mode}] worst spent printed {printed:.4f}, timeline says {summary_tl:.4f}"
                )
            if summary_tl > 1 + 1e-9 and "idle GPUs alone" not in m.group(2):
                problems.append(f"[{mode}] a period at {summary_tl:.4f} of its budget, unnamed")
    return problems


def _worst(timeline_text: str, args, scenario) -> float:
    if args.budget_period_h:
        period = args.budget_period_h * 3600.0
    else:
        period = max(j.submit_time_s for j in scenario.jobs) + 7 * 86400.0
    limit = (
        args.energy_budget_kwh * 3.6e6 if args.energy_budget_kwh else args.carbon_budget_kg * 1000
    )
    key = "energy_j" if args.energy_budget_kwh else "co2_g"
    spent: dict[int, float] = {}
    for step in csv.DictReader(timeline_text.splitlines()):
        k = int(math.floor(float(step["t0_s"]) / period + 1e-9))
        spent[k] = spent.get(k, 0.0) + float(step[key])
    return max((v / limit for v in spent.values()), default=0.0)


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases")
    parser.add_argument("--work", required=True)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--only", type=int, help="run only case number N (1-based)")
    opts = parser.parse_args()
    lines = [
        ln.strip()
        for ln in Path(opts.cases).read_text(encoding="utf-8").splitlines()
        if ln.strip() and not ln.strip().startswith("#")
    ]
    counts = {"clean": 0, "problems": 0}
    exits: dict[str, int] = {}
    for i, line in enumerate(lines, start=1):
        if opts.only and i != opts.only:
            continue
        argv = shlex.split(line)
        work = Path(opts.work) / f"c{i:03d}"
        subprocess.run(["rm", "-rf", str(work)], check=True)
        work.mkdir(parents=True)
        runs = run_twice(argv, work, opts.timeout_s)
        problems = check_command(argv, runs)
        rc = runs[0]["rc"]
        exits[str(rc)] = exits.get(str(rc), 0) + 1
        first_err = runs[0]["stderr"].strip().splitlines()[-1:] if rc else []
        status = "ok" if not problems else "PROBLEM"
        counts["clean" if not problems else "problems"] += 1
        say(f"[{i:03d}] exit {rc} {status}: {line}")
        for err in first_err:
            say(f"      stderr: {err[:300]}")
        for p in problems:
            say(f"      - {p}")
    say(f"{counts['clean']} clean, {counts['problems']} with problems; exits {exits}")
    return 0 if not counts["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
