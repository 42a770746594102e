"""GreenFlow: minimise average JCT under a carbon budget (Gu et al., IEEE TPDS 36(2), 2025).

PowerFlow's greedy with carbon as the cost: a configuration's cost is its remaining
energy priced by the grid intensity over the hours it will run (forecast where known,
the recent distribution after), and the carbon budget is paced towards clean hours
(``clean_bias``, default 1: carbon spent evenly, so energy in inverse proportion to
the intensity). A job that cannot start because this round's carbon allowance is
spent waits with ``WAITING_FOR_CLEAN_HOUR`` and the start of the next forecast hour
at least ``clean_margin`` cleaner (within ``hold_within_s``), when there is one.
Reconstructed from the abstract; see ``budget_greedy``.
"""

from __future__ import annotations

from scheduling.core.policies.budget_greedy import BudgetGreedy
from scheduling.core.registry import register_policy


@register_policy("greenflow")
class GreenFlow(BudgetGreedy):
    name = "greenflow"
    cost = "carbon"

    def __init__(self, *, clean_bias: float = 1.0, share_floor: float = 1.0, **params) -> None:
        # No share floor for carbon: at fifo_lowclock's carbon (ES) the floor 1.15 spent
        # 102.8% and ran past the period (1.0: 99.3%, in the period).
        super().__init__(clean_bias=clean_bias, share_floor=share_floor, **params)
