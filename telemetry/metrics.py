"""``/metrics`` for Prometheus: series a Prometheus user can trust, read fresh on each scrape.

Base units everywhere (joules, grams, watts), one series per label set, and every series that
can exist present from the start (a counter at 0 for a team that used nothing, so ``rate()``
and ``increase()`` work from the first scrape):

- ``wattflow_node_up{node}``: 1 when the node's agent heart-beat within
  ``WATTFLOW_NODE_TIMEOUT_S``, else 0. A silent node is *down*, not drawing 0 W;
- ``wattflow_node_power_watts{node}``: sum of the latest power readings of the node's GPUs
  (last ``telemetry.live.LIVE_WINDOW_S`` s, as the live dashboard); absent while the node is
  silent, so a dead node never reads as an idle one;
- ``wattflow_gpu_power_watts{gpu,UUID,device,modelName,Hostname}``: the GPU's latest power
  reading (absent while silent), labelled as NVIDIA's DCGM exporter labels its
  ``DCGM_FI_DEV_POWER_USAGE`` so the two join on ``UUID`` (or ``Hostname`` and ``gpu``);
- ``wattflow_gpu_energy_joules_total{...same labels}``: energy accounted to the GPU (idle
  draw included), from the hourly rollups; grows as hours are accounted;
- ``wattflow_team_energy_joules_total{team}`` / ``wattflow_team_co2_grams_total{team}``: the
  ledger's totals per team;
- ``wattflow_budget_{energy_joules,co2_grams}_{limit,used,remaining}{team}``: the team's
  running budget (``telemetry.usage.budget_usage``, the scheduler's own number); ``remaining``
  goes negative when the budget is overspent. Budgets may not overlap, so there is one per team.

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
from datetime import datetime, timedelta
from functools import lru_cache

from django.conf import settings
from django.db.models import Sum
from django.http import HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from cluster.models import Gpu, Node, Team
from telemetry.live import LIVE_WINDOW_S
from telemetry.models import EnergyLedgerEntry, GpuHour, GpuSample
from telemetry.usage import budget_usages, running_budgets

# The labels of NVIDIA's dcgm-exporter on its per-GPU series, in its spelling.
GPU_LABELS = ["gpu", "UUID", "device", "modelName", "Hostname"]


def _gpu_labels(gpu: Gpu) -> list[str]:
    return [str(gpu.index), gpu.uuid, f"nvidia{gpu.index}", gpu.model, gpu.node.name]


def _latest_power(now: datetime) -> dict[int, float]:
    """GPU id -> its latest power reading in the live window."""
    return dict(
        GpuSample.objects.filter(ts__gte=now - timedelta(seconds=LIVE_WINDOW_S), ts__lte=now)
        .order_by("gpu_id", "-ts")
        .distinct("gpu_id")
        .values_list("gpu_id", "power_w")
    )


def node_series(now: datetime):
    up = GaugeMetricFamily(
        "wattflow_node_up",
        "1 if the node's agent heart-beat within WATTFLOW_NODE_TIMEOUT_S, else 0.",
        labels=["node"],
    )
    power = GaugeMetricFamily(
        "wattflow_node_power_watts",
        "Sum of the latest power readings of the node's GPUs (absent while it is silent).",
        labels=["node"],
    )
    gpu_power = GaugeMetricFamily(
        "wattflow_gpu_power_watts",
        "Latest power reading of the GPU (absent while it is silent).",
        labels=GPU_LABELS,
    )
    gpu_energy = CounterMetricFamily(
        "wattflow_gpu_energy_joules",
        "Energy accounted to the GPU, idle draw included (grows as hours are accounted).",
        labels=GPU_LABELS,
    )
    cutoff = now - timedelta(seconds=settings.WATTFLOW_NODE_TIMEOUT_S)
    latest = _latest_power(now)
    energy = dict(
        GpuHour.objects.values("gpu_id").annotate(e=Sum("energy_j")).values_list("gpu_id", "e")
    )
    gpus = list(Gpu.objects.select_related("node").order_by("node__name", "index"))
    for node in Node.objects.order_by("name"):
        heard = node.last_heartbeat_at is not None and node.last_heartbeat_at >= cutoff
        up.add_metric([node.name], 1.0 if heard else 0.0)
        readings = [latest[g.pk] for g in gpus if g.node_id == node.pk and g.pk in latest]
        if readings:
            power.add_metric([node.name], sum(readings))
    for gpu in gpus:
        if gpu.pk in latest:
            gpu_power.add_metric(_gpu_labels(gpu), latest[gpu.pk])
        gpu_energy.add_metric(_gpu_labels(gpu), energy.get(gpu.pk) or 0.0)
    return [up, power, gpu_power, gpu_energy]


def team_series():
    energy = CounterMetricFamily(
        "wattflow_team_energy_joules", "Energy accounted to a team's jobs.", labels=["team"]
    )
    co2 = CounterMetricFamily(
        "wattflow_team_co2_grams", "Carbon (CO2e) accounted to a team's jobs.", labels=["team"]
    )
    totals = {
        row["team_id"]: (row["e"] or 0.0, row["c"] or 0.0)
        for row in EnergyLedgerEntry.objects.filter(team__isnull=False)
        .values("team_id")
        .annotate(e=Sum("energy_j"), c=Sum("co2_g"))
    }
    for team_id, slug in Team.objects.order_by("slug").values_list("pk", "slug"):
        e, c = totals.get(team_id, (0.0, 0.0))
        energy.add_metric([slug], e)
        co2.add_metric([slug], c)
    return [energy, co2]


_BUDGET_HELP = {
    "limit": "Limit of the team's running budget.",
    "used": "Use so far in the team's running budget period.",
    "remaining": "Limit minus use of the team's running budget (negative when overspent).",
}


def budget_series(now: datetime):
    families = {
        (kind, what): GaugeMetricFamily(
            f"wattflow_budget_{kind}_{what}", _BUDGET_HELP[what], labels=["team"]
        )
        for kind in ("energy_joules", "co2_grams")
        for what in ("limit", "used", "remaining")
    }
    # One running budget per team (an exclusion constraint); keyed by team all the same, so a
    # label set can never be emitted twice (Prometheus would silently keep one of them).
    by_team = {}
    for budget in running_budgets(now=now):
        by_team.setdefault(budget.team.slug, budget)
    ordered = sorted(by_team.items())
    usages = budget_usages([budget for _, budget in ordered])
    for (slug, _), usage in zip(ordered, usages, strict=True):
        for kind, limit in (("energy_joules", usage.energy), ("co2_grams", usage.carbon)):
            if limit is None:
                continue
            families[(kind, "limit")].add_metric([slug], limit.limit)
            families[(kind, "used")].add_metric([slug], limit.used)
            families[(kind, "remaining")].add_metric([slug], limit.remaining)
    return list(families.values())


class WattflowCollector:
    def collect(self):
        now = timezone.now()
        yield from node_series(now)
        yield from team_series()
        yield from budget_series(now)


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
