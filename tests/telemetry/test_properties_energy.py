"""Property-based tests (Hypothesis) of the accounting arithmetic in ``telemetry/energy.py``:
energy from counters with resets and gaps, split across minutes, hours and jobs.

Examples are bounded (``max_examples``) and derandomized so the suite stays fast and
repeatable; the hand-computed cases are in test_energy.py.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.energy import HOUR_S, MINUTE_S, Holder, Point, attribute, interval_energy_j

PROPS = settings(max_examples=60, derandomize=True, deadline=None, database=None)

T0 = math.floor(1_790_000_000.0 / HOUR_S) * HOUR_S  # a whole hour, in Unix seconds
MAX_GAP_S = 120.0


@st.composite
def series(draw, *, resets: bool = True, gaps: bool = False) -> list[Point]:
    """Samples of one GPU: increasing times, power readings, and a cumulative counter that
    follows power x time, may be missing, and (``resets``) may restart from zero."""
    n = draw(st.integers(min_value=2, max_value=40))
    step = st.floats(min_value=0.5, max_value=(400.0 if gaps else 90.0))
    t, counter = T0 - draw(st.floats(min_value=0, max_value=300)), 5_000.0
    points = []
    for _ in range(n):
        power = draw(st.floats(min_value=0.0, max_value=700.0))
        kind = draw(st.sampled_from(["counter", "counter", "none", "reset"] if resets else
                                    ["counter", "counter", "none"]))  # fmt: skip
        if kind == "reset":
            counter = draw(st.floats(min_value=0.0, max_value=100.0))
        energy = None if kind == "none" else counter
        points.append(Point(t, power, energy))
        dt = draw(step)
        t += dt
        counter += power * dt
    return points


def _expected_total(points: list[Point]) -> float:
    """Every interval's energy (counter difference, or trapezoid where no counter or reset)."""
    return sum(interval_energy_j(a, b)[0] for a, b in zip(points, points[1:], strict=False))


def _whole(points: list[Point]) -> tuple[float, float]:
    return points[0].t_s, points[-1].t_s + 1.0


@PROPS
@given(points=series(), holders=st.lists(st.integers(0, 3), max_size=3))
def test_energy_is_conserved_across_minutes_and_jobs(points, holders):
    start, end = _whole(points)
    span = end - start
    jobs = [
        Holder(job_id=i + 1, start_s=start + span * k / 4, end_s=None if k == 3 else end)
        for i, k in enumerate(holders)
    ]
    result = attribute(points, jobs, window_start_s=start, window_end_s=end, max_gap_s=1e9)
    expected = _expected_total(points)
    assert result.gap_j == 0.0
    assert result.total_j == pytest.approx(expected, rel=1e-9, abs=1e-6)
    assert sum(result.by_minute_j.values()) == pytest.approx(expected, rel=1e-9, abs=1e-6)
    assert all(v >= 0 for v in result.by_job_j.values())
    assert all(minute % MINUTE_S == 0 for minute in result.by_minute_j)


@PROPS
@given(points=series(resets=False))
def test_a_monotonic_counter_is_used_as_is(points):
    """Without resets or missing values, energy is exactly last counter minus first."""
    points = [Point(p.t_s, p.power_w, p.energy_j) for p in points if p.energy_j is not None]
    if len(points) < 2:
        return
    start, end = _whole(points)
    result = attribute(points, [], window_start_s=start, window_end_s=end, max_gap_s=1e9)
    assert result.resets == 0
    assert result.total_j == pytest.approx(points[-1].energy_j - points[0].energy_j, rel=1e-9)
    assert set(result.by_job_j) <= {None}  # nobody held the GPU: all of it is idle draw


@PROPS
@given(points=series())
def test_a_reset_falls_back_to_power_for_that_interval_only(points):
    start, end = _whole(points)
    result = attribute(points, [], window_start_s=start, window_end_s=end, max_gap_s=1e9)
    backwards = sum(
        1
        for a, b in zip(points, points[1:], strict=False)
        if a.energy_j is not None and b.energy_j is not None and b.energy_j < a.energy_j
    )
    assert result.resets == backwards
    for a, b in zip(points, points[1:], strict=False):
        energy, by_counter = interval_energy_j(a, b)
        assert energy >= 0
        if by_counter:
            assert energy == b.energy_j - a.energy_j
        else:
            assert energy == pytest.approx((a.power_w + b.power_w) / 2 * (b.t_s - a.t_s))


@PROPS
@given(points=series(gaps=True), cut=st.floats(min_value=0.0, max_value=1.0))
def test_windows_split_the_energy_additively(points, cut):
    """Accounting hour by hour (any split of the time line) books exactly what one window
    over the whole span books, gaps included."""
    start, end = _whole(points)
    middle = start + (end - start) * cut
    whole = attribute(points, [], window_start_s=start, window_end_s=end, max_gap_s=MAX_GAP_S)
    first = attribute(points, [], window_start_s=start, window_end_s=middle, max_gap_s=MAX_GAP_S)
    second = attribute(points, [], window_start_s=middle, window_end_s=end, max_gap_s=MAX_GAP_S)
    assert first.total_j + second.total_j == pytest.approx(whole.total_j, rel=1e-9, abs=1e-6)
    assert first.gap_j + second.gap_j == pytest.approx(whole.gap_j, rel=1e-9, abs=1e-6)
    assert whole.total_j + whole.gap_j == pytest.approx(_expected_total(points), rel=1e-9, abs=1e-6)


@PROPS
@given(points=series(), sharers=st.integers(min_value=1, max_value=4))
def test_co_located_jobs_share_equally(points, sharers):
    start, end = _whole(points)
    jobs = [Holder(job_id=j, start_s=start - 1.0) for j in range(1, sharers + 1)]
    result = attribute(points, jobs, window_start_s=start, window_end_s=end, max_gap_s=1e9)
    total = result.total_j
    assert None not in result.by_job_j or result.by_job_j[None] == 0.0
    for job in jobs:
        assert result.by_job_j.get(job.job_id, 0.0) == pytest.approx(
            total / sharers, rel=1e-9, abs=1e-9
        )


@PROPS
@given(points=series(), at=st.floats(min_value=0.0, max_value=1.0))
def test_a_job_is_charged_only_while_it_holds_the_gpu(points, at):
    """A job that takes the GPU part-way is charged what was drawn from then on; the rest is
    idle draw. The two add up to the whole."""
    start, end = _whole(points)
    handover = start + (end - start) * at
    result = attribute(
        points, [Holder(7, handover)], window_start_s=start, window_end_s=end, max_gap_s=1e9
    )
    after = attribute(points, [], window_start_s=handover, window_end_s=end, max_gap_s=1e9)
    assert result.by_job_j.get(7, 0.0) == pytest.approx(after.total_j, rel=1e-9, abs=1e-6)
    assert result.by_job_j.get(7, 0.0) + result.by_job_j.get(None, 0.0) == pytest.approx(
        result.total_j, rel=1e-12, abs=1e-9
    )
