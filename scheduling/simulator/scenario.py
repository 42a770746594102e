"""A scenario: trace + cluster + grid + engine settings, and running a policy over it.

This is the importable entry point (no Django): ``load_scenario(...)`` reads the files
once, ``run_policy(scenario, "powerflow", budget=...)`` runs one policy through the core's
``plan_round`` and returns the :class:`~scheduling.simulator.engine.SimResult`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scheduling.core.carbon_data import carbon_file, read_electricity_maps_csv
from scheduling.core.goodput import with_noise_scales
from scheduling.core.types import Cluster, Job, PerfCatalog, Plan, Snapshot
from scheduling.simulator import numerics
from scheduling.simulator.carbon import ConstantIntensity, HourlyIntensity
from scheduling.simulator.cluster_spec import ClusterSpec, read_cluster_spec
from scheduling.simulator.engine import (
    BudgetSpec,
    Planner,
    ProgressHook,
    SimConfig,
    SimResult,
    Simulator,
    idle_power_by_model,
)
from scheduling.simulator.traces import (
    has_model,
    no_model_error,
    read_trace,
    with_arrival_scale,
    with_batch_range,
)

REPO_DATA = Path(__file__).resolve().parents[2] / "data"
DEFAULT_START = datetime(2022, 6, 1, tzinfo=UTC)
BATCH_EFFICIENCY = ("learned", "free")


@dataclass(frozen=True)
class Scenario:
    name: str
    jobs: tuple[Job, ...]
    spec: ClusterSpec
    cluster: Cluster
    catalog: PerfCatalog
    intensity: HourlyIntensity
    config: SimConfig
    zone: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


def load_scenario(
    trace: str | Path,
    cluster: str | Path,
    *,
    data_dir: str | Path = REPO_DATA,
    catalog: PerfCatalog | None = None,
    carbon_zone: str | None = None,
    carbon_kind: str = "direct",
    start: datetime = DEFAULT_START,
    seed: int = 0,
    max_gpus: int = 64,
    config: SimConfig | None = None,
    max_jobs: int | None = None,
    max_batch_factor: int | None = None,
    arrival_scale: float | None = None,
    batch_efficiency: str = "learned",
) -> Scenario:
    """Read everything a run needs. ``max_jobs`` keeps the first N jobs (for quick runs).

    ``batch_efficiency``: ``"learned"`` gives every job its workload's learned
    statistical-efficiency curve (``scheduling/core/goodput_curves.json``; a workload
    without one keeps its submitted batch), ``"free"`` the old model in which every
    batch is equally efficient (noise scale infinite), for before/after comparisons.
    """
    if batch_efficiency not in BATCH_EFFICIENCY:
        raise ValueError(f"batch_efficiency must be one of {', '.join(BATCH_EFFICIENCY)}")
    if catalog is None:
        from scheduling.core.perf_models import load_catalog

        catalog = load_catalog()
    spec = read_cluster_spec(cluster)
    jobs = read_trace(
        trace,
        data_dir=data_dir,
        catalog=catalog,
        gpu_model=spec.gpu_model,
        seed=seed,
        max_gpus=max_gpus,
    )
    if max_jobs is not None:
        jobs = jobs[:max_jobs]
    _check_ground_truth(jobs, catalog, spec.gpu_model, Path(trace).name)
    if max_batch_factor is not None:
        jobs = with_batch_range(jobs, max_batch_factor)
    if arrival_scale is not None:
        jobs = with_arrival_scale(jobs, arrival_scale)
    jobs = with_noise_scales(jobs, override=math.inf if batch_efficiency == "free" else None)
    if carbon_zone is None:
        intensity: HourlyIntensity = ConstantIntensity(0.0, start=start)
    else:
        points = read_electricity_maps_csv(
            carbon_file(data_dir, carbon_zone), kind=carbon_kind, zone=carbon_zone
        )
        intensity = HourlyIntensity(points, start=start)
    config = config or SimConfig()
    meta = {
        "trace": Path(trace).name,
        "cluster": spec.name,
        "gpus": spec.n_gpus,
        "gpu_model": spec.gpu_model,
        "carbon_zone": carbon_zone,
        "carbon_kind": carbon_kind if carbon_zone else None,
        "start": start.isoformat(),
        "seed": seed,
        "max_gpus": max_gpus,
        "max_batch_factor": max_batch_factor,
        "arrival_scale": arrival_scale,
        "batch_efficiency": batch_efficiency,
        "jobs": len(jobs),
        "round_length_s": config.round_length_s,
        "restart_cost_s": config.restart_cost_s,
        "power_off_idle_nodes": config.power_off_idle_nodes,
        "replan_on_events": config.replan_on_events,
        "numerics": numerics.describe(),
    }
    return Scenario(
        name=f"{Path(trace).stem}@{spec.name}",
        jobs=jobs,
        spec=spec,
        cluster=spec.build(),
        catalog=catalog,
        intensity=intensity,
        config=config,
        zone=carbon_zone,
        meta=meta,
    )


def _check_ground_truth(
    jobs: tuple[Job, ...], catalog: PerfCatalog, gpu_model: str, trace_name: str
) -> None:
    """Refuse a trace with a workload the catalog has no model of on the cluster's GPU.

    The catalog is the simulator's ground truth: it advances every job, whatever the
    policies know (``--knowledge learned`` changes what they see, not how jobs run)."""
    missing = sorted(
        {j.workload for j in jobs}
        - {w for w in catalog.workloads() if has_model(catalog, w, gpu_model)}
    )
    if missing:
        raise no_model_error(trace_name, missing, gpu_model, catalog)


TEAM_RULES = ("trace", "workload")


def powered_idle_w(scenario: Scenario) -> float:
    """What the scenario's cluster draws with every GPU idle (0 when idle nodes power off):
    the floor a cluster budget pays whether or not jobs run (the engine's ``_idle_all_w``)."""
    if scenario.config.power_off_idle_nodes:
        return 0.0
    gpus = scenario.cluster.gpus
    idle = idle_power_by_model(
        scenario.catalog, {g.model for g in gpus}, override_w=scenario.config.idle_power_w
    )
    return sum(idle[g.model] for g in gpus)


def with_teams_by_workload(scenario: Scenario) -> Scenario:
    """The scenario with each job's team set to its workload (model class): the stated
    rule for traces that name no teams (the Pollux and ElasticFlow traces)."""
    from dataclasses import replace

    jobs = tuple(replace(j, team=j.workload) for j in scenario.jobs)
    return replace(scenario, jobs=jobs, meta={**scenario.meta, "team_rule": "workload"})


def split_by_team(whole: BudgetSpec, bound: Any, jobs: Sequence[Job]) -> tuple[BudgetSpec, ...]:
    """``whole`` split into one budget per team, in proportion to the least energy its
    jobs' GPUs draw to finish them, idle draw included (``bound``: the scenario's
    ``JctBound``); a carbon limit in the same shares. A team budget pays its jobs' whole
    GPUs: split by the energy above idle, a workload that draws little above it (ncf)
    got a share below what one of its jobs is charged, and its jobs never started."""
    from dataclasses import replace

    team_of = {j.job_id: j.team for j in jobs}
    need: dict[str, float] = {}
    for f in bound.jobs:
        team = team_of[f.job_id]
        need[team] = need.get(team, 0.0) + f.least_gpu_energy_j
    total = sum(need.values())
    if total <= 0.0:
        return (whole,)

    def part(limit: float | None, team: str) -> float | None:
        return None if limit is None else limit * need[team] / total

    return tuple(
        replace(
            whole,
            energy_limit_j=part(whole.energy_limit_j, team),
            co2_limit_g=part(whole.co2_limit_g, team),
            team=team,
            budget_id=f"team-{team}",
        )
        for team in sorted(need)
        if need[team] > 0.0
    )


def core_planner(policy: str, **params: Any) -> Planner:
    """The core's ``plan_round`` with a fresh ``policy`` object for this run."""
    from scheduling.core.registry import get_policy
    from scheduling.core.round import AdmitMemo, plan_round

    pol = get_policy(policy, **params)
    # The run's waiting jobs keep their snapshot objects from round to round, so admission
    # keeps their views (the plans are the same without).
    memo = AdmitMemo()

    def planner(snapshot: Snapshot, now: float) -> Plan:
        return plan_round(snapshot, policy=pol, now=now, memo=memo)

    return planner


def run_policy(
    scenario: Scenario,
    policy: str,
    *,
    budget: BudgetSpec | None = None,
    progress: ProgressHook | None = None,
    planner: Planner | None = None,
    policy_params: Mapping[str, Any] | None = None,
    budgets: Sequence[BudgetSpec] = (),
) -> SimResult:
    if planner is None:
        params = dict(policy_params or {})
        from scheduling.core.registry import takes

        if "restart_s" not in params and takes(policy, "restart_s"):
            # The policy prices a resize or resume at the run's own restart cost: at its
            # default (30 s) against 120 s, a team's period went on restarts alone (385%,
            # and with the hard-limit watch every period, the run never ending).
            params["restart_s"] = scenario.config.restart_cost_s
        planner = core_planner(policy, **params)
    sim = Simulator(
        scenario.jobs,
        cluster=scenario.cluster,
        catalog=scenario.catalog,
        planner=planner,
        config=scenario.config,
        intensity=scenario.intensity,
        budget=budget,
        budgets=budgets,
        progress=progress,
    )
    return sim.run()
