"""The budget price of PowerFlow and GreenFlow (point 4 of ``budget_greedy``'s docstring):
each round, a price per budget from the jobs present and the work expected to arrive,
each priced job's target configuration at that price, and the round's allowance that
those targets take. Split from ``budget_greedy`` for size; the hull and price arithmetic
is in ``scheduling.core.pricing``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scheduling.core.pricing import hull_choice, lower_hull, price_for_share

if TYPE_CHECKING:
    from scheduling.core.policies.budget_greedy import BudgetGreedy, _Round

DEMAND_WINDOW_MIN_S = 24 * 3600.0  # the arrival rate's shortest window (first jobs)


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


def arrivals_bound(
    total: float, squares: float, *, window_s: float, left_s: float, z: float
) -> float:
    """An upper bound on the cost of the work still to arrive in the ``left_s`` to the
    period's end, from the arrivals seen over ``window_s``: their costs' sum ``total`` and
    the sum of their squares ``squares``, taken as a compound Poisson stream (arrivals at
    a steady rate, each of a cost drawn from those seen). With ``r = left_s / window_s``
    the forecast is ``r * total``; its variance is the future stream's own,
    ``r * squares``, plus that of the rate estimated from the window, ``r**2 * squares``;
    the bound is the forecast plus ``z`` standard deviations. Few arrivals, or costs of
    very unequal size, widen it: a window of one job bounds the future at ``1 + z`` times
    the forecast (for ``r`` large), twenty equal ones at about ``1 + z / 4.5`` times."""
    if total <= 0.0 or window_s <= 0.0:
        return 0.0
    r = left_s / window_s
    return r * total + z * math.sqrt(max(squares, 0.0) * r * (1.0 + r))


Hull = list[tuple[float, float, tuple[int, int, int]]]


def in_period_points(hull: Hull, scale: float, left_s: float) -> Hull:
    """A job's hull with each point's cost cut to what it spends before the period ends
    (``left_s``), run at that point from now: the whole cost where the point finishes in
    time, else its draw times ``left_s`` (``cost * left_s / time``). Not itself a hull
    (``lower_hull`` makes it one). Points in ``hull`` are one unit of work, times
    ``scale`` the job's; the result is in the same units. Where the hull's cheapest point,
    its slowest, finishes in time, every point does and nothing is cut."""
    return [(c * min(1.0, left_s / (t * scale)), t, tag) for c, t, tag in hull]


class _Hulls(dict):
    """Hulls by key. An in-period cut (``in_period_points``) is kept as what makes it (the
    hull, scale and time left) and made a hull when first looked up: a long queue has a
    cut per job, and where the price is infinite nothing needs them but their cheapest
    cost, which needs neither the cut's points nor its hull."""

    def __init__(self) -> None:
        super().__init__()
        self.cuts: dict[Hashable, tuple[Hull, float, float]] = {}

    def __missing__(self, key: Hashable) -> Hull:
        hull = self[key] = lower_hull(in_period_points(*self.cuts[key]))
        return hull

    def cut_key(self, hull: Hull, key: Hashable, scale: float, left_s: float) -> Hashable:
        """The key of a job's hull (``hull``, ``key``, ``scale``) cut at ``left_s`` before
        the period ends (``in_period_points``), kept here; ``key`` itself where the job
        finishes in time at every point."""
        if hull[0][1] * scale <= left_s:  # the cheapest point, the slowest, finishes in time
            return key
        cut = ("in_period", key, scale, left_s)
        if cut not in self.cuts:  # every cut, made a hull or not
            self.cuts[cut] = (hull, scale, left_s)
        return cut

    def cheapest(self, key: Hashable) -> float:
        """The cost of the hull's cheapest point (the least cost of its points)."""
        cut = self.cuts.get(key)
        if cut is not None:  # a cut: the least of its points' costs, as in_period_points
            hull, scale, left_s = cut
            return min(c * min(1.0, left_s / (t * scale)) for c, t, _ in hull)
        return self[key][0][0]


def _behind_weight(lag: float, deadband: float) -> float:
    """0 on or ahead of the straight line, rising linearly to 1 at ``deadband`` behind
    it (a step at 0 when ``deadband`` is 0)."""
    if deadband <= 0:
        return 1.0 if lag > 0 else 0.0
    return min(max(lag / deadband, 0.0), 1.0)


def _markup(state: Mapping[str, Any], budget_id: str, lag: float, policy: BudgetGreedy) -> float:
    """What a unit of the budget's planned spending costs as its jobs run
    (``_Round._markup``: their configurations' cost over their targets', at least 1),
    counted as its spending runs ahead of its straight line: none within
    ``lag_deadband`` of it, all of it at ``lag_release`` further ahead. A budget ahead of
    its line spends faster than it was given; one on or behind it has room for the
    difference. Measured in docs/benchmarks.md ("Work that costs more than its
    price planned")."""
    got, planned = state.get("price_markup", {}).get(budget_id, (0.0, 0.0))
    if not (got > planned > 0.0):
        return 1.0
    return 1.0 + (got / planned - 1.0) * _behind_weight(
        -lag - policy.lag_deadband, policy.lag_release
    )


def price_round(policy: BudgetGreedy, rnd: _Round) -> dict[str, Any]:
    """Set each priced budget's price (``rnd.prices``, by budget index: 0 unpriced,
    infinite when the funds do not cover the work's minimum), the jobs' target
    configurations (``rnd.target``) and lower or raise the priced budgets' allowances
    (``rnd.allow_e`` / ``rnd.allow_c``, in place) to what the targets take this round;
    returns the state to carry. ``rnd`` is ``BudgetGreedy.allocate``'s round: its jobs,
    options, payers, cost model, minimum configurations and allowances, by job index.

    ``rnd.hull_of(j)`` is job j's lower hull of (cost, time) points as ``(hull, scale,
    key)``: the points times ``scale`` are the job's, and jobs with the same ``key``
    share the hull, so a long queue of similar jobs is priced by few hulls. Only
    ``rnd.candidates`` (the jobs that the GPUs could admit this round) get targets and
    count towards the allowance; every job counts towards the price."""
    ctx, jobs, opts, pays, running_n = rnd.ctx, rnd.jobs, rnd.opts, rnd.pays, rnd.running_n
    box_eval, hull_of, deltas, min_eval = rnd.box_eval, rnd.hull_of, rnd.deltas, rnd.min_eval
    candidates, floor_w, floor_curve = rnd.candidates, rnd.floor_w, rnd.floor_curve
    allow_e, allow_c, idle_floor_j, to_g = rnd.allow_e, rnd.allow_c, rnd.idle_floor_j, rnd.to_g
    target, price_out = rnd.target, rnd.prices
    budgets = ctx.budgets
    priced = [
        (b.energy_limit_j is not None) if policy.cost == "energy" else (b.co2_limit_g is not None)
        for b in budgets
    ]
    if not any(priced):
        return {}
    state = ctx.policy_state
    prev_now = state.get("price_prev_now")
    # The arrivals' state by budget (their cheapest cost since the budget was first priced,
    # and its spread by octave of their time), for the round's budgets only, as the slow
    # price's below: a budget gone (its period ended, or deleted) never prices again, and
    # kept, the state grew by a budget a team a period for as long as the service ran
    # (every round reads and writes it back whole). The pacer reads each present budget's
    # arrivals since it was first priced, all within its period: nothing else to drop.
    present = {b.budget_id for b in budgets}
    arrivals = {
        k: [float(x) for x in v] for k, v in state.get("price_arrivals", {}).items() if k in present
    }
    hist = {
        k: {t: [float(x) for x in cell] for t, cell in v.items()}
        for k, v in state.get("price_arrival_times", {}).items()
        if k in present
    }
    recs = [
        arrivals.setdefault(b.budget_id, [0.0, ctx.now_s]) if priced[b_i] else None
        for b_i, b in enumerate(budgets)
    ]
    # With ``reserve_bound``: per budget, the sum of the squares of its arrivals' cheapest
    # costs (the spread of the arrivals' cost, for the bound on the future).
    bound_z = policy.reserve_bound
    squares: dict[str, float] = {}
    if bound_z is not None:
        squares = {
            k: float(v) for k, v in state.get("price_arrival_sq", {}).items() if k in present
        }
    hulls: dict[int, tuple[Hull, float, Hashable]] = {}
    # A waiting job of a shared hull: (hull, key, group) by job index (its scale is its
    # remaining iterations), in place of an entry in ``hulls``.
    by_job: list[tuple | None] = [None] * len(jobs)
    shared = _Hulls()
    # Jobs by their payers and hull: (hull, key, priced payers, jobs, scales). A long
    # queue is a few groups of many jobs, and most of what follows is per group.
    groups: dict[tuple[Any, Hashable], tuple[Hull, Hashable, list[int], list[int], list]] = {}
    arrived: list[int] = []
    mine_of: dict[tuple[tuple[int, bool], ...], list[int]] = {}
    # A waiting job that has measured nothing has its shape's hull times its remaining
    # iterations, in its shape's group (``_Round.waiting_hull``): found once a shape.
    shape_of, remaining, waiting_hull = rnd.shape_of, rnd.remaining_iters, rnd.waiting_hull
    by_shape: dict[int, tuple | None] = {}
    submit_s = rnd.submit_s
    for j in range(len(jobs)):
        p = pays[j]
        mine = mine_of.get(p)
        if mine is None:
            mine = mine_of[p] = [bi for bi, _ in p if priced[bi]]
        if not mine:
            continue
        r = remaining[j]
        known = None
        if r > 0.0 and not running_n[j]:
            shape = shape_of[j]
            known = by_shape.get(shape, False)
            if known is False:
                known = waiting_hull(j)
                if known is not None:
                    g = groups.get((p, known[1]))
                    if g is None:
                        g = groups[p, known[1]] = (known[0], known[1], mine, [], [])
                    known = (known[0], known[1], g)
                by_shape[shape] = known
        if known is not None:
            g = known[2]
            by_job[j] = known  # its hull: (known[0], r, known[1]), made where needed
            g[3].append(j)
            g[4].append(r)
        else:
            hj = hulls[j] = hull_of(j)
            g = groups.get((p, hj[2]))
            if g is None:
                g = groups[p, hj[2]] = (hj[0], hj[2], mine, [], [])
            g[3].append(j)
            g[4].append(hj[1])
        if prev_now is None or submit_s[j] > prev_now:
            arrived.append(j)
    # Per budget, its jobs' hulls by key with their summed scales (jobs that share a
    # hull are priced as one), and its groups of jobs.
    weight: list[dict[Hashable, float]] = [{} for _ in budgets]
    members: list[list[tuple]] = [[] for _ in budgets]
    # Per budget, the present jobs' remaining cost at their fastest configurations, the
    # GPU-seconds they take at least before the period ends, and their highest cheapest
    # cost per GPU-second.
    fast = [0.0] * len(budgets)
    gpu_s = [0.0] * len(budgets)
    left_of = [max(b.period_end_s - ctx.now_s, ctx.round_length_s) for b in budgets]
    all_gpus = sum(ctx.capacity.values())
    use_of: dict[Hashable, tuple[float, int, float]] = {}
    for g in groups.values():
        h, key, mine, js, scales = g
        shared[key] = h
        # The fewest GPU-seconds a job takes from later arrivals: what it runs before
        # the period ends, in whichever configuration takes the fewest (the cheapest is
        # the slowest). Over the hull's points, min(n t scale, n left) is the lesser of
        # the least n t (times scale) and the least n (times left): once per hull.
        use = use_of.get(key)
        if use is None:
            sizes = opts[js[0]][0]
            use = use_of[key] = (
                min(sizes[cfg[0]] * t for _, t, cfg in h),
                min(sizes[cfg[0]] for _, _, cfg in h),
                h[0][0] / (sizes[h[0][2][0]] * h[0][1]) if h[0][1] > 0 else 0.0,
            )
        least_nt, least_n, _ = use
        total, top = sum(scales), max(scales)
        for b_i in mine:
            fast[b_i] += h[-1][0] * total
            cap = least_n * left_of[b_i]
            if least_nt * top <= cap:  # every job's least use ends before the period
                gpu_s[b_i] += least_nt * total
            else:  # (min(least_nt * scale, cap) per scale, without a call per scale)
                gpu_s[b_i] += sum([cap if cap < x else x for x in [least_nt * s for s in scales]])
            w = weight[b_i]
            w[key] = w.get(key, 0.0) + total
            members[b_i].append(g)
    # On the first priced round (no state: the first round ever, or after the policy
    # changed), with ``first_backlog``, a job submitted no later than its budget's period
    # began is a backlog the budget found, not an arrival of the period: counted as one,
    # a queue present at the start was forecast as a daily rate for the whole period.
    backlog_first = prev_now is None and policy.first_backlog
    # With ``rate_after_first_day``: per budget, what arrived in its first priced day.
    first_day: dict[str, float] = {}
    if policy.rate_after_first_day:
        first_day = {
            k: float(v) for k, v in state.get("price_first_day", {}).items() if k in present
        }
    for j in arrived:
        hj = hulls.get(j)
        h, scale = (by_job[j][0], remaining[j]) if hj is None else hj[:2]
        # Arrivals' cheapest cost by octave of their time at it: the sums of C, C * T
        # and C / T.
        c0, t0 = h[0][0] * scale, max(h[0][1] * scale, 1.0)
        octave = str(int(math.log2(t0)))
        for b_i in mine_of[pays[j]]:
            if backlog_first and submit_s[j] <= budgets[b_i].period_start_s:
                continue
            recs[b_i][0] += c0
            if policy.rate_after_first_day and ctx.now_s - recs[b_i][1] < DEMAND_WINDOW_MIN_S:
                # arrived in the budget's first priced day (``rate_after_first_day``)
                first_day[budgets[b_i].budget_id] = first_day.get(budgets[b_i].budget_id, 0.0) + c0
            if bound_z is not None:
                bid = budgets[b_i].budget_id
                squares[bid] = squares.get(bid, 0.0) + c0 * c0
            cell = hist.setdefault(budgets[b_i].budget_id, {}).setdefault(octave, [0.0, 0.0, 0.0])
            cell[0] += c0
            cell[1] += c0 * t0
            cell[2] += c0 / t0
    # The slow price's state by budget (``_slow_price``), carried whether or not it moves,
    # for the round's budgets only: a budget gone (its period ended, or deleted) never
    # prices again (a later period is a budget of its own, or starts again at the
    # re-solved price), and kept, a long-running service carried one more a period.
    slow: dict[str, list[float]] = {
        k: [float(x) for x in v] for k, v in state.get("slow_price", {}).items() if k in present
    }
    # The budgets that price on in-period costs (below), with the time left they cut at.
    cut_at: dict[int, float] = {}
    price = [0.0] * len(budgets)
    covered = [False] * len(budgets)
    free_of = [0.0] * len(budgets)
    for b_i, b in enumerate(budgets):
        if not priced[b_i]:
            continue
        rec = recs[b_i]
        left_s = left_of[b_i]
        if policy.cost == "energy":
            free = b.energy_remaining_j - floor_w[b_i] * left_s
        else:
            free = b.co2_remaining_g - (
                floor_curve.co2_g(floor_w[b_i], left_s) if floor_w[b_i] else 0.0
            )
        free_of[b_i] = free
        pmin = sum(shared[k][0][0] * w for k, w in weight[b_i].items())
        window_s = max(ctx.now_s - rec[1], DEMAND_WINDOW_MIN_S)
        rate = rec[0] / window_s
        if policy.rate_after_first_day:
            # after the first day only: what came then, over the time since (none yet: 0)
            since_s = ctx.now_s - rec[1] - DEMAND_WINDOW_MIN_S
            later = rec[0] - first_day.get(b.budget_id, 0.0)
            rate = later / max(since_s, DEMAND_WINDOW_MIN_S) if since_s > 0 else 0.0
        future = rate * left_s
        binned = hist.get(b.budget_id)
        if binned:
            future *= in_period_fraction(binned, left_s)
        if policy.period_reserve > 0 and b.period_end_s > b.period_start_s:
            # A reserve for the rest of the period whatever the forecast says: work
            # arrives in bursts the rate so far does not foresee, and what the present
            # jobs spend above their cheapest cannot be spent on it later.
            span = b.period_end_s - b.period_start_s
            reserve = policy.period_reserve * max(free, 0.0) * min(left_s / span, 1.0)
            if policy.reserve_at_fast and fast[b_i] > pmin > 0:
                # The reserve is counted in cheapest cost, as if the future would spend
                # it all at its cheapest configurations; a budget behind its straight
                # line (by up to ``lag_deadband`` of its limit, all of it beyond) counts
                # the work that would spend it at its fastest, at the present jobs'
                # ratio of fastest to cheapest cost. A budget on or ahead of its line
                # keeps the cheapest count, so a tight budget still keeps its reserve.
                reserve *= 1.0 - _behind_weight(rnd.lags[b_i], policy.lag_deadband) * (
                    1.0 - pmin / fast[b_i]
                )
            if bound_z is not None:
                bound = arrivals_bound(
                    rec[0], squares.get(b.budget_id, 0.0), window_s=window_s,
                    left_s=left_s, z=bound_z,
                )  # fmt: skip
                bound *= in_period_fraction(binned, left_s) if binned else 1.0
                if bound < reserve:
                    # (``reserve_bound_lag``: only as far as the budget is behind its line,
                    # all of it at ``lag_deadband`` behind)
                    w = (
                        _behind_weight(rnd.lags[b_i], policy.lag_deadband)
                        if policy.reserve_bound_lag
                        else 1.0
                    )
                    if policy.reserve_bound_spare and all_gpus > 0 and left_s > 0:
                        # (``reserve_bound_spare``: only as far as the present jobs leave
                        # the GPUs free to the period's end)
                        w *= max(1.0 - gpu_s[b_i] / (all_gpus * left_s), 0.0)
                    reserve -= w * (reserve - bound)
            future = max(future, reserve)
        if gpu_s[b_i] > 0:
            # Whatever the forecast and the reserve say, the work still to come cannot
            # use more than the GPU-seconds the present work leaves free until the
            # period ends (on every GPU model: later jobs may run on any), costed at the
            # highest cheapest cost per GPU-second of any present job (a bound for work
            # like the present; the average undercounted Philly's tight budgets).
            # Without it the reserve, a share of the free remainder, paced a generous
            # budget as if it were tight: with any budget, however large, the present
            # jobs got little more than their cheapest configurations
            # (docs/benchmarks.md, "The reserve of a generous budget").
            spare_gpu_s = max(all_gpus * left_s - gpu_s[b_i], 0.0)
            rate_max = max(use_of[k][2] for k in weight[b_i])
            future = min(future, rate_max * spare_gpu_s)
        if policy.lag_release > 0:
            # A budget whose spending lags its straight line by more than
            # ``lag_deadband`` of its limit has had more than its work needed: what it
            # holds for the future (forecast and reserve) is released in proportion to
            # the lag beyond that, all of it at ``lag_release`` more, so a generous
            # budget is spent while jobs are present instead of being left over.
            behind = rnd.lags[b_i] - policy.lag_deadband
            future *= 1.0 - min(max(behind / policy.lag_release, 0.0), 1.0)
        if not members[b_i]:
            continue
        if free < pmin and policy.in_period_cost:
            # The period cannot pay the present work's whole cheapest cost, but a job
            # that cannot finish before the period ends spends in it only its draw to the
            # end; the rest is the next periods' (each with its own budget). Priced on
            # the whole cost, such work (a job longer than the period, a period's last
            # hours) got an infinite price and ran at its minimum however little of the
            # budget it used. Price this budget on in-period costs instead.
            cut_w: dict[Hashable, float] = {}
            cuts = shared.cuts
            for h, key, _, _, scales in members[b_i]:
                slowest = h[0][1]  # the cheapest point's time: a job cut at all is cut there
                if slowest * max(scales) <= left_s:
                    cut_w[key] = cut_w.get(key, 0.0) + sum(scales)
                    continue
                for scale in scales:
                    # shared.cut_key(h, key, scale, left_s), inlined (a long queue's jobs)
                    if slowest * scale <= left_s:
                        k2 = key
                    else:
                        k2 = ("in_period", key, scale, left_s)
                        if k2 not in cuts:
                            cuts[k2] = (h, scale, left_s)
                    cut_w[k2] = cut_w.get(k2, 0.0) + scale
            cut_at[b_i] = left_s
            weight[b_i] = cut_w
            pmin = sum(shared.cheapest(k) * w for k, w in cut_w.items())
        if free < pmin:
            price[b_i] = math.inf
            continue
        covered[b_i] = True
        if policy.fixed_price is not None:
            price[b_i] = policy.fixed_price  # an oracle experiment, not a policy
            continue
        share = free * pmin / (pmin + future) if pmin + future > 0 else free
        share = max(share, min(free, pmin * policy.share_floor))
        if policy.markup_decay > 0:
            share /= _markup(state, b.budget_id, rnd.lags[b_i], policy)
        keys = list(weight[b_i])
        price[b_i] = price_for_share(
            [shared[k] for k in keys], share, [weight[b_i][k] for k in keys]
        )
        if policy.slow_price is not None:
            price[b_i] = _slow_price(
                slow.get(b.budget_id), slow, b, now=ctx.now_s, solved=price[b_i],
                hulls=[shared[k] for k in keys], lag=rnd.lags[b_i],
                tau=policy.slow_price, deadband=policy.lag_deadband,
            )  # fmt: skip
    price_out[:] = price
    chosen: dict[tuple[Hashable, float], tuple[int, int, int]] = {}  # (hull, price) -> box
    at_hour = policy.cost == "carbon" and policy.hour_price

    # (A module function, not a closure: names a closure captures become cells, and this
    # function's loops over every job read them about 10% slower.)
    choose = functools.partial(
        _choose, hulls=hulls, by_job=by_job, remaining=remaining, mine_of=mine_of, pays=pays,
        price=price, cut_at=cut_at, shared=shared, chosen=chosen,
        hour_hull=rnd.hour_hull if at_hour else None,
    )  # fmt: skip
    rnd.price_choice = choose  # for a job admitted later without being a candidate
    for j in candidates:
        box = choose(j)
        if box is not None:
            target[j] = box
    # The allowance of a budget whose remaining funds cover the minimum cost of the
    # work present is what its jobs' targets (or minimum configurations) take now.
    # Jobs the GPUs cannot admit this round take nothing now: counting them would only
    # raise an allowance that the admitted jobs' targets already bound.
    need = [idle_floor_j if b.team is None else 0.0 for b in budgets]
    for j, box in target.items():
        n0 = opts[j][0][0]
        d_min = deltas(j, None, min_eval(j)[0], 0, n0)
        est_t, _, _ = box_eval(j, box)
        d_tgt = deltas(j, None, est_t, 0, opts[j][0][box[0]])
        for bi, is_cluster in pays[j]:
            k = 1 if is_cluster else 0
            need[bi] += max(d_min[k], d_tgt[k])
    # Energy is free this round where every priced budget's price is 0: each covers the
    # work present at its fastest and what is expected, so its energy buys nothing later,
    # and the round is not held to what the targets take. Held to it, the allowance stays
    # a scarce thing in the greedy's ranking (a step's share of the spare allowance), and
    # a configuration inside a target can take more of the round than the target (a job
    # that finishes within the round on more GPUs): a budget that never bound ran
    # PowerFlow 2.8% slower than no budget on pollux_workload-3. Where another budget's
    # price is not 0, or a budget is paced by the even share (a limit of the other kind
    # than the price's), every allowance stays: a team whose energy is free would otherwise
    # rank its steps by GPUs alone and take the GPUs that the other jobs need
    # (docs/benchmarks.md, "A budget at price 0").
    free_round = all(
        price[b_i] == 0.0 if priced[b_i] else b.energy_limit_j is None and b.co2_limit_g is None
        for b_i, b in enumerate(budgets)
    )
    rnd.free_round = free_round
    for b_i, b in enumerate(budgets):
        if not covered[b_i]:
            continue
        if free_round:
            need[b_i] = math.inf
        # What the idle floor will draw after this round stays reserved: spending it on
        # work now would leave the powered idle GPUs to overspend the period at its end.
        after_s = max(b.period_end_s - ctx.now_s - ctx.round_length_s, 0.0)
        if policy.cost == "energy" and allow_e[b_i] is not None:
            keep = floor_w[b_i] * after_s
            allow_e[b_i] = max(min(b.energy_remaining_j - keep, need[b_i]), 0.0)
        if policy.cost == "carbon" and allow_c[b_i] is not None:
            keep = floor_curve.co2_g(floor_w[b_i], after_s) if floor_w[b_i] and after_s else 0.0
            need_g = need[b_i] * to_g if math.isfinite(need[b_i]) else math.inf
            allow_c[b_i] = max(min(b.co2_remaining_g - keep, need_g), 0.0)
    _finish_short(rnd, price, priced, free_of)
    return {
        "price_prev_now": ctx.now_s,
        "price_arrivals": arrivals,
        "price_arrival_times": hist,
        **({"price_arrival_sq": squares} if bound_z is not None else {}),
        **({"price_first_day": first_day} if policy.rate_after_first_day else {}),
        **({"slow_price": slow} if slow else {}),
        "price": {
            b.budget_id: p
            for b, p, is_priced in zip(budgets, price, priced, strict=True)
            if is_priced and math.isfinite(p)
        },
    }


def _slow_price(
    rec: list[float] | None,
    out: dict[str, list[float]],
    b: Any,
    *,
    now: float,
    solved: float,
    hulls: Sequence[Hull],
    lag: float,
    tau: float,
    deadband: float,
) -> float:
    """The budget's price with ``BudgetGreedy``'s ``slow_price`` (``tau``): the re-solved
    price (``solved``), lowered towards a slow price while the spending lags its line.
    The slow price's state is updated in ``out`` (by budget: the period's start, the
    log of the slow price and when it was last moved).

    The re-solved price answers each round's forecast of the arrivals, so it cannot tell
    a generous budget from a tight one: on Philly at ``elastic``'s energy it ran from 0
    to 3.2e-4 s/J and left 11% of the budget unspent, where one constant price did
    better (docs/benchmarks.md, "The price, not the per-job choices"). The slow price is
    a dual-ascent step on the spending against its line (``lag``, the share of the limit
    by which spending lags it: a straight line, or for a carbon cluster budget the line
    corrected for its idle floor's carbon, ``_Round._lags``): the log of the price moves
    by ``-lag / deadband``, clipped to [-1, 1], times the time since it last moved over
    ``tau`` of the period, so it falls by up to a factor e every ``tau`` of the period
    while the budget is behind its line by ``deadband`` or more and rises as fast while
    it is as far ahead. It starts at the re-solved price and stays within the present
    jobs' hulls' range of prices (half the flattest step's slope, where every job is at
    its fastest, to twice the steepest's, where every job is at its cheapest), so that it
    never winds up beyond what changes a choice; below the flattest step the price is 0.

    The slow price only ever lowers the re-solved one, and only as far as the budget is
    behind its line beyond ``deadband`` (not at all within ``deadband`` of it or ahead,
    all the way at twice ``deadband`` behind; the log of the price interpolated
    between): a tight budget stays near its line and keeps the re-solved price, so a
    price that fell in a quiet spell does not spend early what its later work needs.
    Measured in docs/benchmarks.md ("A slow budget price (issue 13, point 1)"): lowered
    all the way from ``deadband`` behind, Philly at ``fifo_lowclock``'s energy ran
    1.450x -> 1.301x (0.5) and GreenFlow at its carbon 1.353x -> 0.828x (1.0), their
    budgets spent early; lowered without the lag at all, PowerFlow at 1.0 ran 0.672x.
    """
    slopes = [(p[1] - q[1]) / (q[0] - p[0]) for h in hulls for p, q in zip(h, h[1:])]  # noqa: B905
    key = b.budget_id
    if not slopes or not math.isfinite(solved):
        if rec is not None:  # it does not move while it is not used
            out[key] = [rec[0], rec[1], now]
        return solved
    lo, hi = max(min(slopes), 1e-300) / 2.0, max(slopes) * 2.0
    if rec is None or rec[0] != b.period_start_s:
        log_lam = math.log(min(max(solved, lo), hi))
    else:
        log_lam = rec[1]
        dt = now - rec[2]
        span = b.period_end_s - b.period_start_s
        if dt > 0.0 and span > 0.0:
            step = min(max(-lag / max(deadband, 1e-3), -1.0), 1.0)
            log_lam += step * dt / (tau * span)
        log_lam = min(max(log_lam, math.log(lo)), math.log(hi))
    out[key] = [b.period_start_s, log_lam, now]
    lam = math.exp(log_lam)
    w = _behind_weight(lag - deadband, deadband)
    if w <= 0.0 or solved <= lam * (1.0 + 1e-9):  # (exp(log(x)) may miss x by a bit)
        return solved
    if w < 1.0:
        lam = math.exp((1.0 - w) * math.log(solved) + w * log_lam)
    return 0.0 if lam < 2.0 * lo else lam


def _finish_short(
    rnd: _Round,
    price: Sequence[float],
    priced: Sequence[bool],
    free_of: Sequence[float],
) -> None:
    """Raise the allowance of each budget short of its work (an infinite price) to what
    finishes what it can: its candidates at their minimum configurations this round,
    cheapest to finish first, as many as its free funds pay to the end.

    Such a budget keeps the even share of what it has left over the rest of the period
    (``_Round._allowances``). Where that share is less than any job's round at its
    minimum, nothing runs: on philly_week's first 120 jobs, a team's 14 cifar10 jobs,
    most of them three quarters done, were stopped 3.4 h into a 49 h period with 116 Wh
    left, 0.26 Wh a round against the 3.1 Wh one job needs, and waited 42 h with the funds
    that would finish ten of them unspent (docs/benchmarks.md, "A budget short of its
    work"). The funds are spent on this work either way; spent now, it ends sooner. The
    floor the budget pays to the period's end stays reserved, and a job's cost to finish
    is its whole remaining cost at the minimum configuration the allowance pays for (a job
    that would not finish on what is left is not counted). A budget with an energy and a
    carbon limit has both allowances raised, each to no more than it has left, for the
    jobs that what both have left finishes: the even share of the kind not priced would
    otherwise hold the jobs."""
    ctx, budgets, pays, opts = rnd.ctx, rnd.ctx.budgets, rnd.pays, rnd.opts
    short = {
        b_i
        for b_i in range(len(budgets))
        if priced[b_i] and math.isinf(price[b_i]) and free_of[b_i] > 0.0
    }
    if not short:
        return
    rows: dict[int, list[tuple[float, float]]] = {b_i: [] for b_i in short}
    for j in rnd.candidates:
        if not any(bi in short for bi, _ in pays[j]):
            continue
        est, _, to_finish = rnd.min_eval(j)
        d_min = rnd.deltas(j, None, est, 0, opts[j][0][0])
        for bi, is_cluster in pays[j]:
            if bi in short:
                rows[bi].append((to_finish, d_min[1 if is_cluster else 0]))
    to_g = rnd.to_g
    by_energy = rnd.policy.cost == "energy"
    for b_i, found in rows.items():
        b = budgets[b_i]
        after_s = max(b.period_end_s - ctx.now_s - ctx.round_length_s, 0.0)
        floor_w = rnd.floor_w[b_i]
        # What each kind has left beyond the floor it pays to the period's end (a kind
        # without a limit: no bound). Both kinds are raised, and the jobs are chosen by
        # what both have left: a limit of the other kind, paced evenly, would hold the jobs
        # the priced one pays for, and raised on the priced kind's choice alone it was
        # drained on jobs it could not finish (funds a later job of the period needed).
        room_e = room_c = math.inf
        if rnd.allow_e[b_i] is not None:
            room_e = b.energy_remaining_j - floor_w * after_s
        if rnd.allow_c[b_i] is not None:
            keep = rnd.floor_curve.co2_g(floor_w, after_s) if floor_w and after_s else 0.0
            room_c = b.co2_remaining_g - keep
        # the other kind's cost of a priced cost to finish, at this round's intensity
        rate = to_g if by_energy else (1.0 / to_g if to_g > 0 else 0.0)
        room_other = room_c if by_energy else room_e
        found.sort(key=lambda row: row[0])
        cost = other = take = 0.0
        for to_finish, round_j in found:
            if cost + to_finish > free_of[b_i] or other + to_finish * rate > room_other:
                break
            cost += to_finish
            other += to_finish * rate
            take += max(round_j, 0.0)
        if take <= 0.0:
            continue
        if b.team is None:
            take += rnd.idle_floor_j  # a cluster budget's round pays its idle GPUs too
        if rnd.allow_e[b_i] is not None:
            rnd.allow_e[b_i] = max(rnd.allow_e[b_i], min(take, room_e))
        if rnd.allow_c[b_i] is not None:
            rnd.allow_c[b_i] = max(rnd.allow_c[b_i], min(take * to_g, room_c))


def _choose(
    j: int,
    *,
    hulls: Mapping[int, tuple[Hull, float, Hashable]],
    by_job: Sequence[tuple | None],
    remaining: Sequence[float],
    mine_of: Mapping[Any, list[int]],
    pays: Sequence[Any],
    price: Sequence[float],
    cut_at: Mapping[int, float],
    shared: _Hulls,
    chosen: dict[tuple[Hashable, float], tuple[int, int, int]],
    hour_hull: Callable[[int], Hull] | None,
) -> tuple[int, int, int] | None:
    """Job j's target at its budgets' prices (None: no priced budget pays for it);
    ``hour_hull``: a carbon price's hour hull, where it chooses on it (``hour_price``)."""
    hj = hulls.get(j)
    if hj is None:
        shared_hull = by_job[j]
        if shared_hull is None:
            return None  # no priced budget pays for it
        h, scale, key = shared_hull[0], remaining[j], shared_hull[1]
    else:
        h, scale, key = hj
    payers = mine_of[pays[j]]
    lam = max(price[bi] for bi in payers)
    if hour_hull is not None and 0.0 < lam < math.inf:
        return hull_choice(hour_hull(j), lam)
    # Each budget's choice at its own price on the hull it priced on (the whole or the
    # in-period costs: their prices do not compare), and the cheapest of them on the job's
    # whole hull: no budget pays for more than its price allows. Once per (hull, price):
    # a hull's choice at a price does not depend on its scale.
    boxes = []
    for bi in payers:
        left_s = cut_at.get(bi)
        k = key if left_s is None else shared.cut_key(h, key, scale, left_s)
        box = chosen.get((k, price[bi]))
        if box is None:
            box = chosen[(k, price[bi])] = hull_choice(shared[k], price[bi])
        boxes.append(box)
    if len(boxes) > 1:
        rank = {tag: i for i, (_, _, tag) in enumerate(h)}
        boxes.sort(key=lambda box: rank.get(box, 0))
    return boxes[0]
