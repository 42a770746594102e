"""Predictions shown before a job is submitted, and the budget what-if.

``predict_job`` evaluates, for the configuration in the form, the model the rounds would
size the job by (``scheduling.perf_lookup.model_for``: a learned profile, the catalog, or an
estimate) and prices the energy at the grid intensity now (telemetry's provider).
``whatif_average_jct_s`` replays a team's current queue in the simulator
(``scheduling.simulator``: the same ``plan_round`` as the live rounds, sized by the same
lookup) under a proposed budget.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from django.conf import settings
from django.db.models import Q

from cluster.choices import ACTIVE_JOB_STATES
from cluster.models import Gpu, Job, Node, Team, gpus_in_service
from scheduling import adapters, perf_lookup
from scheduling.core import types as core
from scheduling.core.perf_models import energy_to_finish_j, time_to_finish_s
from scheduling.core.types import J_PER_KWH, GpuConfig
from scheduling.simulator import whatif
from scheduling.workload_profiles import NO_HINTS, JobHints
from telemetry.carbon import intensity_for_hour


@dataclass(frozen=True)
class Prediction:
    workload: str
    gpu_model: str
    gpus: int
    batch_size: int
    iterations: int
    iter_time_s: float
    duration_s: float
    power_w: float  # per busy GPU
    energy_j: float
    ci_g_per_kwh: float
    ci_estimated: bool
    co2_g: float
    # Where the performance model comes from: "catalog" (fitted offline to measurements),
    # "learned" (a workload profile earlier jobs taught) or "estimated" (a prior carried
    # over from another workload or GPU model; the job's own telemetry will correct it).
    model_kind: str = "catalog"
    model_source: str = ""

    def as_dict(self) -> dict:
        return {
            "workload": self.workload,
            "gpu_model": self.gpu_model,
            "gpus": self.gpus,
            "batch_size": self.batch_size,
            "iterations": self.iterations,
            "iter_time_s": self.iter_time_s,
            "duration_s": self.duration_s,
            "power_w": self.power_w,
            "energy_j": self.energy_j,
            "energy_kwh": self.energy_j / J_PER_KWH,
            "ci_g_per_kwh": self.ci_g_per_kwh,
            "ci_estimated": self.ci_estimated,
            "co2_g": self.co2_g,
            "model_kind": self.model_kind,
            "model_source": self.model_source,
        }


def cluster_gpu_model_for(workload: str, *, catalog=None, hints: JobHints = NO_HINTS) -> str:
    """The GPU model a job of ``workload`` that names none would run on, by the round's rule
    (``scheduling.core.round``: the most plentiful model the lookup gives a performance model
    on, ties by name); with no GPU registered, the catalog's first for the workload, else its
    first GPU model."""
    catalog = catalog or perf_lookup.current_catalog()
    present: dict[str, int] = {}
    # The GPUs the rounds can plan on: a lost GPU (``Gpu.missing_since``) runs nothing.
    for model in Gpu.objects.reported().values_list("model", flat=True):
        present[model] = present.get(model, 0) + 1
    found = perf_lookup.models_on(
        workload,
        present,
        catalog=catalog,
        nvml=perf_lookup.nvml_by_model(present),
        hints=hints,
    )
    pool = {m: n for m, n in present.items() if m in found} or present
    if pool:
        return min(pool, key=lambda m: (-pool[m], m))
    return (catalog.gpu_models_for(hints.resembles or workload) or catalog.gpu_models())[0]


def predict_job(
    *,
    workload: str,
    gpus: int,
    batch_size: int,
    iterations: int,
    now: datetime,
    gpu_model: str = "",
    hints: JobHints = NO_HINTS,
) -> Prediction:
    """Duration, energy and carbon of running ``iterations`` at the maximum clock on ``gpus``
    consolidated GPUs, from the model a new job of the workload would start from in the live
    rounds (``perf_lookup.model_for``: a learned profile, the catalog, or an estimate).
    Raises ``KeyError`` (``UnknownPerfModelError``) when there is nothing to start from."""
    catalog = perf_lookup.current_catalog()
    gpu_model = gpu_model or cluster_gpu_model_for(workload, catalog=catalog, hints=hints)
    nvml = perf_lookup.nvml_by_model([gpu_model]).get(gpu_model)
    found = perf_lookup.model_for(
        workload,
        gpu_model,
        catalog=catalog,
        nvml=nvml,
        hints=hints,
    )
    if found is None:
        catalog.get(workload, gpu_model)  # raises UnknownPerfModelError, naming what exists
        raise KeyError((workload, gpu_model))
    model, source, kind = found.model, found.source, str(found.kind)
    cfg = GpuConfig(n_gpus=gpus, global_batch=batch_size)
    duration_s = time_to_finish_s(model, cfg, iterations)
    energy_j = energy_to_finish_j(model, cfg, iterations)
    intensity = intensity_for_hour(settings.TELEMETRY_CARBON_ZONE, now)
    return Prediction(
        workload=workload,
        gpu_model=gpu_model,
        gpus=gpus,
        batch_size=batch_size,
        iterations=iterations,
        iter_time_s=model.iter_time_s(cfg),
        duration_s=duration_s,
        power_w=model.power_w(cfg),
        energy_j=energy_j,
        ci_g_per_kwh=intensity.ci_g_per_kwh,
        ci_estimated=intensity.estimated,
        co2_g=energy_j / J_PER_KWH * intensity.ci_g_per_kwh,
        model_kind=kind,
        model_source=source,
    )


def _whatif_jobs(team: Team, cluster: core.Cluster) -> list[core.Job]:
    """The team's active jobs as the live round's adapter sees them on ``cluster`` (a range
    topping its GPUs asks for what it has), moved to time 0 (now) and stopped: the replay
    starts every one of them from its completed iterations."""
    rows = Job.objects.filter(team=team, state__in=ACTIVE_JOB_STATES).select_related("team")
    model_gpus = adapters.gpus_by_model(cluster)
    return [
        replace(
            adapters.job_from_row(job, allocation=None, model_gpus=model_gpus),
            submit_time_s=0.0,
        )
        for job in rows.order_by("submitted_at", "pk")
    ]


def _whatif_cluster(now: datetime) -> core.Cluster:
    """The cluster as the live round sees it now (healthy nodes that heart-beat recently)."""
    return _whatif_gpus(now)[0]


def _whatif_gpus(
    now: datetime,
) -> tuple[core.Cluster, dict[str, core.ClockSteps], dict[str, core.PowerLimits]]:
    """The cluster as the live round sees it now, and the clocks and power limits its GPUs
    take, per GPU model, as the live round reads them (``adapters.build_snapshot``): the
    replay plans only settings the GPUs take, as the round does. It planned every catalog
    clock and limit, so its jobs' times and energy (and its curve) were predicted at
    settings the live GPUs never run at (975 MHz on A100s that take 810, 400 W on 250 W)."""
    nodes = list(Node.objects.prefetch_related(gpus_in_service()).order_by("name"))
    cluster = adapters.cluster_from_rows(nodes, now=now, timeout_s=settings.WATTFLOW_NODE_TIMEOUT_S)
    gpus = [g for n in nodes for g in n.gpus.all() if g.missing_since is None]
    return cluster, adapters.clock_steps_by_model(gpus), adapters.power_limits_by_model(gpus)


@dataclass(frozen=True)
class WhatIf:
    budget: float  # in the limit's unit (kWh or kg)
    avg_jct_s: float | None  # None when not every runnable job finished within the horizon
    n_jobs: int
    n_finished: int
    energy_kwh: float
    co2_kg: float
    schedulable_gpus: int = 0  # GPUs the live round could use now
    never_run: tuple[tuple[str, str], ...] = ()  # (job name, why it can never run)
    unfinished: tuple[str, ...] = ()  # job names still running at the horizon


def whatif_average_jct_s(
    *,
    team: Team,
    kind: str,
    limit: float,
    period_end: datetime,
    now: datetime,
    used: float,
    period_start: datetime | None = None,
) -> WhatIf:
    """Replay ``team``'s active jobs (queued, running, paused) from now in the simulator with
    ``limit`` (kWh for ``kind="energy"``, kg CO2e for ``"carbon"``), of which the team already
    used ``used`` (same unit), until ``period_end``; with ``period_start`` the next periods
    follow with the same limit, so no job runs unbudgeted after this one
    (``scheduling.simulator.whatif`` has the rules: jobs that can never run are named and left
    out, and the page plots the curve made monotone).

    Jobs and cluster come through ``scheduling.adapters`` (the live round's own translation);
    each job is sized by ``perf_lookup.model_for``, as a round sizes a job that has not yet
    reported (a running job's own learned model is not carried into the replay).
    Simplifications (stated on the page too): every active job is treated as
    submitted now and restarts from its completed iterations; the team's queue has the
    schedulable GPUs to itself; the grid intensity stays at this hour's value; idle nodes are
    powered off, so the budget pays for the team's work only, as its ledger does. JCT here is
    time from now to finish.
    """
    if kind not in ("energy", "carbon"):
        raise ValueError(f"unknown budget kind {kind!r}")
    cluster, clock_steps, power_limits = _whatif_gpus(now)
    jobs = _whatif_jobs(team, cluster)
    n_gpus = len(cluster.schedulable_gpus)
    if not jobs or not n_gpus:
        # Nothing to replay, or nowhere to run it: no simulation can say more.
        return WhatIf(limit, None, len(jobs), 0, 0.0, 0.0, n_gpus)
    ci = intensity_for_hour(settings.TELEMETRY_CARBON_ZONE, now).ci_g_per_kwh
    replay = whatif.replay_queue(
        jobs,
        cluster=cluster,
        catalog=perf_lookup.LookupCatalog(
            perf_lookup.current_catalog(),
            perf_lookup.nvml_by_model(),
            hints={
                job.workload: JobHints.of(job)
                for job in Job.objects.filter(team=team, state__in=ACTIVE_JOB_STATES)
                .filter(Q(resembles__gt="") | Q(param_count__isnull=False))
                .order_by("pk")
                .only("workload", "resembles", "param_count")
            },
        ),
        kind=kind,
        limit=limit,
        used=used,
        period_start_s=None if period_start is None else (period_start - now).total_seconds(),
        period_end_s=(period_end - now).total_seconds(),
        ci_g_per_kwh=ci,
        clock_steps=clock_steps,
        power_limits=power_limits,
    )
    named = [int(j) for j, _ in replay.never_run] + [int(j) for j in replay.unfinished]
    names = dict(Job.objects.filter(pk__in=named).values_list("pk", "name"))
    return WhatIf(
        budget=limit,
        avg_jct_s=replay.avg_jct_s,
        n_jobs=replay.n_jobs,
        n_finished=replay.n_finished,
        energy_kwh=replay.energy_kwh,
        co2_kg=replay.co2_kg,
        schedulable_gpus=n_gpus,
        never_run=tuple(
            (f"#{job_id} {names.get(int(job_id), '')}".strip(), why)
            for job_id, why in replay.never_run
        ),
        unfinished=tuple(
            f"#{job_id} {names.get(int(job_id), '')}".strip() for job_id in replay.unfinished
        ),
    )
