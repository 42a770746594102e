"""The pure energy arithmetic: counters, resets, integration, attribution (no database)."""

import pytest

from telemetry.energy import Holder, Point, attribute, interval_energy_j


def _attribute(points, holders, *, start=0.0, end=3600.0, max_gap_s=60.0):
    return attribute(points, holders, window_start_s=start, window_end_s=end, max_gap_s=max_gap_s)


def test_interval_energy_uses_the_counter_when_both_samples_have_it():
    assert interval_energy_j(Point(0, 100.0, 1000.0), Point(1, 300.0, 1250.0)) == (250.0, True)


def test_interval_energy_integrates_power_without_a_counter():
    assert interval_energy_j(Point(0, 100.0), Point(2, 300.0)) == (400.0, False)


def test_counter_reset_falls_back_to_power_for_that_interval_only():
    # given a counter that restarts from 50 J between t=2 and t=3
    points = [
        Point(0, 100.0, 1000.0),
        Point(1, 100.0, 1100.0),
        Point(2, 100.0, 1200.0),
        Point(3, 100.0, 50.0),
        Point(4, 100.0, 170.0),
    ]
    # when attributed with nobody holding the GPU
    result = _attribute(points, [])
    # then the reset interval is integrated (100 J) and the counter is trusted again after it
    assert result.resets == 1
    assert result.by_job_j == {None: pytest.approx(100.0 + 100.0 + 100.0 + 120.0)}


def test_job_switch_mid_batch_splits_energy_at_the_switch():
    # given 10 s at a constant 200 W, job 1 until t=4.5 and job 2 from then on
    points = [Point(float(t), 200.0) for t in range(11)]
    holders = [Holder(1, -100.0, 4.5), Holder(2, 4.5, None)]
    # when attributed
    result = _attribute(points, holders)
    # then each job gets exactly the energy of its share of time
    assert result.by_job_j == {1: pytest.approx(900.0), 2: pytest.approx(1100.0)}
    assert None not in result.by_job_j


def test_co_located_jobs_share_the_gpu_equally_and_idle_time_goes_to_nobody():
    points = [Point(float(t), 100.0) for t in range(11)]
    holders = [Holder(1, 0.0, None), Holder(2, 5.0, None)]
    result = _attribute(points, holders)
    assert result.by_job_j == {
        1: pytest.approx(500.0 + 250.0),
        2: pytest.approx(250.0),
    }
    idle = _attribute(points, [])
    assert idle.by_job_j == {None: pytest.approx(1000.0)}


def test_energy_is_split_at_minute_boundaries_and_clipped_to_the_window():
    points = [Point(3599.5, 120.0), Point(3600.5, 120.0)]
    inside = _attribute(points, [], start=0.0, end=3600.0)
    assert dict(inside.by_minute_j) == {3540.0: pytest.approx(60.0)}
    next_hour = _attribute(points, [], start=3600.0, end=7200.0)
    assert dict(next_hour.by_minute_j) == {3600.0: pytest.approx(60.0)}


def test_a_gap_longer_than_max_gap_is_reported_and_attributed_to_nobody():
    points = [Point(0.0, 100.0, 0.0), Point(120.0, 100.0, 12000.0), Point(121.0, 100.0, 12100.0)]
    result = _attribute(points, [Holder(7, 0.0, None)], max_gap_s=60.0)
    assert result.gap_j == pytest.approx(12000.0)
    assert result.by_job_j == {7: pytest.approx(100.0)}
