"""``/metrics`` for Prometheus: a few low-cardinality series, read fresh on each scrape.

Series (labels are nodes and teams, never GPUs or jobs, so cardinality stays at cluster size):

- ``wattflow_node_power_watts{node}``: sum of the node's GPUs' latest power readings (last
  30 s, as the live dashboard; older readings mean the node is silent and are left out);
- ``wattflow_team_energy_joules_total{team}`` / ``wattflow_team_co2_grams_total{team}``: the
  ledger's totals per team (counters: they only grow as hours are accounted);
- ``wattflow_budget_energy_remaining_kwh{team}`` / ``wattflow_budget_co2_remaining_kg{team}``:
  what is left of each team's budget whose period contains now (absent without a limit).

Who may scrape: a request from an address in ``WATTFLOW_METRICS_ALLOWED_NETWORKS`` (default:
loopback only, so a Prometheus beside ``make run`` works and nobody else does), or one that
sends ``Authorization: Bearer <WATTFLOW_METRICS_TOKEN>`` (when that is set). Others get 401 when a
token is configured (so a scraper knows to send one), else 403. The address is the connection's
(``REMOTE_ADDR``): behind a reverse proxy every request comes from the proxy, so never list the
proxy's network; use the token.
"""

from __future__ import annotations

import hmac
import ipaddress
from functools import lru_cache

from django.conf import settings
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


@lru_cache(maxsize=8)
def _networks(cidrs: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def _from_allowed_network(request) -> bool:
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    networks = _networks(tuple(settings.WATTFLOW_METRICS_ALLOWED_NETWORKS))
    return any(address in network for network in networks)


def _has_token(request) -> bool:
    token = settings.WATTFLOW_METRICS_TOKEN
    scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
    return (
        bool(token)
        and scheme.lower() == "bearer"
        and hmac.compare_digest(sent.strip().encode(), token.encode())
    )


def metrics_refusal(request) -> HttpResponse | None:
    """Why ``request`` may not scrape (a 401/403 response), or None if it may."""
    if _has_token(request) or _from_allowed_network(request):
        return None
    if settings.WATTFLOW_METRICS_TOKEN:
        response = HttpResponse(
            "Send Authorization: Bearer <WATTFLOW_METRICS_TOKEN>.\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(
        "Scraping is allowed from WATTFLOW_METRICS_ALLOWED_NETWORKS only.\n",
        status=403,
        content_type="text/plain",
    )


def metrics_view(request) -> HttpResponse:
    refusal = metrics_refusal(request)
    if refusal is not None:
        return refusal
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WattflowCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
