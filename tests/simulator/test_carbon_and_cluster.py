"""The Electricity Maps reader, exact carbon integration and cluster spec files."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduling.simulator.carbon import (
    CarbonDataError,
    HourlyIntensity,
    carbon_file,
    read_electricity_maps_csv,
)
from scheduling.simulator.cluster_spec import ClusterSpecError, read_cluster_spec

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.mark.parametrize("zone", ["ES", "US-CAL-CISO", "NO", "BR"])
def test_every_zone_file_has_8760_consecutive_hours_of_2022(zone):
    points = read_electricity_maps_csv(carbon_file(DATA, zone))
    assert len(points) == 8760
    assert points[0].start == datetime(2022, 1, 1, tzinfo=UTC)
    assert points[-1].start == datetime(2022, 12, 31, 23, tzinfo=UTC)


def test_direct_and_lca_columns_are_read_from_the_file():
    # em_ES_2022_hourly.csv, first row: direct 133.64, LCA 175.54
    assert read_electricity_maps_csv(carbon_file(DATA, "ES"))[0].ci_g_per_kwh == 133.64
    assert read_electricity_maps_csv(carbon_file(DATA, "ES"), kind="lca")[0].ci_g_per_kwh == 175.54


def test_integration_splits_at_hour_boundaries_from_the_chosen_start():
    points = read_electricity_maps_csv(carbon_file(DATA, "ES"))
    intensity = HourlyIntensity(points, start=datetime(2022, 1, 1, 1, tzinfo=UTC))
    # Sim time 0 is 01:00 (139.1 g/kWh); 1800 s into it, 1800 s of 02:00's hour.
    ci_1, ci_2 = points[1].ci_g_per_kwh, points[2].ci_g_per_kwh
    assert intensity.ci_at(0.0) == ci_1
    assert intensity.ci_at(3600.0) == ci_2
    expected = 1000.0 * (1800 * ci_1 + 1800 * ci_2) / 3.6e6
    assert intensity.co2_g(1000.0, 1800.0, 5400.0) == pytest.approx(expected, rel=1e-12)
    # Past the end of the year the series wraps around to its start.
    year_s = 8760 * 3600.0
    assert intensity.ci_at(year_s) == ci_1


def test_a_start_off_the_hour_grid_or_a_bad_file_is_refused(tmp_path):
    points = read_electricity_maps_csv(carbon_file(DATA, "NO"))
    with pytest.raises(CarbonDataError, match="not a whole hour"):
        HourlyIntensity(points, start=datetime(2022, 1, 1, 0, 30, tzinfo=UTC))
    with pytest.raises(CarbonDataError, match="not a whole hour"):
        HourlyIntensity(points, start=datetime(2023, 1, 1, tzinfo=UTC))
    bad = tmp_path / "em_XX.csv"
    bad.write_text("Datetime (UTC),Carbon Intensity gCO₂eq/kWh (direct)\n2022-01-01 00:00:00,\n")
    with pytest.raises(CarbonDataError, match="em_XX.csv:2: bad value"):
        read_electricity_maps_csv(bad)
    with pytest.raises(CarbonDataError, match="unknown intensity kind"):
        read_electricity_maps_csv(carbon_file(DATA, "NO"), kind="median")


def test_cluster_specs_build_named_gpus_under_switches():
    spec = read_cluster_spec(DATA / "clusters" / "n64g8_t4.json")
    cluster = spec.build()
    assert (spec.n_gpus, len(cluster.nodes), len(cluster.gpus)) == (512, 64, 512)
    assert {n.switch for n in cluster.nodes} == {"sw0", "sw1", "sw2", "sw3"}
    assert cluster.nodes[16].switch == "sw1"
    assert cluster.gpus[9].gpu_id == "n1/1"
    assert len({g.gpu_id for g in cluster.gpus}) == 512
    assert {g.model for g in cluster.gpus} == {"T4"}


def test_elasticflow_cluster_csv_needs_a_gpu_model():
    spec = read_cluster_spec(DATA / "trace" / "cluster_n16g8.csv", gpu_model="A100")
    assert (spec.switches, spec.nodes_per_switch, spec.gpus_per_node, spec.n_gpus) == (
        1,
        16,
        8,
        128,
    )
    with pytest.raises(ClusterSpecError, match="gpu_model is required"):
        read_cluster_spec(DATA / "trace" / "cluster_n16g8.csv")


def test_a_cluster_spec_saved_with_a_byte_order_mark_reads_as_without(tmp_path):
    # It was "not valid JSON (Unexpected UTF-8 BOM ...)", and the CSV's first column missing.
    plain = DATA / "clusters" / "n16g4_t4.json"
    (tmp_path / "bom.json").write_text("\ufeff" + plain.read_text(), encoding="utf-8")
    csv_text = (DATA / "trace" / "cluster_n16g8.csv").read_text()
    (tmp_path / "bom.csv").write_text("\ufeff" + csv_text, encoding="utf-8")

    assert read_cluster_spec(tmp_path / "bom.json") == read_cluster_spec(plain)
    assert read_cluster_spec(tmp_path / "bom.csv", gpu_model="A100").n_gpus == 128


@pytest.mark.parametrize("name", ["latin1.json", "latin1.csv"])
def test_a_cluster_spec_that_is_not_utf8_is_refused_in_one_line(tmp_path, name):
    (tmp_path / name).write_bytes(b"\xff\xfe{}")
    with pytest.raises(ClusterSpecError, match=rf"^{name}: not UTF-8 text \(invalid"):
        read_cluster_spec(tmp_path / name, gpu_model="A100")


def test_malformed_cluster_specs_are_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"gpu_model": "A100", "switches": 1, "nodes_per_switch": 0, "gpus_per_node": 8}'
    )
    with pytest.raises(ClusterSpecError, match="nodes_per_switch must be a positive integer"):
        read_cluster_spec(bad)
    bad.write_text("{not json")
    with pytest.raises(ClusterSpecError, match="not valid JSON"):
        read_cluster_spec(bad)
    # A misspelt key was ignored (the run simulated another cluster than the one meant),
    # and a list of GPU models was reported as a missing gpu_model.
    bad.write_text(
        '{"gpu_model": "A100", "switches": 1, "nodes": 2, "nodes_per_switch": 1,'
        ' "gpus_per_node": 8}'
    )
    with pytest.raises(ClusterSpecError, match=r"bad.json: unknown key\(s\) 'nodes'"):
        read_cluster_spec(bad)
    bad.write_text(
        '{"gpu_model": ["A100", "T4"], "switches": 1, "nodes_per_switch": 1, "gpus_per_node": 8}'
    )
    with pytest.raises(ClusterSpecError, match="gpu_model must be one GPU model name"):
        read_cluster_spec(bad)


def test_an_elasticflow_cluster_row_longer_than_its_header_is_refused(tmp_path):
    # (its tail was dropped: one field too many ran as the cluster its first fields say)
    header = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
    bad = tmp_path / "cluster_long.csv"
    bad.write_text(header + "1,16,8,64,256,4\n")
    said = r"^cluster_long.csv:2: 6 fields where the header has 5 \(extra: '4'\)$"
    with pytest.raises(ClusterSpecError, match=said):
        read_cluster_spec(bad, gpu_model="A100")
    # the same row at the header's width reads
    (tmp_path / "ok.csv").write_text(header + "1,16,8,64,256\n")
    assert read_cluster_spec(tmp_path / "ok.csv", gpu_model="A100").n_gpus == 128


def test_an_electricity_maps_row_longer_than_its_header_is_refused(tmp_path):
    # (its tail was dropped and the hour read as if whole)
    bad = tmp_path / "em_XX.csv"
    bad.write_text(
        "Datetime (UTC),Carbon Intensity gCO₂eq/kWh (direct)\n"
        "2022-01-01 00:00:00,100\n2022-01-01 01:00:00,100,200\n"
    )
    said = r"^em_XX.csv:3: 3 fields where the header has 2 \(extra: '200'\)$"
    with pytest.raises(CarbonDataError, match=said):
        read_electricity_maps_csv(bad)
