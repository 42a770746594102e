"""PowerFlow: minimise average JCT under an energy budget (Gu et al., arXiv 2304.06381).

The budget is paced into a per-round energy allowance and priced; jobs start at their
minimum configuration, shortest first, and the greedy buys the upgrades (next buddy GPU
count, next clock step, next batch size) with the best speedup per share of the spare
GPUs and energy they take, a shorter job's speedup weighted more (heSRPT, by its effect
on average JCT), while GPUs and the allowance last. Placement is buddy allocation with
network packing. The allocator is reconstructed from the abstract; see
``budget_greedy``.
"""

from __future__ import annotations

from scheduling.core.policies.budget_greedy import BudgetGreedy
from scheduling.core.registry import register_policy


@register_policy("powerflow")
class PowerFlow(BudgetGreedy):
    name = "powerflow"
    cost = "energy"
