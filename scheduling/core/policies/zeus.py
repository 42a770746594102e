"""Zeus-style per-job energy-optimal power limit (You et al., NSDI'23), on FIFO.

Zeus picks, per job, the GPU power limit (and batch size) that minimises
``eta * energy + (1 - eta) * max_power * time`` for the work to do, where
``max_power`` is the highest power limit of the GPU (``eta = 0.5`` weighs energy and
time equally; 1 is energy only, 0 time only). Zeus learns the optimum online with a
bandit over recurring runs; here the perf model predicts it directly, which is the
converged choice. Where policies see learned models, a new job's first rounds explore power
limits within a bounded cost first (``scheduling/core/exploration.py``). Jobs are queued as in
``fifo`` with the GPUs they asked for.

The knob is the power limit, in ``power_limit_step_w`` steps (Zeus' 25 W) down from the
highest limit the perf model reports (``power_limits_w``), and always the lowest one
too: a GPU whose range is narrower than a step (the T4's is 60-70 W) would otherwise
have the default limit as its only choice, and ``zeus`` would be ``fifo`` to the digit
there. A model that reports no range is tuned by SM clock step instead. The batch is
tuned too where the job allows a range and its statistical efficiency is known
(``scheduling.core.goodput``).
"""

from __future__ import annotations

from scheduling.core.context import JobView, RoundContext
from scheduling.core.goodput import batch_choices
from scheduling.core.policies.fifo import Fifo
from scheduling.core.registry import register_policy


@register_policy("zeus")
class Zeus(Fifo):
    name = "zeus"
    # Where knowledge is learned, a new job's first rounds try power limits within a
    # bounded cost (just-in-time profiling, scheduling/core/exploration.py).
    explores = True

    def __init__(
        self,
        *,
        eta: float = 0.5,
        power_limit_step_w: float = 25.0,
        tune_batch: bool = True,
        **params,
    ) -> None:
        if not 0.0 <= eta <= 1.0:
            raise ValueError("eta must be in [0, 1]")
        if power_limit_step_w <= 0:
            raise ValueError("power_limit_step_w must be positive")
        super().__init__(**params)
        self.eta = eta
        self.power_limit_step_w = power_limit_step_w
        self.tune_batch = tune_batch

    def _limits(self, jv: JobView) -> tuple[float, ...]:
        lo_hi = getattr(jv.perf, "power_limits_w", None)
        if not lo_hi:
            return ()
        lo, hi = lo_hi
        limits = []
        w = hi
        while w >= lo - 1e-9:
            limits.append(w)
            w -= self.power_limit_step_w
        if lo < limits[-1] - 1e-9:
            limits.append(lo)  # the range's floor, even off the step grid
        return tuple(sorted(limits))

    def _knobs(
        self, ctx: RoundContext, jv: JobView, n: int
    ) -> tuple[int, int | None, float | None]:
        job = jv.job
        batches = [job.global_batch]
        if self.tune_batch and job.min_batch is not None and job.max_batch is not None:
            allowed = [b for b in jv.perf.batch_sizes if job.min_batch <= b <= job.max_batch]
            batches = list(batch_choices(job, allowed))  # only the submitted one if E unknown
        limits = self._limits(jv)
        if limits:
            knobs = [(None, w) for w in limits]
            max_power_w = limits[-1]
        else:
            clocks = jv.perf.clocks_mhz or (None,)
            knobs = [(c, None) for c in clocks]
            max_power_w = max(ctx.estimate(jv, n, job.global_batch, clocks[-1]).power_w, 1e-9)
        best = None
        for b in sorted(set(batches)):
            for clock, limit in knobs:
                est = ctx.estimate(jv, n, b, clock, limit)
                cost = self.eta * est.remaining_energy_j + (1 - self.eta) * max_power_w * n * (
                    est.remaining_s
                )
                key = (cost, -b, -(clock or 0), -(limit or 0.0))
                if best is None or key < best[0]:
                    best = (key, (b, clock, limit))
        return best[1]
