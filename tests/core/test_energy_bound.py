"""The energy a batch needs: a job's unmeasured batches are held to the time its measured
ones say their work takes at the GPU's highest limit (``online_model.busy_energy_line``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.core import online_model
from scheduling.core.online_fit import fit_online
from scheduling.core.online_model import Observation, busy_energy_line, config_of, pool
from scheduling.core.perf_models import FittedPerfModel, load_catalog

BERT = load_catalog().get("bert", "A100")
# The H100 as the service estimates it (A100 carried by the ratio of the highest limits:
# idle 50 W x 700 / 400), the prior bert's equations on it.
H100 = replace(BERT.gpu, name="H100", power_limit_max_w=700.0, idle_power_w=87.5)
PRIOR = FittedPerfModel(
    workload="bert",
    gpu=H100,
    batch_sizes=BERT.batch_sizes,
    throughput=BERT.throughput,
    power=BERT.power,
)
# The H100's lstm (data/device/h100_2026-11-26/sweep2.json): per-GPU batch -> (iteration
# time s, draw W from the energy counter). Flat in time from 32 to 512 while its draw
# climbs; 15.47 ms and 651.7 W at 1024.
LSTM = {
    32: (11.200e-3, 170.8),
    64: (11.041e-3, 195.0),
    128: (10.294e-3, 258.1),
    256: (9.429e-3, 372.3),
    512: (11.309e-3, 522.8),
}
LSTM_1024 = (15.475e-3, 651.7)


def _observations(points, weight=60.0, **extra):
    return [
        Observation(
            n_gpus=1,
            n_nodes=1,
            local_batch=float(b),
            iter_time_s=t,
            power_w=p,
            weight=weight,
            **extra,
        )
        for b, (t, p) in points.items()
    ]


def test_a_flat_time_under_a_climbing_draw_turns_up_where_the_gpu_is_full():
    # given the lstm measured at a round's weight at the five batches around its first
    model = fit_online(PRIOR, _observations(LSTM))
    # when it predicts batch 1024, twice the largest it ran
    cfg = config_of(1, 1, 1024.0)
    t, e = model.iter_time_s(cfg), model.energy_per_iter_j(cfg)
    # then the time is at least what its energy line needs at the highest limit, within 5 %
    # of the 15.47 ms measured (the fitted equations alone: 11.0 ms, 29 % fast), and the
    # energy within 5 % of the 10.09 J measured (the equations: 5.6 J)
    e0_j, e1_j, largest = busy_energy_line(model._cells.values(), model.base)
    assert largest == 512.0
    assert t >= (e0_j + e1_j * 1024) / (700.0 - 87.5) * (1 - 1e-9)
    assert t == pytest.approx(LSTM_1024[0], rel=0.05)
    assert e == pytest.approx(LSTM_1024[0] * LSTM_1024[1], rel=0.05)
    assert model.base.iter_time_s(cfg) < 0.8 * LSTM_1024[0]
    # and its draw there is no more than the GPU's highest limit
    assert model.power_w(cfg) <= 700.0


def test_the_energy_line_is_the_jobs_draw_above_idle_times_its_time():
    # given measurements whose energy above idle is exactly 1 mJ + 10 uJ a sample
    idle_w = H100.idle_power_w
    points = {b: (1e-2, idle_w + (1e-3 + 1e-5 * b) / 1e-2) for b in (64, 128, 512)}
    cells = pool(_observations(points), 1).values()
    # then the line is found, and a measurement at a lower limit or clock does not enter it
    line = busy_energy_line(cells, PRIOR)
    assert line == (pytest.approx(1e-3), pytest.approx(1e-5), 512.0)
    capped = pool(
        _observations(points)
        + _observations({1024: (1e-2, 300.0)}, power_limit_w=300.0)
        + _observations({2048: (1e-2, 300.0)}, sm_clock_mhz=H100.dvfs.min_clock_mhz),
        1,
    ).values()
    assert busy_energy_line(capped, PRIOR) == line
    # nor one on several GPUs, whose draw counts the all-reduce's waiting
    spread = [
        replace(o, n_gpus=4, n_nodes=1, local_batch=2048.0)
        for o in _observations({2048: (1e-2, 600.0)})
    ]
    assert busy_energy_line(pool(_observations(points) + spread, 1).values(), PRIOR) == line


def test_a_job_measured_at_one_batch_is_predicted_as_without_the_bound(monkeypatch):
    # given a job measured at one batch, at five power limits (the Zeus replay's first five)
    limits = (700.0, 675.0, 650.0, 625.0, 600.0)
    obs = [
        Observation(
            n_gpus=1,
            n_nodes=1,
            local_batch=128.0,
            iter_time_s=10e-3 * (1 + 0.01 * i),
            power_w=limit - 100.0,
            power_limit_w=limit,
        )
        for i, limit in enumerate(limits)
    ]
    bounded = fit_online(PRIOR, obs)
    monkeypatch.setattr(online_model, "ENERGY_BOUND", False)
    unbounded = fit_online(PRIOR, obs)
    # then there is no line, and every prediction is the one without the bound
    assert busy_energy_line(bounded._cells.values(), bounded.base) is None
    for b in (16.0, 128.0, 4096.0):
        for limit in (None, 400.0):
            cfg = config_of(1, 1, b, None, limit)
            assert bounded.time_and_power(cfg) == unbounded.time_and_power(cfg)


def test_below_the_largest_batch_measured_the_fitted_equations_predict(monkeypatch):
    # given the lstm's five batches, with and without the bound
    bounded = fit_online(PRIOR, _observations(LSTM))
    monkeypatch.setattr(online_model, "ENERGY_BOUND", False)
    unbounded = fit_online(PRIOR, _observations(LSTM))
    # then batches the job did not run at, below its largest, are the equations' alone
    for b in (16.0, 100.0, 384.0):
        for limit in (None, 400.0):
            cfg = config_of(1, 1, b, None, limit)
            assert bounded.time_and_power(cfg) == unbounded.time_and_power(cfg)


def test_measured_configurations_keep_what_was_measured():
    # given the lstm's five batches
    model = fit_online(PRIOR, _observations(LSTM))
    # then each measured one is predicted as measured (within the shrinkage of 60 samples)
    for b, (t, p) in LSTM.items():
        cfg = config_of(1, 1, float(b))
        assert model.iter_time_s(cfg) == pytest.approx(t, rel=0.01)
        assert model.power_w(cfg) == pytest.approx(p, rel=0.01)


def test_a_bound_job_under_a_lower_limit_is_slower_and_draws_no_more_than_it():
    # given the lstm's five batches, predicted at 1024 under a 400 W limit
    model = fit_online(PRIOR, _observations(LSTM))
    top = config_of(1, 1, 1024.0)
    capped = config_of(1, 1, 1024.0, None, 400.0)
    # then it is no faster than at the highest limit, and draws at most its limit
    assert model.iter_time_s(capped) >= model.iter_time_s(top)
    assert model.power_w(capped) <= 400.0
