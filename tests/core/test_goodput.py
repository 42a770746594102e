"""Statistical efficiency: the equations by hand, the policies that tune batches, and the
shipped curves against the fit that builds them."""

from __future__ import annotations

import dataclasses
import math

import pytest

from scheduling.core import goodput
from scheduling.core.goodput import (
    GoodputCurves,
    WorkloadCurve,
    batch_choices,
    efficiency,
    iters_to_finish,
    noise_scale_from_stats,
    useful_samples_per_iter,
    with_noise_scales,
)
from scheduling.core.perf_models import load_catalog
from scheduling.core.round import plan_round
from scheduling.fitting import goodput_fit
from tests.core.corekit import AnalyticModel, Catalog, job, make_cluster, snapshot


def test_noise_scale_is_variance_times_batch_over_squared_norm():
    # tr(Sigma) / |G|^2 with grad_var = tr(Sigma) / 32 measured at batch 32
    assert noise_scale_from_stats(grad_sqr=2.0, grad_var=5.0, batch=32) == 80.0
    assert noise_scale_from_stats(grad_sqr=4.0, grad_var=0.0, batch=8) == 0.0


@pytest.mark.parametrize(
    ("sqr", "var", "batch"),
    [
        (0.0, 1.0, 32),  # no gradient: no scale
        (-1.0, 1.0, 32),
        (1.0, -1.0, 32),
        (1.0, 1.0, 0),
        (math.nan, 1.0, 32),
        (1.0, math.inf, 32),
        (5e-324, 1e308, 32),  # each finite, the ratio not
        (1.0, 5e305, 256),  # finite, but no measurement: calibrated, it was infinite
    ],
)
def test_unusable_statistics_give_no_noise_scale(sqr, var, batch):
    assert noise_scale_from_stats(sqr, var, batch) is None


def test_efficiency_by_hand():
    # E(b) = (B + b0) / (B + b): B = 100, b0 = 100
    assert efficiency(100.0, 100, 100) == 1.0
    assert efficiency(100.0, 300, 100) == pytest.approx(0.5)
    assert efficiency(100.0, 50, 100) == pytest.approx(200 / 150)
    # perfect scaling: the old free-batch model
    assert efficiency(math.inf, 400, 100) == 1.0
    # unknown: the worst case over every noise scale
    assert efficiency(None, 400, 100) == pytest.approx(0.25)
    assert efficiency(None, 50, 100) == 1.0
    with pytest.raises(ValueError):
        efficiency(1.0, 0, 100)


def test_a_bigger_batch_is_never_free_and_a_smaller_never_costs_more_samples():
    for scale in (0.0, 1.0, 37.0, 1e4, 1e9):
        for b in (128, 256, 4096):
            assert b * efficiency(scale, b, 64) <= b  # fewer useful samples than processed
            assert b * efficiency(scale, b, 64) >= 64  # never less than one old batch


def test_iterations_to_finish_count_useful_samples():
    j = job("a", iters=10.0, global_batch=100, noise_scale=100.0)
    # at batch 200: E = 200 / 300, so 200 x 2/3 useful samples per iteration
    assert useful_samples_per_iter(j, 200) == pytest.approx(400 / 3)
    assert iters_to_finish(j, 200) == pytest.approx(1000 / (400 / 3))
    assert iters_to_finish(j, 100) == 10.0
    done = dataclasses.replace(j, done_iters=4.0)
    assert iters_to_finish(done, 200) == pytest.approx(600 / (400 / 3))


def test_batch_choices_keep_the_submitted_batch_when_efficiency_is_unknown():
    assert batch_choices(job("a", global_batch=64), (32, 128, 256)) == (64,)
    known = job("a", global_batch=64, noise_scale=500.0)
    assert batch_choices(known, (256, 32, 128)) == (32, 64, 128, 256)


def test_curves_give_reported_statistics_precedence_over_the_workload_curve():
    curves = GoodputCurves(
        version="t",
        calibration=3.0,
        workloads={"cifar10": WorkloadCurve(noise_scale=1000.0, ref_batch=128)},
        aliases={"resnet50": "cifar10"},
    )
    assert curves.noise_scale("cifar10") == 1000.0
    assert curves.noise_scale("resnet50") == 1000.0
    assert curves.noise_scale("gpt2") is None
    # own statistics: 2.0 * 64 / 4.0 = 32, calibrated x3
    assert curves.noise_scale("gpt2", grad_sqr=4.0, grad_var=2.0, batch=64) == 96.0
    assert curves.noise_scale("cifar10", grad_sqr=4.0, grad_var=2.0, batch=64) == 96.0
    # unusable statistics fall back to the curve
    assert curves.noise_scale("cifar10", grad_sqr=0.0, grad_var=2.0, batch=64) == 1000.0
    # below one sample (yolov3's first Pollux report: 0.6) is the estimator's, not the
    # job's: refused, the curve (or nothing) stands
    assert curves.noise_scale("cifar10", grad_sqr=4.0, grad_var=0.03, batch=64) == 1000.0
    assert curves.noise_scale("gpt2", grad_sqr=4.0, grad_var=0.03, batch=64) is None
    assert curves.noise_scale("gpt2", grad_sqr=4.0, grad_var=0.0625, batch=64) == 3.0
    # above a trillion samples is no measurement either (calibrated, 1e308 became inf)
    assert curves.noise_scale("cifar10", grad_sqr=1.0, grad_var=5e305, batch=256) == 1000.0
    assert curves.noise_scale("gpt2", grad_sqr=1.0, grad_var=1e10, batch=256) is None
    assert curves.noise_scale("gpt2", grad_sqr=1.0, grad_var=1e9, batch=256) == 7.68e11
    jobs = with_noise_scales([job("a", workload="cifar10"), job("b", workload="gpt2")], curves)
    assert [j.noise_scale for j in jobs] == [1000.0, None]
    assert [j.noise_scale for j in with_noise_scales(jobs, curves, override=math.inf)] == [
        math.inf,
        math.inf,
    ]


def _elastic_snapshot(noise_scale):
    # One GPU, analytic model: T = b / 64 seconds per iteration at any batch, so a
    # bigger batch is exactly as fast per sample; only efficiency decides.
    model = AnalyticModel("w", batch_sizes=(64, 128, 256))
    cluster = make_cluster(nodes_per_switch=1, gpus_per_node=1)
    j = job("a", global_batch=64, min_batch=64, max_batch=256, noise_scale=noise_scale)
    return snapshot(cluster, [j], catalog=Catalog(model))


@pytest.mark.parametrize("policy", ["zeus", "powerflow"])
@pytest.mark.parametrize(
    ("noise_scale", "batch"),
    [
        (math.inf, 1600),  # batch free (the old model): the fastest per sample
        ("learned", 800),  # imagenet's learned curve: half as large
        (10.0, 200),  # a small noise scale: nothing bigger pays
        (None, 200),  # unknown: the submitted batch
    ],
)
def test_batch_tuning_policies_pick_the_batch_that_goodput_favours(policy, noise_scale, batch):
    # Given an imagenet job on a T4 that may use 200 to 1600 samples per batch
    if noise_scale == "learned":
        noise_scale = goodput.load_curves().noise_scale("imagenet")
    cluster = make_cluster(nodes_per_switch=1, gpus_per_node=4, model="T4")
    j = job(
        "a", workload="imagenet", global_batch=200, min_batch=200, max_batch=1600,
        noise_scale=noise_scale,
    )  # fmt: skip
    # when a batch-tuning policy plans it, the batch follows the efficiency
    plan = plan_round(snapshot(cluster, [j], catalog=load_catalog()), policy=policy, now=0.0)
    assert plan.allocations["a"].global_batch == batch


def test_the_prediction_counts_useful_samples():
    # Given a job of 3600 iterations at batch 64 on one GPU (1 s per iteration at 64)
    from scheduling.core.round import admit

    snap = _elastic_snapshot(64.0)
    ctx, _ = admit(snap, now=0.0)
    jv = ctx.jobs[0]
    # at batch 256: E = (64 + 64) / (64 + 256) = 0.4, 102.4 useful samples per 4 s iteration
    remaining_s, _ = ctx.remaining_and_power(jv, 1, 256)
    assert remaining_s == pytest.approx(3600 * 64 / 102.4 * 4.0)
    grid = ctx.remaining_and_power_grid(jv, (1,), (None,), (64, 256))
    assert [g[3] for g in grid] == pytest.approx([3600.0, remaining_s])


def test_shipped_curves_are_what_the_fit_builds():
    built = goodput_fit.build_curves(goodput_fit.read_workloads())
    shipped = goodput.load_curves()
    assert shipped.version == built.version
    assert shipped.calibration == pytest.approx(built.calibration, rel=1e-6)
    assert set(shipped.workloads) == set(built.workloads)
    for name, curve in built.workloads.items():
        assert shipped.workloads[name].noise_scale == pytest.approx(curve.noise_scale, rel=1e-6)
    assert shipped.curve("resnet50") == shipped.curve("imagenet")


def test_every_pollux_workload_has_a_curve_that_charges_its_largest_batch():
    curves = goodput.load_curves()
    for name in ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"):
        c = curves.workloads[name]
        assert efficiency(c.noise_scale, c.batches[-1], c.ref_batch) < 1.0


def test_crossing_interpolates_between_rows():
    row = goodput_fit.Row
    w = goodput_fit.Workload(
        "toy",
        {
            10: (row(1.0, 10.0, 0.5, 1.0, 1.0), row(2.0, 20.0, 0.9, 1.0, 1.0)),
            20: (row(1.0, 6.0, 0.6, 1.0, 1.0), row(2.0, 12.0, 0.8, 1.0, 1.0)),
        },
    )
    # the target is the worse best metric, 0.8; batch 10 crosses it 3/4 of the way
    assert w.target == 0.8
    assert goodput_fit.crossing(w, 10) == pytest.approx((17.5, 1.75))
    assert goodput_fit.crossing(w, 20) == pytest.approx((12.0, 2.0))
    assert goodput_fit.measured_ratios(w) == pytest.approx({10: 1.0, 20: 240 / 175})


def test_perf_catalog_workloads_with_a_curve_on_pollux_gpus():
    # the curves are keyed by the catalog's workload names
    catalog = load_catalog()
    curves = goodput.load_curves()
    for name in curves.workloads:
        assert name in catalog.workloads()


def test_leave_one_workload_out_meets_the_target_for_every_workload():
    # The measured check of docs/benchmarks.md (statistical efficiency): median error of
    # samples-to-target within 15% for each held-out workload, from its own statistics.
    workloads = goodput_fit.read_workloads()
    points = goodput_fit.leave_one_out(workloads)
    for w in workloads:
        errors = [p.error for p in points if p.workload == w.name]
        assert goodput_fit.median(errors) <= 0.15, w.name
    # The first report of yolov3's reference run (a noise scale of 0.6 samples) is refused.
    yolo = next(w for w in workloads if w.name == "yolov3")
    assert all(scale >= 1.0 for _, scale in goodput_fit.reported_noise_scales(yolo))
