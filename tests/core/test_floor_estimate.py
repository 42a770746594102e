"""A light-work floor for a GPU model with too few workloads measured on it, estimated from
the GPU models where enough were (``gpu_estimates.estimated_floor_w``; docs/benchmarks.md,
"A floor for the first jobs on a new GPU model")."""

from __future__ import annotations

import math

import pytest

from scheduling.core import gpu_estimates as ge
from scheduling.core.online_model import Observation, config_of, draw_shaped_prior
from scheduling.core.perf_models import load_catalog

CATALOG = load_catalog()


def ref(name, idle_w, max_w, floor_w, busy_w=None):
    return ge.MeasuredSpan(name, idle_w, max_w, floor_w, busy_w or max_w)


def test_a_floor_is_a_share_of_the_span_from_idle_to_the_highest_limit():
    assert ref("a", 50.0, 400.0, 200.0).floor_share() == pytest.approx(150.0 / 350.0)
    assert ref("b", 10.0, 70.0, 5.0).floor_share() == 0.0  # below idle: at idle
    assert ref("c", 70.0, 70.0, 60.0).floor_share() is None  # no span
    assert ref("d", 10.0, 70.0, math.nan).floor_share() is None


def test_the_estimate_carries_the_median_share_onto_the_gpus_own_span():
    refs = [ref("a", 50.0, 400.0, 50.0 + 0.1 * 350), ref("b", 10.0, 70.0, 10.0 + 0.3 * 60)]
    refs.append(ref("c", 30.0, 250.0, 30.0 + 0.2 * 220))
    # an A40's span as the service estimates it: 37.5 W idle to its 300 W limit
    assert ge.estimated_floor_w(37.5, 300.0, refs) == pytest.approx(37.5 + 0.2 * 262.5)
    assert ge.estimated_floor_w(37.5, 300.0, refs[:2]) == pytest.approx(37.5 + 0.2 * 262.5)
    assert ge.estimated_floor_w(37.5, 300.0, []) is None
    assert ge.estimated_floor_w(37.5, 300.0, [ref("z", 50.0, 400.0, 40.0)]) is None
    assert ge.estimated_floor_w(300.0, 300.0, refs) is None  # no span of its own


def test_a_workload_measured_on_the_gpu_caps_the_estimate_at_its_least_draw():
    refs = [ref("a", 50.0, 400.0, 50.0 + 0.3 * 350)]
    est = 37.5 + 0.3 * 262.5  # 116 W
    assert ge.estimated_floor_w(37.5, 300.0, refs, own={"ncf": [90.0, 84.0]}) == 84.0
    assert ge.estimated_floor_w(37.5, 300.0, refs, own={"bert": [260.0]}) == pytest.approx(est)
    bad = {"x": [math.nan, -1.0, 0.0]}
    assert ge.estimated_floor_w(37.5, 300.0, refs, own=bad) == pytest.approx(est)
    assert ge.estimated_floor_w(37.5, 300.0, refs, own={"idle": [30.0]}) is None


def test_the_catalogs_gpus_are_references_without_the_jobs_workload():
    spans = {s.gpu_model: s for s in ge.catalog_spans(CATALOG)}
    assert set(spans) == {"A100", "T4"}
    a100, t4 = spans["A100"], spans["T4"]
    assert (a100.idle_w, a100.max_limit_w) == (50.0, 400.0)
    assert a100.floor_w == pytest.approx(200.0, abs=1.0)  # resnet50_cifar10 at 64 a GPU
    assert t4.floor_w == pytest.approx(17.0, abs=1.0)  # ncf
    without = {s.gpu_model: s for s in ge.catalog_spans(CATALOG, exclude="ncf")}
    assert without["T4"].floor_w > 30.0  # cifar10 at 128 is then the least
    assert without["A100"] == a100


def test_enough_workloads_measured_set_the_floor_and_fewer_get_the_estimate():
    refs = [ref("a", 50.0, 400.0, 50.0 + 0.2 * 350)]
    three = {"a": [150.0], "b": [200.0], "c": [260.0]}
    assert ge.light_work_span_or_estimate_w(37.5, 279.0, 300.0, three, refs) == (
        150.0,
        260.0,
        None,
    )
    floor_w, busy_w, source = ge.light_work_span_or_estimate_w(37.5, 279.0, 300.0, {}, refs)
    assert (floor_w, busy_w, source) == (pytest.approx(37.5 + 0.2 * 262.5), 279.0, "a")
    one = {"ncf": [84.0]}
    assert ge.light_work_span_or_estimate_w(37.5, 279.0, 300.0, one, refs) == (84.0, 279.0, "a")
    # no reference: as before, no floor and the carried busy maximum
    assert ge.light_work_span_or_estimate_w(37.5, 279.0, 300.0, one, []) == (None, 279.0, None)


def test_an_estimated_floor_is_marked_in_the_shaped_priors_sources():
    prior = CATALOG.get("resnet50", "A100")
    seen = [
        Observation(n_gpus=1, n_nodes=1, local_batch=64.0, iter_time_s=0.1, power_w=80.0),
    ]
    kw = dict(idle_w=50.0, busy_max_w=350.0, draw_shape=True)
    marked = draw_shaped_prior(prior, seen, floor_w=120.0, floor_source="A100,T4", **kw)
    assert marked.sources["light_work_floor"] == "120 W, estimated from A100,T4"
    measured = draw_shaped_prior(prior, seen, floor_w=120.0, **kw)
    assert "light_work_floor" not in measured.sources
    # the job below the floor is read as light work: a flat draw at its own
    for b in (8.0, 64.0, 4096.0):
        assert marked.power_w(config_of(1, 1, b)) == pytest.approx(80.0, rel=0.01)
