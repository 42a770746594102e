"""The budget price of PowerFlow and GreenFlow (point 4 of ``budget_greedy``'s docstring):
each round, a price per budget from the jobs present and the work expected to arrive,
each priced job's target configuration at that price, and the round's allowance that
those targets take. Split from ``budget_greedy`` for size; the hull and price arithmetic
is in ``scheduling.core.pricing``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from scheduling.core.context import Estimate, JobView, RoundContext
from scheduling.core.pacing import IntensityCurve
from scheduling.core.pricing import hull_choice, lower_hull, price_for_share

if TYPE_CHECKING:
    from scheduling.core.policies.budget_greedy import BudgetGreedy


def in_period_fraction(binned: dict[str, list[float]], left_s: float) -> float:
    """The share of future arrivals' cheapest cost that falls inside the period: a job
    of cheapest cost C and time T at it, arriving ``s`` before the period ends and run
    at once, spends ``C * min(1, s / T)`` in it; over arrival times spread evenly over
    the ``left_s`` left that is ``C * (1 - T / (2 L))`` when ``T <= L`` and
    ``C * L / (2 T)`` otherwise. ``binned`` holds the arrivals seen so far, by octave
    of T (``str(int(log2 T))``), as the sums of C, C * T and C / T."""
    total = sum(cell[0] for cell in binned.values())
    if total <= 0:
        return 1.0
    spent = 0.0
    for octave, (c_sum, ct_sum, c_over_t) in binned.items():
        if 2.0 ** (int(octave) + 0.5) <= left_s:
            spent += c_sum - ct_sum / (2.0 * left_s)
        else:
            spent += left_s * c_over_t / 2.0
    return min(max(spent / total, 0.0), 1.0)


def price_round(
    policy: BudgetGreedy,
    ctx: RoundContext,
    jobs: Sequence[JobView],
    opts: Sequence[tuple],
    pays: Sequence[tuple[tuple[int, bool], ...]],
    evaluate: Callable[..., tuple[Estimate, float, float]],
    points: Callable[[int], list[tuple[float, float, tuple[int, int, int]]]],
    deltas: Callable[..., tuple[float, float]],
    mins: Sequence[tuple[Estimate, float, float]],
    floor_w: Sequence[float],
    curve: IntensityCurve,
    allow_e: list[float | None],
    allow_c: list[float | None],
    idle_floor_j: float,
    to_g: float,
    target: dict[int, tuple[int, int, int]],
) -> dict[str, Any]:
    """Set each priced budget's price, the jobs' target configurations (in
    ``target``) and lower or raise the priced budgets' allowances (``allow_e`` /
    ``allow_c``, in place) to what the targets take this round; returns the state to
    carry. The arguments are ``BudgetGreedy.allocate``'s round: its jobs, options,
    payers, cost functions, minimum configurations and allowances, by job index."""
    budgets = ctx.budgets
    priced = [
        (b.energy_limit_j is not None) if policy.cost == "energy" else (b.co2_limit_g is not None)
        for b in budgets
    ]
    if not any(priced):
        return {}
    state = ctx.policy_state
    prev_now = state.get("price_prev_now")
    arrivals = {k: [float(x) for x in v] for k, v in state.get("price_arrivals", {}).items()}
    hulls: dict[int, list[tuple[float, float, tuple[int, int, int]]]] = {}
    for j in range(len(jobs)):
        if not any(priced[bi] for bi, _ in pays[j]):
            continue
        hulls[j] = lower_hull(points(j))
    hist = {
        k: {t: [float(x) for x in cell] for t, cell in v.items()}
        for k, v in state.get("price_arrival_times", {}).items()
    }
    price = [0.0] * len(budgets)
    covered = [False] * len(budgets)
    for b_i, b in enumerate(budgets):
        if not priced[b_i]:
            continue
        members = [j for j in hulls if any(bi == b_i for bi, _ in pays[j])]
        rec = arrivals.setdefault(b.budget_id, [0.0, ctx.now_s])
        for j in members:
            if prev_now is None or jobs[j].job.submit_time_s > prev_now:
                rec[0] += hulls[j][0][0]
                if policy.future_in_period:
                    # Arrivals' cheapest cost by octave of their time at it: the sums
                    # of C, C * T and C / T.
                    c0, t0 = hulls[j][0][0], max(hulls[j][0][1], 1.0)
                    cell = hist.setdefault(b.budget_id, {}).setdefault(
                        str(int(math.log2(t0))), [0.0, 0.0, 0.0]
                    )
                    cell[0] += c0
                    cell[1] += c0 * t0
                    cell[2] += c0 / t0
        left_s = max(b.period_end_s - ctx.now_s, ctx.round_length_s)
        if policy.cost == "energy":
            free = b.energy_remaining_j - floor_w[b_i] * left_s
        else:
            free = b.co2_remaining_g - (curve.co2_g(floor_w[b_i], left_s) if floor_w[b_i] else 0.0)
        pmin = sum(hulls[j][0][0] for j in members)
        rate = rec[0] / max(ctx.now_s - rec[1], policy.demand_window_min_s)
        future = policy.future_weight * rate * left_s
        binned = hist.get(b.budget_id)
        if policy.future_in_period and binned:
            future *= in_period_fraction(binned, left_s)
        if not members:
            continue
        if free < pmin:
            price[b_i] = math.inf
            continue
        covered[b_i] = True
        share = free * pmin / (pmin + future) if pmin + future > 0 else free
        share = max(share, min(free - policy.floor_guard * future, pmin * policy.share_floor))
        price[b_i] = price_for_share([hulls[j] for j in members], share)
    for j, h in hulls.items():
        target[j] = hull_choice(h, max(price[bi] for bi, _ in pays[j] if priced[bi]))
    # The allowance of a budget whose remaining funds cover the minimum cost of the
    # work present is what its jobs' targets (or minimum configurations) take now.
    need = [idle_floor_j if b.team is None else 0.0 for b in budgets]
    for j, box in target.items():
        n0 = opts[j][0][0]
        d_min = deltas(j, None, mins[j][0], 0, n0)
        est_t, _, _ = evaluate(j, *box)
        d_tgt = deltas(j, None, est_t, 0, opts[j][0][box[0]])
        for bi, is_cluster in pays[j]:
            k = 1 if is_cluster else 0
            need[bi] += max(d_min[k], d_tgt[k])
    for b_i, b in enumerate(budgets):
        if not covered[b_i]:
            continue
        if policy.cost == "energy" and allow_e[b_i] is not None:
            allow_e[b_i] = min(b.energy_remaining_j, need[b_i])
        if policy.cost == "carbon" and allow_c[b_i] is not None:
            allow_c[b_i] = min(b.co2_remaining_g, need[b_i] * to_g)
    return {
        "price_prev_now": ctx.now_s,
        "price_arrivals": arrivals,
        "price_arrival_times": hist,
        "price": {
            b.budget_id: p
            for b, p, is_priced in zip(budgets, price, priced, strict=True)
            if is_priced and math.isfinite(p)
        },
    }
