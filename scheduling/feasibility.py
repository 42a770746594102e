"""Whether a job could ever run: checked at submit, before it waits forever (issue 16).

Two rules, each a lower bound so that no job that could run is refused:

- **GPUs.** A job is placed on GPUs of one model (``scheduling.core.placement``), so it needs
  ``min_gpus`` GPUs of its model (or, with no model named, of the largest group of a model
  with a performance model for its workload: ``scheduling.perf_lookup.model_for``, the lookup
  the rounds use, so an estimate counts as the round would size the job by it), counting
  only those the rounds plan on: a GPU its agent no longer reports (``Gpu.missing_since``)
  counts again once reported, and the refusal says how many are lost. While no GPU is
  registered at all (a cluster whose agents have not started) the rule waits for the
  hardware rather than guess.
- **Energy and carbon.** The least energy the job's GPUs could draw for its iterations: any
  GPU model it may run on whose model is measured or learned (an estimate is a prior the
  job's telemetry corrects, not a bound, so it refuses nothing), the GPU counts it allows
  (its bounds and the powers of two between), its smallest batch, any clock step; idle
  power, restarts and communication on other placements only add to it. A job whose least
  energy exceeds what its team's budgets allow together (the one in force now and every
  later one: a job may run on into the next period; a gap left between two budgets is
  unbudgeted time, so then nothing is refused), or whose least carbon (least energy x the
  lowest stored grid intensity of those periods, else the current hour's) exceeds their
  carbon limits together, can never finish inside them. A budget that only notifies stops
  nothing, so it refuses nothing; with no budget in force, more than
  ``cluster.validators.MAX_ENERGY_LIMIT_KWH`` is refused as absurd.
- **Time.** A job whose least time (its fastest configuration on the GPUs the cluster has)
  exceeds ``WATTFLOW_MAX_JOB_DAYS`` is refused as absurd: 10**12 iterations are millennia.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Min

from cluster.choices import HardLimitAction
from cluster.models import Budget, Gpu, Team
from cluster.validators import MAX_ENERGY_LIMIT_KWH
from scheduling import perf_lookup
from scheduling.choices import PerfModelKind
from scheduling.core.perf_models import energy_to_finish_j, time_to_finish_s
from scheduling.core.types import G_PER_KG, J_PER_KWH, GpuConfig
from scheduling.workload_profiles import NO_HINTS, JobHints
from telemetry.carbon import intensity_for_hour
from telemetry.models import CarbonIntensity

SECONDS_PER_DAY = 86_400.0


def _amount(value: float) -> str:
    """1,234.5 or 0.00123: enough digits that a small budget does not read as 0.0."""
    return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"


def _gpu_counts() -> dict[str, int]:
    """GPU model -> GPUs of it the rounds can plan on (``Gpu.objects.reported``)."""
    return dict(Gpu.objects.reported().values_list("model").annotate(n=Count("id")))


def _lost_gpus(gpu_models) -> int:
    """GPUs of ``gpu_models`` (None: of any model) registered and in service that their
    agent no longer reports."""
    lost = Gpu.objects.in_service().filter(missing_since__isnull=False)
    if gpu_models is not None:
        lost = lost.filter(model__in=list(gpu_models))
    return lost.count()


def _gpu_counts_for(
    counts: dict[str, int], workload: str, gpu_model: str, catalog, hints: JobHints = NO_HINTS
):
    if gpu_model:
        return {gpu_model: counts.get(gpu_model, 0)}
    found = perf_lookup.models_on(
        workload,
        counts,
        catalog=catalog,
        nvml=perf_lookup.nvml_by_model(counts),
        hints=hints,
    )
    return {m: n for m, n in counts.items() if m in found}


def _gpu_counts_tried(lo: int, hi: int) -> list[int]:
    counts = {lo, hi}
    n = 1
    while n < hi:
        if n > lo:
            counts.add(n)
        n *= 2
    return sorted(counts)


@dataclass(frozen=True)
class LowerBounds:
    """The least energy (J) and the least time (s) any allowed configuration needs."""

    energy_j: float
    duration_s: float


def lower_bounds(
    *,
    workload: str,
    gpus_by_model: dict[str, int | None],
    min_gpus: int,
    max_gpus: int,
    batch: int,
    iters: int,
    hints: JobHints = NO_HINTS,
) -> LowerBounds | None:
    """Over the GPU models in ``gpus_by_model`` (model -> GPUs of it in the cluster, None when
    unknown), the GPU counts allowed, every clock step and the smallest batch; None when no
    model here has a measured or learned performance model for the workload
    (``perf_lookup.model_for``; estimates are left out, see the module docstring)."""
    catalog = perf_lookup.current_catalog()
    nvml = perf_lookup.nvml_by_model(gpus_by_model)
    energy = duration = math.inf
    for gpu_model, present in gpus_by_model.items():
        found = perf_lookup.model_for(
            workload, gpu_model, catalog=catalog, nvml=nvml.get(gpu_model), hints=hints
        )
        if found is None or found.kind == PerfModelKind.ESTIMATED:
            continue
        model = found.model
        top = max(min_gpus, max_gpus if present is None else min(max_gpus, present))
        for n in _gpu_counts_tried(min_gpus, top):
            if n > batch:
                break
            for clock in (None, *model.clocks_mhz):
                cfg = GpuConfig(n_gpus=n, global_batch=batch, sm_clock_mhz=clock)
                energy = min(energy, energy_to_finish_j(model, cfg, iters))
                duration = min(duration, time_to_finish_s(model, cfg, iters))
    if math.isinf(energy):
        return None
    return LowerBounds(energy_j=energy, duration_s=duration)


def _lowest_intensity(budget: Budget, now: datetime) -> float:
    zone = settings.TELEMETRY_CARBON_ZONE
    stored = CarbonIntensity.objects.filter(
        zone=zone, hour__gte=budget.period_start, hour__lt=budget.period_end
    ).aggregate(low=Min("ci_g_per_kwh"))["low"]
    return stored if stored is not None else intensity_for_hour(zone, now).ci_g_per_kwh


def submit_refusals(
    *,
    team: Team,
    workload: str,
    gpu_model: str,
    min_gpus: int,
    max_gpus: int,
    min_batch_size: int,
    total_iterations: int,
    now: datetime,
    hints: JobHints = NO_HINTS,
) -> dict[str, str]:
    """Field -> why a job with these values could never run; empty when it could.
    ``hints``: what the submitter said of the workload (``JobHints``)."""
    errors: dict[str, str] = {}
    catalog = perf_lookup.current_catalog()
    counts = _gpu_counts()
    usable = _gpu_counts_for(counts, workload, gpu_model, catalog, hints)
    # With none reported, the rule still counts where GPUs are registered (every one lost:
    # an agent restarted seeing none): only a cluster with none waits for the hardware.
    if counts or Gpu.objects.in_service().exists():
        offered = max(usable.values(), default=0)
        if min_gpus > offered:
            of = f"{gpu_model} " if gpu_model else ""
            errors["min_gpus"] = (
                f"The cluster has {offered} {of}GPUs that can run {workload} together (a job "
                f"runs on one GPU model); this job needs at least {min_gpus}, so it could "
                "never start."
            )
            # GPUs lost from their agent's registration count only once it reports them
            # again (the rounds plan on none of them before): said, so the user knows.
            lost = _lost_gpus([gpu_model] if gpu_model else usable or counts or None)
            if lost:
                errors["min_gpus"] += (
                    f" {lost} more are registered but not reported by their node's agent; "
                    "they count again once it reports them."
                )
    if any(usable.values()):
        gpus_by_model = {m: n for m, n in usable.items() if n}
    elif gpu_model:
        gpus_by_model = {gpu_model: None}
    else:
        gpus_by_model = dict.fromkeys(catalog.gpu_models_for(workload))
    bounds = lower_bounds(
        workload=workload,
        gpus_by_model=gpus_by_model,
        min_gpus=min_gpus,
        max_gpus=max_gpus,
        batch=min_batch_size,
        iters=total_iterations,
        hints=hints,
    )
    if bounds is None:
        return errors
    max_days = settings.WATTFLOW_MAX_JOB_DAYS
    if bounds.duration_s > max_days * SECONDS_PER_DAY:
        errors["total_iterations"] = (
            f"These iterations take at least {bounds.duration_s / SECONDS_PER_DAY:,.0f} days "
            f"on this cluster at its fastest, longer than the {max_days:g} days a job may "
            "run (WATTFLOW_MAX_JOB_DAYS)."
        )
        return errors
    energy_kwh = bounds.energy_j / J_PER_KWH
    budgets = []
    for budget in Budget.objects.filter(team=team, period_end__gt=now).order_by("period_start"):
        reaches = budgets[-1].period_end if budgets else now
        if budgets and budget.period_start > reaches:
            return errors  # time left unbudgeted between two budgets: the job could run there
        if budget.period_start > reaches:
            break  # nothing in force now: the budget rule applies once one is
        budgets.append(budget)
    if not budgets:
        if energy_kwh > MAX_ENERGY_LIMIT_KWH:
            errors["total_iterations"] = (
                f"These iterations need at least {energy_kwh:,.0f} kWh, more than any budget "
                f"may hold ({MAX_ENERGY_LIMIT_KWH:,.0f} kWh)."
            )
        return errors
    if any(b.hard_limit_action == HardLimitAction.NOTIFY_ONLY for b in budgets):
        return errors  # a budget that only warns never stops the job
    span = f"{budgets[0].period_start:%Y-%m-%d} .. {budgets[-1].period_end:%Y-%m-%d}"
    whose = f"{team.name}'s budgets from now on ({span})"
    energy_budgets = [b.energy_limit_kwh for b in budgets if b.energy_limit_kwh is not None]
    if len(energy_budgets) == len(budgets) and energy_kwh > sum(energy_budgets):
        errors["total_iterations"] = (
            f"These iterations need at least {_amount(energy_kwh)} kWh, more than all of {whose} "
            f"allow ({_amount(sum(energy_budgets))} kWh): the job could never finish inside them."
        )
        return errors
    carbon_budgets = [b for b in budgets if b.carbon_limit_kg is not None]
    if len(carbon_budgets) == len(budgets):
        low = min(_lowest_intensity(b, now) for b in budgets)
        carbon_kg = energy_kwh * low / G_PER_KG
        allowed = sum(b.carbon_limit_kg for b in budgets)
        if carbon_kg > allowed:
            errors["total_iterations"] = (
                f"These iterations emit at least {_amount(carbon_kg)} kg CO2e, more than all of "
                f"{whose} allow ({_amount(allowed)} kg): the job could never finish inside them."
            )
    return errors
