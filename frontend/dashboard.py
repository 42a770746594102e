"""The numbers behind the dashboard, for one user at one instant.

``dashboard_payload`` is used twice: to render the page and as the JSON the page fetches
when it comes back from a hidden tab (the resync). Everything is filtered through
``cluster.queries`` visibility: a member sees their teams' budgets and jobs, an admin all.
Hardware telemetry (power, utilisation) is the same for everybody: ``telemetry.live``'s
summary, the one its beat task pushes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from cluster.choices import JobState
from cluster.models import Budget
from cluster.queries import (
    average_jct_series,
    budgets_visible_to,
    jobs_visible_to,
    queue_length_series,
)
from frontend import figures
from scheduling.core.types import J_PER_KWH
from scheduling.queries import latest_round_summary
from telemetry.live import live_summary
from telemetry.usage import G_PER_KG, budget_usage

HISTORY = timedelta(hours=24)
STEP = timedelta(hours=1)


def telemetry_figures(summary: dict) -> dict:
    """Power per node and the utilisation heatmap from a telemetry summary (the shape
    ``telemetry.live.live_summary`` builds and ``broadcast_telemetry`` pushes)."""
    return {
        "power": figures.cluster_power_figure(
            [(n["node"], n["power_w"]) for n in summary["nodes"]]
        ),
        "heatmap": figures.gpu_utilisation_heatmap(
            [(g["node"], g["index"], g["util_pct"]) for g in summary["gpus"]]
        ),
    }


def budget_progress(budget: Budget, *, now: datetime) -> dict:
    """Use so far, limits, soft limits, projection and burn-chart figures of one budget, from
    ``telemetry.usage.budget_usage`` (the computation the scheduler, API and /metrics use),
    converted to kWh and kg for display."""
    usage = budget_usage(budget)
    energy_cum, carbon_cum = [], []
    energy_j = co2_g = 0.0
    for hour, hour_energy_j, hour_co2_g in usage.hourly:
        energy_j += hour_energy_j
        co2_g += hour_co2_g
        # A ledger hour is complete at its end; plot the running total there, capped at now.
        at = min(hour + STEP, now)
        energy_cum.append((at, energy_j / J_PER_KWH))
        carbon_cum.append((at, co2_g / G_PER_KG))
    common = {
        "warn_fraction": budget.warn_fraction,
        "period_start": budget.period_start,
        "period_end": budget.period_end,
        "now": now,
    }
    limits = []
    figs = {}
    for limit_usage, unit, scale, cumulative, colour in (
        (usage.energy, "kWh", J_PER_KWH, energy_cum, figures.ENERGY_COLOUR),
        (usage.carbon, "kg CO2e", G_PER_KG, carbon_cum, figures.CARBON_COLOUR),
    ):
        if limit_usage is None:
            continue
        kind = limit_usage.kind
        used, limit = limit_usage.used / scale, limit_usage.limit / scale
        projected = figures.project_to_period_end(
            used, period_start=budget.period_start, period_end=budget.period_end, now=now
        )
        limits.append(
            {
                "kind": kind,
                "unit": unit,
                "used": used,
                "limit": limit,
                "soft_limit": limit_usage.soft_limit / scale,
                "projected": projected,
                "percent": min(100.0, limit_usage.percent),
                "over_soft": limit_usage.over_soft,
                "over_hard": limit_usage.over_hard,
            }
        )
        figs[kind] = figures.budget_burn_figure(
            title=f"{budget.team.name}: {kind} ({unit})",
            unit=unit,
            cumulative=cumulative,
            limit=limit,
            colour=colour,
            **common,
        )
    return {
        "budget": budget,
        "id": budget.pk,
        "team": budget.team.name,
        "limits": limits,
        "figures": figs,
    }


def active_budgets(user, *, now: datetime):
    return (
        budgets_visible_to(user)
        .filter(period_start__lte=now, period_end__gt=now)
        .select_related("team")
        .order_by("team__name", "period_start")
    )


def dashboard_payload(user, *, now: datetime) -> dict:
    """All dashboard figures and numbers ``user`` may see at ``now`` (JSON-ready but for the
    budget objects, which ``as_json`` drops)."""
    jobs = jobs_visible_to(user)
    # The same summary the telemetry beat task pushes, so page load and pushes agree.
    telemetry = live_summary(now)
    start = now - HISTORY
    figs = telemetry_figures(telemetry)
    figs["jct"] = figures.avg_jct_figure(average_jct_series(jobs, start=start, end=now, step=STEP))
    figs["queue"] = figures.queue_length_figure(
        queue_length_series(jobs, start=start, end=now, step=STEP)
    )
    budgets = [budget_progress(b, now=now) for b in active_budgets(user, now=now)]
    return {
        "at": now.isoformat(),
        "cluster_power_w": telemetry["cluster_power_w"],
        "queue_now": jobs.filter(state=JobState.QUEUED).count(),
        "running_now": jobs.filter(state=JobState.RUNNING).count(),
        # The same shape as a pushed round, so the page draws both the same way.
        "latest_round": latest_round_summary(jobs),
        "figures": figs,
        "budgets": budgets,
        # Flat element id -> figure, for the page's JS (ids match the template's divs).
        "budget_figures": {
            f"fig-budget-{b['id']}-{kind}": fig
            for b in budgets
            for kind, fig in b["figures"].items()
        },
    }


def as_json(payload: dict) -> dict:
    """The payload without model instances, for JsonResponse."""
    return {
        **payload,
        "budgets": [{k: v for k, v in b.items() if k != "budget"} for b in payload["budgets"]],
    }
