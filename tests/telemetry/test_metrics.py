"""/metrics: low-cardinality series for Prometheus."""

from datetime import timedelta

from agent_samples import series
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from cluster.models import Budget, Gpu
from telemetry.ingest import ingest_batch
from telemetry.models import EnergyLedgerEntry


def _values(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }


def test_metrics_report_node_power_team_totals_and_budget_left(
    client, agent_node, other_node, team
):
    node, _ = agent_node
    now = timezone.now().replace(microsecond=0)
    for gpu_uuid, power in (("GPU-node-01-0", 200.0), ("GPU-node-01-1", 150.0)):
        ingest_batch(
            node, {"samples": series(gpu_uuid, now - timedelta(seconds=5), 3, power_w=power)}
        )
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    hour = now.replace(minute=0, second=0)
    EnergyLedgerEntry.objects.create(
        gpu=gpu, hour=hour, team=team, energy_j=1.8e6, co2_g=100.0, ci_g_per_kwh=200.0,
        zone="ES",
    )  # fmt: skip
    Budget.objects.create(
        team=team, period_start=hour, period_end=hour + timedelta(days=1),
        energy_limit_kwh=2.0, carbon_limit_kg=1.0,
    )  # fmt: skip
    values = _values(client)
    assert values[("wattflow_node_power_watts", (("node", "node-01"),))] == 350.0
    assert values[("wattflow_node_power_watts", (("node", "node-02"),))] == 0.0
    assert values[("wattflow_team_energy_joules_total", (("team", "vision"),))] == 1.8e6
    assert values[("wattflow_team_co2_grams_total", (("team", "vision"),))] == 100.0
    assert values[("wattflow_budget_energy_remaining_kwh", (("team", "vision"),))] == 1.5
    assert values[("wattflow_budget_co2_remaining_kg", (("team", "vision"),))] == 0.9
