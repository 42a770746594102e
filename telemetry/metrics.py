"""``/metrics`` for Prometheus: a few low-cardinality series, read fresh on each scrape.

Series (labels are nodes and teams, never GPUs or jobs, so cardinality stays at cluster size):

- ``wattflow_node_power_watts{node}``: sum of the node's GPUs' latest power readings (last
  30 s, as the live dashboard; older readings mean the node is silent and are left out);
- ``wattflow_team_energy_joules_total{team}`` / ``wattflow_team_co2_grams_total{team}``: the
  ledger's totals per team (counters: they only grow as hours are accounted);
- ``wattflow_budget_energy_remaining_kwh{team}`` / ``wattflow_budget_co2_remaining_kg{team}``:
  what is left of each team's budget whose period contains now (absent without a limit).

Scraping is open like most exporters; put it behind the reverse proxy's access rules.
"""

from __future__ import annotations

from django.db.models import Sum
from django.http import HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from cluster.models import Budget, Node
from scheduling.core.types import J_PER_KWH
from telemetry.accounting import budget_usage
from telemetry.live import live_summary
from telemetry.models import EnergyLedgerEntry


class WattflowCollector:
    def collect(self):
        now = timezone.now()
        power = GaugeMetricFamily(
            "wattflow_node_power_watts", "Latest total GPU power of a node.", labels=["node"]
        )
        by_node = {n["node"]: n["power_w"] for n in live_summary(now)["nodes"]}
        for name in Node.objects.order_by("name").values_list("name", flat=True):
            power.add_metric([name], by_node.get(name, 0.0))
        yield power

        energy = CounterMetricFamily(
            "wattflow_team_energy_joules", "Energy accounted to a team's jobs.", labels=["team"]
        )
        co2 = CounterMetricFamily(
            "wattflow_team_co2_grams", "Carbon accounted to a team's jobs.", labels=["team"]
        )
        rows = (
            EnergyLedgerEntry.objects.filter(team__isnull=False)
            .values("team__slug")
            .annotate(e=Sum("energy_j"), c=Sum("co2_g"))
            .order_by("team__slug")
        )
        for row in rows:
            energy.add_metric([row["team__slug"]], row["e"])
            co2.add_metric([row["team__slug"]], row["c"])
        yield energy
        yield co2

        energy_left = GaugeMetricFamily(
            "wattflow_budget_energy_remaining_kwh",
            "Energy left in the team's current budget period.",
            labels=["team"],
        )
        co2_left = GaugeMetricFamily(
            "wattflow_budget_co2_remaining_kg",
            "Carbon left in the team's current budget period.",
            labels=["team"],
        )
        budgets = Budget.objects.filter(period_start__lte=now, period_end__gt=now).select_related(
            "team"
        )
        for budget in budgets.order_by("team__slug", "period_start"):
            used = budget_usage(budget)
            if budget.energy_limit_kwh is not None:
                left = budget.energy_limit_kwh - used.energy_j / J_PER_KWH
                energy_left.add_metric([budget.team.slug], left)
            if budget.carbon_limit_kg is not None:
                co2_left.add_metric([budget.team.slug], budget.carbon_limit_kg - used.co2_g / 1000)
        yield energy_left
        yield co2_left


def metrics_view(request) -> HttpResponse:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WattflowCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
