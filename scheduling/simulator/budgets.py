"""Simulated budgets, period by period: what each budget is given and has spent.

``BudgetSpec`` says what a budget is (cluster-wide or a team's, its limits, its first
period and whether periods renew); ``BudgetLedger`` keeps what every period spent and
hands the core the period in force as a ``scheduling.core.types.Budget``, the way the
live adapter hands a budget row with its ledger total.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduling.core.types import Budget, HardLimitAction


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """A budget for the simulated periods: the first is ``[period_start_s, period_end_s)``
    and, with ``renews``, the next ones follow it back to back, each as long as the first
    and with the same limits (the rule for the next period's size: the same limit per
    period length), so nothing runs unbudgeted after the first period ends.

    ``team=None`` is a cluster-wide budget that pays every joule the cluster draws, idle
    GPUs included; a team budget pays what its jobs' GPUs draw while they hold them (as the
    live ledgers charge a team). ``energy_used_j``/``co2_used_g`` are what the first period
    had spent before the simulation starts. ``hard_limit_action`` is the core's.
    """

    period_end_s: float
    energy_limit_j: float | None = None
    co2_limit_g: float | None = None
    team: str | None = None
    period_start_s: float = 0.0
    renews: bool = True
    budget_id: str = "simulation"
    energy_used_j: float = 0.0
    co2_used_g: float = 0.0
    hard_limit_action: HardLimitAction = HardLimitAction.PAUSE_JOBS

    def __post_init__(self) -> None:
        if not self.period_end_s > self.period_start_s:
            raise ValueError("a budget period must end after it starts")

    @property
    def period_s(self) -> float:
        return self.period_end_s - self.period_start_s

    def period_at(self, t: float) -> int | None:
        """Index of the period in force at ``t`` (0: the first); None outside them."""
        if t < self.period_start_s:
            return None
        k = math.floor((t - self.period_start_s) / self.period_s)
        # The division rounds, either way: at a period's end as ``bounds`` computes it
        # (where the engine stops a stretch) it can give the period that just ended, whose
        # end is then not after ``t`` (the run would stand still there, replanning
        # forever), or, just before an end, the next period, which has not started yet
        # (the core would see no budget in force: ``round.active_budgets``). ``t`` belongs
        # to the period whose bounds hold it, the period it starts.
        start, end = self.bounds(k)
        if t >= end:
            k += 1
        elif t < start and k > 0:
            k -= 1
        if not self.renews and k > 0:
            return None
        return k

    def bounds(self, k: int) -> tuple[float, float]:
        # A period starts at exactly the float its predecessor ends at. Computed on its
        # own (``start + k x length``) it can differ from that end by a rounding step
        # (24 of the first 1,000 starts of a 24,300.8185261097 s period fall after the end
        # before them): at such an end the engine hands the core a budget whose period
        # has not started, so the core plans that round with no budget in force and
        # whatever it starts runs unbudgeted to the next planning instant.
        start = self.period_start_s if k == 0 else self._end(k - 1)
        return start, self._end(k)

    def _end(self, k: int) -> float:
        return self.period_start_s + k * self.period_s + self.period_s

    def next_boundary(self, t: float) -> float:
        """The first period start or end after ``t`` (inf if none)."""
        if t < self.period_start_s:
            return self.period_start_s
        k = self.period_at(t)
        if k is None:
            return math.inf
        return self.bounds(k)[1]

    def period_id(self, k: int) -> str:
        return self.budget_id if k == 0 else f"{self.budget_id}@{k}"


@dataclass(frozen=True, slots=True)
class BudgetPeriod:
    """What one budget period was given and spent in a run."""

    budget_id: str
    team: str | None
    start_s: float
    end_s: float
    energy_limit_j: float | None
    co2_limit_g: float | None
    energy_j: float  # spent inside the period (the first period: including what it had)
    co2_g: float

    @property
    def share(self) -> float | None:
        """The largest of spent / limit over energy and carbon (None without limits)."""
        shares = []
        if self.energy_limit_j:
            shares.append(self.energy_j / self.energy_limit_j)
        if self.co2_limit_g:
            shares.append(self.co2_g / self.co2_limit_g)
        return max(shares) if shares else None


def idle_floor_exceeds(period: BudgetPeriod, idle_w: float, intensity) -> bool:
    """Whether ``period`` is one no plan could keep: a cluster budget's period whose powered
    idle GPUs alone (``idle_w``, 0 when idle nodes power off; carbon at ``intensity``) draw
    more than its energy or carbon limit over the whole period. A team budget pays its
    jobs' GPUs only, so stopping them keeps it: never. The command line names such
    periods (``cli._overspent``), and the engine's watch sets no idle floor aside in them
    (``Simulator._reserved_floor_w``)."""
    if period.team is not None or idle_w <= 0.0:
        return False
    if period.energy_limit_j is not None and idle_w * (period.end_s - period.start_s) > (
        period.energy_limit_j
    ):
        return True
    return period.co2_limit_g is not None and (
        intensity.co2_g(idle_w, period.start_s, period.end_s) > period.co2_limit_g
    )


class BudgetLedger:
    """Spend per (budget, period); a stretch is charged to the period it started in (the
    engine never lets one cross a period boundary).

    A period the engine's hard-limit watch stopped at its limit (``stop``) is handed to the
    core as spent from then on, although float round-off may leave it a hair below its
    limit: the round's ``hard_limit_action`` then pauses its jobs, where a budget read as
    not quite spent would be paced again and stopped again a moment later."""

    def __init__(self, specs: Sequence[BudgetSpec]) -> None:
        self.specs = tuple(specs)
        # (budget index, period index) -> [energy_j, co2_g]
        self.usage: dict[tuple[int, int], list[float]] = {
            (i, 0): [b.energy_used_j, b.co2_used_g] for i, b in enumerate(self.specs)
        }
        self.stopped: set[tuple[int, int]] = set()
        # Where the run's clock began (the engine sets it): a period that began before it
        # spends, and its idle floor counts, from then on.
        self.run_start_s = 0.0

    def left(self, i: int, k: int) -> tuple[float | None, float | None]:
        """What period ``k`` of budget ``i`` has left (energy J, carbon g; None: no such
        limit); 0 once the watch stopped it."""
        b = self.specs[i]
        used_e, used_c = self.usage.get((i, k), (0.0, 0.0))
        done = (i, k) in self.stopped
        e = None if b.energy_limit_j is None else 0.0 if done else b.energy_limit_j - used_e
        c = None if b.co2_limit_g is None else 0.0 if done else b.co2_limit_g - used_c
        return e, c

    def stop(self, i: int, k: int) -> None:
        """Mark period ``k`` of budget ``i`` spent (the engine's hard-limit watch)."""
        self.stopped.add((i, k))

    def __bool__(self) -> bool:
        return bool(self.specs)

    def next_boundary(self, t: float) -> float:
        """The first period start or end of any budget after ``t`` (inf if none)."""
        return min((b.next_boundary(t) for b in self.specs), default=math.inf)

    def all_renewed_s(self, t: float, *, at_t: bool = True) -> float:
        """When every budget has begun a new period (or ended) after ``t``: the latest of
        each budget's first period boundary after ``t`` (with ``at_t``, a period that
        begins exactly at ``t`` counts); inf if no budget has one. A job a spent budget
        holds back at ``t`` may start by then, whichever budget holds it."""
        latest = -math.inf
        for b in self.specs:
            k = b.period_at(t)
            if at_t and k is not None and b.bounds(k)[0] == t:
                latest = max(latest, t)
                continue
            nxt = b.next_boundary(t)
            if nxt != math.inf:
                latest = max(latest, nxt)
        return latest if latest > -math.inf else math.inf

    def charge(
        self, t0: float, energy_j: float, co2_g: float, by_team: Mapping[str, list[float]]
    ) -> None:
        """Charge a stretch that starts at ``t0`` (and never crosses a period boundary) to
        the period of each budget in force: a cluster budget pays all of it, a team budget
        what its jobs drew."""
        for i, b in enumerate(self.specs):
            k = b.period_at(t0)
            if k is None:
                continue
            if b.team is None:
                e, c = energy_j, co2_g
            else:
                e, c = by_team.get(b.team, (0.0, 0.0))
            usage = self.usage.setdefault((i, k), [0.0, 0.0])
            usage[0] += e
            usage[1] += c

    def at(self, t: float) -> tuple[Budget, ...]:
        result = []
        for i, b in enumerate(self.specs):
            k = b.period_at(t)
            if k is None:
                continue
            start, end = b.bounds(k)
            used_e, used_c = self.usage.get((i, k), (0.0, 0.0))
            if (i, k) in self.stopped:
                # stopped at its limit by the watch: spent, whatever round-off left
                used_e = max(used_e, b.energy_limit_j or 0.0)
                used_c = max(used_c, b.co2_limit_g or 0.0)
            result.append(
                Budget(
                    budget_id=b.period_id(k),
                    team=b.team,
                    period_start_s=start,
                    period_end_s=end,
                    energy_limit_j=b.energy_limit_j,
                    energy_used_j=used_e,
                    co2_limit_g=b.co2_limit_g,
                    co2_used_g=used_c,
                    hard_limit_action=b.hard_limit_action,
                )
            )
        return tuple(result)

    def periods(self) -> list[BudgetPeriod]:
        periods = []
        for (i, k), (e, c) in self.usage.items():
            b = self.specs[i]
            start, end = b.bounds(k)
            start = min(max(start, self.run_start_s), end)
            periods.append(
                BudgetPeriod(
                    b.period_id(k), b.team, start, end, b.energy_limit_j, b.co2_limit_g, e, c
                )
            )
        return sorted(periods, key=lambda p: (p.start_s, p.budget_id))
