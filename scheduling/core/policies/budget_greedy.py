"""The budget-aware greedy that PowerFlow and GreenFlow share.

Reconstructed from the abstracts (see ``docs/papers.md``); the structure is the
papers', the details below are ours and every constant is a parameter:

1. *Allowances.* Each active budget is paced into this round's allowance
   (``scheduling.core.pacing``): energy evenly over the rest of the period, carbon
   weighted by ``ci ** (1 - clean_bias)`` so that more energy is spent in clean hours.
   A team budget pays its jobs' busy energy; a cluster-wide budget (``team=None``)
   also pays every powered idle GPU, so its spend starts at the idle floor and a
   job's GPUs cost only what they draw above idle: fragmentation is an energy cost.
   That floor is committed until the period ends, so pacing reserves it and spreads
   only the rest (otherwise the budget runs dry before the period does and the idle
   GPUs alone overspend it). ``spend_ahead`` (default 1.25) front-loads the pace a
   little, because a period's end is usually quieter than its start and budget left
   then is wasted; ``catch_up_s`` re-spends what quiet hours saved within that many
   seconds instead (off by default). Measured on the 876-job Philly replay at fifo's
   energy (average-JCT ratio against fifo): spend_ahead 1.0: 1.32x, 1.25: 1.39x,
   1.5: 1.40x, 2.0: 1.21x, 3.0: 0.57x (the budget runs dry before the long tail ends);
   catch_up_s of one day: 1.21x.
2. *Admission at minimum configuration.* Running jobs first (no preemption while the
   allowance lasts), then waiting ones, shortest predicted remaining time first
   (``admission="srtf"``; ``"fifo"`` for submit order). A job's minimum configuration
   is its smallest buddy GPU count >= ``min_gpus``, the lowest clock level and its
   submitted batch. A job that no longer fits the GPUs or the allowance waits.
3. *Greedy upgrades.* Each job's next step in each dimension (next buddy GPU count,
   next clock level, next batch size where the job allows a range) is scored, by
   default (``rank="per_gpu"``), by the two scarce things it takes: the speedup it
   adds over the job's minimum configuration (``T_min / T_new - T_min / T_old``, as
   ``elastic`` normalises), divided by the share of the round's spare GPUs plus the
   share of the spare round allowance of each budget that pays for the job. A step
   that takes neither (a clock step without a budget) ranks above all others. With no
   budget this buys GPUs exactly as ``elastic`` does (a test holds it); with a budget
   a step that spends energy competes with the GPUs it takes. This replaced
   ``rank="relative"``, which ignored GPUs: under load it gave a few jobs that scale
   well dozens of GPUs while most others ran on one (61% of job-rounds on 1 GPU on
   the first 300 jobs of the Philly replay at ``--arrival-scale 0.25``, 0.54x of
   ``elastic`` at its energy; per GPU: 0%, 0.93x). ``rank="relative"`` scores
   relative JCT reduction per relative cost increase, ``(dT / T) / (dC / C)``, where T
   is the predicted remaining time (plus ``restart_s`` when the GPU count differs from
   the running one) and C the job's remaining energy (PowerFlow) or carbon over the
   intensity curve (GreenFlow); ``rank="absolute"`` scores seconds saved per joule
   (gram) instead, for comparison. While idle GPUs stay powered
   (``Snapshot.power_off_idle_nodes`` false) C counts only the draw above idle, which
   is what running the job adds (``cost_above_idle`` overrides). A step that lowers
   the cost and the time ranks above all others. A job paid by a budget takes no
   step scoring below ``min_score`` (default 0.5), so that quiet hours do not spend
   the allowance on poor upgrades that busy hours later miss (``rank="relative"``
   only) (with even pacing a
   round's unspent allowance rolls forward); the floor falls linearly to 0 as the
   budget's spending lags a straight line by up to ``relax_lag`` (default 10%) of its
   limit, since a budget that is behind has nothing to save for. On the 876-job
   replay (average-JCT ratio at each baseline's energy, vs fifo / fifo_lowclock /
   elastic / zeus): no floor 1.39x / 0.50x / 0.91x / 1.12x; floor 0.5 without
   relaxing 1.48x / 0.66x / 0.76x / 1.37x; with relaxing 1.52x / 0.64x / 0.90x / 1.35x.
   A max-heap
   serves the best step while GPUs and every allowance last; a job's entries are
   refreshed only when that job changes (lazy versioning), so a round costs
   O(steps log steps).
4. *Price* (``pricing=True``: PowerFlow's default; GreenFlow keeps it off, see
   ``greenflow.py``). Deferring a job saves none of its energy
   (it must still run, and idle GPUs draw meanwhile), so instead of gating every round
   by an even share, each budget carries a price lambda (seconds per joule, or per
   gram): every job it pays aims at the configuration minimising ``T + lambda * C``
   over all its (size, clock, batch) options (the lower convex hull of its (C, T)
   points), and the greedy's steps stay within that target. Lambda is the lowest
   price at which the jobs present, at their targets, take no more than their share
   of the budget's free remainder (what remains less the idle floor committed to the
   period's end): ``free * Cmin / (Cmin + future)``, where ``Cmin`` is the present
   jobs' cheapest remaining cost and ``future`` the cheapest cost of the work
   expected to arrive, at the rate seen so far (``future_weight`` x arrivals' Cmin
   per second since the budget was first seen, over at least
   ``demand_window_min_s``, x the time left, x the share of an arrival's cheapest cost
   that falls inside the period when ``future_in_period``: a job of time T at its
   cheapest configuration arriving uniformly over the L left spends ``1 - T / (2 L)``
   of its cost in the period if T <= L, ``L / (2 T)`` if not; the arrivals' costs are
   kept by octave of T). The round's allowance is then what the
   targets (or minimum configurations, whichever is more) take this round, so a job
   at its minimum is never held back while the free remainder covers the present
   work's minimum; when it does not, lambda is infinite and the even-share allowance
   above applies again. The score floor is not used for priced jobs (the price
   replaces it). Measured on the 876-job replay (ratio at
   each baseline's energy, fifo / elastic / fifo_lowclock / zeus): 1.59x / 0.91x /
   0.79x / 1.47x, against 1.52x / 0.90x / 0.64x / 1.35x with ``pricing=False``; moving
   log lambda towards each round's value with a time constant (tried, then removed)
   gave over 1 day 0.80x / 1.41x (fifo_lowclock / zeus), 3 days 0.83x / 1.10x;
   ``future_weight`` 0.6: 0.51x / 1.04x, because the free remainder runs short, the
   even share returns, and the jobs run past the period unbudgeted (109% spent).
   The share has a floor: ``min(free - floor_guard * future, share_floor * Cmin)``
   when that is more. Near the cheapest configuration a job saves the most time per
   joule (the price that holds a job there is ~1.5 s/J against ~0.003 s/J for a
   typical target), while the forecast of future work is noisy (it overestimated the
   second half of the replay by up to 50%, so bursts at 55-65% and 80-85% of the
   period ran at minimum and 8% of the budget was left), so the present jobs take at
   least ``share_floor`` times their minimum from the expected future's part unless
   that would leave it less than ``floor_guard`` times its forecast. The floor spends
   what the forecast reserved for work that may not come: it assumes the budget has
   some slack over its work's minimum (fifo_lowclock's energy is 6% above the
   replay's minimum; at 7% less, below that minimum, it runs past the period with or
   without the floor: 108% spent before, 113% with). Measured (ratio,
   fifo / elastic / fifo_lowclock / zeus): ``future_in_period`` alone 0.84x / 1.51x
   (fifo_lowclock / zeus); with ``share_floor`` 1.15 1.61x / 0.92x / 1.39x / 1.52x;
   floor 1.1 1.27x, 1.3 0.99x (104% spent, past the period) against fifo_lowclock;
   floor 1.15 with ``floor_guard`` 0.5 / 0.8 / 0.9 / 1.0: 1.22x / 1.12x / 0.94x /
   0.87x; floor 1.15 without ``future_in_period`` 1.36x / 1.48x (fifo_lowclock /
   zeus). GreenFlow keeps no floor (``share_floor`` 1): at fifo_lowclock's carbon it
   spent 102.8% with it (0.98x), 101.3% with ``floor_guard`` 0.5, both past the
   period. An arrival rate decaying over 7 days instead of the all-time one: 0.72x /
   1.12x, as bursts raise it most. On philly_week (64 x 8 T4) at fifo's energy the
   defaults reach 2.97x against fifo, 1.15x with ``pricing=False``: arrivals stop after
   a week of the four-week period, and ``future_in_period`` stops reserving for them.
   The forecast also misses bursts: on pollux_workload-1 at fifo_lowclock's energy it
   foresaw 3 kWh while a burst at hour 7.5 brought 13 kWh of cheapest cost, so the price
   was 0 until then, the free remainder no longer covered the present work's minimum
   afterwards, and 4-5 long jobs crawled at their cheapest past the period's end (73
   kWh spent against a 54 kWh budget, 36 of it inside the period). So the expected
   future is at least ``period_reserve`` x the free remainder x the share of the period
   left (a reserve that the period's passing releases): with 1.0 every PowerFlow run
   at fifo_lowclock's and zeus' energy on pollux_workload-1..8 finishes inside its
   period (docs/benchmarks.md, "Issue 13 (a)"). And when a priced round's allowance is
   what its targets take, the idle floor's draw after this round stays reserved.

Batch size: the work is a number of useful samples, so a larger global batch needs fewer
iterations only as far as its statistical efficiency allows (``scheduling.core.goodput``);
a job whose efficiency is unknown keeps its submitted batch.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from scheduling.core.context import Estimate, JobView, RoundContext
from scheduling.core.goodput import batch_choices
from scheduling.core.pacing import (
    HOUR_S,
    IntensityCurve,
    intensity_curve,
    lag_share,
    paced_co2_allowance_g,
    paced_energy_allowance_j,
)
from scheduling.core.placement import job_buddy_sizes
from scheduling.core.policies.base import FreeForecast, GpuLedger, by_priority
from scheduling.core.policies.budget_price import price_round
from scheduling.core.pricing import hull_choice, lower_hull
from scheduling.core.types import J_PER_KWH, Grant, PolicyDecision, WaitCode, WaitReason

_SIZE, _CLOCK, _BATCH = 0, 1, 2
_DOMINANT = 1e12  # score of a step that is faster and no costlier


def clock_levels(clocks: tuple[int, ...], levels: int | None) -> tuple[int | None, ...]:
    """``levels`` clocks spread evenly over the supported steps, lowest and highest kept."""
    if not clocks:
        return (None,)
    if levels is None or levels >= len(clocks):
        return tuple(clocks)
    if levels <= 1:
        return (clocks[-1],)
    idx = sorted({round(i * (len(clocks) - 1) / (levels - 1)) for i in range(levels)})
    return tuple(clocks[i] for i in idx)


class BudgetGreedy:
    """Base of ``powerflow`` and ``greenflow``; see the module docstring."""

    name = "budget_greedy"
    cost = "energy"  # what the greedy ranks by: "energy" or "carbon"

    def __init__(
        self,
        *,
        clock_levels: int | None = 5,
        tune_batch: bool = True,
        admission: str = "srtf",
        restart_s: float = 30.0,
        jct_includes_elapsed: bool = False,
        min_gain: float = 1e-4,
        clean_bias: float = 0.0,
        history_hours: int = 168,
        hold_within_s: float = 12 * HOUR_S,
        clean_margin: float = 0.1,
        spend_ahead: float = 1.25,
        catch_up_s: float | None = None,
        rank: str = "per_gpu",
        cost_above_idle: bool | None = None,
        min_score: float = 0.5,
        relax_lag: float = 0.1,
        placement: str = "buddy",
        pricing: bool = True,
        demand_window_min_s: float = 24 * HOUR_S,
        future_weight: float = 1.0,
        future_in_period: bool = True,
        share_floor: float = 1.15,
        floor_guard: float = 0.0,
        period_reserve: float = 1.0,
        keep_running: bool = False,
    ) -> None:
        """Every parameter is described in the module docstring. The price's:

        - ``pricing``: pace budgets by a price (point 4) rather than by gating each
          round with an even share of the budget (point 1's allowance alone);
        - ``demand_window_min_s``: the arrival rate of future work is what arrived
          since the budget was first seen divided by at least this long, so the
          first jobs do not make the rate look infinite;
        - ``future_weight``: weight of the work expected to arrive (below 1 spends
          more now and risks running short at the end);
        - ``future_in_period``: count of the expected arrivals only the cost they can
          spend before the period ends, at their cheapest configuration's speed;
        - ``share_floor``: the present jobs' share is at least this many times their
          cheapest remaining cost (1: no floor) ...
        - ``floor_guard``: ... unless that leaves the expected future less than this
          fraction of its forecast (0: the floor may take all of it);
        - ``period_reserve``: the expected future is at least this many times the free
          remainder times the share of the period left (0: the forecast alone).
        - ``keep_running``: resize hysteresis (off by default): after admission at
          minimum, each running job first returns to its running GPU count where the
          GPUs and its budgets allow, before any step of the greedy; so a running job is
          shrunk only to admit waiting jobs at their minimum, never to grow another.
          Measured on pollux_workload-1/3/6/8 at elastic's energy: 19-46% fewer
          resizes, average JCT -3% to +6% (docs/benchmarks.md, "Issue 13 (a)").
        """
        if admission not in ("srtf", "fifo"):
            raise ValueError(f"admission must be 'srtf' or 'fifo', not {admission!r}")
        self.clock_levels = clock_levels
        self.tune_batch = tune_batch
        self.admission = admission
        self.restart_s = restart_s
        self.jct_includes_elapsed = jct_includes_elapsed
        self.min_gain = min_gain
        self.clean_bias = clean_bias
        self.history_hours = history_hours
        self.hold_within_s = hold_within_s
        self.clean_margin = clean_margin
        self.spend_ahead = spend_ahead
        self.catch_up_s = catch_up_s
        if rank not in ("per_gpu", "relative", "absolute"):
            raise ValueError(f"rank must be 'per_gpu', 'relative' or 'absolute', not {rank!r}")
        self.rank = rank
        self.cost_above_idle = cost_above_idle
        self.min_score = min_score
        self.relax_lag = relax_lag
        self.placement = placement
        self.pricing = pricing
        self.demand_window_min_s = demand_window_min_s
        self.future_weight = future_weight
        self.future_in_period = future_in_period
        self.share_floor = share_floor
        self.floor_guard = floor_guard
        self.period_reserve = period_reserve
        self.keep_running = keep_running

    # --- state carried between rounds -------------------------------------------

    def _history(self, ctx: RoundContext) -> tuple[list[float], dict[str, Any]]:
        """Hourly intensities seen lately (the "recent distribution"), updated with now."""
        state = ctx.policy_state
        history = [float(c) for c in state.get("ci_history", [])]
        hour = math.floor((ctx.snapshot.epoch_s + ctx.now_s) / HOUR_S)
        if state.get("ci_hour") != hour:
            history.append(ctx.ci_g_per_kwh)
            history = history[-self.history_hours :]
        return history, {"ci_history": history, "ci_hour": hour}

    # --- per-job options ----------------------------------------------------------

    def _options(
        self, ctx: RoundContext, jv: JobView, memo: dict | None = None
    ) -> tuple[tuple, tuple, tuple, int]:
        """(GPU counts, clocks, batches, index of the submitted batch) job ``jv`` may
        take; ``memo`` shares them between jobs of the same shape within a round."""
        job = jv.job
        if memo is not None:
            key = (
                jv.gpu_model,
                id(jv.perf),
                job.min_gpus,
                job.max_gpus,
                job.global_batch,
                job.min_batch,
                job.max_batch,
            )
            hit = memo.get(key)
            if hit is None:
                hit = memo[key] = self._options(ctx, jv)
            return hit
        cap = ctx.capacity[jv.gpu_model]
        if self.placement == "buddy":
            sizes = job_buddy_sizes(job, ctx.node_gpus[jv.gpu_model], cap)
        else:
            sizes = tuple(range(job.min_gpus, min(max(job.max_gpus, job.min_gpus), cap) + 1))
        if not sizes:
            sizes = (job.min_gpus,)
        clocks = clock_levels(jv.perf.clocks_mhz, self.clock_levels)
        batches: tuple[int, ...] = (job.global_batch,)
        if self.tune_batch and job.min_batch is not None and job.max_batch is not None:
            allowed = {b for b in jv.perf.batch_sizes if job.min_batch <= b <= job.max_batch}
            batches = batch_choices(job, allowed)  # only the submitted one if E unknown
        return sizes, clocks, batches, batches.index(job.global_batch)

    # --- the round ------------------------------------------------------------------

    def allocate(self, ctx: RoundContext) -> PolicyDecision:
        history, new_state = self._history(ctx)
        curve = intensity_curve(ctx.snapshot.carbon, now=ctx.now_s, history=history)
        ci_now = ctx.ci_g_per_kwh
        round_s = ctx.round_length_s

        # Allowances and spend, by budget index.
        budgets = ctx.budgets
        b_index = {b.budget_id: i for i, b in enumerate(budgets)}
        # Powered idle GPUs are a cluster budget's committed spend to the period's end.
        idle_w = sum(ctx.idle_power_w(m) * n for m, n in ctx.capacity.items())
        floor_w = [
            0.0 if b.team is not None or ctx.snapshot.power_off_idle_nodes else idle_w
            for b in budgets
        ]
        allow_e = [
            paced_energy_allowance_j(
                b,
                now=ctx.now_s,
                round_s=round_s,
                spend_ahead=self.spend_ahead,
                floor_w=f,
                catch_up_s=self.catch_up_s,
            )
            for b, f in zip(budgets, floor_w, strict=True)
        ]
        allow_c = [
            paced_co2_allowance_g(
                b,
                now=ctx.now_s,
                round_s=round_s,
                curve=curve,
                history=history,
                clean_bias=self.clean_bias,
                spend_ahead=self.spend_ahead,
                floor_w=f,
                catch_up_s=self.catch_up_s,
            )
            for b, f in zip(budgets, floor_w, strict=True)
        ]
        idle_floor_j = idle_w * round_s
        spent_e = [idle_floor_j if b.team is None else 0.0 for b in budgets]
        to_g = ci_now / J_PER_KWH
        # The score floor saves budget for later; a budget already behind its straight
        # line by relax_lag of its limit has nothing to save for, so its floor is 0.
        floor_of = [
            self.min_score * min(max(1.0 - lag_share(b, ctx.now_s) / self.relax_lag, 0.0), 1.0)
            if self.relax_lag > 0
            else self.min_score
            for b in budgets
        ]

        jobs = list(ctx.jobs)
        opts_memo: dict = {}
        opts = [self._options(ctx, jv, opts_memo) for jv in jobs]
        # (budget index, is it cluster-wide) of each job's payers; jobs of one team share
        # the tuple (long queues).
        payer_memo: dict[tuple[str, ...], tuple[tuple[int, bool], ...]] = {}
        for jv in jobs:
            if jv.budget_ids not in payer_memo:
                payer_memo[jv.budget_ids] = tuple(
                    (b_index[bid], budgets[b_index[bid]].team is None) for bid in jv.budget_ids
                )
        pays = [payer_memo[jv.budget_ids] for jv in jobs]
        job_idle_w = [ctx.idle_power_w(jv.gpu_model) for jv in jobs]
        above_idle = self.cost_above_idle
        if above_idle is None:
            above_idle = not ctx.snapshot.power_off_idle_nodes
        running_n = [jv.job.allocation.n_gpus if jv.job.allocation else 0 for jv in jobs]

        def rank(j: int, n: int, remaining_s: float, power_w: float) -> tuple[float, float]:
            """(time used for ranking, cost used for ranking) of job j on n GPUs."""
            t = remaining_s
            if running_n[j] and n != running_n[j]:
                t += self.restart_s
            if self.jct_includes_elapsed:
                t += ctx.now_s - jobs[j].job.submit_time_s
            # With idle GPUs powered anyway, a job costs only its draw above idle.
            draw_w = power_w - (job_idle_w[j] if above_idle else 0.0)
            if self.cost == "carbon":
                return t, curve.co2_g(n * draw_w, remaining_s)
            return t, n * draw_w * remaining_s

        def evaluate(j: int, si: int, ci: int, bi: int) -> tuple[Estimate, float, float]:
            """(estimate, time used for ranking, cost used for ranking)."""
            sizes, clocks, batches, _ = opts[j]
            n = sizes[si]
            est = ctx.estimate(jobs[j], n, batches[bi], clocks[ci])
            t, c = rank(j, n, est.remaining_s, est.power_w)
            return est, t, c

        def points(j: int) -> list[tuple[float, float, tuple[int, int, int]]]:
            """(cost, time, configuration) of every configuration of job j."""
            sizes, clocks, batches, _ = opts[j]
            grid = ctx.remaining_and_power_grid(jobs[j], sizes, clocks, batches)
            if self.cost == "carbon" or self.jct_includes_elapsed:
                return [
                    (c, t, (si, ci, bi))
                    for si, ci, bi, remaining_s, power_w in grid
                    for t, c in (rank(j, sizes[si], remaining_s, power_w),)
                ]
            # rank() for energy, inlined: this runs for every configuration of every job.
            idle_w = job_idle_w[j] if above_idle else 0.0
            ran, restart = running_n[j], self.restart_s
            return [
                (
                    sizes[si] * (power_w - idle_w) * remaining_s,
                    remaining_s + restart if ran and sizes[si] != ran else remaining_s,
                    (si, ci, bi),
                )
                for si, ci, bi, remaining_s, power_w in grid
            ]

        def restart_j(j: int, n: int) -> float:
            ran = running_n[j]
            if (ran and n != ran) or (not ran and jobs[j].job.done_iters > 0):
                return n * job_idle_w[j] * min(self.restart_s, round_s)
            return 0.0

        def deltas(
            j: int, old: Estimate | None, new: Estimate, n_old: int, n_new: int
        ) -> tuple[float, float]:
            """Round energy added to a team budget and to a cluster budget."""
            team = new.round_energy_j - (old.round_energy_j if old else 0.0)
            # A team pays its GPUs' idle draw while a (re)start loads the checkpoint, which
            # the busy estimate leaves out: unreserved, a job finishing in the round
            # overspends a nearly spent period (a cluster budget pays idle GPUs anyway).
            team += restart_j(j, n_new) - (restart_j(j, n_old) if old else 0.0)
            cluster_new = new.round_energy_j - n_new * job_idle_w[j] * new.round_busy_s
            cluster_old = (
                (old.round_energy_j - n_old * job_idle_w[j] * old.round_busy_s) if old else 0.0
            )
            return team, cluster_new - cluster_old

        def blocking_budget(j: int, d_team: float, d_cluster: float) -> int | None:
            for bi, is_cluster in pays[j]:
                d = d_cluster if is_cluster else d_team
                if allow_e[bi] is not None and spent_e[bi] + d > allow_e[bi] * (1 + 1e-12):
                    return bi
                if allow_c[bi] is not None and (spent_e[bi] + d) * to_g > allow_c[bi] * (1 + 1e-12):
                    return bi
            return None

        def spend(j: int, d_team: float, d_cluster: float) -> None:
            for bi, is_cluster in pays[j]:
                spent_e[bi] += d_cluster if is_cluster else d_team

        unit_hulls: dict[tuple, list] = {}

        def hull_of(j: int) -> tuple[list, float, Any]:
            """Job j's lower hull of (cost, time) points, as (hull, scale, key): a job
            that is not running, ranked by energy without its elapsed time, has times
            and costs proportional to its remaining iterations, so jobs of one shape
            share the hull of one iteration (a long queue needs few hulls)."""
            jv = jobs[j]
            job = jv.job
            if (
                self.cost == "carbon"
                or self.jct_includes_elapsed
                or running_n[j]
                or job.remaining_iters <= 0.0
            ):
                return lower_hull(points(j)), 1.0, ("job", j)
            sizes, clocks, batches, _ = opts[j]
            key = (
                id(opts[j]),
                id(jv.perf),
                job.global_batch,
                job.iter_time_scale,
                job.power_scale,
                job_idle_w[j] if above_idle else 0.0,
            )
            hull = unit_hulls.get(key)
            if hull is None:
                idle_w = key[-1]
                predict, perf = ctx.cache.predict, jv.perf
                pts = []
                for si, n in enumerate(sizes):
                    for ci, clock in enumerate(clocks):
                        for bi, b in enumerate(batches):
                            iter_s, power_w = predict(perf, n, b, clock, None)
                            t = job.global_batch / b * iter_s * job.iter_time_scale
                            pts.append(
                                (n * (power_w * job.power_scale - idle_w) * t, t, (si, ci, bi))
                            )
                hull = unit_hulls[key] = lower_hull(pts)
            return hull, job.remaining_iters, key

        # --- admission at minimum configuration ---
        ledger = GpuLedger(ctx)
        mins: dict[int, tuple[Estimate, float, float]] = {}

        def min_eval(j: int) -> tuple[Estimate, float, float]:
            hit = mins.get(j)
            if hit is None:
                hit = mins[j] = evaluate(j, 0, 0, opts[j][3])
            return hit

        if self.admission == "srtf":
            keys = []
            predict = ctx.cache.predict
            for j, jv in enumerate(jobs):
                sizes, clocks, batches, b0 = opts[j]
                job = jv.job
                # RoundContext.remaining_and_power at the minimum, inlined: every job
                # of a long queue needs it for the order
                iter_s, _ = predict(jv.perf, sizes[0], batches[b0], clocks[0], None)
                remaining_s = (
                    job.remaining_iters * job.global_batch / batches[b0] * iter_s
                ) * job.iter_time_scale
                first = 1 if job.allocation is None else 0
                keys.append((first, remaining_s, job.submit_time_s, job.job_id, j))
        else:
            keys = [
                (0 if jv.job.is_running else 1, jv.job.submit_time_s, jv.job.job_id, j)
                for j, jv in enumerate(jobs)
            ]
        keys.sort()
        order = by_priority([k[-1] for k in keys], lambda j: jobs[j].job, keep_running_ahead=True)
        # The jobs the GPUs could admit at their minimum, budgets aside: only they can
        # run this round, so only they need target configurations.
        probe = dict(ledger.free)
        candidates: set[int] = set()
        for j in order:
            model, n0 = jobs[j].gpu_model, opts[j][0][0]
            if probe.get(model, 0) >= n0:
                probe[model] -= n0
                candidates.add(j)

        # --- prices (see the module docstring) ---
        target: dict[int, tuple[int, int, int]] = {}
        prices: list[float] = []
        if self.pricing:
            new_state.update(
                price_round(
                    self,
                    ctx,
                    jobs,
                    opts,
                    pays,
                    evaluate,
                    hull_of,
                    deltas,
                    min_eval,
                    candidates,
                    floor_w,
                    curve,
                    allow_e,
                    allow_c,
                    idle_floor_j,
                    to_g,
                    target,
                    prices,
                )
            )
        cfg: dict[int, list[int]] = {}
        cur: dict[int, tuple[Estimate, float, float]] = {}
        gpu_blocked: list[int] = []
        budget_blocked: dict[int, int] = {}
        for j in order:
            jv = jobs[j]
            n0 = opts[j][0][0]
            if not ledger.fits(jv, n0):
                gpu_blocked.append(j)
                continue
            est = min_eval(j)[0]
            d_team, d_cluster = deltas(j, None, est, 0, n0)
            bi = blocking_budget(j, d_team, d_cluster)
            if bi is not None:
                budget_blocked[j] = bi
                continue
            ledger.take(jv, n0)
            spend(j, d_team, d_cluster)
            cfg[j] = [0, 0, opts[j][3]]
            cur[j] = mins[j]
            if prices and j not in candidates:
                # admitted only because a job ahead of it waits on its budget
                lams = [prices[b] for b, _ in pays[j] if prices[b] > 0.0]
                if lams:
                    target[j] = hull_choice(hull_of(j)[0], max(lams))

        # --- hysteresis: running jobs return to their running size first ---
        if self.keep_running:
            for j in order:
                if j not in cfg or not running_n[j]:
                    continue
                sizes = opts[j][0]
                if running_n[j] not in sizes:
                    continue
                si_run = sizes.index(running_n[j])
                box = target.get(j)
                if si_run == 0 or (box is not None and si_run > box[0]):
                    continue
                if not ledger.fits(jobs[j], sizes[si_run] - sizes[0]):
                    continue
                new_cfg = [si_run, cfg[j][1], cfg[j][2]]
                new_eval = evaluate(j, *new_cfg)
                d_team, d_cluster = deltas(j, cur[j][0], new_eval[0], sizes[0], sizes[si_run])
                if blocking_budget(j, d_team, d_cluster) is not None:
                    continue
                ledger.take(jobs[j], sizes[si_run] - sizes[0])
                spend(j, d_team, d_cluster)
                cfg[j] = new_cfg
                cur[j] = new_eval

        # --- greedy upgrades ---
        version = dict.fromkeys(cfg, 0)
        heap: list[tuple] = []

        def push(j: int) -> None:
            est, t, c = cur[j]
            if est.remaining_s <= 0.0:
                return
            sizes, clocks, batches, _ = opts[j]
            si, ci, bi = cfg[j]
            for kind, nxt in ((_SIZE, si + 1), (_CLOCK, ci + 1), (_BATCH, bi + 1)):
                limit = (len(sizes), len(clocks), len(batches))[kind]
                if nxt >= limit:
                    continue
                new_cfg = [si, ci, bi]
                new_cfg[kind] = nxt
                box = target.get(j)
                if box is not None and new_cfg[kind] > box[kind]:
                    continue  # beyond what the price makes worth its cost
                new_est, t2, c2 = evaluate(j, *new_cfg)
                gain = (t - t2) / t
                if gain <= self.min_gain:
                    continue
                if self.rank == "per_gpu":
                    # Speedup over the job's minimum (as elastic normalises) per share
                    # of the round's spare GPUs and spare allowance the step takes.
                    base = min_eval(j)[1]
                    speedup = base / t2 - base / t
                    dn = sizes[new_cfg[0]] - sizes[si]
                    d_team, d_cluster = deltas(j, est, new_est, sizes[si], sizes[new_cfg[0]])
                    share = dn / spare_gpus[jobs[j].gpu_model] if dn > 0 else 0.0
                    for bi_, is_cluster in pays[j]:
                        d = d_cluster if is_cluster else d_team
                        if d > 0 and spare_e[bi_] < math.inf:
                            share += d / spare_e[bi_]
                    score = speedup / share if share > 1e-12 else _DOMINANT * speedup
                    heapq.heappush(heap, (-score, j, kind, version[j], new_cfg, (new_est, t2, c2)))
                    continue
                if self.rank == "absolute":
                    # seconds saved per joule (gram) more: no weighting by the job's draw
                    gain, rel_cost = t - t2, c2 - c
                else:
                    rel_cost = (c2 - c) / c if c > 0 else 0.0
                score = gain / rel_cost if rel_cost > 1e-12 else _DOMINANT * gain
                if box is None and pays[j] and score < max(floor_of[bi_] for bi_, _ in pays[j]):
                    continue  # not worth the budget it would take from later rounds
                heapq.heappush(heap, (-score, j, kind, version[j], new_cfg, (new_est, t2, c2)))

        # What the upgrades share out: the GPUs and the allowances left after admission.
        spare_gpus = {m: max(n, 1) for m, n in ledger.free.items()}
        spare_e = [math.inf] * len(budgets)
        for bi_ in range(len(budgets)):
            if allow_e[bi_] is not None:
                spare_e[bi_] = allow_e[bi_] - spent_e[bi_]
            if allow_c[bi_] is not None and to_g > 0:
                spare_e[bi_] = min(spare_e[bi_], allow_c[bi_] / to_g - spent_e[bi_])
            spare_e[bi_] = max(spare_e[bi_], 1e-9)
        for j in order:
            if j in cfg:
                push(j)
        while heap:
            _, j, kind, ver, new_cfg, new_eval = heapq.heappop(heap)
            if ver != version[j]:
                continue
            sizes = opts[j][0]
            n_old, n_new = sizes[cfg[j][0]], sizes[new_cfg[0]]
            if n_new > n_old and not ledger.fits(jobs[j], n_new - n_old):
                continue  # free GPUs only shrink within a round: drop for good
            d_team, d_cluster = deltas(j, cur[j][0], new_eval[0], n_old, n_new)
            if blocking_budget(j, d_team, d_cluster) is not None:
                continue  # allowances only shrink too
            ledger.take(jobs[j], n_new - n_old)
            spend(j, d_team, d_cluster)
            cfg[j] = new_cfg
            cur[j] = new_eval
            version[j] += 1
            push(j)

        # --- the decision ---
        grants = []
        granted: list[tuple[JobView, int, float]] = []
        for j in order:
            if j not in cfg:
                continue
            sizes, clocks, batches, _ = opts[j]
            si, ci, bi = cfg[j]
            jv = jobs[j]
            grants.append(Grant(jv.job.job_id, sizes[si], batches[bi], jv.gpu_model, clocks[ci]))
            granted.append((jv, sizes[si], cur[j][0].remaining_s))
        waiting: dict[str, WaitReason] = {}
        forecast = FreeForecast(ctx, granted)
        for j in gpu_blocked:
            jv = jobs[j]
            n0 = opts[j][0][0]
            waiting[jv.job.job_id] = WaitReason(
                WaitCode.BEHIND_IN_QUEUE,
                f"Waiting: the {ctx.capacity[jv.gpu_model]} {jv.gpu_model} GPUs are all given to "
                f"jobs ranked ahead of it; it needs {n0}.",
                until_s=forecast.at(jv, n0),
            )
        for j, bi in budget_blocked.items():
            waiting[jobs[j].job.job_id] = self._over_allowance(budgets[bi], curve, ci_now)
        return PolicyDecision(
            grants=tuple(grants),
            waiting=waiting,
            energy_allowance_by_budget_j={
                b.budget_id: a for b, a in zip(budgets, allow_e, strict=True) if a is not None
            },
            co2_allowance_by_budget_g={
                b.budget_id: a for b, a in zip(budgets, allow_c, strict=True) if a is not None
            },
            policy_state=new_state,
        )

    def _over_allowance(self, budget, curve: IntensityCurve, ci_now: float) -> WaitReason:
        whose = f"team {budget.team}'s" if budget.team else "the cluster's"
        if self.cost == "carbon" and budget.co2_limit_g is not None:
            cleaner = curve.next_cleaner(
                ci_now * (1 - self.clean_margin), within_s=self.hold_within_s
            )
            if cleaner is not None:
                return WaitReason(
                    WaitCode.WAITING_FOR_CLEAN_HOUR,
                    f"Waiting: the grid is at {ci_now:.0f} gCO2/kWh and {whose} carbon allowance "
                    f"for this round is spent; a cleaner hour ({curve.at(cleaner):.0f} gCO2/kWh) "
                    "is forecast.",
                    until_s=cleaner,
                )
        return WaitReason(
            WaitCode.OVER_ROUND_ALLOWANCE,
            f"Waiting: {whose} budget is paced over its period and this round's share is "
            "spent by jobs ranked ahead of it.",
        )
