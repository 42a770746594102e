"""Command line of the simulator: ``python -m scheduling.simulator`` and, through the same
``add_arguments``/``execute``, ``python manage.py simulate``.

    python -m scheduling.simulator --trace data/trace/elasticflow_philly_876.csv \\
        --cluster data/clusters/n16g8_a100.json --policy powerflow --match-baseline fifo

A plain run simulates one policy (optionally under ``--energy-budget-kwh`` or
``--carbon-budget-kg``). ``--match-baseline a,b`` runs each baseline, then the policy
with the baseline's energy (``--budget-kind carbon``: carbon) as its budget, and reports
the average-JCT ratio. Results go to ``--out`` as CSV and JSON (and PNG with ``--plots``).
Bad arguments exit with status 2 and one line saying what is wrong; a run that stopped
early with jobs unfinished (nothing progressed for the stall limit) writes its results and
exits with status 1 and one line saying which and why.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from scheduling.core.carbon_data import CarbonDataError
from scheduling.core.types import G_PER_KG, J_PER_KWH, MIN_CARBON_LIMIT_KG, MIN_ENERGY_LIMIT_KWH
from scheduling.simulator.bounds import JctBound, scenario_bound
from scheduling.simulator.budgets import idle_floor_exceeds
from scheduling.simulator.cluster_spec import ClusterSpecError
from scheduling.simulator.compare import KINDS, Comparison, budgets_from
from scheduling.simulator.engine import BudgetSpec, SimConfig, SimResult
from scheduling.simulator.metrics import strict_json, summarise, write_results
from scheduling.simulator.scenario import (
    BATCH_EFFICIENCY,
    REPO_DATA,
    TEAM_RULES,
    Scenario,
    load_scenario,
    powered_idle_w,
    run_policy,
    split_by_team,
    with_teams_by_workload,
)
from scheduling.simulator.traces import TraceError

# The most rounds the longest job may need alone at its fastest: the engine plans every
# round a job is active, so a job of 1e12 iterations (or of a batch of 1e9) ran for hours,
# as did 0.01 s rounds, without a word. 10^5 rounds of 300 s are 347 days; the traces' longest
# jobs take 24.
MAX_ROUNDS = 100_000
# The largest --congestion: spread jobs' communication 100 times as long as measured.
MAX_CONGESTION = 100.0


class UsageError(Exception):
    """Bad arguments or inputs; the message is the one line the user sees."""


class StoppedEarly(Exception):
    """A run stopped with jobs unfinished (its results are written but incomplete); the
    message is the one line the user sees."""


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors, on one line
        raise UsageError(message)


def _positive(kind, upper: float = math.inf, *, lower: float = 0.0, lower_is: str = ""):
    """An argument type: a finite ``kind`` above 0, at least ``lower`` (``lower_is`` says
    what that is) and at most ``upper``."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            # (a count refused "0.5" and "1e3" as "not a number": they are, but not whole)
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite positive number")
        if value < lower:
            note = f" ({lower_is})" if lower_is else ""
            raise argparse.ArgumentTypeError(f"{text!r} is less than {lower:g}{note}")
        if value > upper:
            raise argparse.ArgumentTypeError(f"{text!r} is more than {upper:g}")
        return value

    return parse


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number, not negative")
    return value


def _share_below_one(text: str) -> float:
    """A share of a job's predicted JCT, from 0 up to (not including) 1."""
    value = _non_negative(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be below 1 (a share of the JCT)")
    return value


def _noise(text: str) -> float:
    """A log-normal sigma: 1 already spreads a measurement over 0.37-2.7x of the truth (1000
    overflowed the first observation, and the first co-located pair)."""
    value = _non_negative(text)
    if value > 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is more than 1 (a log-normal sigma)")
    return value


def _start(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO datetime") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", required=True, help="trace CSV (data/trace/...)")
    parser.add_argument("--cluster", required=True, help="cluster spec (data/clusters/*.json)")
    parser.add_argument("--policy", required=True, help="policy name from the core's registry")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--energy-budget-kwh",
        type=_positive(float, lower=MIN_ENERGY_LIMIT_KWH, lower_is="1 Wh"),
        help="cluster energy budget (at least 0.001: 1 Wh)",
    )
    budget.add_argument(
        "--carbon-budget-kg",
        type=_positive(float, lower=MIN_CARBON_LIMIT_KG, lower_is="1 g"),
        help="cluster carbon budget (at least 0.001: 1 g)",
    )
    budget.add_argument(
        "--match-baseline",
        help="comma-separated baselines whose spend becomes the policy's budget",
    )
    parser.add_argument("--budget-kind", choices=KINDS, help="what --match-baseline matches")
    parser.add_argument(
        "--budget-period-h",
        type=_positive(float, upper=10 * 8760.0),  # ten years
        help="budget period for a fixed budget (default: until the last submission + 1 week)",
    )
    parser.add_argument(
        "--team-budgets",
        action="store_true",
        help="one budget per team instead of one for the cluster: matched, each team gets what "
        "its jobs drew under the baseline; fixed, the limit is split in proportion to each "
        "team's jobs' least possible energy (team budgets pay their jobs' GPUs, not idle ones)",
    )
    parser.add_argument(
        "--team-rule",
        choices=TEAM_RULES,
        default="trace",
        help="a job's team: 'trace' (philly_week: its virtual cluster; other traces have one "
        "team) or 'workload' (its model class)",
    )
    parser.add_argument(
        "--horizon-factor",
        type=_positive(float),
        default=1.0,
        help="matched budget period = factor x the baseline's makespan (default 1); "
        "below 1, each period gets that share of the baseline's spend",
    )
    parser.add_argument("--carbon-zone", help="Electricity Maps zone of data/carbon (ES, ...)")
    parser.add_argument("--carbon-kind", choices=("direct", "lca"), default="direct")
    parser.add_argument(
        "--start", type=_start, default=datetime(2022, 6, 1, tzinfo=UTC), help="UTC of time 0"
    )
    parser.add_argument(
        "--round-length-s", type=_positive(float, upper=86400.0), default=300.0
    )  # a day at most
    parser.add_argument("--restart-cost-s", type=_non_negative, default=30.0)
    parser.add_argument("--power-off-idle-nodes", action="store_true")
    parser.add_argument("--replan-on-events", action="store_true")
    parser.add_argument(
        "--congestion",
        # (1e300 made spread jobs crawl and a 25-job run never end; the benchmarks use 4)
        type=_positive(float, upper=MAX_CONGESTION),
        default=1.0,
        help="factor on inter-node communication time of spread jobs (default 1: as measured)",
    )
    parser.add_argument(
        "--colocation-noise",
        type=_noise,
        default=0.0,
        help="sigma of seeded log-normal noise on co-located throughput (GPU sharing)",
    )
    parser.add_argument(
        "--knowledge",
        choices=("both", "learned", "oracle"),
        default="both",
        help="what policies know: 'learned', each job's online model fitted from simulated "
        "observations; 'oracle', the catalog that advances jobs; 'both' (default) runs each "
        "policy both ways and reports learned first, oracle beside it",
    )
    parser.add_argument(
        "--measurement-noise",
        type=_noise,
        default=0.05,
        help="learned: sigma of seeded log-normal noise on each observed iteration time and "
        "power (default 0.05)",
    )
    parser.add_argument(
        "--exploration-budget",
        type=_share_below_one,
        default=0.03,
        help="learned: share of a job's predicted JCT that exploring power limits may cost, "
        "for policies that explore (zeus); 0 turns it off (default 0.03)",
    )
    parser.add_argument(
        "--batch-probe",
        action="store_true",
        help="learned: a job exploring limits that may change its batch (known efficiency, "
        "a range allowing twice its batch) runs one round at twice it (off by default)",
    )
    parser.add_argument(
        "--policy-param",
        action="append",
        metavar="NAME=VALUE",
        help="constructor parameter of --policy (not the baselines), repeatable; "
        "e.g. pricing=false",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the philly_week mapping")
    parser.add_argument("--max-gpus", type=_positive(int), default=64, help="elastic cap per job")
    parser.add_argument(
        "--max-batch-factor",
        type=_positive(int),
        help="let jobs grow their batch up to N x the trace's (each batch counted in useful "
        "samples: see --batch-efficiency)",
    )
    parser.add_argument(
        "--batch-efficiency",
        choices=BATCH_EFFICIENCY,
        default="learned",
        help="learned: each workload's statistical-efficiency curve (default); free: every "
        "batch equally efficient, the optimistic model before goodput",
    )
    parser.add_argument(
        "--arrival-scale",
        type=_positive(float),
        help="multiply submit times by this factor (0.25: arrivals 4x as dense)",
    )
    parser.add_argument("--max-jobs", type=_positive(int), help="simulate only the first N jobs")
    parser.add_argument("--data-dir", default=str(REPO_DATA), help="the repository's data/")
    parser.add_argument("--out", default="var/simulations", help="folder for CSV/JSON/PNG")
    parser.add_argument("--plots", action="store_true", help="also write PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="python -m scheduling.simulator",
        description="Replay a job trace through the scheduling core.",
    )
    add_arguments(parser)
    return parser


def _progress_bar(total: int, desc: str, enabled: bool):
    if not enabled:
        return None, None
    bar = tqdm(total=total, desc=desc, unit="job", dynamic_ncols=True, leave=False)

    def hook(finished: int, t_s: float) -> None:
        if finished != bar.n:
            bar.update(finished - bar.n)
            bar.set_postfix_str(f"t={t_s / 86400:.1f} d", refresh=False)

    return bar, hook


def _run(
    scenario: Scenario,
    policy: str,
    *,
    budgets: tuple[BudgetSpec, ...],
    progress: bool,
    params: dict[str, Any] | None = None,
):
    label = f"{policy} ({scenario.config.knowledge})"
    bar, hook = _progress_bar(len(scenario.jobs), label, progress)
    started = time.perf_counter()
    try:
        result = run_policy(scenario, policy, budgets=budgets, progress=hook, policy_params=params)
    finally:
        if bar is not None:
            bar.close()
    return result, time.perf_counter() - started


def _hours(seconds: float | None, width: int, digits: int) -> str:
    """Seconds as hours, or "n/a" (no job finished) in the same width."""
    return f"{seconds / 3600:{width}.{digits}f}" if seconds else f"{'n/a':>{width}}"


def _line(name: str, summary: dict[str, Any], wall_s: float, *, carbon: bool = True) -> str:
    """One run's figures; ``carbon`` false (no ``--carbon-zone``: nothing prices a kWh) prints
    its carbon as "n/a", not a 0.0 kg a reader takes for clean power."""
    co2 = f"{summary['co2_kg']:9.1f} kg" if carbon else f"{'n/a':>9}   "
    return (
        f"{name:<28} avg JCT {_hours(summary['avg_jct_s'], 9, 3)} h  "
        f"p99 {_hours(summary['p99_jct_s'], 9, 2)} h  "
        f"energy {summary['energy_kwh']:10.1f} kWh  carbon {co2}  "
        f"util {summary['gpu_utilisation']:.3f}  unfinished {summary['n_unfinished']}  "
        f"({wall_s:.1f} s)"
    )


def scenario_of(args: argparse.Namespace) -> Scenario:
    """The scenario the parsed arguments describe (the trace on the cluster, with the
    run's settings and team rule); raises what the loaders raise on bad input."""
    config = SimConfig(
        round_length_s=args.round_length_s,
        restart_cost_s=args.restart_cost_s,
        power_off_idle_nodes=args.power_off_idle_nodes,
        replan_on_events=args.replan_on_events,
        congestion=args.congestion,
        colocation_noise=args.colocation_noise,
        seed=args.seed,
        measurement_noise=args.measurement_noise,
        exploration_budget=args.exploration_budget or None,
        exploration_batch_probe=args.batch_probe,
        max_rounds=MAX_ROUNDS,
    )
    scenario = load_scenario(
        args.trace,
        args.cluster,
        data_dir=args.data_dir,
        carbon_zone=args.carbon_zone,
        carbon_kind=args.carbon_kind,
        start=args.start,
        seed=args.seed,
        max_gpus=args.max_gpus,
        max_batch_factor=args.max_batch_factor,
        arrival_scale=args.arrival_scale,
        batch_efficiency=args.batch_efficiency,
        config=config,
        max_jobs=args.max_jobs,
    )
    if args.team_rule == "workload":
        scenario = with_teams_by_workload(scenario)
    return scenario


def execute(args: argparse.Namespace, *, stdout: TextIO | None = None) -> dict[str, Any]:
    """Run what the arguments ask for; raises :class:`UsageError` with one line."""
    stdout = stdout or sys.stdout
    # Checked whether or not the run reads it (an Elasticflow trace without a carbon zone
    # reads nothing from it): a missing folder was taken without a word.
    data_dir = Path(args.data_dir)
    if not data_dir.exists():
        raise UsageError(f"--data-dir {args.data_dir}: no such folder")
    if not data_dir.is_dir():
        raise UsageError(f"--data-dir {args.data_dir}: not a folder")
    # An empty list of baselines is refused (``_baselines``), not read as none given: ''
    # ran the policy with no budget at all.
    _baselines(args)
    if args.budget_kind and not args.match_baseline:
        raise UsageError("--budget-kind only applies with --match-baseline")
    if args.budget_period_h and not (args.energy_budget_kwh or args.carbon_budget_kg):
        # A matched budget's period is the baseline's makespan x --horizon-factor; without
        # any budget the option was ignored without a word.
        raise UsageError(
            "--budget-period-h only applies with --energy-budget-kwh or --carbon-budget-kg"
        )
    if args.carbon_budget_kg and not args.carbon_zone:
        raise UsageError("--carbon-budget-kg needs --carbon-zone (carbon is zero without one)")
    if args.budget_period_h and args.round_length_s > args.budget_period_h * 3600.0:
        # A round plans and paces for its whole length while the engine cuts it at each
        # period's end: a 2-hour round reserved two hours of idle draw out of a 1-hour
        # period and no job fitted (101 of 160 jobs never finished).
        raise UsageError(
            f"--round-length-s {args.round_length_s:g} is longer than the budget period "
            f"(--budget-period-h {args.budget_period_h:g}, {args.budget_period_h * 3600:g} "
            "s): a round must fit in a period"
        )
    kind = args.budget_kind or ("carbon" if args.policy == "greenflow" else "energy")
    if args.match_baseline and kind == "carbon" and not args.carbon_zone:
        raise UsageError("a carbon-matched comparison needs --carbon-zone")
    _check_policies([args.policy, *(_baselines(args) or [])])
    params = _policy_params(args.policy, args.policy_param or [])
    try:
        scenario = scenario_of(args)
    except (TraceError, ClusterSpecError, CarbonDataError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if not scenario.jobs:
        raise UsageError("the trace has no jobs")
    # ``ones`` grows batches that other policies keep: its runs get a bound with those. A
    # budgeted run plans between rounds too (period edges, probes, the hard-limit watch).
    bound = scenario_bound(
        scenario,
        ones_batches="ones" in [args.policy, *_baselines(args)],
        budgeted=bool(args.energy_budget_kwh or args.carbon_budget_kg or args.match_baseline),
    )
    _check_rounds(bound, args.round_length_s)
    if not args.out.strip():
        raise UsageError("--out must name a folder")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)  # before the runs, not after them
    except OSError as exc:
        raise UsageError(f"--out {out}: {exc.strerror or exc}") from None
    progress = not args.no_progress
    stem = f"{Path(args.trace).stem}_{scenario.spec.name}"
    modes = ("learned", "oracle") if args.knowledge == "both" else (args.knowledge,)
    scenarios = {
        mode: replace(scenario, config=replace(scenario.config, knowledge=mode)) for mode in modes
    }
    report: dict[str, Any] = {
        "scenario": {
            **scenario.meta,
            "knowledge": list(modes),
            "measurement_noise": args.measurement_noise if "learned" in modes else None,
        },
        "policy_params": params,
        "bound": {
            "avg_jct_s": bound.avg_jct_s,
            "min_makespan_s": bound.min_makespan_s,
            "min_energy_kwh": bound.min_energy_j / J_PER_KWH,
            "floor_energy_kwh": bound.floor_energy_j / J_PER_KWH,
        },
        "runs": {},
        "comparisons": [],
    }
    # Per knowledge mode, the results by run name (plots show the first mode's).
    results: dict[str, dict[str, SimResult]] = {mode: {} for mode in modes}
    # Runs that stopped with jobs unfinished, but not because those can never run on this
    # cluster (named below as they are found; the run ended once only they were left).
    stopped: list[tuple[str, SimResult]] = []

    def record(mode: str, name: str, result: SimResult, wall_s: float) -> None:
        summary = summarise(result)
        suffix = "" if mode == modes[0] else f"_{mode}"
        meta = {**scenario.meta, "run": name, "knowledge": mode}
        write_results(result, out, name=f"{stem}_{name}{suffix}", meta=meta)
        entry = {**summary, "wall_s": wall_s, "knowledge": mode}
        results[mode][name] = result
        if mode == modes[0]:
            report["runs"][name] = entry
        else:
            # The first mode's figures stay at the top of the run (what existing readers
            # take), the other's beside them, with the ratios learned / oracle.
            first = report["runs"][name]
            first[mode] = entry
            first["learned_vs_oracle"] = _ratios(first, entry)
        stdout.write(
            _line(f"{name} [{mode}]", summary, wall_s, carbon=bool(args.carbon_zone)) + "\n"
        )
        if result.stopped_with_runnable_jobs:
            stopped.append((f"{name} [{mode}]", result))
        stuck = result.never_runnable
        if stuck:
            ids = sorted(stuck)
            shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
            when = (
                "it stalled with other jobs left"
                if result.stopped_with_runnable_jobs
                else "the run stopped when only they were left"
            )
            stdout.write(
                f"  {len(ids)} job(s) can never run on this cluster under {name} ({shown}); "
                f"{when}. Job {ids[0]}: {stuck[ids[0]]}\n"
            )

    baselines = _baselines(args)
    if baselines:
        for base in baselines:
            name = f"{args.policy}@{base}-{kind}"
            lines = {}
            for mode in modes:
                if base not in results[mode]:
                    result, wall = _run(scenarios[mode], base, budgets=(), progress=progress)
                    record(mode, base, result, wall)
                if all(r.first_start_s is None for r in results[mode][base].jobs):
                    # Its run ended where it began, and a budget period ending at its end
                    # stopped the comparison with a traceback (ValueError).
                    raise UsageError(
                        f"--match-baseline {base} started no job on this cluster, so it sets "
                        f"no budget to match ({results[mode][base].stopped_why or 'none ran'})"
                    )
                budgets = budgets_from(
                    results[mode][base],
                    kind,
                    horizon_factor=args.horizon_factor,
                    per_team=args.team_budgets,
                    idle_w=powered_idle_w(scenarios[mode]),
                    intensity=scenarios[mode].intensity,
                )
                _check_period(budgets[0], args.round_length_s, args.horizon_factor, base)
                result, wall = _run(
                    scenarios[mode], args.policy, budgets=budgets, progress=progress, params=params
                )
                record(mode, name, result, wall)
                comparison = Comparison(
                    kind, base, args.policy, budgets, results[mode][base], result
                )
                line = {**comparison.report(bound), "knowledge": mode}
                line["per_team"] = bool(args.team_budgets)
                lines[mode] = line
                # As a fixed budget's line does: periods over, and those the idle GPUs
                # alone put over (a matched carbon budget in a dirtier period than the
                # baseline's said only "worst period 102.2%").
                over = _overspent(result.budget_periods, bound.idle_power_w, scenarios[mode])
                _write_comparison(stdout, args.policy, base, kind, mode, line, over)
                # and those no plan could keep, counted as a fixed budget's run counts them
                # (the comparison's line and its run's entry had no count)
                entry = report["runs"][name]
                entry = entry if mode == modes[0] else entry[mode]
                _note_unkeepable(
                    stdout, mode, result.budget_periods, bound.idle_power_w, scenarios[mode], line
                )
                entry["budget_periods_unkeepable"] = line["budget_periods_unkeepable"]
            line = lines[modes[0]]
            for mode in modes[1:]:
                line[mode] = lines[mode]
            report["comparisons"].append(line)
    else:
        budgets: tuple[BudgetSpec, ...] = ()
        if args.energy_budget_kwh or args.carbon_budget_kg:
            period_h = args.budget_period_h
            period_end_s = (
                period_h * 3600.0
                if period_h
                else max(j.submit_time_s for j in scenario.jobs) + 7 * 86400.0
            )
            whole = BudgetSpec(
                period_end_s=period_end_s,
                energy_limit_j=args.energy_budget_kwh * J_PER_KWH
                if args.energy_budget_kwh
                else None,
                co2_limit_g=args.carbon_budget_kg * G_PER_KG if args.carbon_budget_kg else None,
            )
            budgets = split_by_team(whole, bound, scenario.jobs) if args.team_budgets else (whole,)
            # A cluster budget pays its powered idle GPUs (the bound's idle draw is 0 when
            # idle nodes power off): one that the idle draw alone exceeds no plan can keep.
            # (from where the run begins: the idle cluster before its first job is not the
            # run's, ``state.run_start_s``)
            begins_s = min(max(whole.period_start_s, bound.start_s), whole.period_end_s)
            floor_j = bound.idle_power_w * (whole.period_end_s - begins_s)
            if whole.energy_limit_j and not args.team_budgets and floor_j > whole.energy_limit_j:
                stdout.write(
                    f"  note: the cluster's idle GPUs alone draw {floor_j / J_PER_KWH:.1f} "
                    f"kWh a period, more than the {args.energy_budget_kwh:g} kWh budget; "
                    "every period will be over unless idle nodes are powered off "
                    "(--power-off-idle-nodes)\n"
                )
            floor_g = scenario.intensity.co2_g(bound.idle_power_w, begins_s, whole.period_end_s)
            if whole.co2_limit_g and not args.team_budgets and floor_g > whole.co2_limit_g:
                stdout.write(
                    f"  note: the cluster's idle GPUs alone emit {floor_g / G_PER_KG:.3g} kg "
                    f"CO2e in the first period, more than the {args.carbon_budget_kg:g} kg "
                    "budget; periods whose grid is as dirty will be over unless idle nodes "
                    "are powered off (--power-off-idle-nodes)\n"
                )
        for mode in modes:
            result, wall = _run(
                scenarios[mode], args.policy, budgets=budgets, progress=progress, params=params
            )
            record(mode, args.policy, result, wall)
            periods = result.budget_periods
            if periods:
                worst = max((p.share for p in periods if p.share is not None), default=None)
                stdout.write(
                    f"  [{mode}] {len(periods)} budget period(s); worst spent {_share(worst)} "
                    f"of its budget{_overspent(periods, bound.idle_power_w, scenarios[mode])}\n"
                )
                entry = report["runs"][args.policy]
                entry = entry if mode == modes[0] else entry[mode]
                _note_unkeepable(stdout, mode, periods, bound.idle_power_w, scenarios[mode], entry)
    results_first = results[modes[0]]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}_report.json").write_text(strict_json(report) + "\n", encoding="utf-8")
    if args.plots:
        from scheduling.simulator.plots import plot_jct_cdf, plot_power_energy

        plot_jct_cdf(results_first, out / f"{stem}_jct_cdf.png", title=scenario.name)
        plot_power_energy(results_first, out / f"{stem}_power_energy.png", title=scenario.name)
    stdout.write(
        f"no policy can beat avg JCT {bound.avg_jct_s / 3600:.3f} h, nor finish every job "
        f"with less than {bound.min_energy_j / J_PER_KWH:.1f} kWh (contention-free bound)\n"
    )
    if not args.carbon_zone:
        stdout.write("carbon: n/a without --carbon-zone (a zone of data/carbon, e.g. ES)\n")
    stdout.write(f"results in {out}/{stem}_*\n")
    if stopped:
        # A run that stopped early reads like a finished one in the table (its unfinished
        # jobs aside): --restart-cost-s 1e12 stalled every resized job, and exited 0.
        name, result = stopped[0]
        unfinished = sum(1 for r in result.jobs if r.finish_s is None)
        others = f" (and {len(stopped) - 1} other run(s))" if len(stopped) > 1 else ""
        raise StoppedEarly(
            f"{name} stopped early with {unfinished} of {len(result.jobs)} jobs unfinished"
            f"{others}: {result.stopped_why}; its results are incomplete"
        )
    return report


def _check_period(budget: BudgetSpec, round_length_s: float, factor: float, base: str) -> None:
    """Refuse a matched budget period shorter than a round, as such a ``--budget-period-h``
    is refused: a round plans for its whole length, so no job fitted a period's budget.
    ``--horizon-factor 0.001`` gave 12 s periods to 300 s rounds and the run never ended;
    a one-job trace fifo ran in 66 s stalled powerflow for a simulated week (50 s), then
    exited 1."""
    period_s = budget.period_end_s - budget.period_start_s
    if round_length_s > period_s:
        raise UsageError(
            f"the matched budget period is {period_s:.3g} s (--horizon-factor {factor:g} x "
            f"{base}'s run), shorter than a round (--round-length-s {round_length_s:g}): a "
            "round must fit in a period"
        )


def _check_rounds(bound: JctBound, round_length_s: float) -> None:
    """Refuse a run whose longest job alone, at its fastest, spans more than ``MAX_ROUNDS``
    rounds: every policy's run of it would take at least that many."""
    longest = max(bound.jobs, key=lambda f: f.time_s[0])
    rounds = longest.time_s[0] / round_length_s
    if rounds > MAX_ROUNDS:
        raise UsageError(
            f"job {longest.job_id} needs at least {longest.time_s[0] / 86400:.3g} days at its "
            f"fastest on this cluster, {rounds:.3g} rounds of {round_length_s:g} s: more than "
            f"the {MAX_ROUNDS:,} a run may plan (a longer --round-length-s, or less work)"
        )


def _ratios(learned: dict[str, Any], oracle: dict[str, Any]) -> dict[str, float | None]:
    """learned / oracle for average JCT and energy (> 1: imperfect knowledge costs)."""

    def ratio(key: str) -> float | None:
        a, b = learned.get(key), oracle.get(key)
        return a / b if a is not None and b else None

    return {"avg_jct": ratio("avg_jct_s"), "energy": ratio("energy_kwh")}


def _write_comparison(
    stdout: TextIO,
    policy: str,
    base: str,
    kind: str,
    mode: str,
    line: dict[str, Any],
    over: str = "",
) -> None:
    """The comparison's line; ``over``: what :func:`_overspent` says of its periods."""
    ratio = line["avg_jct_ratio"]
    spent = "energy_kwh" if kind == "energy" else "co2_kg"
    unit = "kWh" if kind == "energy" else "kg CO2e"
    possible = line["best_possible_ratio"]
    inside = line[
        "candidate_energy_in_period_kwh" if kind == "energy" else "candidate_co2_in_period_kg"
    ]
    # The budgets' first periods against their limits (with team budgets those pay the jobs'
    # GPUs only, less than the baseline's cluster-wide spend), and the cluster's total.
    limit = line["budget_energy_kwh" if kind == "energy" else "budget_co2_kg"]
    why = ""
    if ratio is None and line.get("baseline_unfinished_jobs"):
        why = f" ({base} left {line['baseline_unfinished_jobs']} job(s) unfinished)"
    elif ratio is None and line["candidate_unfinished_jobs"]:
        why = f" ({policy} left {line['candidate_unfinished_jobs']} job(s) unfinished)"
    # Team budgets match what each team's jobs drew under the baseline; the idle GPUs are
    # nobody's, so the candidate's total may differ from the baseline's (an independent
    # sweep read "at equal energy" beside 226 kWh against 122).
    matched = f"equal {kind} per team (jobs only)" if line.get("per_team") else f"equal {kind}"
    stdout.write(
        f"  [{mode}] {policy} vs {base} at {matched}: avg JCT ratio "
        f"{'n/a' + why if ratio is None else f'{ratio:.3f}x'}; spent "
        f"{inside:.1f} of {limit:.1f} "
        f"{unit} inside the period, {line['candidate_' + spent]:.1f} in "
        f"all; worst period {_share(line['candidate_max_period_share'])} of its budget{over}; "
        f"no policy could exceed "
        f"{'n/a' if possible is None else f'{possible:.3f}x'}\n"
    )


def _overspent(periods: list, idle_w: float, scenario: Scenario) -> str:
    """What to add to the periods' line about those over their budget: how many, and how
    many of them a cluster budget could not have kept because the powered idle GPUs alone
    drew more than it (their carbon varies with the grid, so a carbon budget can be above
    the idle draw in most periods and below it in a few dirty ones)."""
    over = [p for p in periods if p.share is not None and p.share > 1.0]
    if not over:
        return ""
    # (a team's budget pays its jobs, not the idle GPUs: never floored)
    floored = len(_unkeepable(over, idle_w, scenario))
    text = f"; {len(over)} period(s) over"
    if floored:
        text += (
            f", {floored} of them where the idle GPUs alone drew more than the budget (no plan "
            "could keep those unless idle nodes are powered off: --power-off-idle-nodes)"
        )
    return text


def _note_unkeepable(
    stdout: TextIO,
    mode: str,
    periods: list,
    idle_w: float,
    scenario: Scenario,
    entry: dict[str, Any],
) -> None:
    """Count in ``entry`` (``budget_periods_unkeepable``) the periods no plan could keep
    (``_unkeepable``), and where there are some, warn what the budget did in them."""
    unkeepable = _unkeepable(periods, idle_w, scenario)
    entry["budget_periods_unkeepable"] = len(unkeepable)
    if unkeepable:
        stdout.write(
            f"  [{mode}] warning: {len(unkeepable)} of the {len(periods)} periods "
            "are ones no plan could keep over their whole length (the idle GPUs "
            "alone draw more than the budget): in them its jobs may run until "
            "the limit is spent, "
            "then the budget's hard limit action (pause_jobs) stops them to the "
            "period's end\n"
        )


def _unkeepable(periods: list, idle_w: float, scenario: Scenario) -> list:
    """The periods whose powered idle GPUs alone drew more than their budget, over or not
    (``idle_floor_exceeds``): no plan could have kept them."""
    return [p for p in periods if idle_floor_exceeds(p, idle_w, scenario.intensity)]


def _share(value: float | None) -> str:
    """A share as a percentage, to one decimal; over 100% with as many decimals as show
    it (up to 6), so that an overspent period never prints as "100.0%"."""
    if value is None:
        return "n/a"
    digits = 1
    while value > 1.0 and round(100 * value, digits) <= 100.0:
        if digits == 6:
            return "100.0% (over by less than 1e-6 of it)"
        digits += 1
    return f"{100 * value:.{digits}f}%"


def _baselines(args: argparse.Namespace) -> list[str]:
    if args.match_baseline is None:
        return []
    names = [n.strip() for n in args.match_baseline.split(",") if n.strip()]
    if not names:
        raise UsageError("--match-baseline needs at least one policy name")
    return names


def _policy_params(policy: str, items: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs for the policy's constructor; a value is read as JSON
    (``true``, ``0.5``, ``null``) and otherwise kept as text."""
    from scheduling.core.registry import get_policy

    params: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--policy-param takes NAME=VALUE, not {item!r}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"--policy-param {name.strip()} must be a finite number, not {text}")
        params[name.strip()] = value
    accepted = _constructor_params(policy)
    unknown = sorted(set(params) - accepted) if accepted is not None else []
    if unknown:
        # (it read "BudgetGreedy.__init__() got an unexpected keyword argument ...": a
        # class the user never named, and not what the policy does take)
        raise UsageError(
            f"bad --policy-param for {policy}: it takes no {', '.join(map(repr, unknown))}; "
            f"its parameters: {', '.join(sorted(accepted))}"
        )
    try:
        instance = get_policy(policy, **params)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"bad --policy-param for {policy}: {exc}") from None
    # The constructors do not check types; a value of another kind than the parameter's
    # default (pricing=flase) is a typo, not a setting.
    defaults = _constructor_defaults(type(instance))
    for name, value in params.items():
        default = defaults.get(name)
        if default is None or value is None:
            continue
        if isinstance(value, float) and isinstance(default, int) and value.is_integer():
            value = params[name] = int(value)  # 3.0 where 3 is meant
        if (
            isinstance(default, bool) != isinstance(value, bool)
            or (isinstance(default, int | float) and not isinstance(value, int | float))
            or (isinstance(default, int) and isinstance(value, float))
        ):
            raise UsageError(
                f"bad --policy-param for {policy}: {name} takes a value like {default!r}, "
                f"not {value!r}"
            )
    return params


def _constructor_params(policy: str) -> set[str] | None:
    """The keyword parameters policy ``policy``'s constructors name (its class's and its
    bases': a ``**params`` passes the rest to its base), or None where the base-most one
    takes ``**kwargs`` too (then any name may be meant)."""
    from scheduling.core.registry import get_policy

    names: set[str] = set()
    open_ended = False
    for klass in type(get_policy(policy)).__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        open_ended = False
        for name, param in inspect.signature(init).parameters.items():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                open_ended = True
            elif name != "self" and param.kind is not inspect.Parameter.VAR_POSITIONAL:
                names.add(name)
    return None if open_ended else names


def _constructor_defaults(cls: type) -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for name, param in inspect.signature(init).parameters.items():
            if param.default is not inspect.Parameter.empty:
                defaults[name] = param.default
    return defaults


def _check_policies(names: list[str]) -> None:
    from scheduling.core.registry import policy_names

    known = policy_names()
    for name in names:
        if name not in known:
            raise UsageError(f"unknown policy {name!r}; known: {', '.join(known)}")


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        execute(args)
    except UsageError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except StoppedEarly as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    return 0
