"""The online model at set SM clocks, on Perseus' measured sweeps (the clock replay of
``benchmarks/bench_online_model.py``): a job observed at the top clocks only predicts the
clocks below from its prior's shape, within the issue's 15% target, and a job observed at
every clock predicts what it measured."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

import pytest

from scheduling.core.online_fit import fit_online
from scheduling.core.online_model import FitSettings

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_online_model.py"


@pytest.fixture(scope="module")
def cases():
    spec = importlib.util.spec_from_file_location("bench_online_model", BENCH)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up there
    spec.loader.exec_module(bench)
    return bench._perseus_cases()


def _energy_errors(case, seen: int, **settings) -> tuple[list[float], list[float]]:
    model = fit_online(case.candidates[0], case.configs[:seen], settings=FitSettings(**settings))
    errs = [
        abs(model.energy_per_iter_j(obs.config()) / e_true - 1.0)
        for obs, (_, e_true) in zip(case.configs, case.truth, strict=True)
    ]
    return errs[:seen], errs[seen:]


def test_each_distinct_sweep_is_one_case_from_the_top_clock_down(cases):
    # bloom's and gpt3's stages 0-6 repeat one sweep: two cases a model on each GPU
    assert sorted((c.dataset, c.workload) for c in cases) == [
        (f"perseus_{gpu}", f"{model}/stage{stage}")
        for gpu in ("A100", "A40")
        for model in ("bloom", "gpt3-175b")
        for stage in (0, 7)
    ]
    for case in cases:
        clocks = [obs.sm_clock_mhz for obs in case.configs]
        assert clocks == sorted(clocks, reverse=True)
        # the prior is the other model's (a prior from the job's own sweep would pass the
        # targets below without learning anything)
        other = {"bloom": "gpt3-175b", "gpt3-175b": "bloom"}[case.workload.split("/")[0]]
        assert case.candidates[0].workload == other


def test_a_job_seen_near_the_top_predicts_the_lower_clocks_within_the_target(cases):
    # after five observations (the top 60 MHz): what it saw within the 5%, every
    # clock below within its 15% median
    for case in cases:
        observed, unobserved = _energy_errors(case, 5)
        assert max(observed) < 0.05, case.workload
        assert statistics.median(unobserved) < 0.15, case.workload


def test_a_job_seen_at_every_clock_predicts_what_it_measured(cases):
    case = cases[0]
    observed, unobserved = _energy_errors(case, len(case.configs))
    assert unobserved == []
    assert statistics.median(observed) < 0.02


def test_the_prior_holds_the_clock_shape_where_the_job_has_not_been(cases):
    # given the A100 sweeps, whose top clocks the GPU does not hold (time flat, draw falling
    # steeply): five observations there, with the prior only at the observed clocks,
    # flattened the draw's shape and put the energy below 7.4% off (2.7% after one)
    a100 = [c for c in cases if c.dataset == "perseus_A100"]

    def median_below(**settings):
        return statistics.median(e for case in a100 for e in _energy_errors(case, 5, **settings)[1])

    # then with the prior's weight at the lowest and middle clock it stays near its prior
    assert median_below() < 0.04 < 0.06 < median_below(clock_anchor_weight=0.0)
