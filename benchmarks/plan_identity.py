"""Digest every field of the plans ``plan_round`` makes over a fixed set of cases, so that a
change meant to make it faster can be checked to leave every plan identical to the byte.

Each case is a few rounds in sequence on ``bench_plan_round.py``'s cluster (1,024 A100s)
and job mix: the second round's jobs run what the first planned (their progress advanced,
the budgets charged what it predicted) and its snapshot carries the first plan's policy
state and exploration, as the service and the simulator carry them. The cases cover the
policies (powerflow and greenflow above all, also fifo, elastic, ones, eaco), 1,000 jobs
(about half running) and 11,000 (1,000 running, 10,000 waiting), energy and carbon
budgets binding, generous and tight, team budgets alone, a period ending within 3 h, a spent
``hold_queue`` budget, learned models (shared priors, per-job priors, running jobs with
measurements of their own, an inexact snapshot as the service's) and a mix of jobs with
batch ranges, priorities, starvation-age waits and stopped jobs.

For each round it writes one line: the case, the round, the SHA-256 of ``repr(plan)``
(every field, dicts in their insertion order) and of ``json.dumps(plan.policy_state)``;
``--dump DIR`` also writes the full text of each, to diff a case that differs::

    PYTHONPATH=. .venv/bin/python benchmarks/plan_identity.py --out /tmp/ids-base.txt
    # ... change the code ...
    PYTHONPATH=. .venv/bin/python benchmarks/plan_identity.py --out /tmp/ids-new.txt
    diff /tmp/ids-base.txt /tmp/ids-new.txt && echo identical

It runs under ``PYTHONHASHSEED=0`` (it restarts itself so where it is not), so that any
order left to string hashing cannot make two runs differ (ONES's carried population was so
ordered until 7 Dec: ``tests/core/test_ones_hash_seed.py``).
``--only SUBSTRING`` runs the cases whose name contains it; ``--list`` names them.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_plan_round as bench  # noqa: E402

from scheduling.core.online_model import (  # noqa: E402
    N_PARAMS,
    Observation,
    OnlinePerfModel,
    pool,
)
from scheduling.core.perf_models import load_catalog  # noqa: E402
from scheduling.core.round import plan_round  # noqa: E402
from scheduling.core.types import (  # noqa: E402
    Budget,
    CarbonSignal,
    GpuConfig,
    HardLimitAction,
    Job,
    Snapshot,
)

DAY_S = bench.DAY_S
NOW = 2 * DAY_S
ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class Case:
    policy: str
    size: str  # "1k": 1,000 jobs, about half running; "11k": 1,000 running + 10,000 waiting
    budgets: str
    models: str = "catalog"  # catalog | shared | per-job | learned
    mix: bool = False

    @property
    def name(self) -> str:
        return f"{self.policy}-{self.size}-{self.budgets}-{self.models}" + (
            "-mix" if self.mix else ""
        )


def cases() -> list[Case]:
    out: list[Case] = []
    budget_kinds = (
        "none", "energy", "energy-generous", "energy-tight", "carbon", "carbon-generous",
        "carbon-tight", "both", "period-end", "team-only", "hold-spent", "notify-spent",
    )  # fmt: skip
    for policy in ("powerflow", "greenflow"):
        for size in ("1k", "11k"):
            for kind in budget_kinds:
                out.append(Case(policy, size, kind))
            for models in ("shared", "per-job", "learned"):
                for kind in ("energy", "carbon", "period-end", "team-only"):
                    out.append(Case(policy, size, kind, models))
            out.append(Case(policy, size, "energy", "catalog", mix=True))
            out.append(Case(policy, size, "carbon", "learned", mix=True))
            out.append(Case(policy, size, "period-end", "per-job", mix=True))
    for policy in ("fifo", "elastic", "ones", "eaco"):
        for size in ("1k", "11k"):
            out.append(Case(policy, size, "energy"))
            out.append(Case(policy, size, "none", "learned", mix=True))
    return out


def _budgets(kind: str) -> tuple[Budget, ...]:
    full_w = 1024 * 300.0
    week = 7 * DAY_S
    e = full_w * week  # a week at full power
    co2 = e / 3.6e6 * 250.0  # the same at 250 g/kWh
    if kind == "none":
        return ()
    if kind == "period-end":
        # a period ending 2.5 h after the first round, with little left
        start, end = NOW - 3 * DAY_S, NOW + 2.5 * 3600.0
        lim = full_w * (end - start)
        return (
            Budget("red", "red", start, end, energy_limit_j=lim * 0.3, energy_used_j=lim * 0.29),
            Budget("blue", "blue", start, end, co2_limit_g=co2, co2_used_g=co2 * 0.9999),
            Budget("all", None, start, end, energy_limit_j=lim, energy_used_j=lim * 0.96),
        )
    scale = {"energy": 1.0, "energy-generous": 20.0, "energy-tight": 0.01}
    if kind in scale:
        s = scale[kind]
        return (
            Budget("red", "red", 0.0, week, energy_limit_j=e * 0.25 * s),
            Budget("blue", "blue", 0.0, week, energy_limit_j=e * 0.2 * s),
            Budget("all", None, 0.0, week, energy_limit_j=e * 0.8 * s),
        )
    scale = {"carbon": 1.0, "carbon-generous": 20.0, "carbon-tight": 0.01}
    if kind in scale:
        s = scale[kind]
        return (
            Budget("red", "red", 0.0, week, co2_limit_g=co2 * 0.25 * s),
            Budget("blue", "blue", 0.0, week, co2_limit_g=co2 * 0.2 * s),
            Budget("all", None, 0.0, week, co2_limit_g=co2 * 0.8 * s),
        )
    if kind == "both":
        return (
            Budget("red", "red", 0.0, week, energy_limit_j=e * 0.25, co2_limit_g=co2 * 0.3),
            Budget("blue", "blue", 0.0, week, energy_limit_j=e * 0.3, co2_limit_g=co2 * 0.2),
            Budget("all", None, 0.0, week, energy_limit_j=e * 0.8, co2_limit_g=co2 * 0.9),
        )
    if kind == "team-only":
        return (
            Budget("red", "red", 0.0, week, energy_limit_j=e * 0.1, co2_limit_g=co2 * 0.5),
            Budget("blue", "blue", 0.0, week, co2_limit_g=co2 * 0.15),
        )
    if kind in ("hold-spent", "notify-spent"):
        action = HardLimitAction.HOLD_QUEUE if kind == "hold-spent" else HardLimitAction.NOTIFY_ONLY
        return (
            Budget("red", "red", 0.0, week, energy_limit_j=e * 0.1, energy_used_j=e * 0.1,
                   hard_limit_action=action),
            Budget("blue", "blue", 0.0, week, energy_limit_j=e * 0.2),
            Budget("all", None, 0.0, week, energy_limit_j=e * 0.8),
        )  # fmt: skip
    raise ValueError(kind)


def _carbon(r: int) -> CarbonSignal:
    """An hourly forecast over the next day, cleaner and dirtier hours in turn."""
    base = NOW + r * 300.0
    hour0 = (base // 3600.0) * 3600.0
    forecast = tuple(
        (hour0 + h * 3600.0, 250.0 + 120.0 * ((h * 7) % 5 - 2) / 2.0) for h in range(24)
    )
    return CarbonSignal(ci_g_per_kwh=250.0 + 10.0 * r, forecast=forecast)


def _mixed(jobs: tuple[Job, ...]) -> tuple[Job, ...]:
    """Batch ranges with a known noise scale, priorities, an old wait, stopped jobs."""
    out = []
    for i, job in enumerate(jobs):
        changes: dict = {}
        if i % 3 == 0:
            b = job.global_batch
            changes.update(min_batch=max(b // 4, 1), max_batch=b * 4, noise_scale=b * 8.0)
        if i % 7 == 0:
            changes["priority"] = 1
        if i % 11 == 0:
            changes.update(iter_time_scale=1.2, power_scale=0.9)
        if job.allocation is None and i % 5 == 0:
            changes["done_iters"] = job.total_iters * 0.3  # stopped earlier
        if i % 13 == 0:
            changes["submit_time_s"] = NOW - 20 * DAY_S
        out.append(dataclasses.replace(job, **changes) if changes else job)
    return tuple(out)


def _models(snap: Snapshot, catalog, how: str) -> dict:
    if how == "catalog":
        return {}
    if how in ("shared", "per-job"):
        return bench.prior_models(snap, catalog, how)
    # learned: one prior per workload for waiting jobs; each running job a model with
    # measurements of its own at its running count (10% slower, 5% more draw)
    out = bench.prior_models(snap, catalog, "shared")
    for k, job in enumerate(snap.jobs):
        a = job.allocation
        if a is None:
            continue
        prior = catalog.get(job.workload, "A100")
        cfg = GpuConfig(n_gpus=a.n_gpus, global_batch=a.global_batch)
        t, p = prior.time_and_power(cfg)
        obs = Observation(
            n_gpus=a.n_gpus,
            n_nodes=1,
            local_batch=a.global_batch / a.n_gpus,
            iter_time_s=t * 1.1,
            power_w=p * 1.05,
            weight=3.0,
        )
        params = [0.0] * N_PARAMS
        params[k % N_PARAMS] = 0.01 * (k % 3)
        out[(job.job_id, "A100")] = OnlinePerfModel(
            prior=prior,
            params=params,
            workload=job.workload,
            n_time_obs=3.0,
            n_power_obs=3.0,
            cells=pool([obs], 8),
        )
    return out


def _first(case: Case, catalog, cluster, rows) -> Snapshot:
    if case.size == "1k":
        snap = bench.build_snapshot(7, cluster, rows, catalog, 1000, NOW)
    else:
        snap = bench.build_snapshot(
            7, cluster, rows, catalog, 1000, NOW, n_waiting=10000, all_running=True
        )
    jobs = _mixed(snap.jobs) if case.mix else snap.jobs
    snap = dataclasses.replace(
        snap,
        jobs=jobs,
        budgets=_budgets(case.budgets),
        carbon=_carbon(0),
        exact_perf=case.models != "learned",
        exploration_budget_frac=0.05 if case.models == "learned" else None,
    )
    return dataclasses.replace(snap, job_perf=_models(snap, catalog, case.models))


def _next(snap: Snapshot, plan, r: int) -> Snapshot:
    """The next round: jobs run what the plan gave them for a round, budgets charged what
    it predicted; the plan's state carried."""
    now = NOW + r * 300.0
    jobs = []
    for job in snap.jobs:
        a = plan.allocations.get(job.job_id)
        done = job.done_iters
        if a is not None:
            done = min(job.total_iters, done + job.total_iters * 0.002 * a.n_gpus)
        if done >= job.total_iters:
            continue  # finished
        started = job.started_s if a is not None and job.allocation is not None else None
        jobs.append(
            dataclasses.replace(
                job,
                done_iters=done,
                allocation=a,
                started_s=started if started is not None else (now - 300.0 if a else None),
                attained_gpu_s=job.attained_gpu_s + (a.n_gpus * 300.0 if a else 0.0),
            )
        )
    budgets = tuple(
        dataclasses.replace(
            b,
            energy_used_j=b.energy_used_j + plan.predicted_energy_by_budget_j.get(b.budget_id, 0.0),
            co2_used_g=b.co2_used_g + plan.predicted_co2_by_budget_g.get(b.budget_id, 0.0),
        )
        for b in snap.budgets
    )
    return dataclasses.replace(
        snap,
        jobs=tuple(jobs),
        budgets=budgets,
        carbon=_carbon(r),
        policy_state=plan.policy_state,
        exploration=plan.exploration,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=False, help="write the digests here (default stdout)")
    p.add_argument("--dump", default=None, help="also write each plan's full text here")
    p.add_argument("--only", default=None, help="only the cases whose name contains this")
    p.add_argument("--list", action="store_true", help="name the cases and stop")
    args = p.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":
        # ONES's carried population comes out in an order that follows string hashing
        # (its plans' policy_state differs from one process to the next): fix the seed
        os.execve(
            sys.executable,
            [sys.executable, *sys.argv],
            {**os.environ, "PYTHONHASHSEED": "0"},
        )
    todo = [c for c in cases() if args.only is None or args.only in c.name]
    if args.list:
        sys.stdout.write("".join(f"{c.name}\n" for c in todo))
        return 0
    if not todo:
        sys.stderr.write(f"no case matches {args.only!r}\n")
        return 2
    catalog, rows = load_catalog(), bench.trace_rows()
    cluster = bench.build_cluster(8, 16, 8)
    dump = Path(args.dump) if args.dump else None
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
    lines = []
    t0 = time.perf_counter()
    for case in todo:
        snap = _first(case, catalog, cluster, rows)
        for r in range(ROUNDS):
            if r:
                snap = _next(snap, plan, r)  # noqa: F821 (the previous round's)
            plan = plan_round(snap, policy=case.policy, now=NOW + r * 300.0)
            text = repr(plan)
            state = json.dumps(plan.policy_state)
            h_plan = hashlib.sha256(text.encode()).hexdigest()[:20]
            h_state = hashlib.sha256(state.encode()).hexdigest()[:20]
            lines.append(f"{case.name} round={r} plan={h_plan} state={h_state}")
            if dump is not None:
                (dump / f"{case.name}.r{r}.txt").write_text(text + "\n" + state + "\n")
    body = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(body)
    else:
        sys.stdout.write(body)
    took = time.perf_counter() - t0
    sys.stderr.write(f"{len(todo)} cases, {len(lines)} plans, {took:.0f} s\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
