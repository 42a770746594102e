"""GreenFlow: minimise average JCT under a carbon budget (Gu et al., IEEE TPDS 36(2), 2025).

PowerFlow's greedy with carbon as the cost: a configuration's cost is its remaining
energy priced by the grid intensity over the hours it will run (forecast where known,
the recent distribution after), and the carbon budget is paced towards clean hours
(``clean_bias``, default 1: carbon spent evenly, so energy in inverse proportion to
the intensity). A job that cannot start because this round's carbon allowance is
spent waits with ``WAITING_FOR_CLEAN_HOUR`` and the start of the next forecast hour
at least ``CLEAN_MARGIN`` cleaner (within ``HOLD_WITHIN_S``, ``budget_greedy``), when there is one.
Unlike PowerFlow it paces by the even share of point 1 of ``budget_greedy``, not by the
budget price (``pricing=True`` turns the price on; see ``__init__`` for why it is off).
Reconstructed from the abstract; see ``budget_greedy``.
"""

from __future__ import annotations

from scheduling.core.policies.budget_greedy import BudgetGreedy
from scheduling.core.registry import register_policy


@register_policy("greenflow")
class GreenFlow(BudgetGreedy):
    name = "greenflow"
    cost = "carbon"

    def __init__(
        self,
        *,
        clean_bias: float = 1.0,
        pricing: bool = False,
        share_floor: float = 1.0,
        rank: str = "relative",
        **params,
    ) -> None:
        # GreenFlow keeps the relative ranking (PowerFlow's is "per_gpu"): with the even
        # share and a carbon budget, per-GPU ranking measured worse on the first 300
        # Philly jobs at ES's carbon (vs fifo / elastic / zeus: 1.640x / 0.953x / 1.381x
        # against 1.731x / 0.926x / 1.618x); docs/benchmarks.md, issue 13.
        # The budget price stays off for carbon: at fifo_lowclock's carbon with the
        # US-CAL-CISO 2022 intensities it spent 112.9% and ran past the period (0.48x),
        # where the even share stays inside (99.9%, 0.71x); with ES it would gain
        # (0.86x against 0.58x). docs/benchmarks.md, section (b), has both. When it is
        # on, no share floor: at fifo_lowclock's carbon (ES) the floor 1.15 spent
        # 102.8% and ran past the period (1.0: 99.3%, in the period).
        super().__init__(
            clean_bias=clean_bias, pricing=pricing, share_floor=share_floor, rank=rank, **params
        )
