"""/metrics as a Prometheus user reads it, parsed with prometheus_client's own text parser:
base units, every team's counters from the start, one series per label set, a silent node
down rather than idle, and per-GPU series labelled as DCGM's exporter labels them."""

from collections import Counter
from datetime import timedelta

from agent_samples import series
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from cluster.models import Budget, Gpu, Node
from telemetry.ingest import ingest_batch
from telemetry.models import EnergyLedgerEntry, GpuHour


def _samples(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    return [
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    ]


def _values(client):
    samples = _samples(client)
    return {(name, labels): value for name, labels, value in samples}


def _dcgm(node: str, index: int) -> tuple:
    return tuple(
        sorted(
            {
                "gpu": str(index),
                "UUID": f"GPU-{node}-{index}",
                "device": f"nvidia{index}",
                "modelName": "A100",
                "Hostname": node,
            }.items()
        )
    )


def test_team_counters_exist_at_zero_for_every_team_before_any_use(client, team, other_team):
    values = _values(client)
    for slug in ("vision", "language"):
        assert values[("wattflow_team_energy_joules_total", (("team", slug),))] == 0.0
        assert values[("wattflow_team_co2_grams_total", (("team", slug),))] == 0.0


def test_budgets_are_in_joules_and_grams_and_overspending_goes_negative(
    client, agent_node, team, other_team
):
    # given vision used 1.8 MJ (0.5 kWh) and 90 g against 2 kWh and 50 g (180 % of carbon)
    now = timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    EnergyLedgerEntry.objects.create(
        gpu=gpu, hour=hour, team=team, energy_j=1.8e6, co2_g=90.0, ci_g_per_kwh=180.0, zone="ES"
    )
    Budget.objects.create(
        team=team, period_start=hour, period_end=hour + timedelta(days=1),
        energy_limit_kwh=2.0, carbon_limit_kg=0.05,
    )  # fmt: skip
    values = _values(client)
    vision = (("team", "vision"),)
    assert values[("wattflow_team_energy_joules_total", vision)] == 1.8e6
    assert values[("wattflow_team_co2_grams_total", vision)] == 90.0
    assert values[("wattflow_budget_energy_joules_limit", vision)] == 7.2e6
    assert values[("wattflow_budget_energy_joules_used", vision)] == 1.8e6
    assert values[("wattflow_budget_energy_joules_remaining", vision)] == 5.4e6
    assert values[("wattflow_budget_co2_grams_limit", vision)] == 50.0
    assert values[("wattflow_budget_co2_grams_used", vision)] == 90.0
    assert values[("wattflow_budget_co2_grams_remaining", vision)] == -40.0
    # a team without a running budget has no budget series (no invented limit)
    assert not any(k[1] == (("team", "language"),) for k in values if "budget" in k[0])
    # and nothing is left in kWh or kg
    assert not [k for k in values if k[0].endswith(("_kwh", "_kg"))]


def test_a_silent_node_is_down_and_draws_no_watts(client, agent_node, other_node, settings):
    # given node-01 heart-beating with fresh readings, node-02 silent for 5 minutes
    settings.WATTFLOW_NODE_TIMEOUT_S = 60
    now = timezone.now().replace(microsecond=0)
    node, _ = agent_node
    silent, _ = other_node
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now - timedelta(seconds=5))
    Node.objects.filter(pk=silent.pk).update(last_heartbeat_at=now - timedelta(minutes=5))
    for gpu_uuid, power in (("GPU-node-01-0", 200.0), ("GPU-node-01-1", 150.0)):
        ingest_batch(
            node, {"samples": series(gpu_uuid, now - timedelta(seconds=5), 3, power_w=power)}
        )
    ingest_batch(
        silent, {"samples": series("GPU-node-02-0", now - timedelta(minutes=5), 3, power_w=90.0)}
    )
    values = _values(client)
    assert values[("wattflow_node_up", (("node", "node-01"),))] == 1.0
    assert values[("wattflow_node_up", (("node", "node-02"),))] == 0.0
    assert values[("wattflow_node_power_watts", (("node", "node-01"),))] == 350.0
    assert ("wattflow_node_power_watts", (("node", "node-02"),)) not in values
    assert values[("wattflow_gpu_power_watts", _dcgm("node-01", 0))] == 200.0
    assert values[("wattflow_gpu_power_watts", _dcgm("node-01", 1))] == 150.0
    assert ("wattflow_gpu_power_watts", _dcgm("node-02", 0)) not in values


def test_gpu_energy_counters_carry_dcgm_labels_from_the_start(client, agent_node, other_node):
    gpu = Gpu.objects.get(uuid="GPU-node-01-1")
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    for h, energy_j in ((hour - timedelta(hours=1), 1000.0), (hour, 250.0)):
        GpuHour.objects.create(
            gpu=gpu, hour=h, energy_j=energy_j, samples=10, power_avg_w=1.0, power_max_w=1.0
        )
    values = _values(client)
    energy = {
        labels: v
        for (name, labels), v in values.items()
        if name == "wattflow_gpu_energy_joules_total"
    }
    assert energy == {
        _dcgm("node-01", 0): 0.0,
        _dcgm("node-01", 1): 1250.0,
        _dcgm("node-02", 0): 0.0,
        _dcgm("node-02", 1): 0.0,
    }


def test_no_series_is_emitted_twice(client, agent_node, other_node, team, other_team):
    # given every kind of series: two teams with running budgets, live readings, ledgers
    now = timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    node, _ = agent_node
    ingest_batch(node, {"samples": series("GPU-node-01-0", now - timedelta(seconds=3), 2)})
    for t, gpu_uuid in ((team, "GPU-node-01-0"), (other_team, "GPU-node-01-1")):
        Budget.objects.create(
            team=t, period_start=hour - timedelta(days=1), period_end=hour + timedelta(days=1),
            energy_limit_kwh=1.0, carbon_limit_kg=1.0,
        )  # fmt: skip
        EnergyLedgerEntry.objects.create(
            gpu=Gpu.objects.get(uuid=gpu_uuid), hour=hour, team=t, energy_j=10.0,
            co2_g=1.0, ci_g_per_kwh=360.0, zone="ES",
        )  # fmt: skip
    samples = _samples(client)
    repeated = [
        k for k, n in Counter((name, labels) for name, labels, _ in samples).items() if n > 1
    ]
    assert repeated == []
    assert len({name for name, _, _ in samples if name.startswith("wattflow_budget_")}) == 6
