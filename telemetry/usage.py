"""What a budget has used: the one computation the scheduler, the pages, the API and
``/metrics`` all read.

``budget_usage(budget)`` sums the team's ledger rows (``EnergyLedgerEntry``) over the budget's
period ``[period_start, period_end)`` to the minute, per hour and in total: the page's burn
chart and the total it prints are the same numbers. Hours wholly in the period count whole;
of an hour the period starts or ends inside, each minute counts by the share of its seconds
inside the period (the ledger keeps each row's energy by minute). Before, every hour that
starts in the period counted whole: a period ending at 15:38 went on counting to 16:00, and
one starting at 15:28 missed its first half hour. Everything is kept
in base units (joules, grams of CO2e); ``kWh`` and ``kg`` are display conversions.

A limit's ``fraction`` is not capped: 0.09 kg of a 0.05 kg budget is 1.8 (180 %), and
``remaining`` is then negative. A budget stored before its limits had bounds can make a number
infinite (a 5e-324 kWh limit is an infinite share of any use, 1e308 kg is inf grams): what is
read out gives such a number as None (JSON null; ``manage.py check --database default``
names the budget). ``publish_usage_of_teams`` publishes ``BUDGET_USAGE_CHANGED``
(``config/events.py``) for the running budgets of teams whose ledgers accounting changed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.postgres.aggregates import BoolOr
from django.db.models import Q, Sum

from cluster.models import Budget
from config import events
from scheduling.core.types import G_PER_KG, J_PER_KWH, decimal_product
from telemetry.carbon import hour_floor
from telemetry.models import EnergyLedgerEntry

MINUTE = timedelta(minutes=1)


def finite_or_none(value: float) -> float | None:
    """``value``, or None where it is no finite number (JSON holds none, pages showed inf %)."""
    return value if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class LimitUsage:
    """One limit of a budget (energy in J, or carbon in g) against what was used."""

    kind: str  # "energy" or "carbon"
    used: float  # J or g
    limit: float  # J or g
    warn_fraction: float

    @property
    def unit(self) -> str:
        return "J" if self.kind == "energy" else "g"

    @property
    def soft_limit(self) -> float:
        # (as typed: a 7 g limit's 70 % is 4.9 g, not 4.8999999999999995)
        return decimal_product(self.limit, self.warn_fraction)

    @property
    def remaining(self) -> float:
        """Limit minus use; negative once the limit is overspent."""
        return self.limit - self.used

    @property
    def fraction(self) -> float:
        """Use over limit, not capped at 1."""
        return self.used / self.limit

    @property
    def percent(self) -> float:
        return 100.0 * self.fraction

    @property
    def over_soft(self) -> bool:
        return self.used >= self.soft_limit

    @property
    def over_hard(self) -> bool:
        return self.used >= self.limit

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "unit": self.unit,
            "used": finite_or_none(self.used),
            "limit": finite_or_none(self.limit),
            "soft_limit": finite_or_none(self.soft_limit),
            "remaining": finite_or_none(self.remaining),
            "percent": finite_or_none(self.percent),
            "over_soft": self.over_soft,
            "over_hard": self.over_hard,
        }


@dataclass(frozen=True)
class BudgetUsage:
    """A budget's use so far: totals, the hourly rows they are the sum of, and each limit."""

    budget_id: int
    team_id: int
    team_slug: str
    period_start: datetime
    period_end: datetime
    energy_j: float
    co2_g: float
    estimated: bool  # some carbon was priced with a fallback intensity
    hourly: tuple[tuple[datetime, float, float], ...]  # (hour, energy_j, co2_g), ascending
    energy: LimitUsage | None
    carbon: LimitUsage | None

    @property
    def energy_kwh(self) -> float:
        return self.energy_j / J_PER_KWH

    @property
    def co2_kg(self) -> float:
        return self.co2_g / G_PER_KG

    @property
    def limits(self) -> tuple[LimitUsage, ...]:
        return tuple(x for x in (self.energy, self.carbon) if x is not None)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, base units (what the websocket pushes and the API returns)."""
        return {
            "budget_id": self.budget_id,
            "team_id": self.team_id,
            "team": self.team_slug,
            "period_start": self.period_start.isoformat(),
            "period_end": self.period_end.isoformat(),
            "energy_used_j": self.energy_j,
            "co2_used_g": self.co2_g,
            "energy_used_kwh": self.energy_kwh,
            "co2_used_kg": self.co2_kg,
            "estimated": self.estimated,
            "limits": [x.as_dict() for x in self.limits],
        }


def budget_usage(budget: Budget) -> BudgetUsage:
    """``budget``'s use: the team's ledger over its period, to the minute: the hours wholly
    in it, and of an hour the period starts or ends inside, each minute's share of it
    (``EnergyLedgerEntry.minutes_j``; a row accounted before minutes were kept counts whole
    if its hour starts in the period, as all rows did)."""
    return budget_usages([budget])[0]


def _first_hour(budget: Budget) -> datetime:
    # The ledger's hours are UTC hours: a bound at +05:30 has its own on the half hour.
    return hour_floor(budget.period_start)


def _edge_hours(budget: Budget) -> set[datetime]:
    """The hours the period starts or ends inside, from its bounds (not from the rows: one
    committed in between would count whole)."""
    start, end = budget.period_start, budget.period_end
    first = _first_hour(budget)
    last = hour_floor(end)
    return {h for h, inside in ((first, first < start), (last, last < end)) if inside}


def budget_usages(budgets: Iterable[Budget]) -> list[BudgetUsage]:
    """``budget_usage`` of each of ``budgets``, in their order, in two queries whatever their
    number (the team's ledger per hour over all their periods, and the rows of the hours
    they start or end inside). Read one budget at a time, a list of budgets cost two queries
    each: 216 for the budget page of 30 teams' weekly budgets over four weeks."""
    budgets = list(budgets)
    if not budgets:
        return []
    spans: dict[int, tuple[datetime, datetime]] = {}
    for b in budgets:
        lo, hi = spans.get(b.team_id, (_first_hour(b), b.period_end))
        spans[b.team_id] = (min(lo, _first_hour(b)), max(hi, b.period_end))
    where = Q()
    for team_id, (lo, hi) in spans.items():
        where |= Q(team_id=team_id, hour__gte=lo, hour__lt=hi)
    per_team: dict[int, list[dict]] = {}
    for row in (
        EnergyLedgerEntry.objects.filter(where)
        .values("team_id", "hour")
        .annotate(e=Sum("energy_j"), c=Sum("co2_g"), est=BoolOr("ci_estimated"))
        .order_by("team_id", "hour")
    ):
        per_team.setdefault(row["team_id"], []).append(row)
    # By position, not id: unsaved budgets (the what-if's) all have none, and each took the
    # edge hours of the last one.
    edges = [_edge_hours(b) for b in budgets]
    edge_where = Q()
    for b, hours in zip(budgets, edges, strict=True):
        if hours:
            edge_where |= Q(team_id=b.team_id, hour__in=hours)
    edge_rows: dict[tuple[int, datetime], list[tuple]] = {}
    if edge_where:
        for team_id, *row in EnergyLedgerEntry.objects.filter(edge_where).values_list(
            "team_id", "hour", "energy_j", "co2_g", "ci_g_per_kwh", "minutes_j"
        ):
            edge_rows.setdefault((team_id, row[0]), []).append(tuple(row))
    return [
        _usage(b, per_team.get(b.team_id, ()), hours, edge_rows)
        for b, hours in zip(budgets, edges, strict=True)
    ]


def _usage(
    budget: Budget,
    team_rows: Iterable[dict],
    edges: set[datetime],
    edge_rows: dict[tuple[int, datetime], list[tuple]],
) -> BudgetUsage:
    start, end = budget.period_start, budget.period_end
    first = _first_hour(budget)
    parts = (
        _edge_parts([r for h in edges for r in edge_rows.get((budget.team_id, h), ())], start, end)
        if edges
        else {}
    )
    hourly = []
    estimated = False
    for row in team_rows:
        if not first <= row["hour"] < end:
            continue
        e, c = row["e"] or 0.0, row["c"] or 0.0
        if row["hour"] in parts:
            e, c = parts[row["hour"]]
            if not (e or c):
                continue
        hourly.append((row["hour"], e, c))
        estimated = estimated or bool(row["est"])
    # Summed in hour order, the order the burn chart accumulates in: the chart's last point
    # and the total are the same float.
    energy_j = co2_g = 0.0
    for _, e, c in hourly:
        energy_j += e
        co2_g += c
    warn = budget.warn_fraction
    energy = None
    if budget.energy_limit_kwh is not None:
        energy_limit_j = decimal_product(budget.energy_limit_kwh, J_PER_KWH)
        energy = LimitUsage("energy", energy_j, energy_limit_j, warn)
    carbon = None
    if budget.carbon_limit_kg is not None:
        carbon_limit_g = decimal_product(budget.carbon_limit_kg, G_PER_KG)
        carbon = LimitUsage("carbon", co2_g, carbon_limit_g, warn)
    return BudgetUsage(
        budget_id=budget.pk,
        team_id=budget.team_id,
        team_slug=budget.team.slug,
        period_start=budget.period_start,
        period_end=budget.period_end,
        energy_j=energy_j,
        co2_g=co2_g,
        estimated=estimated,
        hourly=tuple(hourly),
        energy=energy,
        carbon=carbon,
    )


def _edge_parts(
    found: Iterable[tuple], start: datetime, end: datetime
) -> dict[datetime, tuple[float, float]]:
    """(energy J, carbon g) of each hour of ``found`` (the ledger rows, as (hour, energy_j,
    co2_g, ci_g_per_kwh, minutes_j), of the hours the period starts or ends inside) over
    [start, end): each minute's energy in proportion to the seconds of it inside the
    period (a period starting at 00:07:13 pays 47 s of minute 00:07; counting only the
    minutes that start inside, a live probe's budgets paid nothing for their first
    partial minute and ended at 104-113% of their limits by the GPUs' own samples)."""
    out: dict[datetime, tuple[float, float]] = {}
    for hour, energy_j, co2_g, ci, minutes_j in found:
        if minutes_j:
            e = 0.0
            for k, j in enumerate(minutes_j):
                at = hour + k * MINUTE
                inside_s = (min(at + MINUTE, end) - max(at, start)).total_seconds()
                if inside_s > 0:
                    e += j * min(inside_s / MINUTE.total_seconds(), 1.0)
            c = e / J_PER_KWH * ci
        elif hour >= start:
            e, c = energy_j, co2_g  # no minutes kept: the hour counts whole, as before
        else:
            e = c = 0.0
        e0, c0 = out.get(hour, (0.0, 0.0))
        out[hour] = (e0 + e, c0 + c)
    return out


def running_budgets(*, now: datetime, team_ids: Iterable[int] | None = None):
    """Budgets whose period contains ``now`` (one per team at most: they may not overlap)."""
    budgets = Budget.objects.filter(period_start__lte=now, period_end__gt=now)
    if team_ids is not None:
        budgets = budgets.filter(team_id__in=list(team_ids))
    return budgets.select_related("team").order_by("team__slug", "period_start", "id")


def publish_usage_of_teams(team_ids: Iterable[int], *, now: datetime) -> int:
    """Publish ``BUDGET_USAGE_CHANGED`` (after commit) with the usage of the running budgets
    of ``team_ids``; returns how many budgets it named (0: nothing published)."""
    team_ids = sorted(set(team_ids))
    if not team_ids:
        return 0
    usages = [u.as_dict() for u in budget_usages(running_budgets(now=now, team_ids=team_ids))]
    if usages:
        events.publish_on_commit(
            events.BUDGET_USAGE_CHANGED, {"at": now.isoformat(), "budgets": usages}
        )
    return len(usages)
