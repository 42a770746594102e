"""/metrics scraped by a real Prometheus (Debian's ``prometheus``) from a live daphne: the
series land as a Prometheus user would query them, Prometheus itself sees no duplicate
series, and the per-GPU series join DCGM-exporter-shaped series on ``UUID``.

No DCGM exporter can run without an NVIDIA GPU, so the DCGM side is a static exposition in
DCGM's documented label spelling, served by a plain HTTP server: it stands for the exporter's
output, and the join query is the one an operator would write."""

from __future__ import annotations

import shutil
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from django.db import connection
from django.utils import timezone
from support.net import free_port
from support.polling import wait_for

from cluster.models import Budget, Gpu, Node, Team
from telemetry.ingest import ingest_batch
from telemetry.models import EnergyLedgerEntry

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMETHEUS = shutil.which("prometheus")

DCGM_LABELS = (
    'gpu="{i}",UUID="GPU-node-01-{i}",device="nvidia{i}",modelName="A100",'
    'Hostname="node-01",DCGM_FI_DRIVER_VERSION="535.104.05"'
)
DCGM_EXPOSITION = (
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
    "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    + "".join(
        f"DCGM_FI_DEV_GPU_TEMP{{{DCGM_LABELS.format(i=i)}}} {temp}\n"
        for i, temp in ((0, 64), (1, 50))
    )
)


class _Dcgm(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's spelling
        body = DCGM_EXPOSITION.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def dcgm_shaped_target():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Dcgm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _reading(gpu_uuid: str, ts, power_w: float) -> dict:
    return {
        "gpu_uuid": gpu_uuid, "ts": ts.isoformat(), "power_w": power_w, "energy_j": None,
        "util_pct": 90.0, "mem_used_mib": 2048.0, "temp_c": 60.0, "sm_clock_mhz": 1410,
        "power_limit_w": 400.0,
    }  # fmt: skip


@pytest.fixture
def live_node_01():
    """node-01 as its agent would keep it: a heartbeat and a reading per GPU (200 W and
    150 W) every second, from a thread, until the test ends."""
    stop = threading.Event()

    def feed():
        try:
            node = Node.objects.get(name="node-01")
            while not stop.is_set():
                now = timezone.now()
                Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
                readings = [
                    _reading("GPU-node-01-0", now, 200.0),
                    _reading("GPU-node-01-1", now, 150.0),
                ]
                ingest_batch(node, {"samples": readings}, now=now)
                stop.wait(1.0)
        finally:
            connection.close()

    thread = threading.Thread(target=feed, daemon=True)
    yield thread.start
    stop.set()
    if thread.is_alive():
        thread.join(timeout=10)


def _scene(make_node) -> None:
    """Two teams (one never used anything), node-01 (fed live), node-02 silent for 5 minutes
    with an old reading, vision 180 % through its carbon budget."""
    now = timezone.now().replace(microsecond=0)
    vision = Team.objects.create(name="Vision", slug="vision")
    Team.objects.create(name="Language", slug="language")
    make_node("node-01", gpus=2)
    silent = make_node("node-02", gpus=2)
    old = now - timedelta(minutes=5)
    Node.objects.filter(pk=silent.pk).update(last_heartbeat_at=old)
    ingest_batch(silent, {"samples": [_reading("GPU-node-02-0", old, 90.0)]})
    hour = now.replace(minute=0, second=0)
    EnergyLedgerEntry.objects.create(
        gpu=Gpu.objects.get(uuid="GPU-node-01-0"), hour=hour, team=vision, energy_j=1.8e6,
        co2_g=90.0, ci_g_per_kwh=180.0, zone="ES",
    )  # fmt: skip
    Budget.objects.create(
        team=vision, period_start=hour, period_end=hour + timedelta(days=1),
        energy_limit_kwh=2.0, carbon_limit_kg=0.05,
    )  # fmt: skip


def _query(api: str, promql: str) -> dict:
    """Instant query -> {frozenset of labels without job/instance: value}."""
    body = requests.get(f"{api}/api/v1/query", params={"query": promql}, timeout=5).json()
    assert body["status"] == "success", body
    return {
        frozenset((k, v) for k, v in r["metric"].items() if k not in ("job", "instance")): float(
            r["value"][1]
        )
        for r in body["data"]["result"]
    }


def test_prometheus_scrapes_trustworthy_series_from_a_live_server(
    processes, make_node, tmp_path, dcgm_shaped_target, live_node_01
):
    if PROMETHEUS is None:
        pytest.skip(
            "PROMETHEUS NOT INSTALLED: /metrics was not scraped by a real Prometheus "
            "(apt-get install prometheus; make test installs it as root)"
        )
    _scene(make_node)
    live_node_01()
    server = processes.web()
    prometheus_port = free_port()
    api = f"http://127.0.0.1:{prometheus_port}"
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: wattflow
    static_configs: [{{targets: ["{server.removeprefix("http://")}"]}}]
  - job_name: dcgm
    static_configs: [{{targets: ["{dcgm_shaped_target}"]}}]
  - job_name: prometheus
    static_configs: [{{targets: ["127.0.0.1:{prometheus_port}"]}}]
"""
    )
    processes.start(
        "prometheus",
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prometheus_port}"],
    )  # fmt: skip

    def all_targets_up():
        try:
            targets = requests.get(f"{api}/api/v1/targets", timeout=2).json()["data"]
        except (requests.RequestException, ValueError):
            return False
        active = targets["activeTargets"]
        return len(active) == 3 and all(t["health"] == "up" for t in active) and active

    active = wait_for(
        all_targets_up, timeout_s=60, what="Prometheus to scrape all targets", every_s=0.5
    )
    assert [t["lastError"] for t in active] == ["", "", ""]
    time.sleep(3)  # a few more scrapes, so duplicates (if any) would have been counted

    # a silent node is down and draws no watts; the live one reports its GPUs' sum
    assert _query(api, "wattflow_node_up") == {
        frozenset({("__name__", "wattflow_node_up"), ("node", "node-01")}): 1.0,
        frozenset({("__name__", "wattflow_node_up"), ("node", "node-02")}): 0.0,
    }
    assert _query(api, "wattflow_node_power_watts") == {
        frozenset({("__name__", "wattflow_node_power_watts"), ("node", "node-01")}): 350.0
    }
    # counters for every team from the start, in joules and grams
    energy = _query(api, "wattflow_team_energy_joules_total")
    assert sorted((dict(k)["team"], v) for k, v in energy.items()) == [
        ("language", 0.0),
        ("vision", 1.8e6),
    ]
    assert _query(api, 'wattflow_budget_co2_grams_remaining{team="vision"}') == {
        frozenset({("__name__", "wattflow_budget_co2_grams_remaining"), ("team", "vision")}): -40.0
    }
    assert _query(api, 'wattflow_budget_energy_joules_remaining{team="vision"}') == {
        frozenset(
            {("__name__", "wattflow_budget_energy_joules_remaining"), ("team", "vision")}
        ): 5.4e6
    }
    assert not _query(api, '{__name__=~"wattflow_.*_(kwh|kg)"}')
    # Prometheus saw no sample twice in any scrape
    duplicates = _query(api, "prometheus_target_scrapes_sample_duplicate_timestamp_total")
    assert list(duplicates.values()) == [0.0]
    # every GPU's energy counter is there, labelled as DCGM labels it
    gpu_energy = _query(api, "wattflow_gpu_energy_joules_total")
    assert sorted(dict(k)["UUID"] for k in gpu_energy) == [
        "GPU-node-01-0", "GPU-node-01-1", "GPU-node-02-0", "GPU-node-02-1",
    ]  # fmt: skip
    # and the per-GPU power joins DCGM's series on UUID
    joined = _query(
        api,
        "wattflow_gpu_power_watts * on(UUID) group_left(DCGM_FI_DRIVER_VERSION) "
        "(0 * DCGM_FI_DEV_GPU_TEMP + 1)",
    )
    assert sorted(
        (dict(k)["UUID"], dict(k)["Hostname"], dict(k)["DCGM_FI_DRIVER_VERSION"], v)
        for k, v in joined.items()
    ) == [
        ("GPU-node-01-0", "node-01", "535.104.05", 200.0),
        ("GPU-node-01-1", "node-01", "535.104.05", 150.0),
    ]
