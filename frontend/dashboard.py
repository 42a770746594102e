"""The numbers behind the dashboard, for one user at one instant.

``dashboard_payload`` is used twice: to render the page and as the JSON the page fetches
when it comes back from a hidden tab (the resync). Everything is filtered through
``cluster.queries`` visibility: a member sees their teams' budgets and jobs, an admin all.
Hardware telemetry (power, utilisation) is the same for everybody: ``telemetry.live``'s
summary, the one its beat task pushes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings

from cluster.choices import HardLimitAction, JobState
from cluster.models import Budget
from cluster.queries import (
    budgets_visible_to,
    completed_jcts,
    jobs_visible_to,
    queue_and_running_series,
    sees_every_team,
    teams_of,
)
from frontend import figures, labels, timeline_figures
from scheduling import budget_alerts
from scheduling.core.types import G_PER_KG, J_PER_KWH, decimal_quotient
from scheduling.queries import latest_round_summary, running_jobs_series
from telemetry.carbon import hour_floor, intensity_for_hour
from telemetry.live import live_summary
from telemetry.models import EnergyLedgerEntry
from telemetry.queries import cluster_power_series, intensity_series
from telemetry.usage import BudgetUsage, budget_usage, budget_usages, finite_or_none

HISTORY = timedelta(hours=24)
JCT_HISTORY = timedelta(days=7)
STEP = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
GRID_AHEAD = timedelta(hours=24)


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


def running_hour_minutes(budgets, *, now: datetime) -> dict[int, list[list[float]]]:
    """Per team of ``budgets``, its ledger rows' ``minutes_j`` of the hour running at ``now``
    (what ``_minute_shares`` spreads), in one query for them all."""
    hour = hour_floor(now)
    team_ids = {b.team_id for b in budgets}
    out: dict[int, list[list[float]]] = {team_id: [] for team_id in team_ids}
    if team_ids:
        for team_id, minutes in EnergyLedgerEntry.objects.filter(
            team_id__in=team_ids, hour=hour
        ).values_list("team_id", "minutes_j"):
            out[team_id].append(minutes)
    return out


def _minute_shares(
    team_id: int,
    hour: datetime,
    now: datetime,
    *,
    start: datetime,
    end: datetime,
    rows: list[list[float]] | None = None,
) -> list[tuple[datetime, float]]:
    """(end of each minute of ``hour`` inside the period [start, end) and before ``now``,
    share of the hour's energy inside the period used by then) from the team's ledger minutes
    (``EnergyLedgerEntry.minutes_j``); empty where none are kept. Each minute counts by the
    share of its seconds inside the period, as ``telemetry.usage`` counts an edge hour, so
    the hour's own total (its part inside the period) is spread by them. (Spread by the whole
    hour's minutes, a period starting at 14:30 was drawn using energy from 14:01 on, before
    it began, with its points out of time order.)"""
    per_minute: list[float] = []
    if rows is None:
        rows = EnergyLedgerEntry.objects.filter(team_id=team_id, hour=hour).values_list(
            "minutes_j", flat=True
        )
    for minutes in rows:
        for k, joules in enumerate(minutes or ()):
            if k == len(per_minute):
                per_minute.append(0.0)
            per_minute[k] += joules
    inside = []
    for k, joules in enumerate(per_minute):
        at = hour + k * MINUTE
        inside_s = (min(at + MINUTE, end) - max(at, start)).total_seconds()
        inside.append(joules * min(max(inside_s, 0.0) / MINUTE.total_seconds(), 1.0))
    total = sum(inside)
    if not total > 0.0:
        return []
    shares, so_far = [], 0.0
    for k, joules in enumerate(inside):
        at = hour + (k + 1) * MINUTE
        if at >= now or at > end:
            break
        so_far += joules
        if at > start:
            shares.append((at, so_far / total))
    return shares


def budget_progress(
    budget: Budget,
    *,
    now: datetime,
    usage: BudgetUsage | None = None,
    minutes: dict[int, list[list[float]]] | None = None,
) -> dict:
    """Use so far, limits, soft limits, projection and burn-chart figures of one budget, from
    ``telemetry.usage.budget_usage`` (the computation the scheduler, API and /metrics use),
    converted to kWh and kg for display. ``usage`` (``budget_usages``) and ``minutes``
    (``running_hour_minutes``) read for many budgets at once are used where given."""
    if usage is None:
        usage = budget_usage(budget)
    energy_cum, carbon_cum = [], []
    energy_j = co2_g = 0.0
    for hour, hour_energy_j, hour_co2_g in usage.hourly:
        if hour + STEP > now:
            # The hour running now, by its minutes: drawn at its end (now), a limit
            # crossed in it was marked at the page's refresh (a live probe).
            shares = _minute_shares(
                budget.team_id,
                hour,
                now,
                start=budget.period_start,
                end=budget.period_end,
                # (the prefetch is of the hour running now; another hour is read here)
                rows=minutes.get(budget.team_id)
                if minutes is not None and hour == hour_floor(now)
                else None,
            )
            for at, share in shares:
                energy_cum.append((at, (energy_j + share * hour_energy_j) / J_PER_KWH))
                carbon_cum.append((at, (co2_g + share * hour_co2_g) / G_PER_KG))
        energy_j += hour_energy_j
        co2_g += hour_co2_g
        # A ledger hour is complete at its end; plot the running total there, capped at now
        # and at the period's end (a period ending at 15:38 has used its last at 15:38).
        at = min(hour + STEP, now, budget.period_end)
        energy_cum.append((at, energy_j / J_PER_KWH))
        carbon_cum.append((at, co2_g / G_PER_KG))
    # A spent pause_jobs budget's jobs wait for the next period: nothing more to project.
    stopped = budget.hard_limit_action == HardLimitAction.PAUSE_JOBS and any(
        lim.over_hard for lim in usage.limits
    )
    common = {
        "warn_fraction": budget.warn_fraction,
        "period_start": budget.period_start,
        "period_end": budget.period_end,
        "now": now,
        "stopped": stopped,
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
        used = limit_usage.used / scale
        # None where a budget stored before its limits had bounds makes them infinite
        # (1e308 kg, or any use of 5e-324 kWh): shown as a dash, never inf or Infinity.
        limit = finite_or_none(decimal_quotient(limit_usage.limit, scale))
        percent = finite_or_none(limit_usage.percent)
        projected = figures.project_to_period_end(
            used,
            period_start=budget.period_start,
            period_end=budget.period_end,
            now=now,
            stopped=stopped,
        )
        limits.append(
            {
                "kind": kind,
                "unit": unit,
                "used": used,
                "limit": limit,
                "soft_limit": finite_or_none(decimal_quotient(limit_usage.soft_limit, scale)),
                "projected": projected,
                # The truth, past 100 % too (0.09 of 0.05 kg is 180 %); the bar caps its width.
                "percent": percent,
                "bar_percent": 100.0 if percent is None else min(100.0, percent),
                "over_soft": limit_usage.over_soft,
                "over_hard": limit_usage.over_hard,
            }
        )
        share = "?" if percent is None else f"{percent:.3g}"
        figs[kind] = figures.budget_burn_figure(
            title=(
                f"{budget.team.name}: {kind}, {share} % of "
                f"{'?' if limit is None else f'{limit:.4g}'} {unit} used (the team)"
            ),
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


def progress_of(budgets: list[Budget], *, now: datetime) -> list[dict]:
    """``budget_progress`` of each of ``budgets``, their ledger read for all of them at once
    (a fixed number of queries, not three a budget)."""
    minutes = running_hour_minutes(budgets, now=now)
    return [
        budget_progress(b, now=now, usage=u, minutes=minutes)
        for b, u in zip(budgets, budget_usages(budgets), strict=True)
    ]


def _dashboard_jobs(user):
    """The jobs the dashboard counts: every team's for a user whose scope is all teams
    (``sees_every_team``), else their own teams' (``scope_of``). A staff user who may view
    jobs but not budgets (or budgets but not jobs) is fed only their teams' rounds and
    budgets live (``frontend.consumers.groups_for``), and the page said "your team" over
    every team's queue: its numbers, its scope and its pushes disagreed."""
    if sees_every_team(user):
        return jobs_visible_to(user)
    return jobs_visible_to(user).filter(team__in=teams_of(user).values("pk"))


def active_budgets(user, *, now: datetime):
    budgets = budgets_visible_to(user)
    if not sees_every_team(user):  # (as ``_dashboard_jobs``)
        budgets = budgets.filter(team__in=teams_of(user).values("pk"))
    return (
        budgets.filter(period_start__lte=now, period_end__gt=now)
        .select_related("team")
        .order_by("team__name", "period_start")
    )


def scope_of(user) -> str:
    """Whose jobs and budgets the team-scoped cards count, in words."""
    if sees_every_team(user):
        return "all teams"
    names = list(teams_of(user).order_by("name").values_list("name", flat=True))
    if not names:
        return "no team"
    return ("your team " if len(names) == 1 else "your teams ") + ", ".join(names)


def grid_figure(*, now: datetime) -> tuple[dict, dict]:
    """The zone's intensity over the last day and the stored day ahead, over the cluster's
    measured power and running jobs; and the intensity now (value, estimated, source)."""
    zone = settings.TELEMETRY_CARBON_ZONE
    start = now - HISTORY
    intensity = intensity_series(zone, hour_floor(start), hour_floor(now) + GRID_AHEAD)
    current = intensity_for_hour(zone, now)
    note = (
        f"hourly {zone} intensities from data/carbon (Electricity Maps, 2022) replayed onto "
        f"{now.year}"
        if intensity
        else f"no hourly intensities stored for {zone}: every hour is priced at the yearly mean"
    )
    fig = timeline_figures.grid_intensity_figure(
        intensity,
        now=now,
        zone=zone,
        power_kw=cluster_power_series(start, now),
        running=running_jobs_series(start, now),
        note=note,
    )
    now_info = {
        "ci_g_per_kwh": current.ci_g_per_kwh,
        "estimated": current.estimated,
        "source": current.source,
        "zone": zone,
    }
    return fig, now_info


def dashboard_payload(user, *, now: datetime) -> dict:
    """All dashboard figures and numbers ``user`` may see at ``now`` (JSON-ready but for the
    budget objects, which ``as_json`` drops). Cards say their scope: ``scope`` (the user's
    teams, or all teams for an admin) or the cluster."""
    jobs = _dashboard_jobs(user)
    scope = scope_of(user)
    # The same summary the telemetry beat task pushes, so page load and pushes agree.
    telemetry = live_summary(now)
    figs = telemetry_figures(telemetry)
    figs["jct"] = timeline_figures.jct_figure(
        completed_jcts(jobs, start=now - JCT_HISTORY, end=now), scope=scope
    )
    figs["queue"] = timeline_figures.queue_running_figure(
        queue_and_running_series(jobs, start=now - HISTORY, end=now), scope=scope
    )
    figs["grid"], grid_now = grid_figure(now=now)
    budgets = progress_of(list(active_budgets(user, now=now)), now=now)
    return {
        # Spent budgets of running periods (and budgets found over their limit after their
        # period, for a day): a lead sees their teams', an admin every team's.
        "alerts": [
            {
                "id": a.pk,
                "team": a.team.name,
                "at": a.at.isoformat(),
                "at_utc": a.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M"),
                "action": a.action,
                "found": budget_alerts.headline(a),
                "spent": budget_alerts.describe(a),
                "consequence": a.consequence,
            }
            for a in budget_alerts.visible_alerts(user, now=now)
        ],
        "at": now.isoformat(),
        "scope": scope,
        "cluster_power_w": telemetry["cluster_power_w"],
        "grid_now": grid_now,
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


def page_labels() -> dict:
    """Words for the codes the page's JS shows (pushed rounds carry codes only)."""
    return {
        "actions": labels.ACTION_LABELS,
        "waits": {str(k): v for k, v in labels.WAIT_LABELS.items()},
    }


def as_json(payload: dict) -> dict:
    """The payload without model instances, for JsonResponse."""
    return {
        **payload,
        "budgets": [{k: v for k, v in b.items() if k != "budget"} for b in payload["budgets"]],
    }
