"""The budget what-if: a team's queue replayed under a proposed budget, and the curve of
predicted average JCT against budget that the budget page plots. Pure (no Django): the
page's view (``frontend/predictions.py``) reads the rows through the live adapter and
calls :func:`replay_queue`.

Two rules make the curve readable:

* **A job that can never run is named, not left to blank the plot.** Before replaying,
  the core's own admission (``round.admit``, without budgets) is asked about each job;
  one it turns away for good (no perf model for its workload on any GPU here, or more
  GPUs than any model has schedulable) is left out of the replay and reported with the
  core's reason, so the average covers the jobs that can run.
* **More budget never predicts a worse average JCT.** A budget is a ceiling: a team
  given ``B`` can always do what it would under any ``B' < B`` (a lead reaches it by
  setting the lower limit), so the prediction at ``B`` is the best average JCT of the
  replays at budgets up to ``B`` (:func:`monotone`). The replay at ``B`` itself is kept
  beside it (``raw``), because where the two differ the scheduler given ``B`` would not
  find that better schedule by itself.

Budgets renew: after the period the next one applies with the same limit (``BudgetSpec``),
so the replay never runs a job unbudgeted, and a budget too small for the queue shows as a
long JCT rather than a fast unbudgeted tail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduling.core.round import admit
from scheduling.core.types import (
    G_PER_KG,
    J_PER_KWH,
    ClockSteps,
    Cluster,
    Job,
    PerfCatalog,
    PowerLimits,
    Snapshot,
    WaitCode,
)
from scheduling.simulator.carbon import ConstantIntensity
from scheduling.simulator.engine import BudgetSpec, SimConfig, Simulator
from scheduling.simulator.metrics import summarise
from scheduling.simulator.scenario import core_planner

# The what-if simulates at most this far past now (a queue that cannot finish within it
# shows as "not all jobs finish" instead of running for ever).
HORIZON_S = 30 * 86400.0
ROUND_S = 300.0
NEVER = (WaitCode.NO_PERF_MODEL, WaitCode.NO_MATCHING_GPU)


@dataclass(frozen=True)
class Replay:
    budget: float  # in the limit's unit (kWh or kg)
    avg_jct_s: float | None  # None when not every runnable job finished within the horizon
    n_jobs: int  # runnable jobs replayed
    n_finished: int
    energy_kwh: float
    co2_kg: float
    never_run: tuple[tuple[str, str], ...] = ()  # (job id, the core's reason)
    # Runnable jobs still unfinished at the horizon (a blank point: which jobs make it one)
    unfinished: tuple[str, ...] = ()


def never_runnable(
    jobs: Sequence[Job],
    cluster: Cluster,
    catalog: PerfCatalog,
    *,
    clock_steps: Mapping[str, ClockSteps] | None = None,
    power_limits: Mapping[str, PowerLimits] | None = None,
) -> dict[str, str]:
    """Jobs the core's admission turns away whatever the budget, with its reason."""
    snapshot = Snapshot(
        cluster=cluster,
        jobs=tuple(jobs),
        perf=catalog,
        round_length_s=ROUND_S,
        clock_steps=dict(clock_steps or {}),
        power_limits=dict(power_limits or {}),
    )
    _, waiting = admit(snapshot, now=0.0)
    return {job_id: r.message for job_id, r in waiting.items() if r.code in NEVER}


def replay_queue(
    jobs: Sequence[Job],
    *,
    cluster: Cluster,
    catalog: PerfCatalog,
    kind: str,
    limit: float,
    used: float = 0.0,
    period_start_s: float | None = None,
    period_end_s: float,
    ci_g_per_kwh: float,
    clock_steps: Mapping[str, ClockSteps] | None = None,
    power_limits: Mapping[str, PowerLimits] | None = None,
) -> Replay:
    """Replay ``jobs`` (submitted at 0 = now) under ``limit`` (kWh for ``kind="energy"``,
    kg CO2e for ``"carbon"``) for the period ``[period_start_s, period_end_s)`` of which
    ``used`` is spent; with ``period_start_s`` the next periods follow with the same limit,
    without it the budget ends with the period. PowerFlow paces an energy budget,
    GreenFlow a carbon one; idle nodes are powered off, so the budget pays for the team's
    work only, as its ledger does. ``clock_steps`` and ``power_limits``: the settings the
    cluster's GPUs take (``Snapshot.clock_steps``, ``Snapshot.power_limits``), so the replay
    plans what the live round plans on them (none: every clock and limit of the catalog)."""
    if kind not in ("energy", "carbon"):
        raise ValueError(f"unknown budget kind {kind!r}")
    never = never_runnable(
        jobs, cluster, catalog, clock_steps=clock_steps, power_limits=power_limits
    )
    named = tuple(sorted(never.items()))
    runnable = [j for j in jobs if j.job_id not in never]
    if not runnable or not cluster.schedulable_gpus:
        return Replay(limit, None, len(runnable), 0, 0.0, 0.0, named)
    energy = kind == "energy"
    scale = J_PER_KWH if energy else G_PER_KG
    end_s = max(period_end_s, ROUND_S)
    start_s = min(period_start_s, 0.0) if period_start_s is not None else 0.0
    spec = BudgetSpec(
        period_end_s=end_s,
        period_start_s=start_s,
        renews=period_start_s is not None,
        energy_limit_j=limit * scale if energy else None,
        co2_limit_g=None if energy else limit * scale,
        energy_used_j=used * scale if energy else 0.0,
        co2_used_g=0.0 if energy else used * scale,
    )
    result = Simulator(
        runnable,
        cluster=cluster,
        catalog=catalog,
        planner=core_planner("powerflow" if energy else "greenflow"),
        # As the service plans: its catalog is an estimate (``Snapshot.exact_perf``).
        config=SimConfig(
            round_length_s=ROUND_S,
            max_time_s=HORIZON_S,
            power_off_idle_nodes=True,
            exact_perf=False,
        ),
        intensity=ConstantIntensity(ci_g_per_kwh),
        budget=spec,
        clock_steps=clock_steps,
        power_limits=power_limits,
    ).run()
    summary = summarise(result)
    all_done = summary["n_unfinished"] == 0
    return Replay(
        budget=limit,
        avg_jct_s=summary["avg_jct_s"] if all_done else None,
        n_jobs=summary["n_jobs"],
        n_finished=summary["n_finished"],
        energy_kwh=summary["energy_kwh"],
        co2_kg=summary["co2_kg"],
        never_run=named,
        unfinished=tuple(sorted(r.spec.job_id for r in result.jobs if r.finish_s is None)),
    )


def monotone(points: Sequence[tuple[float, float | None]]) -> list[tuple[float, float | None]]:
    """(budget, avg JCT or None) sorted by budget, each JCT replaced by the best one at
    that budget or below (None only while no budget up to it finished every job)."""
    best: float | None = None
    out = []
    for budget, jct in sorted(points, key=lambda p: p[0]):
        if jct is not None and (best is None or jct < best):
            best = jct
        out.append((budget, best))
    return out
