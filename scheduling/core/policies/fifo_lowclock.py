"""FIFO at a fixed reduced SM clock: the energy-naive way to save energy.

Identical to ``fifo`` except that every job runs at ``clock_fraction`` of its GPU's
highest supported clock, snapped down to a supported step (or at ``sm_clock_mhz``
when that is given instead).
"""

from __future__ import annotations

from scheduling.core.policies.fifo import Fifo
from scheduling.core.registry import register_policy


@register_policy("fifo_lowclock")
class FifoLowClock(Fifo):
    name = "fifo_lowclock"

    def __init__(
        self, *, clock_fraction: float = 0.7, sm_clock_mhz: int | None = None, **params
    ) -> None:
        if not 0.0 < clock_fraction <= 1.0:
            raise ValueError("clock_fraction must be in (0, 1]")
        super().__init__(sm_clock_mhz=sm_clock_mhz, **params)
        self.clock_fraction = clock_fraction

    def _clock(self, clocks: tuple[int, ...]) -> int | None:
        if self.sm_clock_mhz is not None or not clocks:
            return super()._clock(clocks)
        target = clocks[-1] * self.clock_fraction
        below = [c for c in clocks if c <= target]
        return below[-1] if below else clocks[0]
