"""Fitting: deterministic, reproduces measured rows it did not see, and the shipped JSON is
what the data gives. Pure: no database."""

from __future__ import annotations

import copy
import json

import pytest
from support.fits import catalog_approx, pop_unidentified, reuse_zeus_fits

from scheduling.core.perf_models import CATALOG_PATH, catalog_to_dict, load_catalog
from scheduling.core.types import GpuConfig
from scheduling.fitting import perf_data
from scheduling.fitting.perf_build import build_catalog, fit_throughputs, limit_binds
from scheduling.fitting.perf_fit import (
    fit_clock_series,
    fit_power_limit,
    fit_throughput,
    predict_throughput_row,
)
from scheduling.fitting.perf_report import (
    CROSS_VALIDATIONS,
    TARGET_MEDIAN_ERROR,
    HeldOut,
    Summary,
    count_fit_steps,
    cross_validate,
    fit_and_validate,
    format_table,
    model_errors,
    summarise,
)

TOL = TARGET_MEDIAN_ERROR


@pytest.fixture(autouse=True)
def _zeus_fitted_once(monkeypatch):
    # the catalog builds here share one set of Zeus fits (support/fits.py says why it holds)
    reuse_zeus_fits(monkeypatch)


@pytest.fixture(scope="module")
def zeus_rows():
    return perf_data.read_zeus()


def _without(rows, held):
    return [r for r in rows if r is not held]


# --- readers --------------------------------------------------------------------------


def test_elasticflow_reader_skips_unmeasured_cells_and_converts_rates():
    rows = perf_data.read_elasticflow()
    cifar = [r for r in rows if r.workload == "resnet50_cifar10"]
    ds2_64 = [r for r in rows if r.workload == "deepspeech2" and r.n_gpus == 64]

    assert max(r.n_gpus for r in cifar) == 8  # 16-64 GPUs are zeros in the table
    assert [r.global_batch for r in ds2_64] == [64]  # the empty cell at batch 32 is skipped
    first = next(r for r in rows if r.workload == "bert" and r.n_gpus == 1 and r.local_batch == 64)
    assert first.iter_time_s == pytest.approx(1 / 6.030661553957379, rel=1e-12)
    sixteen = next(r for r in rows if r.workload == "bert" and r.n_gpus == 16)
    assert sixteen.n_nodes == 2


def test_pollux_reader_counts_nodes_from_placement_digits():
    rows = [r for r in perf_data.read_pollux() if r.workload == "bert"]
    row = next(r for r in rows if r.source.endswith("placements") and r.n_gpus == 7)

    assert row.n_nodes in (2, 3, 4)
    assert len(rows) == 540 + 180  # placements + scalability rows


def test_zeus_reader_averages_the_optimizers(zeus_rows):
    row = next(
        r
        for r in zeus_rows
        if r.gpu == "v100"
        and r.workload == "shufflenetv2"
        and r.batch_size == 1024
        and r.power_limit_w == 100
    )
    # adadelta 11.2767 s and adam 11.0867 s (and the other optimizers) are averaged
    assert 10.0 < row.time_per_epoch_s < 12.0
    assert row.energy_per_epoch_j == row.time_per_epoch_s * row.average_power_w


# --- a known row of each data set, held out of its fit --------------------------------------


def test_elasticflow_row_is_reproduced_when_held_out():
    rows = [r for r in perf_data.read_elasticflow() if r.workload == "resnet50"]
    held = next(r for r in rows if r.n_gpus == 8 and r.global_batch == 128)  # 16.534 it/s

    params = fit_throughput(_without(rows, held))

    assert predict_throughput_row(params, held) == pytest.approx(1 / 16.53414011075494, rel=TOL)


def test_pollux_row_is_reproduced_when_held_out():
    rows = [r for r in perf_data.read_pollux() if r.workload == "imagenet"]
    held = next(r for r in rows if r.n_gpus == 1 and r.local_batch == 200)  # 0.9235 s

    params = fit_throughput(_without(rows, held))

    assert predict_throughput_row(params, held) == pytest.approx(0.923530888557434, rel=TOL)


def test_perseus_clock_is_reproduced_when_held_out():
    rows = [
        r
        for r in perf_data.read_perseus()
        if (r.model, r.gpu_model, r.stage, r.instruction) == ("bloom", "A100", 0, "forward")
    ]
    held = next(r for r in rows if r.clock_mhz == 1065)  # 0.06377 s, 16.4155 J

    fit = fit_clock_series(_without(rows, held), 1410)

    assert fit.time_s(1065) == pytest.approx(0.06377059793472281, rel=TOL)
    assert fit.time_s(1065) * fit.power_w(1065) == pytest.approx(16.415526000000536, rel=TOL)


def test_zeus_row_is_reproduced_when_held_out(zeus_rows):
    rows = [r for r in zeus_rows if r.gpu == "a40" and r.workload == "resnet50"]
    held = next(r for r in rows if r.batch_size == 128 and r.power_limit_w == 200)

    fit = fit_power_limit(_without(rows, held), 300.0)

    assert fit.time_per_epoch_s(128, 200) == pytest.approx(held.time_per_epoch_s, rel=TOL)
    assert fit.average_power_w(128, 200) == pytest.approx(held.average_power_w, rel=TOL)


# --- the shape the data shows --------------------------------------------------------------


@pytest.mark.parametrize("gpu", perf_data.ZEUS_GPUS)
def test_energy_rises_with_the_power_limit_above_the_sweet_spot_as_zeus_measured(zeus_rows, gpu):
    # Zeus' ResNet-50 at batch 128 (64 on P100, which has no 128 row): energy per epoch is
    # lowest below the top limit and grows from there to the highest limit on every GPU.
    batch = 64 if gpu == "p100" else 128
    rows = [r for r in zeus_rows if r.gpu == gpu and r.workload == "resnet50"]
    limits = sorted({r.power_limit_w for r in rows})
    measured = {r.power_limit_w: r.energy_per_epoch_j for r in rows if r.batch_size == batch}
    sweet = min(limits, key=measured.__getitem__)
    assert sweet < limits[-1]
    assert measured[limits[-1]] > 1.05 * measured[sweet]  # the data shows it

    fit = fit_power_limit(rows, limits[-1])
    above = [pl for pl in limits if pl >= sweet]
    energy = [fit.time_per_epoch_s(batch, pl) * fit.average_power_w(batch, pl) for pl in above]

    assert energy == sorted(energy)
    assert energy[-1] > 1.05 * energy[0]


def test_the_lowest_limit_binds_for_resnet50_but_not_for_ncf_on_v100(zeus_rows):
    def sweep(workload):
        rows = [r for r in zeus_rows if r.gpu == "v100" and r.workload == workload]
        return rows, fit_power_limit(rows, 250.0)

    assert limit_binds(*sweep("resnet50"))
    assert not limit_binds(*sweep("ncf"))  # NCF draws ~40 W: a 100 W limit never bites


# --- determinism and the shipped file ----------------------------------------------------------


def test_fitting_is_deterministic(zeus_rows):
    rows = perf_data.read_pollux()
    first, second = fit_throughputs(rows), fit_throughputs(rows)
    sweep = [r for r in zeus_rows if r.gpu == "rtx6000" and r.workload == "bert"]

    assert first == second
    assert fit_power_limit(sweep, 260.0) == fit_power_limit(sweep, 260.0)


def test_shipped_catalog_is_what_the_data_gives(tmp_path):
    shipped = json.loads(CATALOG_PATH.read_text())
    fresh = catalog_to_dict(build_catalog())
    keys = ("workload", "gpu_model", "batch_sizes", "throughput", "sources")

    fresh_gpus, shipped_gpus = copy.deepcopy(fresh["gpus"]), copy.deepcopy(shipped["gpus"])
    pop_unidentified(fresh_gpus, shipped_gpus)
    assert fresh_gpus == catalog_approx(shipped_gpus)
    assert [{k: m[k] for k in keys} for m in fresh["models"]] == catalog_approx(
        [{k: m[k] for k in keys} for m in shipped["models"]]
    )
    # A draw flat in the batch has many parameter sets (``busy_floor_frac`` 1 makes
    # ``batch_half`` irrelevant), so the power is compared by what it predicts.
    path = tmp_path / "fresh.json"
    path.write_text(json.dumps(fresh))
    again = load_catalog(path)
    for model in load_catalog().models():
        twin = again.get(model.workload, model.gpu_model)
        for n, batch in ((n, b) for n in (1, 8) for b in model.batch_sizes):
            cfg = GpuConfig(n, batch)
            # A T4 near its 70 W board limit draws by the unidentified peak-to-average
            # ratio (``pop_unidentified``): 1% apart between two machines.
            rel = 2e-2 if model.gpu_model == "T4" else 2e-3
            assert twin.power_w(cfg) == pytest.approx(model.power_w(cfg), rel=rel), (
                model.workload,
                model.gpu_model,
                cfg,
            )
    assert (
        fresh["aliases"]
        == shipped["aliases"]
        == [{"workload": "imagenet", "gpu_model": "A100", "target": "resnet50"}]
    )
    assert all(m["errors"]["iter_time_median_abs_error"] <= TOL for m in shipped["models"])


def test_a_catalog_round_trips_through_json(tmp_path):
    catalog = load_catalog()
    path = tmp_path / "cat.json"
    path.write_text(json.dumps(catalog_to_dict(catalog)))

    again = load_catalog(path)

    cfg = GpuConfig(12, 256, sm_clock_mhz=1200, gpus_per_node=(8, 4))
    for model in catalog.models():
        twin = again.get(model.workload, model.gpu_model)
        assert twin.iter_time_s(cfg) == model.iter_time_s(cfg)
        assert twin.power_w(cfg) == model.power_w(cfg)


# --- reporting helpers -----------------------------------------------------------------------


def test_summary_reports_medians_and_flags_a_miss():
    results = [
        HeldOut("zeus_a40", "ncf", "a40", "power", 100.0, p) for p in (105.0, 80.0, 130.0)
    ] + [HeldOut("zeus_a40", "ncf", "a40", "iter_time", 10.0, 10.5)]

    summaries = summarise(results)

    assert summaries == [
        Summary("zeus_a40", "iter_time", 1, pytest.approx(0.05), pytest.approx(0.05)),
        Summary("zeus_a40", "power", 3, pytest.approx(0.2), pytest.approx(0.3)),
    ]
    table = format_table(summaries)
    assert "MISSES 10%" in table.splitlines()[3]
    assert table.splitlines()[2].endswith("ok")


def test_model_errors_cover_only_throughput_data_sets():
    results = [
        HeldOut("elasticflow_a100", "bert", "A100", "iter_time", 1.0, 1.02),
        HeldOut("elasticflow_a100", "bert", "A100", "iter_time", 1.0, 0.9),
        HeldOut("zeus_a40", "bert", "a40", "iter_time", 1.0, 2.0),
    ]

    errors = model_errors(results)

    assert list(errors) == [("bert", "A100")]
    assert errors[("bert", "A100")]["n_heldout"] == 2
    assert errors[("bert", "A100")]["iter_time_median_abs_error"] == pytest.approx(0.06)


def test_progress_total_matches_the_steps_reported():
    labels: list[str] = []

    fit_and_validate(progress=labels.append, validate=False)

    assert len(labels) == count_fit_steps(validate=False) == 15
    assert labels[:2] == ["zeus", "perseus"]
    assert count_fit_steps() == 15 + len(CROSS_VALIDATIONS)


def test_cross_validating_an_unknown_data_set_is_refused_before_any_work():
    calls: list[str] = []

    with pytest.raises(ValueError, match="unknown data set\\(s\\) mlperf"):
        cross_validate(progress=calls.append, datasets=["elasticflow_a100", "mlperf"])

    assert calls == []
