"""Pure energy arithmetic for accounting: samples -> interval energies -> minutes and jobs.

No Django here (tested without a database). Times are Unix seconds (floats).

**Interval energy.** Between consecutive samples ``a`` and ``b`` of one GPU the energy is the
counter difference ``b.energy_j - a.energy_j`` when both carry the cumulative counter and it
did not go backwards. Where either has no counter, or the counter went backwards (a reset:
driver reload, GPU reset), the interval's energy is the trapezoid of the two power readings,
``(a.power_w + b.power_w) / 2 * dt``; only that one interval falls back, the counter is used
again from ``b`` on. An interval longer than ``max_gap_s`` is a gap in the data (the agent was
down): its energy is reported in ``gap_j`` and attributed to nobody, because when inside the gap
it was drawn (and by which job) is unknown.

**Implausible counter steps.** A counter step larger than the GPU could have drawn is not
believed: with ``max_power_w`` (the GPU's largest power limit) given, a step above
``max(max_power_w, a.power_w, b.power_w) x (1 + tolerance) x dt`` plus what is left of one
second of that draw (the read jitter between a counter and its timestamp: a balance across
steps, spent by a step above full power and earned back by time below it, ``_Slack``) is
refused, reported in
``refused``, and the interval falls back to the trapezoid of its power readings, exactly as a
reset does. A genuine counter never steps that far, so only forged or corrupt readings (a
1e12 J jump) are caught, and what they claimed is charged to nobody. A single spiked reading
costs two intervals their counter (the jump up is refused, the fall back is a reset); a
counter that stays at the new level is believed again from the next interval on.

**Attribution.** Energy is spread uniformly over its interval, then split at minute
boundaries and at the start and end of every holder (a job's allocation on this GPU). Each
piece goes to the holders active at its midpoint in equal shares (co-located jobs share a GPU
equally: the GPU cannot tell which job drew what); a piece nobody holds goes to ``None``, the
idle draw.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

MINUTE_S = 60.0
HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class Point:
    t_s: float
    power_w: float
    energy_j: float | None = None


@dataclass(frozen=True, slots=True)
class Holder:
    """A job's hold on the GPU over [start_s, end_s); ``end_s`` None = still holding."""

    job_id: int
    start_s: float
    end_s: float | None = None

    def active_at(self, t_s: float) -> bool:
        return self.start_s <= t_s and (self.end_s is None or t_s < self.end_s)


@dataclass(frozen=True, slots=True)
class RefusedStep:
    """A counter step between two samples that exceeds what the GPU could draw."""

    prev_t_s: float
    t_s: float
    prev_energy_j: float
    energy_j: float
    allowed_j: float
    charged_j: float  # what the interval was charged instead (integrated power)

    @property
    def step_j(self) -> float:
        return self.energy_j - self.prev_energy_j


@dataclass
class Attribution:
    by_minute_j: dict[float, float] = field(default_factory=lambda: defaultdict(float))
    by_job_j: dict[int | None, float] = field(default_factory=lambda: defaultdict(float))
    # (job id, minute start) -> J: what each holder drew in each minute, so that a budget
    # period that starts or ends inside an hour counts its own minutes of that hour.
    by_job_minute_j: dict[tuple[int | None, float], float] = field(
        default_factory=lambda: defaultdict(float)
    )
    gap_j: float = 0.0
    resets: int = 0
    refused: list[RefusedStep] = field(default_factory=list)

    @property
    def total_j(self) -> float:
        return sum(self.by_job_j.values())


# Read jitter between an energy counter and its sample's timestamp, in seconds of full power.
COUNTER_SLACK_S = 1.0


def plausible_step_j(max_power_w: float, dt_s: float, tolerance: float) -> float:
    """The largest counter step believed over ``dt_s`` seconds after a run of steps at
    most the full-power draw (a full slack; see ``_Slack``)."""
    return max_power_w * (1.0 + tolerance) * (dt_s + COUNTER_SLACK_S)


class _Slack:
    """The counter's read jitter, spent and earned back across steps.

    A counter read a little late shows a step above full power and the next one below
    it: ``COUNTER_SLACK_S`` seconds of full power is allowed above the draw, in total over
    consecutive steps, and a step below full power earns it back. Allowed afresh on every
    step, the slack grew with the number of samples, not with time: 20,000 samples 1 ms
    apart, each claiming 899 J, charged one job 18 MJ (5 kWh) for 20 s on a 400 W GPU (a
    live probe)."""

    def __init__(self) -> None:
        self.left_j: float | None = None  # None: a full slack (no step seen)

    def _left_j(self, full_w: float) -> float:
        cap = full_w * COUNTER_SLACK_S
        return cap if self.left_j is None else min(self.left_j, cap)

    def allowed_j(self, full_w: float, dt_s: float) -> float:
        return full_w * dt_s + self._left_j(full_w)

    def spend(self, full_w: float, dt_s: float, energy_j: float) -> None:
        cap = full_w * COUNTER_SLACK_S
        self.left_j = min(cap, self._left_j(full_w) + full_w * dt_s - energy_j)

    def spent(self) -> None:
        self.left_j = 0.0


def interval_energy_j(a: Point, b: Point) -> tuple[float, bool]:
    """Energy between two samples and whether the counter was used (False: integrated)."""
    if a.energy_j is not None and b.energy_j is not None and b.energy_j >= a.energy_j:
        return b.energy_j - a.energy_j, True
    return _integrated_j(a, b), False


def _integrated_j(a: Point, b: Point) -> float:
    return (a.power_w + b.power_w) / 2.0 * (b.t_s - a.t_s)


def attribute(
    points: list[Point],
    holders: list[Holder],
    *,
    window_start_s: float,
    window_end_s: float,
    max_gap_s: float,
    max_power_w: float | None = None,
    tolerance: float = 0.5,
) -> Attribution:
    """Energy of the intervals between ``points`` (ascending, may extend past the window on
    both sides) clipped to [window_start_s, window_end_s), by minute and by holder. With
    ``max_power_w``, counter steps above :func:`plausible_step_j` are refused (see above)."""
    result = Attribution()
    edges = sorted({h.start_s for h in holders} | {h.end_s for h in holders if h.end_s})
    slack = _Slack()
    for a, b in zip(points, points[1:], strict=False):
        dt = b.t_s - a.t_s
        if dt <= 0:
            continue
        energy_j, by_counter = interval_energy_j(a, b)
        if a.energy_j is not None and b.energy_j is not None and not by_counter:
            result.resets += 1
        if max_power_w is not None:
            # Checked on every step of the points given, the window's or not: the slack
            # runs across them (each accounting window starts with a full one).
            full_w = max(max_power_w, a.power_w, b.power_w) * (1.0 + tolerance)
            allowed_j = slack.allowed_j(full_w, dt)
            if by_counter and energy_j > allowed_j:
                charged_j = _integrated_j(a, b)
                lo, hi = max(a.t_s, window_start_s), min(b.t_s, window_end_s)
                if hi > lo:
                    result.refused.append(
                        RefusedStep(a.t_s, b.t_s, a.energy_j, b.energy_j, allowed_j, charged_j)
                    )
                energy_j = charged_j
                slack.spent()  # judged from here with no slack left until it is earned
            else:
                # A step without the counter (a reset, a missing reading) earns slack back
                # by its time only, as any step does: refilled whole, a counter alternating
                # 0, 899, 0, ... kept half its forged steps (a review).
                slack.spend(full_w, dt, energy_j)
        lo, hi = max(a.t_s, window_start_s), min(b.t_s, window_end_s)
        if hi <= lo:
            continue
        if dt > max_gap_s:
            result.gap_j += energy_j * (hi - lo) / dt
            continue
        rate_w = energy_j / dt
        first_minute = math.floor(lo / MINUTE_S) + 1
        if first_minute * MINUTE_S >= hi and not any(lo < e < hi for e in edges):
            # The common case (1 s samples): the interval lies in one minute and one holding.
            _add_piece(result, holders, lo, hi, rate_w * (hi - lo))
            continue
        cuts = [lo, hi]
        cuts.extend(k * MINUTE_S for k in range(first_minute, math.ceil(hi / MINUTE_S)))
        cuts.extend(e for e in edges if lo < e < hi)
        cuts = sorted(set(cuts))
        for t0, t1 in zip(cuts, cuts[1:], strict=False):
            _add_piece(result, holders, t0, t1, rate_w * (t1 - t0))
    return result


def _add_piece(
    result: Attribution, holders: list[Holder], t0: float, t1: float, piece_j: float
) -> None:
    """Book energy drawn over [t0, t1) (inside one minute and one holding) at its midpoint."""
    mid = (t0 + t1) / 2.0
    minute = math.floor(mid / MINUTE_S) * MINUTE_S
    result.by_minute_j[minute] += piece_j
    active = [h.job_id for h in holders if h.active_at(mid)]
    if not active:
        result.by_job_j[None] += piece_j
        result.by_job_minute_j[None, minute] += piece_j
    else:
        share = piece_j / len(active)
        for job_id in active:
            result.by_job_j[job_id] += share
            result.by_job_minute_j[job_id, minute] += share
