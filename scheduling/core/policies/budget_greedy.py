"""The budget-aware greedy that PowerFlow and GreenFlow share.

Reconstructed from the abstracts (see ``docs/papers.md``); the structure is the
papers', the details below are ours. Each call of ``allocate`` builds one ``_Round``
and runs its stages in order; the measurements behind the defaults are in
docs/benchmarks.md ("BudgetGreedy's defaults, as measured").

1. *Allowances* (``_Round.__init__``). Each active budget is paced into this round's
   allowance (``scheduling.core.pacing``): energy evenly over the rest of the period,
   carbon weighted by ``ci ** (1 - clean_bias)`` so that more energy is spent in clean
   hours. A team budget pays its jobs' busy energy; a cluster-wide budget
   (``team=None``) also pays every powered idle GPU, so its spend starts at the idle
   floor and a job's GPUs cost only what they draw above idle: fragmentation is an
   energy cost. That floor is committed until the period ends, so pacing reserves it
   and spreads only the rest. ``spend_ahead`` (default 1.25) front-loads the pace a
   little, because a period's end is usually quieter than its start.
2. *Admission at minimum configuration* (``order``, ``admit``). Running jobs first (no
   preemption while the allowance lasts), then waiting ones, shortest predicted
   remaining time at the minimum first (``admission="srtf"``; ``"fifo"`` for submit
   order). A job's minimum configuration is its smallest buddy GPU count >=
   ``min_gpus``, the lowest clock level and its submitted batch. A job that no longer
   fits the GPUs or the allowance waits. Shortest-first alone can pass a long job over
   for as long as shorter ones keep arriving; with ``starvation_s`` (off by default) a
   waiting job that has waited that long since it last changed is admitted right
   after the running jobs, earliest submitted first (within a priority).
   ``admission="marginal"`` (with ``rank="hesrpt"``, off by default) admits only the
   running and the starving jobs here and lets each other waiting job's admission
   compete in the greedy of point 3
   as a step from no GPUs to its minimum (speedup 1, heSRPT-weighted), so an upgrade
   that finishes a short job sooner can outrank a long job's start; measured in
   docs/benchmarks.md ("Issue 13: admission by marginal JCT"), it loses on Philly.
   With ``keep_running`` (resize hysteresis, off by default) each running job then
   returns to its running GPU count where the GPUs and its budgets allow
   (``keep_running_sizes``), so it is shrunk only to admit waiting jobs (with
   ``admission="marginal"`` before the waiting jobs are admitted, which then starve).
3. *Greedy upgrades* (``upgrade``). Each job's next step in each dimension (next buddy
   GPU count, next clock level, next batch size where the job allows a range) is
   scored and a max-heap serves the best step while GPUs and every allowance last; a
   job's entries are refreshed only when that job changes (lazy versioning), so a
   round costs O(steps log steps). ``rank="per_gpu"`` scores a
   step by the two scarce things it takes: the speedup it adds over the job's minimum
   configuration (``T_min / T_new - T_min / T_old``, as ``elastic`` normalises),
   divided by the share of the round's spare GPUs plus the share of the spare round
   allowance of each budget that pays for the job; a step that takes neither ranks
   above all others. With no budget this buys GPUs exactly as ``elastic`` does (a test
   holds it). ``rank="hesrpt"`` weighs that speedup by its marginal effect on average
   JCT: average JCT is the integral of the number of jobs present, and speeding a job
   up shortens the time that every job not shorter than it is present. heSRPT (Berg,
   Vesilo, Harchol-Balter, arXiv 1903.09346: the optimal allocation for jobs present
   at once with speedup n**p) gives the job with i of m jobs not shorter than it a
   share whose marginal speedup is, approximately, in proportion to (i/m)**p; so here a
   step's speedup counts ``w ** p`` times, ``w`` being the share of the jobs present
   (running and waiting) whose remaining time at their minimum is at least this
   one's (1 for the shortest, 1/m for the longest of m) and ``p`` ``hesrpt_exp``
   (None: the step's own exponent, ``log(T_old / T_new) / log(n_new / n_old)``).
   Among jobs of one length it ranks as ``per_gpu``. It is PowerFlow's default, with
   ``hesrpt_exp`` 0.5 (the exponent of a square-root speedup; the steps' own exponents
   did worse on Philly), as measured in docs/benchmarks.md ("Issue 13: admission by
   marginal JCT"). ``rank="relative"`` (the even share's, ``greenflow`` with
   ``pricing=False``) scores relative JCT reduction per relative cost increase,
   ``(dT / T) / (dC / C)``, where T is the predicted remaining time (plus
   ``restart_s`` when the GPU count differs from the running one) and C the job's
   remaining energy (PowerFlow) or carbon over the intensity curve (GreenFlow).
   While idle GPUs stay powered (``Snapshot.power_off_idle_nodes`` false) C counts only
   the draw above idle, which is what running the job adds to a cluster budget
   (``cost_above_idle`` overrides); a job that a team budget pays counts its GPUs' whole
   draw, which is what its team is charged. A step that lowers the cost and the time
   ranks above all others. Under ``rank="relative"`` a job paid by an unpriced budget
   takes no step scoring below ``min_score`` (default 0.5), so that quiet hours do not
   spend the allowance on poor upgrades that busy hours later miss; the floor falls
   linearly to 0 as the budget's spending lags a straight line by up to ``RELAX_LAG`` of
   its limit, since a budget that is behind has nothing to save for.
4. *Price* (``price``, ``pricing=True``: the default of PowerFlow and GreenFlow, see
   ``greenflow.py``; the arithmetic is in ``budget_price``). Deferring a job saves
   none of its energy (it must still run, and idle GPUs draw meanwhile), so instead of
   gating every round by an even share, each budget carries a price lambda (seconds per
   joule, or per gram): every job it pays aims at the configuration minimising ``T +
   lambda * C`` over all its (size, clock, batch) options (the lower convex hull of its
   (C, T) points), and the greedy's steps stay within that target. Lambda is the lowest
   price at which the jobs present, at their targets, take no more than their share of
   the budget's free remainder (what remains less the idle floor committed to the
   period's end): ``free * Cmin / (Cmin + future)``, where ``Cmin`` is the present jobs'
   cheapest remaining cost and ``future`` the cheapest cost of the work expected to
   arrive, at the rate seen so far (arrivals' Cmin per second since the budget was first
   seen, over at least a day, x the time left, x the share of an arrival's cheapest cost
   that falls inside the period), and at least ``period_reserve`` x the free remainder x
   the share of the period left, a reserve for bursts that the period's passing
   releases; both bounded by what the GPU-seconds left free of the present work until
   the period ends would cost at the present jobs' highest cheapest cost per
   GPU-second, so that a generous budget is not paced as if it were tight. A budget
   whose spending lags its straight line by more than ``lag_deadband`` (3% of its
   limit) has had more than its work needed, so what it holds for the future is
   released in proportion to the lag beyond that (all of it at ``lag_release``, 10%,
   more): a generous budget is spent while jobs are present, where
   the reserve alone left a quarter of it over; a tight one, whose spending stays on its
   line, keeps its reserve. The share is at least ``share_floor`` times ``Cmin`` while
   the free remainder allows (the forecast is noisy and the cheapest configurations save
   the most time per joule). A budget spending ahead of its straight line (by more than
   ``lag_deadband``, fully at ``lag_release`` more) divides that share by its markup,
   what its jobs' configurations have lately cost for their progress over what their
   targets would have (``markup_decay``): the targets of a burst can need more GPUs
   than the cluster has, and on fewer GPUs each iteration can cost more than the price
   planned. The round's allowance is then what the targets (or minimum
   configurations, whichever is more) take this round, so a job at its minimum is never
   held back while the free remainder covers the present work's minimum; when it does
   not, lambda is infinite and the even-share allowance above applies again. Where every
   priced budget's lambda is 0, energy is free this round and the allowance is what the
   period has left (the floor kept), so a budget that never binds plans as no budget
   does. What the idle floor draws after this round stays reserved, except in a period
   whose idle floor alone is over the limit (no plan keeps it: ``_Round._floor_over_limit``):
   there nothing is set aside and the allowance is what the limit has left, so the jobs
   run until it is spent and the budget's ``hard_limit_action`` then applies, as it does
   under ``fifo`` (before, such a period gave no job anything). The score floor is not used for
   priced jobs (the price replaces it). A carbon price (GreenFlow with ``pricing``)
   also: prices the hours past the forecast at the mean of the hours seen and the
   forecast's; measures a cluster budget's lag against its idle floor's carbon as the
   grid made it (``_Round._lags``), not a straight line of the limit; and keeps in
   every allowance the floor's carbon to the period's end with the hours past the
   forecast as dirty as the dirtiest recent day, or, where that would leave no job
   anything, with the margin above the mean narrowed by the square root of the days it
   spans (``_keep_committed_carbon``).
   ``hour_price`` (off) chooses each job's target with its energy priced at this
   hour's intensity (``_Round.hour_hull``).

Probes (``probe_s``, learned knowledge only): a job whose model is still its prior alone
(``estimated``: no iteration time of its own measured yet, and its prior is not its
workload's own profile measured at two per-GPU batches or more, ``profiles.knows_split``)
and that waits only because that prior's cost does not fit a budget's allowance may start
once at its minimum configuration for at most ``probe_s`` seconds
(``PolicyDecision.replan_at_s`` asks for the next plan
there, and a round that comes earlier keeps the probe running to its end; the probe's
length does not depend on the round's), if the probe's predicted busy energy fits
``probe_share`` of what each budget that pays for it has left in its period (after this
round's spending and a cluster budget's idle floor to the period's end). Where it does
not, and nothing else of those budgets runs this round, the share kept for their other
work keeps nothing from anyone: the probe may take all of what the period has left,
counted and charged (in each of its rounds, and held back from other probes until it
ends) at its GPUs' highest power limit, so that a prior that underestimates the draw
cannot overspend (a team whose period is small beside one probe never learned its jobs);
where even that cannot pay ``probe_s``, the probe is as long as it can pay with
``min_probe_s`` to spare (a live probe ends at a beat tick), if that is at least
``min_probe_s``.
A probe that ends before the job was observed (a slow start: a real training script may
take a minute to load its data before its first progress report) goes on for another
``probe_s``, bounded the same way, at most ``probe_extensions`` times; then the job waits
like any other. A prior that overestimates the job would otherwise hold it back for good:
a job that never runs is never observed, so the prior is never corrected (seen as ncf
never starting under a learned team-budget run). After the probe the job's own
observations decide, like any other job's.

For the same reason a job takes no more GPUs than its minimum while its model is its
prior alone (``prior_box``): what more GPUs gain and cost would be the prior's guess (a
prior taught by one observed GPU count says little about thirty-two). A prior borrowed from
another workload can be wrong by orders of magnitude where the job never ran: learned, with
no budget, the first ncf job of pollux_workload-2 (34 ms an iteration on the one GPU it
asked for) was predicted at 149 s there and 9 s on sixteen GPUs, and took all 64; the
workload's profile, taught only on many GPUs, went on giving each later ncf job sixteen,
and learned PowerFlow without a budget ran 5-16% slower than with the catalog's truth
(docs/benchmarks.md, "A job its prior alone knows is not grown"). A job running on more
GPUs keeps them (the box never restarts it on fewer). The box bounds its GPUs, not its
clock, nor what the round spends: where a budget's price chose a target for the job, the
round's allowance is counted with that target before the box replaces it, and the greedy
may raise the boxed job's clock within the allowance, as any job's. (A job a budget pays
for was held at its lowest clock as well; learned, pollux 1-8, letting it take its clock
was better in 28 of 32 cluster-budget and 19 of 32 team-budget comparisons, up to 1.7x,
worse in 13 by at most 3.2%, with no period over. Counting the allowance with the box's
target instead lost up to half of the team-budget ratios against ``fifo_lowclock``.) With
``prior_box="requested"`` such a job may instead grow to the GPU count it asked for
(``Job.requested_gpus``): the user's own request bounds what the prior's guess can cost,
and a short job is not left at the minimum for the round it takes to be observed.

Each probe is kept in the policy state (``prior_probes``: when, for how long, on how many
GPUs, at what predicted energy) as long as the job is active (``extensions``: how often it
went on), and a job is probed at most once: a probed job that was stopped is not probed again.

Batch size: the work is a number of useful samples, so a larger global batch needs fewer
iterations only as far as its statistical efficiency allows (``scheduling.core.goodput``);
a job whose efficiency is unknown keeps its submitted batch.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable
from typing import Any

from scheduling.core.context import Estimate, JobView, RoundContext
from scheduling.core.goodput import batch_choices, useful_samples_per_iter
from scheduling.core.online_model import BlendedPerfModel, OnlinePerfModel
from scheduling.core.pacing import (
    DAY_S,
    HOUR_S,
    IntensityCurve,
    committed_lag_share,
    dirtiest_day_ci,
    floor_over_limit,
    intensity_curve,
    intensity_drift,
    lag_share,
    paced_co2_allowance_g,
    paced_energy_allowance_j,
    upper_quantile,
)
from scheduling.core.placement import job_buddy_sizes
from scheduling.core.policies.base import FreeForecast, GpuLedger, prior_only, waiting_since_s
from scheduling.core.policies.budget_price import price_round
from scheduling.core.pricing import lower_hull
from scheduling.core.types import (
    J_PER_KWH,
    Budget,
    Grant,
    HardLimitAction,
    PolicyDecision,
    WaitCode,
    WaitReason,
)

_SIZE, _CLOCK, _BATCH, _ADMIT = 0, 1, 2, 3  # kinds of greedy step
_DOMINANT = 1e12  # score of a step that is faster and no costlier
HISTORY_HOURS = 168  # hourly intensities kept as the "recent distribution"
TREND_MIN_DAYS = 7  # past days the idle floor's drift needs at least (floor_trend_days)
HOLD_WITHIN_S = 12 * HOUR_S  # a cleaner hour further ahead is not worth naming
CLEAN_MARGIN = 0.1  # a "cleaner hour" is at least this much cleaner than now
RELAX_LAG = 0.1  # the score floor is 0 once spending lags its straight line by this

Evaluation = tuple[Estimate, float, float]  # (estimate, time ranked by, cost ranked by)


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


def _top_limit_w(jv: JobView) -> float | None:
    """The highest power limit of job ``jv``'s GPUs, where its model knows their range."""
    limits = getattr(jv.perf, "power_limits_w", None)
    return None if limits is None else float(limits[1])


class BudgetGreedy:
    """Base of ``powerflow`` and ``greenflow``; see the module docstring."""

    name = "budget_greedy"
    cost = "energy"  # what the greedy ranks by: "energy" or "carbon"

    def __init__(
        self,
        *,
        clock_levels: int | None = 5,
        admission: str = "srtf",
        restart_s: float = 30.0,
        min_gain: float = 1e-4,
        clean_bias: float = 0.0,
        spend_ahead: float = 1.25,
        rank: str = "hesrpt",
        cost_above_idle: bool | None = None,
        min_score: float = 0.5,
        placement: str = "buddy",
        pricing: bool = True,
        share_floor: float = 1.15,
        period_reserve: float = 1.0,
        lag_release: float = 0.1,
        lag_deadband: float = 0.03,
        keep_running: bool = False,
        probe_s: float | None = 60.0,
        probe_share: float = 0.25,
        probe_extensions: int = 2,
        min_probe_s: float = 10.0,
        reserve_at_fast: bool = False,
        hour_price: bool = False,
        keep_window_h: int = 24,
        starvation_s: float | None = None,
        hesrpt_exp: float | None = 0.5,
        fixed_price: float | None = None,
        prior_box: str = "minimum",
        unmeasured_risk: bool = True,
        keep_hedge: bool = True,
        prediction_margin: float = 0.05,
        in_period_cost: bool = True,
        markup_decay: float = 0.9,
        slow_price: float | None = None,
        run_in_parts: bool = True,
        floor_trend_days: int | None = None,
        floor_trend_t: float = 0.0,
        floor_quantile: float | None = None,
        first_backlog: bool = False,
        rate_after_first_day: bool = False,
        reserve_bound: float | None = None,
        reserve_bound_lag: bool = False,
        reserve_bound_spare: bool = False,
        free_rank: str | None = None,
    ) -> None:
        """Every parameter is described in the module docstring; also:

        - ``clock_levels``: how many of the GPU's clock steps the greedy considers;
        - ``restart_s``: what a checkpoint-restart costs a resized or resumed job;
        - ``min_gain``: a step must cut the job's remaining time by more than this share;
        - ``placement``: ``"buddy"`` (power-of-two GPU counts that pack into nodes) or
          ``"first_fit"`` (every count from ``min_gpus`` to ``max_gpus``);
        - ``pricing``: pace budgets by a price (point 4) rather than by gating each
          round with an even share of the budget (point 1's allowance alone);
        - ``share_floor``: the present jobs' share is at least this many times their
          cheapest remaining cost (1: no floor);
        - ``period_reserve``: the expected future is at least this many times the free
          remainder times the share of the period left (0: the forecast alone);
        - ``lag_release``, ``lag_deadband``: what is held for the future is released
          linearly as spending lags its straight line from ``lag_deadband`` to
          ``lag_deadband + lag_release`` of the limit (``lag_release`` 0: never);
        - ``keep_running``: resize hysteresis, off by default (point 2);
        - ``probe_s``, ``probe_share``, ``probe_extensions``, ``min_probe_s``: the
          bounded probe of a job known only by its prior (module docstring; ``probe_s``
          None: never);
        - ``reserve_at_fast`` (off by default): a budget behind its straight line (up
          to ``lag_deadband`` of its limit, fully beyond) counts its period reserve as
          future work at its fastest configurations, at the present jobs' ratio of
          fastest to cheapest cost, instead of at its cheapest; measured in
          docs/benchmarks.md ("Issue 13, point 1 (C)"): it gains on pollux and loses
          on Philly at 0.25 and at tight budgets, so it stays opt-in.
        - ``hour_price``: a carbon price chooses targets with this hour's intensity;
        - ``keep_window_h``: a carbon price keeps the idle floor past the forecast at the
          dirtiest mean of this many consecutive hours seen lately (24: a day).
        - ``keep_hedge`` (on): where the dirtiest window held for the whole rest of the
          period would leave no job anything, the kept level's margin above the mean
          past the first window is narrowed by the square root of the windows it spans
          (``pacing.IntensityCurve.co2_g_hedged``); off, such a budget (mostly idle
          floor) had no allowance for any job for months (docs/benchmarks.md, "The idle
          floor's reserve").
        - ``prediction_margin``: an estimated round energy (an online model's, or any
          model's where the snapshot says its models are not exact, as the service's
          are; not a catalog model's in an oracle simulation, which is what it runs on)
          counts this share more against the allowances: its GPUs may draw a little more
          than it predicts, and a period whose last allowance was filled to the joule by
          predictions went over by the draw (docs/benchmarks.md, "A contract sweep").
        - ``in_period_cost`` (on): where a budget's free remainder cannot pay its present
          jobs' whole cheapest remaining cost, they are priced on what they spend before
          the period ends (``budget_price.in_period_points``) instead of getting an
          infinite price, which held jobs longer than a period at their minimum however
          little of the budget they used (docs/benchmarks.md, "A contract sweep").
        - ``markup_decay`` (0: off): a budget spending ahead of its straight line counts
          what the GPUs could not give its jobs: where a job runs on fewer GPUs than its
          price target (the cheapest configurations of a burst can need more GPUs than
          the cluster has), each unit of its progress costs more than the price
          planned, by the markup ``_Round._markup`` measures (decayed by this factor a
          round), and the budget's share is divided by it (``budget_price``).
        - ``run_in_parts`` (on): a job whose least whole cost is more than one whole period
          of a ``pause_jobs`` budget can pay runs at its minimum configuration on what the
          period has left, after every other job was admitted, and the hard-limit watch
          pauses it at the limit; the next periods pay the rest (``_Round.admit_parts``).
          Off, such a job never started (docs/benchmarks.md, "A job larger than a
          period").
        - ``starvation_s`` (None: no bound): a waiting job that has waited this long
          since it last changed is admitted right after the running jobs, earliest
          submitted first (within a priority),
          whatever its predicted length (module docstring, point 2).
        - ``hesrpt_exp``: the exponent of ``rank="hesrpt"``'s weight (None: each size
          step's own scaling exponent, a clock or batch step the job's last one).
        - ``fixed_price`` (None: the budget price of point 4): an experiment, not a
          policy: every priced budget's price held at this value (seconds per joule or
          per gram) in each round where its free remainder covers the work's minimum,
          so that a run shows what one price over the whole period gives; chosen after
          the fact, it is an oracle (docs/benchmarks.md, "One price for the whole period").
        - ``unmeasured_risk``: the price hull of a job that has run (running, or
          stopped and waiting) counts, at a GPU count beyond the most its learned model
          has measured, the worst case of the round that measures it: the extra GPUs'
          draw for a round with no speedup (energy prices only: measured for GreenFlow's
          carbon price too and not kept); see ``_Round._measured_gpus``.
        - ``slow_price`` (None: off): the re-solved price is lowered towards a slow
          price while the budget's spending lags its line by more than
          ``lag_deadband``, fully at twice that; the slow price is a dual-ascent step on
          that lag, by up to a factor e per this share of the period
          (``budget_price._slow_price``). Off by default: measured in docs/benchmarks.md
          ("A slow budget price (issue 13, point 1)"), at 0.05 it spent more of a
          generous budget and was never slower on pollux 1-8, but on Philly 876 GreenFlow
          at ``fifo_lowclock``'s carbon lost 1.3-5.4% and PowerFlow against ``elastic``
          0.5% at arrival scales 0.5 and 0.25.
        - ``floor_trend_days`` (None: off): a carbon price prices a cluster budget's idle
          floor past the forecast with the grid's upward drift, the least-squares slope
          of the daily mean intensities of up to this many past days (at least
          ``TREND_MIN_DAYS``), carried forward as far as they look back
          (``pacing.intensity_drift``; with ``floor_trend_t`` above 0, only a slope at
          least that many times its standard error); the jobs' own carbon keeps the
          flat tail. Off by default: measured in docs/benchmarks.md ("A drifting grid's
          floor"), at 56 days it takes GreenFlow on Philly 876 at ``fifo_lowclock``'s
          carbon from 0.941x to 1.251x in US-CAL-CISO (a grid that grows dirtier from
          June to September) but from 1.353x to 0.784x in ES (a dirty third week of June
          read as a season), and at ``elastic``'s carbon it was slower in both (0.974x ->
          0.971x, 0.955x -> 0.924x) and at arrival scale 0.5 in both zones;
          ``floor_trend_t=3`` gave 0.944x and 1.247x.
        - ``floor_quantile`` (None: off): a carbon price prices a cluster budget's idle
          floor past the forecast at this quantile of the hours its tail is the mean of
          (the last week's and the forecast's; ``pacing.upper_quantile``) where that is
          above their mean. Off by default: measured in docs/benchmarks.md ("The floor's
          forecast, replayed"), at 0.6 it takes GreenFlow on Philly 876 at
          ``fifo_lowclock``'s carbon from 0.941x to 1.223x in US-CAL-CISO (0.7: 1.268x)
          but from 1.353x to 1.343x in ES (0.7: 1.310x), and at ``elastic``'s carbon it
          was slower in both (0.974x -> 0.970x, 0.955x -> 0.949x).
        - ``first_backlog`` (off by default): on the first priced round (no policy state:
          the first round, or the first after the policy changed), a job submitted no
          later than its budget's period began is a backlog the budget found, not an
          arrival: it does not enter the arrival rate that the price forecasts for the
          rest of the period (a queue present at the start was forecast as that much
          work every day). Later rounds already count only jobs submitted since the last
          round, so a budget created over a queue finds it a backlog either way.
          Measured in docs/benchmarks.md ("Derived traces at HEAD, and a backlog the
          price found"): GreenFlow ES on 80 jobs at time 0 at ``fifo_lowclock``'s carbon
          0.775x -> 0.827x; on Philly 876 (where it drops one job from the first day's
          rate) PowerFlow at ``fifo_lowclock``'s energy +0.1-0.5%, at ``elastic``'s
          level, but GreenFlow ES at ``fifo_lowclock``'s carbon 1.353x -> 1.343x, so it
          stays off; pollux_workload-1..8 unchanged (their first jobs come after the
          period began).
        - ``rate_after_first_day`` (off by default): the arrival rate the price forecasts
          leaves out what arrived in the budget's first priced day, over the time since
          that day: a count over the time since the first arrival, read just after a burst,
          is high by the burst it has just seen (four bursts of 25 jobs ten days apart:
          a forecast of 20,105 MJ at day 1 against 1,731 MJ still to come, 2.5x at the
          second burst). Measured in docs/benchmarks.md ("An unkeepable budget period,
          GreenFlow's reserve bound at 0.5 and 0.25, and the bursts miss instrumented").
        - ``reserve_bound`` (None: off): the period reserve (``period_reserve``) is held
          to no more than an upper bound of the in-period cost still to arrive: the
          arrivals seen so far taken as a compound Poisson stream, their forecast plus
          this many standard deviations (``budget_price.arrivals_bound``; the rate's
          own uncertainty from the window it was seen over counted). The reserve is a
          share of the free remainder whatever the arrivals were, so a budget several
          times its work was paced as a tight one; where the arrivals seen make a
          future that large implausible, the bound frees the difference for the present
          jobs. A tight budget, whose reserve is below its forecast, is unchanged.
          Measured in docs/benchmarks.md ("The period reserve bounded by the arrivals
          seen"): off by default; with ``reserve_bound_lag`` and z 2 PowerFlow on Philly
          876 against ``elastic`` gains at 1.0 (0.960x -> 0.973x) and loses at 0.5 and
          0.25 (0.964x -> 0.959x, 0.949x -> 0.945x), and GreenFlow at
          ``fifo_lowclock``'s carbon loses (US-CAL-CISO 0.941x -> 0.724x).
          ``reserve_bound_lag`` (off): the reserve is lowered to the bound only as far as
          the budget lags its straight line (none on or ahead of it, all of the
          difference at ``lag_deadband`` behind), so a budget that spends as fast as its
          line keeps its reserve. ``reserve_bound_spare`` (off): and only as far as
          the present jobs leave the GPUs free to the period's end (their fewest
          GPU-seconds before it over the cluster's), so a cluster its present work
          fills keeps the reserve for the work that will wait.
        - ``free_rank`` (None: off): the rank of the steps in a round where energy is
          free (every priced budget's price is 0, or no budget limits the round:
          ``_Round.free_round``). ``"per_gpu"`` ranks them by the speedup per share of
          the spare GPUs alone, as ``elastic`` does, instead of ``rank``'s. At price 0
          the heSRPT weight buys the same average JCT as ``elastic``'s division with
          more GPU-hours and energy: on Philly 876 at 1.0 without a budget 8.066 h
          against 8.062 h, 0.48% more energy, so a PowerFlow priced at 0 at
          ``elastic``'s energy ran out at 0.95 of the period (0.950x; ranked per
          GPU, 1.000x: ``elastic``'s run). Off by default: measured in
          docs/benchmarks.md ("PowerFlow at price 0 is `elastic` less its energy"), the
          default pacer gains nothing from it on Philly 876 against ``elastic`` (0.960x
          -> 0.961x at 1.0, 0.964x at 0.5, 0.949x -> 0.948x at 0.25), and on pollux at
          1.0, where a generous budget is at price 0 in many rounds and heSRPT's division
          there beats ``elastic``'s, it loses up to 17% (pollux_workload-8 1.315x ->
          1.095x); tight budgets have no round at price 0 and are unchanged.
        - ``prior_box``: how many GPUs a job known only by its prior may take before it
          is observed: ``"minimum"`` (its minimum) or ``"requested"`` (up to the GPUs it
          asked for); either at any clock; module docstring, "Probes".
        """
        if admission not in ("srtf", "fifo", "marginal"):
            raise ValueError(f"admission must be 'srtf', 'fifo' or 'marginal', not {admission!r}")
        if rank not in ("per_gpu", "relative", "hesrpt"):
            raise ValueError(f"rank must be 'per_gpu', 'relative' or 'hesrpt', not {rank!r}")
        if admission == "marginal" and rank != "hesrpt":
            raise ValueError("admission='marginal' needs rank='hesrpt' (their scores share a unit)")
        if starvation_s is not None and not starvation_s > 0:
            raise ValueError("starvation_s must be positive or None")
        if clock_levels is not None and (type(clock_levels) is not int or clock_levels < 1):
            raise ValueError("clock_levels must be a whole number, at least 1, or None")
        # (a restart of -100,000 s made every resize look like a gain: average JCT 8x worse)
        for name, value in (
            ("restart_s", restart_s), ("min_gain", min_gain), ("clean_bias", clean_bias),
            ("min_score", min_score), ("share_floor", share_floor),
            ("period_reserve", period_reserve), ("lag_release", lag_release),
            ("lag_deadband", lag_deadband),
        ):  # fmt: skip
            if isinstance(value, bool) or not value >= 0:
                raise ValueError(f"{name} must be 0 or more")
        if not spend_ahead > 0:
            raise ValueError("spend_ahead must be positive")
        self.clock_levels = clock_levels
        self.admission = admission
        self.restart_s = restart_s
        self.min_gain = min_gain
        self.clean_bias = clean_bias
        self.spend_ahead = spend_ahead
        self.rank = rank
        self.cost_above_idle = cost_above_idle
        self.min_score = min_score
        self.placement = placement
        self.pricing = pricing
        self.share_floor = share_floor
        self.period_reserve = period_reserve
        self.lag_release = lag_release
        self.lag_deadband = lag_deadband
        self.keep_running = keep_running
        # A learned model's unmeasured larger count is tried once, by jobs no budget pays
        # for (gpu_probe); not with keep_running, which would keep the probe's count.
        self.probes_gpus = not keep_running
        if probe_s is not None and not probe_s > 0:
            raise ValueError("probe_s must be positive or None")
        if not 0.0 < probe_share <= 1.0:
            raise ValueError("probe_share must be in (0, 1]")
        self.probe_s = probe_s
        self.probe_share = probe_share
        if probe_extensions < 0:
            raise ValueError("probe_extensions must be 0 or more")
        self.probe_extensions = probe_extensions
        if not min_probe_s > 0.0:
            raise ValueError("min_probe_s must be positive")
        self.min_probe_s = min_probe_s
        self.reserve_at_fast = reserve_at_fast
        self.hour_price = hour_price
        if type(keep_window_h) is not int or keep_window_h < 1:
            raise ValueError("keep_window_h must be a whole number of hours, at least 1")
        self.keep_window_h = keep_window_h
        self.keep_hedge = keep_hedge
        if not 0.0 <= prediction_margin < 1.0:
            raise ValueError("prediction_margin must be at least 0 and below 1")
        self.prediction_margin = prediction_margin
        self.in_period_cost = in_period_cost
        if isinstance(markup_decay, bool) or not 0.0 <= markup_decay < 1.0:
            raise ValueError("markup_decay must be at least 0 and below 1")
        self.markup_decay = markup_decay
        self.starvation_s = starvation_s
        self.hesrpt_exp = hesrpt_exp
        if fixed_price is not None and (
            isinstance(fixed_price, bool) or not (math.isfinite(fixed_price) and fixed_price >= 0)
        ):
            raise ValueError("fixed_price must be a finite price >= 0 or None")
        self.fixed_price = fixed_price
        if slow_price is not None and (
            isinstance(slow_price, bool) or not (math.isfinite(slow_price) and slow_price > 0)
        ):
            raise ValueError("slow_price must be a positive share of the period or None")
        self.slow_price = slow_price
        if not isinstance(first_backlog, bool):
            raise ValueError("first_backlog must be true or false")
        self.first_backlog = first_backlog
        if not isinstance(rate_after_first_day, bool):
            raise ValueError("rate_after_first_day must be true or false")
        self.rate_after_first_day = rate_after_first_day
        if reserve_bound is not None and (
            isinstance(reserve_bound, bool)
            or not isinstance(reserve_bound, int | float)
            or not (math.isfinite(reserve_bound) and reserve_bound >= 0)
        ):
            raise ValueError("reserve_bound must be a finite number >= 0 or None")
        self.reserve_bound = reserve_bound
        if not isinstance(reserve_bound_lag, bool):
            raise ValueError("reserve_bound_lag must be true or false")
        self.reserve_bound_lag = reserve_bound_lag
        if not isinstance(reserve_bound_spare, bool):
            raise ValueError("reserve_bound_spare must be true or false")
        self.reserve_bound_spare = reserve_bound_spare
        if free_rank not in (None, "per_gpu"):
            raise ValueError(f"free_rank must be 'per_gpu' or None, not {free_rank!r}")
        self.free_rank = free_rank
        if floor_trend_days is not None and (
            type(floor_trend_days) is not int or floor_trend_days < TREND_MIN_DAYS
        ):
            raise ValueError(
                f"floor_trend_days must be a whole number of days, at least {TREND_MIN_DAYS}, "
                "or None"
            )
        self.floor_trend_days = floor_trend_days
        if isinstance(floor_trend_t, bool) or not floor_trend_t >= 0:
            raise ValueError("floor_trend_t must be 0 or more")
        self.floor_trend_t = floor_trend_t
        if floor_quantile is not None and (
            isinstance(floor_quantile, bool) or not 0.0 < floor_quantile < 1.0
        ):
            raise ValueError("floor_quantile must be a share between 0 and 1, or None")
        self.floor_quantile = floor_quantile
        if prior_box not in ("minimum", "requested"):
            raise ValueError(f"prior_box must be 'minimum' or 'requested', not {prior_box!r}")
        self.prior_box = prior_box
        self.unmeasured_risk = unmeasured_risk
        self.run_in_parts = run_in_parts

    # --- state carried between rounds -------------------------------------------

    def _history(self, ctx: RoundContext) -> tuple[list[float], dict[str, Any]]:
        """Hourly intensities seen lately (the "recent distribution"), updated with now."""
        state = ctx.policy_state
        history = [float(c) for c in state.get("ci_history", [])]
        hour = math.floor((ctx.snapshot.epoch_s + ctx.now_s) / HOUR_S)
        new = hour != state.get("ci_hour")
        if new:
            history.append(ctx.ci_g_per_kwh)
            history = history[-HISTORY_HOURS:]
        kept: dict[str, Any] = {"ci_history": history, "ci_hour": hour}
        if self.floor_trend_days is not None and self.cost == "carbon":
            # Each day's hourly intensities summed, for the floor's drift: [day, sum, n].
            days = [[float(x) for x in d] for d in state.get("ci_days", [])]
            if new:
                day = float(math.floor(hour * HOUR_S / DAY_S))
                if days and days[-1][0] == day:
                    days[-1][1] += ctx.ci_g_per_kwh
                    days[-1][2] += 1.0
                else:
                    days.append([day, ctx.ci_g_per_kwh, 1.0])
                days = days[-(self.floor_trend_days + 1) :]
            kept["ci_days"] = days
        return history, kept

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
                job.noise_scale is None,  # batch_choices: only the submitted batch if unknown
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
        if job.min_batch is not None and job.max_batch is not None:
            allowed = {b for b in jv.perf.batch_sizes if job.min_batch <= b <= job.max_batch}
            batches = batch_choices(job, allowed)  # only the submitted one if E unknown
        return sizes, clocks, batches, batches.index(job.global_batch)

    # --- the round ------------------------------------------------------------------

    def allocate(self, ctx: RoundContext) -> PolicyDecision:
        rnd = _Round(self, ctx)
        rnd.order()
        rnd.price()
        rnd.admit()
        rnd.keep_running_sizes(None if self.keep_running else rnd.pinned)
        rnd.upgrade()
        return rnd.decision()

    def _over_allowance(
        self, budget, curve: IntensityCurve, ci_now: float, *, alone: bool = False,
        prior: str | None = None, short: bool = False, infeasible: bool = False,
    ) -> WaitReason:  # fmt: skip
        """Why a job waits on ``budget``: ``alone``, its minimum costs more than the round's
        whole allowance (no job ahead of it spent any of it); ``prior``, that cost is its
        prior's guess and its first probe does not fit either ("share": a quarter of what
        the period has left at the prior's draw; "top": all of it at its GPUs' top draw);
        ``short``, the budget cannot pay its jobs' cheapest cost in its period
        (``budget_price._finish_short``); ``infeasible``, the budget's idle floor alone is
        over its limit in this period (``_Round._floor_over_limit``)."""
        whose = f"team {budget.team}'s" if budget.team else "the cluster's"
        if infeasible:
            return WaitReason(
                WaitCode.OVER_ROUND_ALLOWANCE,
                f"Waiting: {whose} budget cannot be kept in this period: its idle GPUs alone "
                "draw more than its limit (power idle nodes off, or raise the limit). Its jobs "
                "spend what is left of the limit, then its hard limit action applies; what is "
                "left this round is taken by jobs ranked ahead of it or is less than this "
                "job's smallest configuration costs.",
            )
        if self.cost == "carbon" and budget.co2_limit_g is not None:
            cleaner = curve.next_cleaner(ci_now * (1 - CLEAN_MARGIN), within_s=HOLD_WITHIN_S)
            if cleaner is not None:
                return WaitReason(
                    WaitCode.WAITING_FOR_CLEAN_HOUR,
                    f"Waiting: the grid is at {ci_now:.0f} gCO2/kWh and {whose} carbon allowance "
                    f"for this round is spent; a cleaner hour ({curve.at(cleaner):.0f} gCO2/kWh) "
                    "is forecast.",
                    until_s=cleaner,
                )
        if alone and prior:
            probe = (
                "would draw more, at its GPUs' highest power limit, than that budget has "
                "left in its period"
                if prior == "top"
                else f"would take more than {self.probe_share:.0%} of what that budget has "
                "left in its period"
            )
            return WaitReason(
                WaitCode.OVER_ROUND_ALLOWANCE,
                f"Waiting: it has not run yet, and its prior (a guess from other workloads) "
                f"says its smallest configuration costs more than {whose} budget allows a "
                f"round; a first short run to measure it {probe}.",
            )
        if short and alone and not prior:
            return WaitReason(
                WaitCode.OVER_ROUND_ALLOWANCE,
                f"Waiting: {whose} budget has too little left in this period to finish any "
                "of its jobs; what is left is paced over the period.",
            )
        if short and not prior:
            return WaitReason(
                WaitCode.OVER_ROUND_ALLOWANCE,
                f"Waiting: {whose} budget cannot pay for all of its jobs' work in this "
                "period; what it has left goes to the jobs it can finish, the cheapest to "
                "finish first.",
            )
        if alone:
            return WaitReason(
                WaitCode.OVER_ROUND_ALLOWANCE,
                f"Waiting: its smallest configuration costs more than {whose} budget allows "
                "a round, as the budget is paced over its period.",
            )
        return WaitReason(
            WaitCode.OVER_ROUND_ALLOWANCE,
            f"Waiting: {whose} budget is paced over its period and this round's share is "
            "spent by jobs ranked ahead of it.",
        )


class _Round:
    """One round of ``BudgetGreedy``: what it knows about the jobs and budgets (by job
    and budget index), the cost model every stage shares, and the stages, run in the
    order ``BudgetGreedy.allocate`` calls them. A configuration is a list ``[size
    index, clock index, batch index]`` into the job's options."""

    def __init__(self, policy: BudgetGreedy, ctx: RoundContext) -> None:
        self.policy = policy
        self.ctx = ctx
        history, self.new_state = policy._history(ctx)
        self.curve = intensity_curve(
            ctx.snapshot.carbon,
            now=ctx.now_s,
            history=history,
            with_forecast=policy.cost == "carbon" and policy.pricing,
        )
        # The curve a cluster budget's idle floor is priced on to its period's end: the
        # same, or with the grid's upward drift past the forecast (``floor_trend_days``).
        self.floor_curve = self.curve
        days = self.new_state.get("ci_days")
        if days:
            today = math.floor((ctx.snapshot.epoch_s + ctx.now_s) / DAY_S)
            level, rate, span_s = intensity_drift(
                days, today=today, min_days=TREND_MIN_DAYS, min_t=policy.floor_trend_t
            )
            if rate > 0.0:
                # past the forecast: the trend line's level today if above the recent
                # mean, rising at its rate for as long as the days it was fitted on span
                curve = self.curve
                self.floor_curve = IntensityCurve(
                    now=curve.now,
                    ci_now=curve.values[0],
                    points=ctx.snapshot.carbon.forecast,
                    tail_ci=max(curve.tail_ci, level),
                    drift=(rate, span_s),
                )
        if policy.floor_quantile is not None and policy.cost == "carbon":
            # past the forecast: an upper quantile of the hours the tail is the mean of
            ahead = [ci for start, ci in ctx.snapshot.carbon.forecast if start > ctx.now_s]
            recent = [*history, *ahead]
            high = upper_quantile(recent, policy.floor_quantile) if recent else 0.0
            floor = self.floor_curve
            if high > floor.tail_ci:
                self.floor_curve = IntensityCurve(
                    now=floor.now,
                    ci_now=floor.values[0],
                    points=ctx.snapshot.carbon.forecast,
                    tail_ci=high,
                    drift=(floor.drift_rate, floor.drift_span_s),
                )
        self.ci_now = ctx.ci_g_per_kwh
        self.round_s = ctx.round_length_s
        self._allowances(history)
        self._jobs()
        # what the stages decide
        self.order_: list[int] = []
        self.candidates: set[int] = set()
        self.target: dict[int, tuple[int, int, int]] = {}
        self.prices: list[float] = []
        # A job's target at the prices (``budget_price.price_round`` sets it once priced).
        self.price_choice: Callable[[int], tuple[int, int, int] | None] = lambda j: None
        self.ledger = GpuLedger(ctx)
        self.cfg: dict[int, list[int]] = {}
        self.cur: dict[int, Evaluation] = {}
        self.gpu_blocked: list[int] = []
        self.starving: set[int] = set()  # waiting past starvation_s
        self.min_s = [0.0] * len(self.jobs)  # remaining time at the minimum (by_length)
        self.deferred: list[int] = []  # admitted by the greedy (admission="marginal")
        # How far down ``order_`` any job was admitted: the rest all wait behind full GPUs.
        self.admitted_in: int | None = None
        self.weights: dict[int, float] = {}  # hesrpt: share of jobs not shorter
        # Whether energy is free this round (``budget_price.price_round`` sets it): no
        # budget limits the round, or every priced budget's price is 0.
        self.free_round = not any(
            b.energy_limit_j is not None or b.co2_limit_g is not None for b in ctx.budgets
        )
        self.scaling: dict[int, float] = {}  # hesrpt: the last size step's exponent
        self.sorted_min_s: list[float] | None = None
        self.budget_blocked: dict[int, int] = {}
        self.parts: list[int] = []  # budget-blocked jobs larger than a period (admit_parts)
        self.part_spent: dict[int, float] = {}  # by budget: the rounds of parts admitted
        # Jobs begun in parts (by job id, carried while they are active): they go on in
        # parts to their end, also once what is left of them fits a period.
        self.in_parts: set[str] = set(ctx.policy_state.get("run_in_parts", ()))
        self.blocked_alone: set[int] = set()  # of those, over the allowance on their own
        self.probe_unpaid: dict[int, str] = {}  # jobs whose first probe did not fit: why
        self._reserved: list[float] | None = None  # probe_reserved, once a round
        self._job_index: dict[str, int] | None = None  # job id -> index, for it
        self._caps: list[tuple[float | None, float | None]] | None = None  # _unpayable
        self._gpu_specs = getattr(ctx.snapshot.perf, "gpus", {})  # catalog GPU models
        self.mins: dict[int, Evaluation] = {}
        self.box_evals: dict[tuple[int, tuple[int, int, int]], Evaluation] = {}
        # Jobs whose step an allowance refused, with the budget that refused it, and the
        # budgets whose spending a step has lowered since (``upgrade``).
        self.budget_blocked_steps: dict[int, int] = {}
        self.spend_fell: set[int] = set()
        # hull_of's shared hulls: a waiting job's, and a running job's two by GPU count
        self.unit_hulls: dict[tuple, list] = {}
        self.running_hulls: dict[tuple, tuple[list, list]] = {}
        self.unit_points: dict[tuple, list] = {}
        # Probes of jobs known only by their prior: earlier ones (still active) and new.
        self.probes: dict[str, dict[str, Any]] = {}
        earlier = ctx.policy_state.get("prior_probes", {})
        if earlier:  # (most rounds have none: no pass over a long queue for them)
            active = {job.job_id for job in ctx.snapshot.jobs}
            self.probes = {job_id: dict(rec) for job_id, rec in earlier.items() if job_id in active}
            # A probe is used up once its job ran; one granted but never started (its
            # block was not placed, the executor failed) leaves the job free to be
            # probed again.
            for job in ctx.snapshot.jobs:
                if job.allocation is not None and job.job_id in self.probes:
                    self.probes[job.job_id]["ran"] = True

    # --- inputs -------------------------------------------------------------------

    def _allowances(self, history: list[float]) -> None:
        """Each budget's allowance for the round, what it has spent of it (a cluster
        budget starts at the idle floor) and its score floor (point 1)."""
        policy, ctx, round_s = self.policy, self.ctx, self.round_s
        self.budgets = budgets = ctx.budgets
        # Powered idle GPUs are a cluster budget's committed spend to the period's end.
        idle_w = sum(ctx.idle_power_w(m) * n for m, n in ctx.capacity.items())
        floor_w = [
            0.0 if b.team is not None or ctx.snapshot.power_off_idle_nodes else idle_w
            for b in budgets
        ]
        # A period whose idle floor alone is over its limit cannot be kept: no floor is
        # set aside in it (the simulator's hard-limit watch sets none aside either), so its
        # jobs may spend what its limit has left, and once that is spent its
        # ``hard_limit_action`` applies as to any spent budget (``floor_over_limit``).
        self.infeasible = [
            bool(f) and self._floor_over_limit(b, f, history)
            for b, f in zip(budgets, floor_w, strict=True)
        ]
        self.drawn_floor_w = floor_w  # what the idle GPUs draw, set aside or not
        self.floor_w = floor_w = [
            0.0 if bad else f for f, bad in zip(floor_w, self.infeasible, strict=True)
        ]
        self.allow_e: list[float | None] = [
            paced_energy_allowance_j(
                b, now=ctx.now_s, round_s=round_s, spend_ahead=policy.spend_ahead, floor_w=f
            )
            for b, f in zip(budgets, floor_w, strict=True)
        ]
        self.allow_c: list[float | None] = [
            paced_co2_allowance_g(
                b,
                now=ctx.now_s,
                round_s=round_s,
                curve=self.curve,
                history=history,
                clean_bias=policy.clean_bias,
                spend_ahead=policy.spend_ahead,
                floor_w=f,
                floor_curve=self.floor_curve,
            )
            for b, f in zip(budgets, floor_w, strict=True)
        ]
        for bi, bad in enumerate(self.infeasible):
            if bad:
                # not paced: an even share of a limit its floor outspends gives no job
                # anything, and the floor would spend the rest before the jobs could
                self.allow_e[bi] = budgets[bi].energy_remaining_j
                self.allow_c[bi] = budgets[bi].co2_remaining_g
        self.idle_floor_j = idle_w * round_s
        self.spent_e = [self.idle_floor_j if b.team is None else 0.0 for b in budgets]
        self.spent_before = list(self.spent_e)  # before any job (wait reasons)
        self.to_g = self.ci_now / J_PER_KWH
        # The score floor saves budget for later; a budget already behind its straight
        # line by RELAX_LAG of its limit has nothing to save for, so its floor is 0.
        self.lags = self._lags()
        self.floor_of = [
            policy.min_score * min(max(1.0 - lag / RELAX_LAG, 0.0), 1.0) for lag in self.lags
        ]

    def _floor_over_limit(self, b: Budget, floor_w: float, history: list[float]) -> bool:
        """Whether cluster budget ``b``'s powered idle GPUs (``floor_w``) alone draw more
        than one of its limits over its whole period (``pacing.floor_over_limit``): what
        the floor drew so far (at most what the budget has spent: a run that began within
        the period drew nothing before) and what it will draw to the period's end, its
        carbon so far from the policy's state where a carbon price keeps it (``_lags``),
        else at the mean intensity of the hours seen, and ahead on the intensity curve."""
        now = self.ctx.now_s
        so_far_g = None
        if b.co2_limit_g is not None:
            rec = self.ctx.policy_state.get("floor_co2", {}).get(b.budget_id)
            elapsed_s = max(now - b.period_start_s, 0.0)
            if rec is not None and float(rec[0]) == b.period_start_s:
                start, so_far_g, last_now, last_ci = (float(v) for v in rec)
                so_far_g += floor_w * max(now - max(last_now, start), 0.0) * last_ci / J_PER_KWH
            else:
                mean_ci = sum(history) / len(history) if history else self.ci_now
                so_far_g = floor_w * elapsed_s * mean_ci / J_PER_KWH
        # on the intensity's best estimate: a floor priced above it (``floor_trend_days``,
        # ``floor_quantile``) is a hedge that sets more aside, not a proof that no plan
        # keeps the period. Past the forecast, at the mean of the hours seen and the
        # forecast's (the carbon price's curve): the hours seen alone, a run's first hour
        # or few, are one part of the daily cycle, and PowerFlow's curve carried a dirty
        # first hour to a ten-day period's end and took a period its floor keeps at the
        # forecast's mean (16.6 of 20 kg) for one no plan keeps (36.2 kg).
        curve = self.curve
        if b.co2_limit_g is not None and not (self.policy.cost == "carbon" and self.policy.pricing):
            curve = intensity_curve(
                self.ctx.snapshot.carbon, now=now, history=history, with_forecast=True
            )
        return floor_over_limit(
            b, now=now, floor_w=floor_w, floor_curve=curve, floor_so_far_g=so_far_g
        )

    def _lags(self) -> list[float]:
        """Each budget's lag behind its line (``pacing.lag_share``). A carbon-priced
        policy's cluster budget measures it against its idle floor's carbon as the
        intensity made it (``pacing.committed_lag_share``); that carbon so far is summed
        round by round in the policy's state (``floor_co2``: per budget, its period's
        start, the grams so far, and the previous round's time and intensity)."""
        ctx, now = self.ctx, self.ctx.now_s
        if self.policy.cost != "carbon" or not self.policy.pricing:
            return [lag_share(b, now) for b in self.budgets]
        seen = ctx.policy_state.get("floor_co2", {})
        kept: dict[str, list[float]] = {}
        lags = []
        for bi, (b, fw) in enumerate(zip(self.budgets, self.drawn_floor_w, strict=True)):
            if not fw or b.co2_limit_g is None:
                lags.append(lag_share(b, now))
                continue
            rec = seen.get(b.budget_id)
            so_far = 0.0
            if rec is not None and float(rec[0]) == b.period_start_s:
                start, so_far, last_now, last_ci = (float(v) for v in rec)
                dt = now - max(last_now, start)
                so_far += fw * max(dt, 0.0) * last_ci / J_PER_KWH
            elif now > b.period_start_s:
                # first seen after its period began: as if the intensity so far were now's
                so_far = fw * (now - b.period_start_s) * self.ci_now / J_PER_KWH
            kept[b.budget_id] = [b.period_start_s, so_far, now, self.ci_now]
            if self.infeasible[bi]:
                # no floor set aside (its carbon so far still kept, for ``_floor_over_limit``)
                lags.append(lag_share(b, now))
                continue
            rest = self.floor_curve.co2_g(fw, max(b.period_end_s - now, 0.0))
            lags.append(
                committed_lag_share(b, now, committed_so_far_g=so_far, committed_rest_g=rest)
            )
        if kept:
            self.new_state["floor_co2"] = kept
        return lags

    def _jobs(self) -> None:
        """Each job's options, payers, idle draw and running GPU count."""
        policy, ctx, budgets = self.policy, self.ctx, self.budgets
        b_index = {b.budget_id: i for i, b in enumerate(budgets)}
        self.jobs = jobs = list(ctx.jobs)
        opts_memo: dict = {}
        # The idle draw a job's cost leaves out (``cost_above_idle`` None): only while idle
        # GPUs stay powered and every budget that pays for the job is the cluster's, which
        # pays the idle GPUs anyway. A team budget pays the whole draw of its jobs' GPUs
        # (as the live ledgers charge a team), so for a team's job the idle draw is part
        # of what a configuration costs: left out, a low clock looked far cheaper than it
        # is to the team, and one vgg16 job on 64 GPUs at the lowest clock spent its
        # team's period budget at three times its straight line (docs/benchmarks.md,
        # "Team budgets pay the idle draw"). True / False: above idle / the whole draw
        # for every job.
        forced = policy.cost_above_idle
        powered = not ctx.snapshot.power_off_idle_nodes
        # What a job's round energy counts against the allowances, per predicted joule:
        # more than 1 for an estimate (``prediction_margin``): a learned model, or any model
        # where the snapshot's are not exact (the service's catalog models too).
        learned = 1.0 + policy.prediction_margin
        exact = ctx.snapshot.exact_perf
        estimated = (OnlinePerfModel, BlendedPerfModel)
        # Everything above depends only on a job's shape (its GPU and perf model, sizes,
        # batches, scales and payers): worked out once per shape, as a long queue has
        # few, and looked up per job.
        payer_memo: dict[tuple[str, ...], tuple[tuple[int, bool], ...]] = {}
        idle_of: dict[str, float] = {}
        shapes: dict[tuple, tuple] = {}
        rows = []
        self.shape_first: list[int] = []  # by shape: its first job's index
        shape_first = self.shape_first
        for jv in jobs:
            job = jv.job
            shape = (
                jv.gpu_model, id(jv.perf), job.min_gpus, job.max_gpus, job.global_batch,
                job.min_batch, job.max_batch, job.noise_scale, job.iter_time_scale,
                job.power_scale, jv.budget_ids,
            )  # fmt: skip
            row = shapes.get(shape)
            if row is None:
                opts = policy._options(ctx, jv, opts_memo)
                # (budget index, is it cluster-wide) of the job's payers
                pays = payer_memo.get(jv.budget_ids)
                if pays is None:
                    pays = payer_memo[jv.budget_ids] = tuple(
                        (b_index[bid], budgets[b_index[bid]].team is None) for bid in jv.budget_ids
                    )
                idle_w = idle_of.get(jv.gpu_model)
                if idle_w is None:
                    idle_w = idle_of[jv.gpu_model] = ctx.idle_power_w(jv.gpu_model)
                above_idle = bool(forced) or (
                    forced is None and powered and all(c for _, c in pays)
                )
                cost_idle_w = idle_w if above_idle else 0.0
                margin = 1.0 if exact and not isinstance(jv.perf, estimated) else learned
                # ``hull_of``'s key: jobs with the same one share a per-iteration hull
                hull_key = (
                    id(opts), id(jv.perf), job.global_batch, job.noise_scale,
                    job.iter_time_scale, job.power_scale, cost_idle_w,
                )  # fmt: skip
                row = shapes[shape] = (
                    opts,
                    pays,
                    idle_w,
                    cost_idle_w,
                    margin,
                    hull_key,
                    len(shapes),
                )
                shape_first.append(len(rows))
            rows.append(row)
        # (read only, by job index: the rows' columns)
        (
            self.opts, self.pays, self.job_idle_w, self.cost_idle_w, self.margin,
            self.hull_key, self.shape_of,
        ) = zip(*rows, strict=True) if rows else ((),) * 7  # fmt: skip
        # the fewest GPUs any job starts on: with none free, no job further down fits
        self.least_n0 = min((o[0][0] for o in opts_memo.values()), default=0)
        self.submit_s = [jv.job.submit_time_s for jv in jobs]
        self.job_ids = [jv.job.job_id for jv in jobs]
        self.running_n = [jv.job.allocation.n_gpus if jv.job.allocation else 0 for jv in jobs]
        # Running jobs changed within two restarts (a resize still loading its checkpoint,
        # or one that has computed less than its restart since): they keep their GPU count
        # this round unless admission needs their GPUs (``keep_running_sizes``, ``_push``).
        # Without it a job whose two counts the price alternately favoured was resized every
        # round and, with restarts longer than a round, never progressed (docs/benchmarks.md,
        # "The simulator on a reviewer's own inputs": 2,096 resizes, stopped as stalled).
        settle_s = 2.0 * self.policy.restart_s
        now_s = ctx.now_s
        self.pinned = (
            {
                j
                for j, jv in enumerate(jobs)
                if jv.job.allocation is not None
                and jv.job.last_change_s is not None
                and now_s - jv.job.last_change_s < settle_s
            }
            if settle_s > 0
            else set()
        )
        # (read by the order and the price: a property, computed once)
        # (Job.remaining_iters, max(total - done, 0.0), inlined: a call per job of a queue)
        self.remaining_iters = [
            0.0 if 0.0 > (r := jv.job.total_iters - jv.job.done_iters) else r for jv in jobs
        ]
        # the most GPUs each perf model has measured (``_measured_gpus``), by id
        self._max_measured: dict[int, int | None] = {}

    # --- the cost model -----------------------------------------------------------

    def rank(self, j: int, n: int, remaining_s: float, power_w: float) -> tuple[float, float]:
        """(time used for ranking, cost used for ranking) of job j on n GPUs."""
        t = remaining_s
        if self.running_n[j] and n != self.running_n[j]:
            t += self.policy.restart_s
        # With idle GPUs powered anyway, a job costs only its draw above idle.
        draw_w = power_w - self.cost_idle_w[j]
        if self.policy.cost == "carbon":
            return t, self.curve.co2_g(n * draw_w, remaining_s)
        return t, n * draw_w * remaining_s

    def evaluate(self, j: int, si: int, ci: int, bi: int) -> Evaluation:
        """(estimate, time used for ranking, cost used for ranking)."""
        sizes, clocks, batches, _ = self.opts[j]
        n = sizes[si]
        est = self.ctx.estimate(self.jobs[j], n, batches[bi], clocks[ci])
        t, c = self.rank(j, n, est.remaining_s, est.power_w)
        return est, t, c

    def box_eval(self, j: int, box: tuple[int, int, int]) -> Evaluation:
        """Job j's evaluation at configuration ``box`` (memoised: the price's allowance and
        the markup both read a job's target)."""
        hit = self.box_evals.get((j, box))
        if hit is None:
            hit = self.box_evals[j, box] = self.evaluate(j, *box)
        return hit

    def min_eval(self, j: int) -> Evaluation:
        """Job j's evaluation at its minimum configuration (memoised)."""
        hit = self.mins.get(j)
        if hit is None:
            hit = self.mins[j] = self.evaluate(j, 0, 0, self.opts[j][3])
        return hit

    def points(self, j: int) -> list[tuple[float, float, tuple[int, int, int]]]:
        """(cost, time, configuration) of every configuration of job j."""
        sizes, clocks, batches, _ = self.opts[j]
        grid = self.ctx.remaining_and_power_grid(self.jobs[j], sizes, clocks, batches)
        if self.policy.cost == "carbon":
            return [
                (c, t, (si, ci, bi))
                for si, ci, bi, remaining_s, power_w in grid
                for t, c in (self.rank(j, sizes[si], remaining_s, power_w),)
            ]
        # rank() for energy, inlined: this runs for every configuration of every job.
        idle_w = self.cost_idle_w[j]
        ran, restart = self.running_n[j], self.policy.restart_s
        return [
            (
                sizes[si] * (power_w - idle_w) * remaining_s,
                remaining_s + restart if ran and sizes[si] != ran else remaining_s,
                (si, ci, bi),
            )
            for si, ci, bi, remaining_s, power_w in grid
        ]

    def hour_hull(self, j: int) -> list:
        """Job j's lower hull of (remaining energy above idle priced at the intensity of
        this hour, time): where a carbon budget's price chooses a job's configuration
        (``hour_price``). Each second of the job's remaining run is decided afresh each
        round, so the marginal gram of a configuration is its energy now times the
        intensity now: in a dirty hour the same price buys a cheaper configuration, in a
        clean one a faster one."""
        sizes, clocks, batches, _ = self.opts[j]
        grid = self.ctx.remaining_and_power_grid(self.jobs[j], sizes, clocks, batches)
        idle_w = self.cost_idle_w[j]
        ran, restart, to_g = self.running_n[j], self.policy.restart_s, self.to_g
        return lower_hull(
            [
                (
                    sizes[si] * (power_w - idle_w) * remaining_s * to_g,
                    remaining_s + restart if ran and sizes[si] != ran else remaining_s,
                    (si, ci, bi),
                )
                for si, ci, bi, remaining_s, power_w in grid
            ]
        )

    def hull_of(self, j: int) -> tuple[list, float, Any]:
        """Job j's lower hull of (cost, time) points, as (hull, scale, key): the hull's
        points times ``scale`` are the job's, and jobs with the same key share the hull.
        Ranked by energy, a job's times and costs are proportional to its remaining
        iterations, so a waiting job's hull is that of one iteration (a long queue needs
        few hulls); a running job's adds the restart to every other GPU count, so it is
        the hull of two shared ones, its own count's and the others' (moved by the
        restart), each scaled. A job whose learned model has measured it (running, or
        stopped and waiting) also pays the risk of the counts beyond what it measured
        (``_measured_gpus``), on a hull of its own."""
        r = self.remaining_iters[j]
        if self.policy.cost == "carbon" or r <= 0.0:
            return lower_hull(self.points(j)), 1.0, ("job", j)
        key = self.hull_key[j]
        ran = self.running_n[j]
        if not ran:
            # A waiting job that has run (stopped, preempted) has measured counts too:
            # beyond them it pays the round's risk (``_measured_gpus``), on a hull of its
            # own. One that never ran has measured nothing: its prior holds it to its
            # smallest count until it is observed (the prior box), and a long queue of such
            # jobs shares a few per-iteration hulls.
            measured = self._measured_gpus(j, 0)
            if measured:
                sizes = self.opts[j][0]
                risk = self._round_risk
                pts = [
                    (c * r + risk(sizes[tag[0]], c, t, r, measured), t * r, tag)
                    for c, t, tag in self._unit_points(j, key)
                ]
                return lower_hull(pts), 1.0, ("job", j)
            hull = self.unit_hulls.get(key)
            if hull is None:
                hull = self.unit_hulls[key] = lower_hull(self._unit_points(j, key))
            return hull, r, key
        parts = self.running_hulls.get((key, ran))
        if parts is None:
            pts, sizes = self._unit_points(j, key), self.opts[j][0]
            parts = self.running_hulls[key, ran] = (
                lower_hull([p for p in pts if sizes[p[2][0]] == ran]),
                lower_hull([p for p in pts if sizes[p[2][0]] != ran]),
            )
        restart = self.policy.restart_s
        same, other = parts
        measured = self._measured_gpus(j, ran)
        if measured is None:
            return (
                lower_hull(
                    [(c * r, t * r, tag) for c, t, tag in same]
                    + [(c * r, t * r + restart, tag) for c, t, tag in other]
                ),
                1.0,
                ("job", j),
            )
        # Beyond the counts its model has measured, a point costs the worst case of the
        # round that measures it as well (``_measured_gpus``): the extra GPUs drawing for
        # a round that buys nothing. Hulled after, since that cost is not per iteration.
        sizes = self.opts[j][0]
        pts = [(c * r, t * r, tag) for c, t, tag in same]
        for c, t, tag in self._unit_points(j, key):
            n = sizes[tag[0]]
            if n != ran:
                pts.append((c * r + self._round_risk(n, c, t, r, measured), t * r + restart, tag))
        return lower_hull(pts), 1.0, ("job", j)

    def waiting_hull(self, j: int) -> tuple[list, Any] | None:
        """``hull_of``'s shared hull and key for job j, a waiting job with work left, if
        the greedy ranks by energy and its model has measured nothing: the same for every
        waiting job of its shape (``shape_of``) with work left, whose hull is it times its
        remaining iterations. None where ``hull_of`` makes such a job a hull of its own."""
        if self.policy.cost == "carbon":
            return None
        if self._measured_gpus(j, 0):
            return None
        key = self.hull_key[j]
        hull = self.unit_hulls.get(key)
        if hull is None:
            hull = self.unit_hulls[key] = lower_hull(self._unit_points(j, key))
        return hull, key

    def _round_risk(self, n: int, c: float, t: float, r: float, measured: float) -> float:
        """What a count of ``n`` GPUs beyond the ``measured`` ones risks, for a point of
        ``c`` cost and ``t`` seconds an iteration and ``r`` iterations left: its extra
        GPUs drawing for the round that measures it, with no speedup (``_measured_gpus``)."""
        if n <= measured or t <= 0.0:
            return 0.0
        return (n - measured) * c / (n * t) * min(self.round_s, t * r)

    def _measured_gpus(self, j: int, ran: int) -> int | None:
        """The most GPUs job j's learned model has measured it on (at least its running
        count ``ran`` and its smallest), or None where its model is not learned (a
        catalog model knows every count), it has measured nothing and does not run, or
        ``unmeasured_risk`` is off.

        A learned model predicts a count the job never ran at from its prior's shape,
        which can be far off (ncf on T4s: measured on one GPU, predicted at 10 ms and
        0.44 J an iteration on four, where four take 21 ms and 0.90 J). Priced as
        predicted, such a count looked faster and no costlier: under a team budget with
        no slack every ncf job moved there, each paid a round at twice the energy per
        iteration and the restarts there and back before its model knew better, and the
        team's last jobs waited for the next period (docs/benchmarks.md, "A GPU count the
        job has not run at, priced at its worst case"). So ``hull_of`` prices a count
        beyond what was measured with the worst case of the round that measures it."""
        if not self.policy.unmeasured_risk:
            return None
        perf = self.jobs[j].perf
        known = self._max_measured
        measured = known.get(id(perf), -1)
        if measured == -1:  # (a property over the model's cells: once a model a round)
            measured = known[id(perf)] = getattr(perf, "max_measured_gpus", None)
        # (a waiting job that never ran has measured nothing: its prior box holds it)
        if measured is None or not (measured or ran):
            return None
        return max(measured, ran, self.opts[j][0][0])

    def _unit_points(self, j: int, key: tuple) -> list[tuple[float, float, tuple[int, int, int]]]:
        """``points`` of one remaining iteration of job j, restart aside (energy only;
        memoised by ``hull_of``'s key)."""
        pts = self.unit_points.get(key)
        if pts is not None:
            return pts
        jv = self.jobs[j]
        job = jv.job
        sizes, clocks, batches, _ = self.opts[j]
        predict, perf, idle_w = self.ctx.cache.predict, jv.perf, self.cost_idle_w[j]
        its, ps = job.iter_time_scale, job.power_scale
        # iterations at batch b per iteration at the submitted batch (goodput)
        per_iter = [job.global_batch / useful_samples_per_iter(job, b) for b in batches]
        pts = self.unit_points[key] = []
        for si, n in enumerate(sizes):
            for ci, clock in enumerate(clocks):
                for bi, b in enumerate(batches):
                    iter_s, power_w = predict(perf, n, b, clock, None)
                    t = per_iter[bi] * iter_s * its
                    pts.append((n * (power_w * ps - idle_w) * t, t, (si, ci, bi)))
        return pts

    def restart_j(self, j: int, n: int) -> float:
        """Idle draw of job j's GPUs while a (re)start on n GPUs loads its checkpoint."""
        ran = self.running_n[j]
        if (ran and n != ran) or (not ran and self.jobs[j].job.done_iters > 0):
            return n * self.job_idle_w[j] * min(self.policy.restart_s, self.round_s)
        return 0.0

    def deltas(
        self, j: int, old: Estimate | None, new: Estimate, n_old: int, n_new: int
    ) -> tuple[float, float]:
        """Round energy added to a team budget and to a cluster budget."""
        idle_w = self.job_idle_w[j]
        m = self.margin[j]  # on the model's prediction, not on the restart's idle draw
        team = (new.round_energy_j - (old.round_energy_j if old else 0.0)) * m
        # A team pays its GPUs' idle draw while a (re)start loads the checkpoint, which
        # the busy estimate leaves out: unreserved, a job finishing in the round
        # overspends a nearly spent period (a cluster budget pays idle GPUs anyway).
        team += self.restart_j(j, n_new) - (self.restart_j(j, n_old) if old else 0.0)
        cluster_new = new.round_energy_j - n_new * idle_w * new.round_busy_s
        cluster_old = (old.round_energy_j - n_old * idle_w * old.round_busy_s) if old else 0.0
        return team, (cluster_new - cluster_old) * m

    def blocking_budget(self, j: int, d_team: float, d_cluster: float) -> int | None:
        """The first of job j's budgets whose allowance these deltas would exceed."""
        allow_e, allow_c, spent_e, to_g = self.allow_e, self.allow_c, self.spent_e, self.to_g
        for bi, is_cluster in self.pays[j]:
            d = d_cluster if is_cluster else d_team
            if allow_e[bi] is not None and spent_e[bi] + d > allow_e[bi] * (1 + 1e-12):
                return bi
            if allow_c[bi] is not None and (spent_e[bi] + d) * to_g > allow_c[bi] * (1 + 1e-12):
                return bi
        return None

    def spend(self, j: int, d_team: float, d_cluster: float) -> None:
        for bi, is_cluster in self.pays[j]:
            self.spent_e[bi] += d_cluster if is_cluster else d_team

    def apply(self, j: int, new_cfg: list[int], new_eval: Evaluation) -> bool:
        """Move admitted job j to ``new_cfg`` if the GPUs and its budgets allow."""
        sizes = self.opts[j][0]
        n_old, n_new = sizes[self.cfg[j][0]], sizes[new_cfg[0]]
        if n_new > n_old and not self.ledger.fits(self.jobs[j], n_new - n_old):
            return False
        d_team, d_cluster = self.deltas(j, self.cur[j][0], new_eval[0], n_old, n_new)
        refused_by = self.blocking_budget(j, d_team, d_cluster)
        if refused_by is not None:
            self.budget_blocked_steps[j] = refused_by
            return False
        self.ledger.take(self.jobs[j], n_new - n_old)
        self.spend(j, d_team, d_cluster)
        for bi, is_cluster in self.pays[j]:
            if (d_cluster if is_cluster else d_team) < 0.0:
                self.spend_fell.add(bi)
        self.cfg[j] = new_cfg
        self.cur[j] = new_eval
        return True

    # --- stage 1: the order of admission (point 2) --------------------------------

    def order(self) -> None:
        """Admission order (running jobs first, then waiting jobs past ``starvation_s``,
        earliest submitted first), and the jobs the GPUs could admit at their minimum,
        budgets aside: only they can run this round, so only they need target
        configurations."""
        jobs, opts, policy = self.jobs, self.opts, self.policy
        starve_s = policy.starvation_s
        by_length = policy.admission != "fifo" or policy.rank == "hesrpt"
        fifo = policy.admission == "fifo"
        predict = self.ctx.cache.predict
        # The batch and seconds per iteration at the minimum, by shape (a long queue has
        # few; the options and perf model are the shape's).
        min_iter: dict[int, tuple[int, float]] = {}
        shape_of, remaining, min_s = self.shape_of, self.remaining_iters, self.min_s
        n = len(jobs)
        if by_length:
            # RoundContext.remaining_and_power at the minimum, inlined: every job of a
            # long queue needs it for the order; the prediction is its shape's
            for shape, j in enumerate(self.shape_first):
                sizes, clocks, batches, b0 = opts[j]
                iter_s, _ = predict(jobs[j].perf, sizes[0], batches[b0], clocks[0], None)
                min_iter[shape] = (batches[b0], iter_s)
            self.min_s = min_s = [
                (r * jv.job.global_batch / hit[0] * hit[1]) * jv.job.iter_time_scale
                for r, jv, hit in zip(remaining, jobs, [min_iter[s] for s in shape_of], strict=True)
            ]
        length = [0.0] * n if fifo or not by_length else min_s
        running = [jv.job.allocation is not None for jv in jobs]
        if starve_s is None and not any(
            jv.job.priority for jv, run in zip(jobs, running, strict=True) if not run
        ):
            # Two classes, running jobs and waiting jobs of one priority: each sorted
            # on the rest of its key (length, submit time, id, index).
            keys = list(zip(length, self.submit_s, self.job_ids, range(n), strict=True))
            ahead = [k for k, run in zip(keys, running, strict=True) if run]
            behind = [k for k, run in zip(keys, running, strict=True) if not run]
            ahead.sort()
            behind.sort()
            self.order_ = [k[3] for k in ahead] + [k[3] for k in behind]
        else:
            self._order_by_class(length, running)
        # The jobs the GPUs could admit at their minimum: only they can run this round,
        # so only they need target configurations. A job that a budget cannot pay for
        # at any allowance this round (a spent team budget) takes no GPUs here: it would
        # be refused at admission, and the jobs behind it, left without targets or
        # allowance, waited on idle GPUs whatever their own budgets held.
        probe = dict(self.ledger.free)
        left = sum(probe.values())  # GPUs still free of any model
        takes_one = self.least_n0 >= 1
        for j in self.order_:
            if not left and takes_one:
                break  # every GPU is taken: no job further down the queue fits
            model, n0 = jobs[j].gpu_model, opts[j][0][0]
            if probe.get(model, 0) >= n0 and not self._unpayable(j):
                probe[model] -= n0
                left -= n0
                self.candidates.add(j)

    def _order_by_class(self, length: list[float], running: list[bool]) -> None:
        """``order_`` by class (running or not, priority, group): a class's jobs are sorted
        on the rest of the key alone, in the same order as on the whole key, without
        comparing the class's equal leading fields at every comparison of a long queue."""
        starve_s, now = self.policy.starvation_s, self.ctx.now_s
        fifo = self.policy.admission == "fifo"
        classes: dict[tuple[int, int, int], list[tuple]] = {}
        for j, jv in enumerate(self.jobs):
            job = jv.job
            if running[j]:
                group = 0
            elif starve_s is not None and now - waiting_since_s(job) >= starve_s:
                group = 1  # earliest submitted first, whatever its length
                self.starving.add(j)
            else:
                group = 2
            # Running jobs first, then a higher priority first (``by_priority`` with the
            # running kept ahead, in the same key).
            if group == 0:
                cls = (0, 0, 0)
            else:
                cls = (1, -job.priority, 1 if fifo or group == 1 else 2)
            rows = classes.get(cls)
            if rows is None:
                rows = classes[cls] = []
            rows.append((0.0 if group == 1 else length[j], job.submit_time_s, job.job_id, j))
        self.order_ = []
        for cls in sorted(classes):
            rows = classes[cls]
            rows.sort()
            self.order_ += [row[3] for row in rows]

    def _room(self, bi: int, joules: float) -> bool:
        """Whether budget ``bi``'s cap (``_budget_caps``) holds ``joules`` more this round."""
        cap_e, cap_c = self._caps[bi]
        spent = self.spent_e[bi] + joules
        if cap_e is not None and spent > cap_e * (1 + 1e-9):
            return False
        return cap_c is None or spent * self.to_g <= cap_c * (1 + 1e-9)

    def _budget_caps(self) -> list[tuple[float | None, float | None]]:
        """Each budget's most for this round whatever its price: what remains after the idle
        floor to the period's end is kept, or the paced allowance if that is more (energy
        J, carbon g; None: no such limit)."""
        ctx, caps = self.ctx, []
        for bi, b in enumerate(self.budgets):
            after_s = max(b.period_end_s - ctx.now_s - self.round_s, 0.0)
            fw = self.floor_w[bi]
            cap_e = cap_c = None
            if self.allow_e[bi] is not None:
                cap_e = max(self.allow_e[bi], b.energy_remaining_j - fw * after_s)
            if self.allow_c[bi] is not None:
                keep = self.floor_curve.co2_g(fw, after_s) if fw and after_s else 0.0
                cap_c = max(self.allow_c[bi], b.co2_remaining_g - keep)
            caps.append((cap_e, cap_c))
        return caps

    def _unpayable(self, j: int) -> bool:
        """Whether one of job j's budgets cannot pay its minimum configuration this round
        whatever allowance the prices give it (its cap, ``_budget_caps``). A job only its
        prior knows may still be probed (``probe``): never unpayable here."""
        if not self.pays[j] or (self.policy.probe_s is not None and prior_only(self.jobs[j])):
            return False
        if self._caps is None:
            self._caps = self._budget_caps()
        n0 = self.opts[j][0][0]
        spec = self._gpu_specs.get(self.jobs[j].gpu_model)
        if spec is not None:
            # Far from every cap: a bound on the minimum's cost (twice the GPU's top limit
            # for a round, and the restart's idle draw) fits, and nothing is evaluated.
            bound = n0 * (
                2.0 * spec.power_limit_max_w * self.round_s * self.margin[j]
                + self.job_idle_w[j] * self.policy.restart_s
            )
            if all(self._room(bi, bound) for bi, _ in self.pays[j]):
                return False
        d_team, d_cluster = self.deltas(j, None, self.min_eval(j)[0], 0, n0)
        return not all(
            self._room(bi, d_cluster if is_cluster else d_team) for bi, is_cluster in self.pays[j]
        )

    # --- stage 2: prices (point 4) ------------------------------------------------

    def price(self) -> None:
        """Each priced budget's price, the candidates' target configurations and the
        priced budgets' allowances (``budget_price.price_round``)."""
        if self.policy.pricing:
            self.new_state.update(price_round(self.policy, self))
        if self.policy.pricing and self.policy.cost == "carbon":
            self._keep_committed_carbon()

    def _keep_committed_carbon(self) -> None:
        """Lower each carbon allowance so that what remains after this round pays the
        idle floor to the period's end with the hours past the forecast as dirty as the
        dirtiest recent day (``pacing.dirtiest_day_ci``); where that leaves no job
        anything, its margin above the mean narrowed over the days it spans
        (``keep_hedge``). The price and the even share
        reserve the floor at the recent mean, which a grid that grows dirtier over the
        period outruns; the floor is drawn whatever the plan, so a budget that spent
        down to the mean's reserve goes over its period at its end. Only binds when
        the remaining carbon is close to that reserve."""
        ctx = self.ctx
        hi = None
        for b_i, b in enumerate(self.budgets):
            fw, allow = self.floor_w[b_i], self.allow_c[b_i]
            if not fw or allow is None or b.co2_remaining_g is None:
                continue
            if hi is None:
                history = self.new_state.get("ci_history", [])
                hi = dirtiest_day_ci(
                    ctx.snapshot.carbon,
                    now=ctx.now_s,
                    history=history,
                    hours=self.policy.keep_window_h,
                )
            after_s = max(b.period_end_s - ctx.now_s - self.round_s, 0.0)
            dirty = max(hi, self.curve.tail_ci)
            keep = self.curve.co2_g_upper(fw, after_s, dirty)
            round_floor_g = self.idle_floor_j * self.to_g
            if self.policy.keep_hedge and b.co2_remaining_g - keep <= round_floor_g:
                # The dirtiest day held to the period's end leaves no job anything: keep
                # the margin narrowed over the days it spans instead, so that a budget
                # that is mostly idle floor is not closed to work for months.
                keep = self.curve.co2_g_hedged(
                    fw, after_s, dirty, self.policy.keep_window_h * HOUR_S
                )
            self.allow_c[b_i] = min(allow, max(b.co2_remaining_g - keep, round_floor_g))

    # --- stage 3: admission at minimum configuration (point 2) --------------------

    def admit(self) -> None:
        """Admit jobs at their minimum configuration in ``order_``. With
        ``admission="marginal"`` only the running jobs, the starving ones and those of a
        higher ``Job.priority`` than the lowest waiting are admitted here; the other
        waiting jobs compete with the upgrades in the greedy (``upgrade``)."""
        if self.policy.admission == "marginal":
            waiting = [j for j in self.order_ if self.jobs[j].job.allocation is None]
            low = min((self.jobs[j].job.priority for j in waiting), default=0)
            for j in self.order_:
                job = self.jobs[j].job
                if job.allocation is None and j not in self.starving and job.priority == low:
                    self.deferred.append(j)
                else:
                    self.admit_one(j)
            self.admit_parts()
            return
        # admit_one's first test inlined: behind full GPUs a long queue only waits
        free, jobs, opts = self.ledger.free, self.jobs, self.opts
        takes_one = self.least_n0 >= 1
        for k, j in enumerate(self.order_):
            if takes_one and not any(free.values()):
                # every GPU is taken (admission only takes): the rest of the queue waits
                self.gpu_blocked.extend(self.order_[k:])
                self.admitted_in = k
                break
            if free.get(jobs[j].gpu_model, 0) < opts[j][0][0]:
                self.gpu_blocked.append(j)
                continue
            self.admit_one(j)
        self.admit_parts()

    def admit_parts(self) -> None:
        """Admit, at their minimum configuration and after every other job, the jobs
        that a budget held back although no whole period of it can pay them
        (``_part_charges``): each is charged its round, and the hard-limit watch pauses it
        where the period's funds run out; the next periods pay the rest.

        Priced on its whole cost, such a job never started: no period's free funds cover
        it, so its price is infinite and its round's cost more than any allowance, while
        under ``fifo`` or ``tiresias`` it finishes over several periods, each paused at
        its limit (docs/benchmarks.md, "A job larger than a period"). It comes after the
        others so that a job the period can finish is not left without funds by one it
        cannot."""
        others: dict[int, float] = {}  # by budget: what the other jobs need to finish
        for j in self.parts:
            jv, n0 = self.jobs[j], self.opts[j][0][0]
            if not self.ledger.fits(jv, n0):
                continue  # still budget-blocked: its reason stays
            est = self.min_eval(j)[0]
            for bi, _ in self.pays[j]:
                if bi not in others:
                    others[bi] = self._others_need(bi)
            charges = self._part_charges(j, est, *self.deltas(j, None, est, 0, n0), others)
            if not charges:
                continue  # the jobs admitted before it spent what it would run on
            self.ledger.take(jv, n0)
            for bi, joules in charges.items():
                self.spent_e[bi] += joules
                self.part_spent[bi] = self.part_spent.get(bi, 0.0) + joules
                # The round's allowance is what it is predicted to take, the part's whole
                # round included: the watch, not the allowance, stops the part where the
                # period's funds run out.
                if self.allow_e[bi] is not None:
                    self.allow_e[bi] = max(self.allow_e[bi], self.spent_e[bi])
                if self.allow_c[bi] is not None:
                    self.allow_c[bi] = max(self.allow_c[bi], self.spent_e[bi] * self.to_g)
            self.cfg[j] = [0, 0, self.opts[j][3]]
            self.cur[j] = self.mins[j]
            self.target[j] = (0, 0, self.opts[j][3])  # it runs at its minimum: no upgrade
            self.budget_blocked.pop(j, None)
            self.blocked_alone.discard(j)
            self.in_parts.add(jv.job.job_id)
        # (also in a round that held no job back: a job begun in parts that its budget
        # pays in full this round stays so, to its end)
        if self.in_parts:
            # (every active job, also those a spent budget holds back before the policy)
            active = {job.job_id for job in self.ctx.snapshot.jobs}
            kept = sorted(self.in_parts & active)
            if kept:
                self.new_state["run_in_parts"] = kept

    def _whole_j(self, j: int, est: Estimate, is_cluster: bool) -> float:
        """Job j's whole remaining cost at its minimum configuration to a team budget (its
        GPUs' whole draw and the restart a start costs it) or a cluster budget (the draw
        above idle: the cluster pays its idle GPUs anyway), in joules."""
        n0 = self.opts[j][0][0]
        whole = est.remaining_energy_j * self.margin[j]
        if is_cluster:
            return whole - n0 * self.job_idle_w[j] * est.remaining_s * self.margin[j]
        return whole + self.restart_j(j, n0)

    def _others_need(self, bi: int) -> float:
        """What the jobs paying budget ``bi`` that do not run in parts need to finish, at
        their minimum configurations (joules; summed only until it reaches what the budget
        has left, where no part is paid anyway): a part is paid only from what is left
        beyond it, so that the period's funds finish the jobs they can before any goes to
        a job that no period can finish."""
        b = self.budgets[bi]
        left = math.inf
        if b.energy_limit_j is not None:
            left = b.energy_remaining_j
        if b.co2_limit_g is not None and self.to_g > 0:
            left = min(left, b.co2_remaining_g / self.to_g)
        need = 0.0
        for j in range(len(self.jobs)):
            if self.jobs[j].job.job_id in self.in_parts:
                continue
            for b_j, is_cluster in self.pays[j]:
                if b_j == bi:
                    whole = self._whole_j(j, self.min_eval(j)[0], is_cluster)
                    if not self._larger(bi, whole):  # (a job in parts does not come first)
                        need += whole
                    break
            if need >= left:
                break
        return need

    def _larger(self, bi: int, whole_j: float) -> bool:
        """Whether ``whole_j`` (a job's whole remaining cost at its minimum, joules) is more
        than a whole period of budget ``bi`` pays: its limit less a cluster budget's idle
        floor over the period (the carbon at the recent mean intensity, the cost at now's)."""
        b = self.budgets[bi]
        fw = self.floor_w[bi]
        span = b.period_end_s - b.period_start_s
        if b.energy_limit_j is not None and whole_j > b.energy_limit_j - fw * span:
            return True
        if b.co2_limit_g is not None and self.to_g > 0:
            floor_g = fw * span * self.curve.tail_ci / J_PER_KWH
            return whole_j * self.to_g > b.co2_limit_g - floor_g
        return False

    def _part_charges(
        self,
        j: int,
        est: Estimate,
        d_team: float,
        d_cluster: float,
        others: dict[int, float],
    ) -> dict[int, float] | None:
        """What each budget paying for job j is charged this round if it runs at its
        minimum configuration in parts (``admit_parts``), or None where it may not: every
        budget whose allowance would not take its round (``d_team`` / ``d_cluster``) must
        pause its jobs at its limit (``pause_jobs``: the watch then stops the job there),
        be unable to pay the job's whole remaining cost at its minimum in any whole period
        (its limit less a cluster budget's idle floor over the period; a job it can pay
        waits for a period that pays it all) unless the job was begun in parts (it goes on
        so to its end: stopped once what is left of it fits a period, it would pay one
        more restart), and have funds left beyond the job's restart, so that the part
        makes progress. Each budget is charged the job's round."""
        if not self.pays[j]:
            return None
        charges: dict[int, float] = {}
        to_g = self.to_g
        restart = self.restart_j(j, self.opts[j][0][0])
        begun = self.jobs[j].job.job_id in self.in_parts
        for bi, is_cluster in self.pays[j]:
            d = d_cluster if is_cluster else d_team
            b = self.budgets[bi]
            fits_e = self.allow_e[bi] is None or self.spent_e[bi] + d <= self.allow_e[bi] * (
                1 + 1e-12
            )
            fits_c = self.allow_c[bi] is None or (self.spent_e[bi] + d) * to_g <= self.allow_c[
                bi
            ] * (1 + 1e-12)
            if fits_e and fits_c:
                charges[bi] = d
                continue
            if b.hard_limit_action != HardLimitAction.PAUSE_JOBS:
                return None
            fw = self.floor_w[bi]
            # The job's whole remaining cost at its minimum (against a whole period's pay).
            whole = self._whole_j(j, est, is_cluster)
            fixed = 0.0 if is_cluster else restart
            after_s = max(b.period_end_s - self.ctx.now_s - self.round_s, 0.0)
            room = math.inf
            # What it has left beyond the idle floor to the period's end (a cluster's, this
            # round's included), what the jobs not in parts need to finish (they come
            # first) and the parts admitted before this one.
            taken = self.spent_before[bi] + others[bi] + self.part_spent.get(bi, 0.0)
            if b.energy_limit_j is not None:
                room = b.energy_remaining_j - fw * after_s - taken
            if b.co2_limit_g is not None and to_g > 0:
                keep = self.floor_curve.co2_g(fw, after_s) if fw and after_s else 0.0
                room = min(room, (b.co2_remaining_g - keep) / to_g - taken)
            if not (begun or self._larger(bi, whole)) or not room > fixed:
                return None
            charges[bi] = d
        return charges

    def admit_one(self, j: int) -> bool:
        """Admit job j at its minimum configuration if the GPUs and its budgets allow
        (else note why it waits); True if it was admitted (a probe included)."""
        jobs, opts, ledger = self.jobs, self.opts, self.ledger
        jv = jobs[j]
        n0 = opts[j][0][0]
        if not ledger.fits(jv, n0):
            self.gpu_blocked.append(j)
            return False
        est = self.min_eval(j)[0]
        d_team, d_cluster = self.deltas(j, None, est, 0, n0)
        bi = self.blocking_budget(j, d_team, d_cluster)
        if bi is None:
            bi = self.period_guard(j, est)
        if bi is not None:
            if self.probe(j, est):
                return True
            self.budget_blocked[j] = bi
            if self.spent_e[bi] <= self.spent_before[bi]:  # no job ahead of it spent any
                self.blocked_alone.add(j)
            if self.policy.run_in_parts and not prior_only(jv):
                self.parts.append(j)  # perhaps run in parts (``admit_parts``)
            return False
        ledger.take(jv, n0)
        self.spend(j, d_team, d_cluster)
        self.cfg[j] = [0, 0, opts[j][3]]
        self.cur[j] = self.mins[j]
        if prior_only(jv):
            # Its prior alone says what more GPUs would gain and cost: it takes no more
            # than its box until it is observed (module docstring, "Probes").
            self.target[j] = self.prior_box(j)
        elif self.prices and j not in self.candidates:
            # admitted only because a job ahead of it waits on its budget: chosen as the
            # candidates are, each budget on the hull it priced on
            if any(self.prices[b] > 0.0 for b, _ in self.pays[j]):
                box = self.price_choice(j)
                if box is not None:
                    self.target[j] = box
        return True

    def prior_box(self, j: int) -> tuple[int, int, int]:
        """The furthest configuration (size, clock, batch index) job j may be upgraded to
        while its prior alone speaks for it: its minimum GPU count, or with
        ``prior_box="requested"`` the count it asked for, never less than it runs on now;
        any clock (module docstring, "Probes"). A priced target it had is replaced, after
        the round's allowance was counted with it."""
        sizes, clocks, _, batch = self.opts[j]
        si = 0
        if self.policy.prior_box == "requested":
            si = max(bisect.bisect_right(sizes, self.jobs[j].job.requested_gpus) - 1, 0)
        if self.running_n[j] in sizes:
            si = max(si, sizes.index(self.running_n[j]))
        return (si, len(clocks) - 1, batch)

    def probe(self, j: int, est: Estimate) -> bool:
        """Start job j at its minimum configuration for a bounded probe if only its prior
        holds it back, keep a probe that has not ended running, or extend one that ended
        before the job was observed (module docstring, "Probes"); True if it was admitted
        so."""
        policy, jv = self.policy, self.jobs[j]
        job = jv.job
        if policy.probe_s is None or not prior_only(jv):
            return False
        now = self.ctx.now_s
        rec = self.probes.get(job.job_id)
        n0 = self.opts[j][0][0]
        if rec is not None and job.allocation is not None and now < rec["until_s"] - 1e-6:
            # A probe still under way was paid for when it started: it runs to its end
            # (a round may come before it, e.g. at a live beat tick), charged as it was
            # counted.
            part_s = min(rec["until_s"] - now, self.round_s)
            if "top_w" in rec:
                self._admit_probe(j, *self._top_j(j, rec["top_w"], part_s))
            else:
                self._admit_probe(j, *self._busy_j(j, est, part_s))
            return True
        if rec is not None and job.allocation is None and not rec.get("ran"):
            rec = None  # granted, never started: not used up
        if rec is None:
            if job.allocation is not None:
                return False
        elif job.allocation is None or rec.get("extensions", 0) >= policy.probe_extensions:
            return False  # probed already: stopped, or out of extensions
        length = min(policy.probe_s, est.remaining_s)
        if not length > 0.0:
            return False
        # The bound is on the whole probe; this round is charged its own part of it (a
        # round inside the probe charges the next part, above).
        restart_j = self.restart_j(j, n0)
        busy_team, d_cluster = self._busy_j(j, est, length)
        d_team = busy_team + restart_j
        top_w = None
        if not self._probe_fits(j, policy.probe_share, d_team, d_cluster):
            # At its GPUs' highest power limit, the most the probe can draw whatever its
            # prior says (None: the model has no limit range).
            top_w = self._top_w(j, est)
            idle = all(
                self.spent_e[bi] <= self.spent_before[bi] and not self.probe_reserved()[bi]
                for bi, _ in self.pays[j]
            )
            if top_w is None or not idle:
                self._unpaid_first_probe(j, rec, "share")
                return False
            # Nothing else of its budgets runs this round: the share kept for their other
            # work keeps nothing from anyone, and a team whose period is small beside a
            # probe at its prior's draw never learned its jobs (ncf's 67 jobs never
            # started on a 7 kJ team period: 2.5 kJ of prior draw against 1.7 kJ). The
            # probe may then take what the period has left, counted and charged (in this
            # round and the probe's later ones, and held back from other probes until it
            # ends) at the most its GPUs can draw, so that a prior that underestimates the
            # draw cannot overspend.
            top_team, top_cluster = self._top_j(j, top_w, length)
            if not self._probe_fits(j, 1.0, top_team + restart_j, top_cluster):
                # A period too small for a whole probe at the top draw may still pay a
                # shorter one (a 3.4 kJ team period against 4.4 kJ for 60 s on a T4:
                # its 74 jobs never started); shorter than ``min_probe_s`` teaches
                # nothing. It leaves ``min_probe_s`` of the top draw unspent: a live
                # probe ends at the first beat tick after its end (10 s by default).
                # What such a probe teaches is one configuration; the engine's (and the
                # service's) hard-limit watch stops a budget where a later plan's guess
                # from it overspends.
                room_s = self._top_probe_s(j, top_w, restart_j) - policy.min_probe_s
                length = min(length, room_s)
                if not length >= policy.min_probe_s:
                    self._unpaid_first_probe(j, rec, "top")
                    return False
                busy_team, d_cluster = self._busy_j(j, est, length)  # its record's
                d_team = busy_team + restart_j
        part_s = min(length, self.round_s)
        if top_w is None:
            now_share = part_s / length
            self._admit_probe(j, busy_team * now_share + restart_j, d_cluster * now_share)
        else:
            top_team, top_cluster = self._top_j(j, top_w, part_s)
            self._admit_probe(j, top_team + restart_j, top_cluster)
        if rec is None:
            rec = self.probes[job.job_id] = {
                "at_s": now,
                "until_s": now + length,
                "n_gpus": n0,
                "predicted_energy_j": d_team,
            }
        else:
            # It ended before the job was observed (a slow start, reports not yet in):
            # it goes on for another probe_s, bounded like the first.
            rec["extensions"] = rec.get("extensions", 0) + 1
            rec["until_s"] = now + length
            rec["predicted_energy_j"] += d_team
        if "top_w" in rec or top_w is not None:
            rec.pop("top_w", None)
            if top_w is not None:
                rec["top_w"] = top_w
            self._reserved = None  # what later probes see held back changed
        return True

    def period_guard(self, j: int, est: Estimate) -> int | None:
        """For a job its prior alone knows, on GPUs whose highest power limit is known: the
        first budget paying for it whose period could not pay for its whole round at that
        limit, after this round's spending, the idle floor and held probes (None: all
        can). Its prior may be another workload's, wrong by far (learned cifar10 on ncf's:
        190 times too fast, a third of its draw): admitted by its prior's cheap figures in
        a period's last rounds, it overran tight budgets by up to 13.6% (docs/benchmarks.md,
        "The budget contract in learned runs, swept"). The pacing still goes by the prior;
        only a start the period could not pay for at worst waits (or is probed)."""
        if not prior_only(self.jobs[j]):
            return None
        top_w = self._top_w(j, est)
        if top_w is None:
            return None
        team_j, cluster_j = self._top_j(j, top_w, self.round_s)
        team_j += self.restart_j(j, self.opts[j][0][0])
        if self._probe_fits(j, 1.0, team_j, cluster_j):
            return None
        return self.pays[j][0][0]

    def _top_w(self, j: int, est: Estimate) -> float | None:
        """Job j at its minimum GPU count drawing its GPUs' highest power limit (or its
        estimate, if higher), with the margin (None: its model has no limit range)."""
        top = _top_limit_w(self.jobs[j])
        if top is None:
            return None
        return self.opts[j][0][0] * max(top, est.power_w) * self.margin[j]

    def _top_probe_s(self, j: int, top_w: float, restart_j: float) -> float:
        """The longest probe of job j at ``top_w`` that every budget paying for it can
        pay in full (``_probe_fits`` with a share of 1), its restart included."""
        team_w, cluster_w = self._top_j(j, top_w, 1.0)
        longest = math.inf
        for bi, is_cluster in self.pays[j]:
            free_j, free_g = self._probe_room(bi)
            w = cluster_w if is_cluster else team_w
            fixed = 0.0 if is_cluster else restart_j
            if free_j is not None:
                longest = min(longest, (free_j - fixed) / w if w > 0 else math.inf)
            if free_g is not None and self.to_g > 0:
                longest = min(longest, (free_g / self.to_g - fixed) / w if w > 0 else math.inf)
        return max(longest, 0.0)

    def _probe_room(self, bi: int) -> tuple[float | None, float | None]:
        """What budget ``bi`` has left for a probe in its period (energy J, carbon g;
        None: no such limit), after this round's spending, a cluster budget's idle
        floor to the period's end and what probes at their top draw still hold."""
        b = self.budgets[bi]
        committed = (
            self.spent_e[bi]
            + self.probe_reserved()[bi]
            + self.floor_w[bi] * max(b.period_end_s - self.ctx.now_s - self.round_s, 0.0)
        )
        free_j = None if b.energy_limit_j is None else b.energy_remaining_j - committed
        free_g = None if b.co2_limit_g is None else b.co2_remaining_g - committed * self.to_g
        return free_j, free_g

    def _probe_fits(self, j: int, share: float, d_team: float, d_cluster: float) -> bool:
        """Whether a probe of job j costing ``d_team`` (``d_cluster`` to a cluster budget)
        fits ``share`` of what each budget paying for it has left in its period, after this
        round's spending, a cluster budget's idle floor to the period's end and what the
        probes at their top draw still hold (``probe_reserved``)."""
        for bi, is_cluster in self.pays[j]:
            d = d_cluster if is_cluster else d_team
            free_j, free_g = self._probe_room(bi)
            if free_j is not None and d > share * free_j:
                return False
            if free_g is not None and d * self.to_g > share * free_g:
                return False
        return True

    def probe_reserved(self) -> list[float]:
        """Per budget, the energy that probes counted at their GPUs' top draw may still
        draw from now on (their later rounds are charged it). This round's part is
        counted too, whether or not its job was admitted yet in this round: held twice
        once it is, which errs on the side of the budget."""
        if self._reserved is None:
            reserved = [0.0] * len(self.budgets)
            if self._job_index is None:
                self._job_index = {jv.job.job_id: k for k, jv in enumerate(self.jobs)}
            now = self.ctx.now_s
            for job_id, rec in self.probes.items():
                k = self._job_index.get(job_id)
                left_s = rec["until_s"] - now
                if "top_w" not in rec or k is None or left_s <= 0.0:
                    continue
                team_j, cluster_j = self._top_j(k, rec["top_w"], left_s)
                for bi, is_cluster in self.pays[k]:
                    reserved[bi] += cluster_j if is_cluster else team_j
            self._reserved = reserved
        return self._reserved

    def _top_j(self, j: int, top_w: float, length_s: float) -> tuple[float, float]:
        """(team, cluster) energy of job j's probe at ``top_w`` (its GPUs' top draw, with
        the margin) for ``length_s``: its whole draw, and its draw above idle."""
        idle_w = self.opts[j][0][0] * self.job_idle_w[j] * self.margin[j]
        return top_w * length_s, max(top_w - idle_w, 0.0) * length_s

    def _busy_j(self, j: int, est: Estimate, length_s: float) -> tuple[float, float]:
        """(team, cluster) energy of job j at its minimum configuration for ``length_s``:
        its whole draw, and its draw above idle."""
        n0, m = self.opts[j][0][0], self.margin[j]  # a prior-only job's: learned
        return (
            n0 * est.power_w * length_s * m,
            n0 * max(est.power_w - self.job_idle_w[j], 0.0) * length_s * m,
        )

    def _unpaid_first_probe(self, j: int, rec: dict[str, Any] | None, test: str) -> None:
        """Note that job j's first probe did not fit (``test``: "share", the quarter at
        its prior's draw; "top", what the period has left at its GPUs' top draw)."""
        if rec is None:  # its first probe (an extension's job has run)
            self.probe_unpaid[j] = test

    def _admit_probe(self, j: int, d_team: float, d_cluster: float) -> None:
        self.ledger.take(self.jobs[j], self.opts[j][0][0])
        self.spend(j, d_team, d_cluster)
        self.cfg[j] = [0, 0, self.opts[j][3]]
        self.cur[j] = self.mins[j]
        self.target[j] = (0, 0, self.opts[j][3])  # a probe takes no upgrade

    # --- stage 4 (keep_running only): running jobs return to their size first -----

    def keep_running_sizes(self, only: set[int] | None = None) -> None:
        """Running jobs return to their running GPU count where the GPUs allow: every one
        (``keep_running``), or those in ``only`` (the jobs still settling after a change,
        ``pinned``), whatever the price's target."""
        if only is not None and not only:
            return
        for j in self.order_:
            if j not in self.cfg or not self.running_n[j]:
                continue
            if only is not None and j not in only:
                continue
            sizes = self.opts[j][0]
            if self.running_n[j] not in sizes:
                continue
            si_run = sizes.index(self.running_n[j])
            box = self.target.get(j)
            if si_run == 0 or (only is None and box is not None and si_run > box[0]):
                continue
            if not self.ledger.fits(self.jobs[j], sizes[si_run] - sizes[0]):
                continue
            new_cfg = [si_run, self.cfg[j][1], self.cfg[j][2]]
            self.apply(j, new_cfg, self.evaluate(j, *new_cfg))

    # --- stage 5: greedy upgrades (point 3) ---------------------------------------

    def upgrade(self) -> None:
        """Serve the best-scoring step of any admitted job while GPUs and every
        allowance last."""
        budgets, allow_e, allow_c, spent_e, to_g = (
            self.budgets,
            self.allow_e,
            self.allow_c,
            self.spent_e,
            self.to_g,
        )
        # What the upgrades share out: the GPUs and the allowances left after admission.
        self.spare_gpus = {m: max(n, 1) for m, n in self.ledger.free.items()}
        spare_e = [math.inf] * len(budgets)
        for bi_ in range(len(budgets)):
            if allow_e[bi_] is not None:
                spare_e[bi_] = allow_e[bi_] - spent_e[bi_]
            if allow_c[bi_] is not None and to_g > 0:
                spare_e[bi_] = min(spare_e[bi_], allow_c[bi_] / to_g - spent_e[bi_])
            spare_e[bi_] = max(spare_e[bi_], 1e-9)
        self.spare_e = spare_e
        self.version = dict.fromkeys(self.cfg, 0)
        self.heap: list[tuple] = []
        self.budget_blocked_steps.clear()
        self.spend_fell.clear()
        for j in self.order_[: self.admitted_in]:
            if j in self.cfg:
                self._push(j)
        for j in self.deferred:
            self._push_admission(j)
        heap, version = self.heap, self.version
        while heap:
            _, j, kind, ver, new_cfg, new_eval = heapq.heappop(heap)
            if kind == _ADMIT:
                # admitted here at its minimum, or noted as waiting for the GPUs or a budget
                if self.admit_one(j):
                    version[j] = 0
                    self._push(j)
                continue
            if ver != version[j]:
                continue
            # Free GPUs only shrink within a round: a step that does not fit them now is
            # dropped for good. An allowance can grow back: a job's cost need not rise
            # along its path to its target (a resize's idle draw while it restarts, a
            # lower draw per GPU on more GPUs), so a step that lowers a budget's spending
            # gives the steps that budget's allowance refused another try. Without that a
            # job could be refused the last step to its own running count, and resized
            # back and forth from round to round.
            if self.apply(j, new_cfg, new_eval):
                version[j] += 1
                self._push(j)
                if self.spend_fell:
                    blocked = self.budget_blocked_steps
                    retry = sorted(k for k, bi in blocked.items() if bi in self.spend_fell)
                    self.spend_fell.clear()
                    for k in retry:
                        del blocked[k]
                        if k != j:  # j's next steps are queued already
                            version[k] += 1
                            self._push(k)

    def _push(self, j: int) -> None:
        """Score job j's next step in each dimension and queue the worthwhile ones."""
        est, t, c = self.cur[j]
        if est.remaining_s <= 0.0:
            return
        policy = self.policy
        sizes, clocks, batches, _ = self.opts[j]
        si, ci, bi = self.cfg[j]
        box = self.target.get(j)
        for kind, nxt in ((_SIZE, si + 1), (_CLOCK, ci + 1), (_BATCH, bi + 1)):
            limit = (len(sizes), len(clocks), len(batches))[kind]
            if nxt >= limit:
                continue
            new_cfg = [si, ci, bi]
            new_cfg[kind] = nxt
            if box is not None and new_cfg[kind] > box[kind]:
                continue  # beyond what the price makes worth its cost
            if kind == _SIZE and j in self.pinned and sizes[nxt] > self.running_n[j]:
                continue  # still settling after its last change: no resize
            if (
                kind == _SIZE
                # heSRPT with its own exponent per step: a size step's score sets it
                and not (policy.rank == "hesrpt" and policy.hesrpt_exp is None)
                and not self.ledger.fits(self.jobs[j], sizes[nxt] - sizes[si])
            ):
                continue  # free GPUs only shrink within a round: it will not fit later
            new_est, t2, c2 = self.evaluate(j, *new_cfg)
            gain = (t - t2) / t
            if gain <= policy.min_gain:
                continue
            if policy.rank != "relative":
                score = self._per_gpu_score(j, est, new_est, t, t2, si, new_cfg[0])
            else:
                rel_cost = (c2 - c) / c if c > 0 else 0.0
                score = gain / rel_cost if rel_cost > 1e-12 else _DOMINANT * gain
                pays = self.pays[j]
                if box is None and pays and score < max(self.floor_of[b] for b, _ in pays):
                    continue  # not worth the budget it would take from later rounds
            heapq.heappush(
                self.heap, (-score, j, kind, self.version[j], new_cfg, (new_est, t2, c2))
            )

    def _per_gpu_score(
        self, j: int, est: Estimate, new_est: Estimate, t: float, t2: float, si: int, si2: int
    ) -> float:
        """The speedup the step adds over the job's minimum (as elastic normalises),
        weighted under ``rank="hesrpt"`` (``hesrpt_weight``), per share of the round's
        spare GPUs and spare allowance the step takes."""
        base = self.min_eval(j)[1]
        gain = base / t2 - base / t
        sizes = self.opts[j][0]
        if self.policy.rank == "hesrpt" and not (
            self.free_round and self.policy.free_rank == "per_gpu"
        ):
            q = self.policy.hesrpt_exp
            if q is None:
                if si2 != si:
                    # the step's own scaling exponent: T ~ n ** -q
                    q = math.log(t / t2) / math.log(sizes[si2] / sizes[si])
                    q = self.scaling[j] = min(max(q, 0.0), 1.0)
                else:
                    q = self.scaling.get(j, 1.0)  # a clock or batch step
            gain *= self.hesrpt_weight(j) ** q
        d_team, d_cluster = self.deltas(j, est, new_est, sizes[si], sizes[si2])
        share = self._share(j, sizes[si2] - sizes[si], d_team, d_cluster)
        return gain / share if share > 1e-12 else _DOMINANT * gain

    def hesrpt_weight(self, j: int) -> float:
        """The share of the jobs present (admitted or waiting) whose remaining time at
        their minimum is at least job j's: 1 for the shortest, 1/m for the longest of m.
        heSRPT's optimal allocation weighs a job's speedup by this share to the power
        of its scaling exponent (module docstring, point 3)."""
        w = self.weights.get(j)
        if w is None:
            if self.sorted_min_s is None:
                self.sorted_min_s = sorted(self.min_s)
            m = len(self.sorted_min_s)
            w = self.weights[j] = (m - bisect.bisect_left(self.sorted_min_s, self.min_s[j])) / m
        return w

    def _share(self, j: int, dn: int, d_team: float, d_cluster: float) -> float:
        """The share of the round's spare GPUs and of each paying budget's spare
        allowance that ``dn`` more GPUs and these energy deltas take."""
        share = dn / self.spare_gpus[self.jobs[j].gpu_model] if dn > 0 else 0.0
        for bi_, is_cluster in self.pays[j]:
            d = d_cluster if is_cluster else d_team
            if d > 0 and self.spare_e[bi_] < math.inf:
                share += d / self.spare_e[bi_]
        return share

    def _push_admission(self, j: int) -> None:
        """Queue waiting job j's admission at its minimum configuration
        (``admission="marginal"``), scored as a step from no GPUs to its minimum: a
        speedup of 1, weighted as ``_per_gpu_score`` weighs (exponent 1 where it takes
        the step's: from nothing, a job's progress grows in proportion), per share of
        the spare GPUs and allowance its minimum takes. An upgrade that finishes a
        short job sooner can so outrank a long job's admission."""
        est = self.min_eval(j)[0]
        n0 = self.opts[j][0][0]
        d_team, d_cluster = self.deltas(j, None, est, 0, n0)
        q = self.policy.hesrpt_exp
        gain = self.hesrpt_weight(j) ** (1.0 if q is None else q)
        share = self._share(j, n0, d_team, d_cluster)
        score = gain / share if share > 1e-12 else _DOMINANT * gain
        heapq.heappush(self.heap, (-score, j, _ADMIT, -1, None, None))

    # --- stage 6: the decision ----------------------------------------------------

    def _markup(self) -> dict[str, list[float]]:
        """Per priced budget, decayed sums over its rounds of what its granted jobs'
        configurations cost for the progress they make in the round, and of what their
        price targets would have cost for the same progress (``markup_decay``): where the
        GPUs cannot give a job its target (fewer GPUs than the target's, which cost
        more per iteration), the work costs more than the price planned. A job only its
        prior knows is left out: its target is its prior box (any clock) or a probe's
        minimum, which bound what it may take, not what the price planned for it, and
        against the box's top clock a job at the price's own clock counted as costing
        less than planned."""
        prev = self.ctx.policy_state.get("price_markup", {})
        acc = [[0.0, 0.0] for _ in self.budgets]
        for j in self.cfg:
            box = self.target.get(j)
            est, _, cost = self.cur[j]
            if box is None or est.remaining_s <= 0.0 or prior_only(self.jobs[j]):
                continue
            # the share of its remaining work the job does this round, at the
            # configuration it got and at its target
            done = min(self.round_s / est.remaining_s, 1.0)
            target_cost = self.box_eval(j, box)[2]
            for bi, _ in self.pays[j]:
                if 0.0 < self.prices[bi] < math.inf:
                    acc[bi][0] += cost * done
                    acc[bi][1] += target_cost * done
        d = self.policy.markup_decay
        out = {}
        for bi, b in enumerate(self.budgets):
            got, planned = prev.get(b.budget_id, (0.0, 0.0))
            out[b.budget_id] = [d * got + acc[bi][0], d * planned + acc[bi][1]]
        return out

    def decision(self) -> PolicyDecision:
        ctx, jobs, opts, budgets = self.ctx, self.jobs, self.opts, self.budgets
        grants = []
        granted: list[tuple[JobView, int, float]] = []
        for j in self.order_[: self.admitted_in]:
            if j not in self.cfg:
                continue
            sizes, clocks, batches, _ = opts[j]
            si, ci, bi = self.cfg[j]
            jv = jobs[j]
            grants.append(Grant(jv.job.job_id, sizes[si], batches[bi], jv.gpu_model, clocks[ci]))
            granted.append((jv, sizes[si], self.cur[j][0].remaining_s))
        waiting: dict[str, WaitReason] = {}
        forecast = FreeForecast(ctx, granted)
        behind: dict[tuple[str, int], WaitReason] = {}  # one per GPU model and count
        by_shape: dict[int, WaitReason] = {}  # (a shape's jobs share model and count)
        shape_of, job_ids = self.shape_of, self.job_ids
        for j in self.gpu_blocked:
            reason = by_shape.get(shape_of[j])
            if reason is None:
                jv = jobs[j]
                n0 = opts[j][0][0]
                reason = behind.get((jv.gpu_model, n0))
                if reason is None:
                    reason = behind[jv.gpu_model, n0] = WaitReason(
                        WaitCode.BEHIND_IN_QUEUE,
                        f"Waiting: the {ctx.capacity[jv.gpu_model]} {jv.gpu_model} GPUs are "
                        f"all given to jobs ranked ahead of it; it needs {n0}.",
                        until_s=forecast.at(jv, n0),
                    )
                by_shape[shape_of[j]] = reason
            waiting[job_ids[j]] = reason
        for j, bi in self.budget_blocked.items():
            short = bool(self.prices) and math.isinf(self.prices[bi])
            waiting[jobs[j].job.job_id] = self.policy._over_allowance(
                budgets[bi], self.curve, self.ci_now, alone=j in self.blocked_alone,
                prior=self.probe_unpaid.get(j), short=short, infeasible=self.infeasible[bi],
            )  # fmt: skip
        state = dict(self.new_state)
        if self.policy.markup_decay > 0 and self.prices:
            state["price_markup"] = self._markup()
        if self.probes:
            state["prior_probes"] = self.probes
        # The next plan is due when the first probe that runs on ends.
        now = ctx.now_s
        running = {g.job_id for g in grants}
        replan = [
            rec["until_s"]
            for job_id, rec in self.probes.items()
            if job_id in running and rec["until_s"] > now + 1e-6
        ]
        return PolicyDecision(
            grants=tuple(grants),
            waiting=waiting,
            replan_at_s=min(replan) if replan else None,
            energy_allowance_by_budget_j={
                b.budget_id: a for b, a in zip(budgets, self.allow_e, strict=True) if a is not None
            },
            co2_allowance_by_budget_g={
                b.budget_id: a for b, a in zip(budgets, self.allow_c, strict=True) if a is not None
            },
            policy_state=state,
        )
