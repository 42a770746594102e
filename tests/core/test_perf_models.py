"""The shipped performance catalog: coverage, sane predictions over the whole grid, the
helpers built on it and the online refinement. Pure: no database."""

from __future__ import annotations

import math

import pytest

from scheduling.core.perf_models import (
    Catalog,
    DvfsParams,
    UnknownPerfModelError,
    energy_to_finish_j,
    load_catalog,
    refine_scales,
    time_to_finish_s,
)
from scheduling.core.types import GpuConfig
from scheduling.fitting import perf_data

CATALOG = load_catalog()
ELASTICFLOW = ("bert", "deepspeech2", "gpt2", "inception3", "resnet50", "resnet50_cifar10", "vgg16")


def test_catalog_has_a_version_and_both_gpu_models():
    assert CATALOG.version == "2"
    assert CATALOG.gpu_models() == ("A100", "T4")


@pytest.mark.parametrize("workload", ELASTICFLOW)
def test_every_elasticflow_workload_has_a_complete_a100_model(workload):
    model = CATALOG.get(workload, "A100")

    assert model.gpu_model == "A100"
    assert model.clocks_mhz[0] == 855 and model.clocks_mhz[-1] == 1410
    assert model.power.busy_max_w > model.idle_power_w == 50.0
    assert model.batch_sizes[0] >= 32


@pytest.mark.parametrize("workload", perf_data.POLLUX_WORKLOADS)
def test_every_pollux_workload_runs_on_t4(workload):
    model = CATALOG.get(workload, "T4")

    assert model.workload == workload
    assert model.clocks_mhz[-1] == 1590
    assert model.batch_sizes == perf_data.pollux_batch_sizes(workload)


def test_imagenet_on_a100_is_the_resnet50_model():
    assert CATALOG.get("imagenet", "A100") is CATALOG.get("resnet50", "A100")
    assert CATALOG.gpu_models_for("imagenet") == ("A100", "T4")


def test_unknown_pair_raises_a_key_error_that_names_what_exists():
    with pytest.raises(KeyError) as info:
        CATALOG.get("resnet50", "H100")

    assert isinstance(info.value, UnknownPerfModelError)
    assert "'resnet50' on GPU model 'H100'" in str(info.value)
    assert "resnet50@A100" in str(info.value)
    assert not CATALOG.has("resnet50", "H100")


def _grid(model):
    gpu = model.gpu
    clocks = (None, 1, gpu.clocks_mhz[0], gpu.clocks_mhz[len(gpu.clocks_mhz) // 2], 10_000)
    limits = (None, 1.0, gpu.power_limit_min_w, gpu.power_limit_max_w, 10_000.0)
    batches = (1, *model.batch_sizes, 10 * model.batch_sizes[-1])
    for n in (1, 2, 3, 4, 8, 16, 64, 256):
        for b in batches:
            for f in clocks:
                for pl in limits:
                    yield GpuConfig(n, b, sm_clock_mhz=f, power_limit_w=pl)
        yield GpuConfig(n, model.batch_sizes[0], gpus_per_node=(1,) * n)


@pytest.mark.parametrize("model", CATALOG.models(), ids=repr)
def test_predictions_are_finite_and_positive_over_the_whole_grid(model):
    for cfg in _grid(model):
        t, p, e = model.iter_time_s(cfg), model.power_w(cfg), model.energy_per_iter_j(cfg)

        assert math.isfinite(t) and t > 0, cfg
        assert math.isfinite(p) and model.idle_power_w <= p <= model.gpu.power_limit_max_w, cfg
        assert e == pytest.approx(cfg.n_gpus * p * t, rel=1e-12)


@pytest.mark.parametrize("model", CATALOG.models(), ids=repr)
def test_a_lower_clock_is_slower_and_draws_less(model):
    b = model.batch_sizes[-1]
    times = [model.iter_time_s(GpuConfig(1, b, sm_clock_mhz=f)) for f in model.clocks_mhz]
    powers = [model.power_w(GpuConfig(1, b, sm_clock_mhz=f)) for f in model.clocks_mhz]

    assert times == sorted(times, reverse=True) and times[0] > times[-1]
    assert powers == sorted(powers) and powers[0] < powers[-1]


def test_default_power_limit_and_max_clock_equal_leaving_them_unset():
    model = CATALOG.get("vgg16", "A100")
    plain = GpuConfig(4, 256)
    explicit = GpuConfig(4, 256, sm_clock_mhz=1410, power_limit_w=400.0)

    assert model.iter_time_s(explicit) == model.iter_time_s(plain)
    assert model.power_w(explicit) == model.power_w(plain)


def test_energy_per_iteration_falls_when_the_a100_limit_drops_from_400_to_250_w():
    # Zeus shows it on every GPU it measured for ResNet-50 (see test_perf_fit.py).
    model = CATALOG.get("resnet50", "A100")
    energies = [model.energy_per_iter_j(GpuConfig(1, 256, power_limit_w=pl)) for pl in (400, 250)]
    times = [model.iter_time_s(GpuConfig(1, 256, power_limit_w=pl)) for pl in (400, 250)]

    assert energies[0] > energies[1]
    assert times[0] < times[1]


def test_spreading_over_nodes_is_slower_than_packing():
    model = CATALOG.get("bert", "T4")
    packed = model.iter_time_s(GpuConfig(4, 96, gpus_per_node=(4,)))
    spread = model.iter_time_s(GpuConfig(4, 96, gpus_per_node=(1, 1, 1, 1)))
    default = model.iter_time_s(GpuConfig(4, 96))

    assert packed == default
    assert spread > packed


def test_time_and_energy_to_finish_scale_the_per_iteration_prediction():
    model = CATALOG.get("gpt2", "A100")
    cfg = GpuConfig(8, 256, sm_clock_mhz=1200)
    t, e = model.iter_time_s(cfg), model.energy_per_iter_j(cfg)

    assert time_to_finish_s(model, cfg, 1000) == pytest.approx(1000 * t, rel=1e-12)
    assert time_to_finish_s(model, cfg, 1000, iter_time_scale=1.5) == pytest.approx(1500 * t)
    assert energy_to_finish_j(model, cfg, 10, iter_time_scale=2.0, power_scale=0.5) == (
        pytest.approx(10 * e)
    )
    assert time_to_finish_s(model, cfg, -5) == 0.0
    assert energy_to_finish_j(model, cfg, 0) == 0.0


def test_repeated_predictions_come_from_the_cache_unchanged():
    model = CATALOG.get("inception3", "A100")
    cfg = GpuConfig(16, 128, power_limit_w=300.0)
    first = model.iter_time_s(cfg)

    assert cfg in model._cache
    assert model.iter_time_s(GpuConfig(16, 128, power_limit_w=300.0)) == first


# --- online refinement ------------------------------------------------------------------


def test_refinement_moves_towards_the_median_observed_ratio():
    update = refine_scales(
        predicted_iter_time_s=2.0,
        predicted_power_w=200.0,
        observed_iter_times_s=[3.0, 3.0, 100.0],  # one stall: the median ignores it
        observed_powers_w=[100.0],
        alpha=0.5,
    )

    # weight 1 - 0.5^3 = 0.875 towards 1.5 in log space; one power sample: 0.5 towards 0.5
    assert update.iter_time_scale == pytest.approx(1.5**0.875, rel=1e-12)
    assert update.power_scale == pytest.approx(0.5**0.5, rel=1e-12)


def test_refinement_without_usable_observations_keeps_the_prior():
    update = refine_scales(
        predicted_iter_time_s=1.0,
        predicted_power_w=100.0,
        observed_iter_times_s=[float("nan"), 0.0, -1.0],
        iter_time_scale=1.25,
        power_scale=0.8,
    )

    assert update == (1.25, 0.8)


def test_refinement_is_clamped_to_its_bounds():
    update = refine_scales(
        predicted_iter_time_s=1.0,
        predicted_power_w=100.0,
        observed_iter_times_s=[50.0] * 40,
        observed_powers_w=[1.0] * 40,
        bounds=(0.5, 2.0),
    )

    assert update.iter_time_scale == 2.0
    assert update.power_scale == 0.5


def test_refinement_converges_to_a_steady_bias():
    scale = 1.0
    for _ in range(50):
        scale = refine_scales(
            predicted_iter_time_s=0.1,
            predicted_power_w=300.0,
            observed_iter_times_s=[0.13],
            iter_time_scale=scale,
        ).iter_time_scale

    assert scale == pytest.approx(1.3, rel=1e-4)


def test_refinement_rejects_non_positive_predictions():
    with pytest.raises(ValueError, match="predictions must be positive"):
        refine_scales(predicted_iter_time_s=0.0, predicted_power_w=100.0)


# --- the power limit as an effective clock -------------------------------------------------


def test_a_power_limit_maps_to_the_clock_whose_peak_draw_fits_under_it():
    dvfs = DvfsParams(
        max_clock_mhz=1000,
        min_clock_mhz=500,
        time_fixed_frac=0.2,
        power_static_frac=0.5,
        power_exp=2.0,
        peak_to_avg=1.25,
    )

    # peak 125 W: 100 W leaves 0.8 of it; 0.5 + 0.5 r^2 = 0.8
    assert dvfs.ratio_for_limit(100.0, 100.0) == pytest.approx(math.sqrt(0.6), rel=1e-12)
    # peaks never exceed the default limit of 110 W: 100/110 of it is left
    assert dvfs.ratio_for_limit(100.0, 100.0, 110.0) == pytest.approx(
        math.sqrt((100 / 110 - 0.5) / 0.5), rel=1e-12
    )
    assert dvfs.ratio_for_limit(110.0, 100.0, 110.0) == 1.0  # the measured state
    assert dvfs.ratio_for_limit(200.0, 100.0) == 1.0  # the limit does not bind
    assert dvfs.ratio_for_limit(40.0, 100.0) == 0.5  # below the static draw: the clock floor
    assert dvfs.ratio_for_limit(70.0, 100.0) == 0.5  # r = sqrt(0.12) = 0.35 < floor
    assert dvfs.time_factor(0.5) == pytest.approx(0.2 + 0.8 / 0.5)
    assert dvfs.power_factor(0.5) == pytest.approx(0.5 + 0.5 * 0.25)


def test_names_an_alias_joins_are_one_workload_on_every_gpu_model():
    catalog = load_catalog()
    # the catalog declares imagenet as resnet50 on the A100; they are one workload anywhere
    assert catalog.same_workload("imagenet") == {"imagenet", "resnet50"}
    assert catalog.same_workload("resnet50") == {"imagenet", "resnet50"}
    assert catalog.same_workload("bert") == {"bert"}
    assert catalog.same_workload("never-heard-of") == {"never-heard-of"}
    # and chains of aliases, declared on different GPU models, join all their names
    model = catalog.get("resnet50", "A100")
    chained = Catalog(
        [model],
        version="t",
        gpus=catalog.gpus,
        aliases={("imagenet", "A100"): "resnet50", ("rn50", "A100"): "imagenet"},
    )
    assert chained.same_workload("rn50") == {"imagenet", "resnet50", "rn50"}
