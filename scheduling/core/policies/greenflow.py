"""GreenFlow: minimise average JCT under a carbon budget (Gu et al., IEEE TPDS 36(2), 2025).

PowerFlow's greedy with carbon as the cost: a configuration's cost is its remaining
energy priced by the grid intensity over the hours it will run (forecast where known,
the recent distribution after), and the carbon budget is paced towards clean hours
(``clean_bias``, default 1: carbon spent evenly, so energy in inverse proportion to
the intensity). A job that cannot start because this round's carbon allowance is
spent waits with ``WAITING_FOR_CLEAN_HOUR`` and the start of the next forecast hour
at least ``CLEAN_MARGIN`` cleaner (within ``HOLD_WITHIN_S``, ``budget_greedy``), when there is one.
It paces with PowerFlow's budget price and ranks upgrades as PowerFlow does
(``rank="hesrpt"``), with what a carbon price needs beyond an energy one (see
``__init__``); ``pricing=False, rank="relative"`` gives the even share of point 1 of
``budget_greedy`` instead.
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
        pricing: bool = True,
        share_floor: float = 1.1,
        rank: str = "hesrpt",
        **params,
    ) -> None:
        # PowerFlow's allocator with carbon as the cost (the budget price, its ranking,
        # the lag release), with what a carbon price needs beyond an energy one: the tail
        # past the 24 h forecast priced at the mean of the hours seen and the forecast's,
        # the lag measured against the idle floor's carbon as the grid made it
        # (``pacing.committed_lag_share``), and every allowance keeping the floor's carbon
        # to the period's end with the hours past the forecast as dirty as the dirtiest
        # recent day (``_keep_committed_carbon``); docs/benchmarks.md, "GreenFlow with the
        # carbon price". ``pricing=False, rank="relative"`` is the even share of point 1,
        # the default until the measurements of "GreenFlow's default: the carbon price"
        # (same file): with team budgets (pollux_workload-1..8, ES and US-CAL-CISO,
        # learned and oracle, at fifo's carbon) the even share lost to fifo in 25 of 32
        # runs (0.25-2.47x fifo's average JCT), the price won in all 32 (1.34-9.0x), no
        # period over; on the first 300 Philly jobs with team budgets the even share is
        # ahead by 0-16%. Known limit, either way: a cluster budget pays the idle GPUs' floor,
        # which no plan avoids; on the full Philly trace at 1.0 with US-CAL-CISO at
        # fifo_lowclock's carbon the price stopped all work 63 h before the period's end
        # and the floor alone, on days dirtier than any seen before, went 0.010% over
        # (the even share ended at 99.9%; with the heSRPT rank, the default since
        # "GreenFlow with the heSRPT rank" in the same file, it ended at 99.99998%).
        # A share floor of 1.1 (PowerFlow's is 1.15): with 1.0, in busy weeks the share
        # sat at the present work's cheapest cost and the price rose 100-fold (Philly at
        # fifo_lowclock's carbon, ES 1.0: 0.929x); with 1.1 1.366x (ES 0.5: 1.034x ->
        # 1.353x), better in all 16 pollux runs at fifo_lowclock's and elastic's carbon,
        # no period over in them; on Philly US-CAL-CISO 1.0 at fifo_lowclock's carbon the
        # idle floor in the period's last, dirtiest days went 0.010% over (1.0 ended 0.7 g
        # under: the same unforeseeable tail either way, see below); docs/benchmarks.md,
        # "GreenFlow's share floor". (An earlier measurement, before the carbon fixes
        # below: 1.15 spent 102.8% at fifo_lowclock's carbon, ES; today 99.2%.)
        # ``hour_price`` (each job's target chosen with its energy at this hour's
        # intensity) stays off: mixed on pollux_workload-1/3 and the first 300 Philly jobs.
        super().__init__(
            clean_bias=clean_bias, pricing=pricing, share_floor=share_floor, rank=rank, **params
        )
