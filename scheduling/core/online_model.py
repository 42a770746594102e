"""Online performance model: what one job's own measurements say about its speed and power.

The catalog (``perf_models``) knows a handful of (workload, GPU model) pairs fitted offline.
A running job reports iteration times (progress reports) and per-GPU power (NVML samples)
for each configuration it runs in; this module fits, from those observations, the same
equations the catalog evaluates (``docs/perf_models.md``), starting from a prior: the
nearest catalog workload, or a workload profile that earlier jobs taught.

Parameters are moved in log space (logit for the two shares), relative to the prior::

    z[0]  time level     compute constants x e^z0, all-reduce constants x e^(0.5 z0)
                                                             (no pull towards the prior)
    z[1]  alpha_c_s x e^z1     z[2] beta_c_s x e^z2          compute: linear in per-GPU batch
    z[3]  alpha_r_s x e^z3     z[4] beta_r_s x e^z4          all-reduce inside one node
    z[5]  alpha_n_s x e^z5     z[6] beta_n_s x e^z6          all-reduce across nodes
    z[7]  time_fixed_frac (phi): logit + z7                  how time reacts to the clock
    z[8]  peak_to_avg (kappa) x e^z8                         where a power limit starts to bind
    z[9]  power level: busy_max_w x e^z9                     (no pull towards the prior)
    z[10] batch_half x e^z10                                 draw versus per-GPU batch
    z[11] power_static_frac (s): logit + z11                 draw versus clock
    z[12] power_exp (k) x e^z12
    z[13] compute_sharpness (q): log q + z13, folded at 0    fixed and per-sample compute:
                                                             summed (q = 1) or a launch floor

``z[13]`` alone is penalised beyond the token ridge (``FitSettings.shape_ridge``): the
catalog's fits add the fixed and the per-sample compute time (q = 1), and the job's own
measurements must pay for a floor.

and fitted by regularised least squares (Levenberg-Marquardt). The job's observations enter
as squared log errors, each configuration weighted by its number of measurements. The prior
enters as ``prior_weight`` pseudo-observations spread over a grid of configurations around
the job's (GPU counts 1, 2, a node, two nodes; its per-GPU batches and a few around them;
the default, observed and lowest power limits; the observed clocks): at each, the prior's
prediction *with the job's level* (``z[0]``, ``z[9]``), so the prior speaks for the shape
only. A job run at set clocks has as many pseudo-observations again at the clocks it has
not been, its lowest and middle clock (``FitSettings.clock_anchor_weight``): the grid's
are at the clocks it ran at, so a few observations near the top decided the whole clock
shape. A level is learned
from one observation (a 3B-parameter model 20x slower than its prior is matched at its first
report); the shape follows the job as its observations outnumber the k pseudo-observations
(weight ``n / (n + k)``). A token ridge (``ridge``) keeps a parameter that nothing observes
where the prior put it. Nothing is clamped: every parameter reaches what the data says.

The level and the network: a job's first reports are usually on one GPU, where its time
is all compute, so the level they teach is its compute's. Its all-reduce (gradients over
the network) is not seen there, and scales with the level only as far as what made the
job slower or faster than its prior also grows its gradients: a model with 20x the
parameters has both, an input pipeline or a batch 20x the prior's has only the compute.
The level carries half of itself, in log, to the all-reduce constants (``NETWORK_LEVEL``:
x sqrt(20) for a job 20x its prior), and the prior's pseudo-observations put its shape at
that level: its compute at e^z0, its all-reduce at e^(z0 / 2), combined again (time), and
its idle draw plus the compute draw for the compute's share of that time (draw). Carried
whole (1, the old rule), a one-GPU ncf job 745x faster than its cifar10 prior was
predicted to scale linearly to 64 T4s (it is fastest on 4) and PowerFlow spent its team's
week on it in six hours; not carried (0), a slower job is predicted to scale as if its
gradients were the prior's. Leave one workload out, the median error on configurations
never observed, from 1 to a half: pollux 33.6 -> 18.6% after 1 observation and 12.1 ->
9.5% after 5, ElasticFlow 57.7 -> 42.5% after 1 and 3.6 -> 4.6% after 5; 0.4 did about
as well, 0.25 and 0 worse on pollux (docs/benchmarks.md, "The level and the network").

On top of the fitted equations, a configuration that was measured is corrected by its own
mean log residual, shrunk by ``config_pseudo_obs`` (``m / (m + config_pseudo_obs)`` of it
for ``m`` measurements): what was seen is predicted as seen, what was not follows the
equations.

Observations that are not finite, not positive or absurd (``refusal_reason``) never enter
a fit; the caller logs the reason. The fit itself is in ``online_fit`` (``fit_online``,
``fit_params``); this module holds the observations, the parameter moves and the model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduling.core.perf_models import (
    FittedPerfModel,
    GpuSpec,
    PowerParams,
    ThroughputParams,
    config_parts,
)
from scheduling.core.types import GpuConfig

N_PARAMS = 14
TIME_LEVEL, POWER_LEVEL, SHARPNESS = 0, 9, 13
# Bounds of what a measurement can be before it is refused as absurd.
MIN_ITER_TIME_S = 1e-5  # 10 us: no training step is shorter
MAX_ITER_TIME_S = 86_400.0  # a day per iteration is a stalled job, not a speed
MAX_POWER_FACTOR = 1.5  # x the GPU's highest power limit (NVML averages stay below it)
MAX_POWER_W = 2_000.0  # for a GPU model the catalog does not know
# How far the time level carries the prior's all-reduce constants: they move by
# e^(NETWORK_LEVEL x z0) where the compute constants move by e^z0 (module docstring,
# "The level and the network").
NETWORK_LEVEL = 0.5


@dataclass(frozen=True, slots=True)
class Observation:
    """One measurement (or ``weight`` of them) of a job in one configuration.

    ``iter_time_s``: seconds per iteration at ``local_batch`` samples per GPU;
    ``power_w``: mean draw of each of the job's GPUs while it ran. Either may be None.
    ``sm_clock_mhz``/``power_limit_w`` None: the GPU's top clock / default limit.
    ``log_t_ss``/``log_p_ss``: for a pooled observation, the weighted sum of squared
    deviations of the pooled measurements' logs about their mean (0 for one measurement):
    what repeated measurements say about the noise (``OnlinePerfModel.measured``).
    """

    n_gpus: int
    n_nodes: int
    local_batch: float
    iter_time_s: float | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    power_limit_w: float | None = None
    weight: float = 1.0
    log_t_ss: float = 0.0
    log_p_ss: float = 0.0

    def config(self) -> GpuConfig:
        return config_of(
            self.n_gpus, self.n_nodes, self.local_batch, self.sm_clock_mhz, self.power_limit_w
        )

    @property
    def key(self) -> tuple:
        return config_key(self.config(), gpus_per_node=max(self.n_gpus, 1))


def config_of(
    n_gpus: int,
    n_nodes: int,
    local_batch: float,
    sm_clock_mhz: int | None = None,
    power_limit_w: float | None = None,
) -> GpuConfig:
    """The ``GpuConfig`` of ``n_gpus`` spread evenly over ``n_nodes``."""
    n_nodes = max(1, min(n_nodes, n_gpus))
    shape = tuple(n_gpus // n_nodes + (1 if i < n_gpus % n_nodes else 0) for i in range(n_nodes))
    return GpuConfig(
        n_gpus=n_gpus,
        global_batch=max(1, round(local_batch * n_gpus)),
        sm_clock_mhz=sm_clock_mhz,
        power_limit_w=power_limit_w,
        gpus_per_node=shape,
    )


def config_key(cfg: GpuConfig, *, gpus_per_node: int) -> tuple:
    """A configuration as a dictionary key: GPUs, nodes, global batch, clock, limit (W)."""
    if cfg.gpus_per_node:
        nodes = sum(1 for k in cfg.gpus_per_node if k > 0) or 1
    else:
        nodes = -(-max(cfg.n_gpus, 1) // max(gpus_per_node, 1))
    limit = None if cfg.power_limit_w is None else round(cfg.power_limit_w)
    return (cfg.n_gpus, nodes, cfg.global_batch, cfg.sm_clock_mhz, limit)


def refusal_reason(obs: Observation, *, gpu: GpuSpec | None = None) -> str | None:
    """Why ``obs`` must not enter a fit (None: it may)."""
    if not (isinstance(obs.n_gpus, int) and obs.n_gpus >= 1):
        return f"GPU count {obs.n_gpus!r} is not a positive integer"
    if not (isinstance(obs.n_nodes, int) and 1 <= obs.n_nodes <= obs.n_gpus):
        return f"node count {obs.n_nodes!r} is not between 1 and the GPU count"
    if not (math.isfinite(obs.local_batch) and obs.local_batch > 0):
        return f"per-GPU batch {obs.local_batch!r} is not a positive finite number"
    if not (math.isfinite(obs.weight) and obs.weight > 0):
        return f"weight {obs.weight!r} is not a positive finite number"
    for name, ss in (("log_t_ss", obs.log_t_ss), ("log_p_ss", obs.log_p_ss)):
        if not (math.isfinite(ss) and ss >= 0):
            return f"{name} {ss!r} is not a finite number, not negative"
    if obs.iter_time_s is None and obs.power_w is None:
        return "neither an iteration time nor a power"
    if obs.iter_time_s is not None:
        t = obs.iter_time_s
        if not math.isfinite(t):
            return f"iteration time {t!r} is not finite"
        if t <= 0:
            return f"iteration time {t!r} s is not positive"
        if not MIN_ITER_TIME_S <= t <= MAX_ITER_TIME_S:
            return f"iteration time {t:g} s is outside [{MIN_ITER_TIME_S:g}, {MAX_ITER_TIME_S:g}] s"
    if obs.power_w is not None:
        p = obs.power_w
        top = MAX_POWER_W if gpu is None else MAX_POWER_FACTOR * gpu.power_limit_max_w
        if not math.isfinite(p):
            return f"power {p!r} is not finite"
        if p <= 0:
            return f"power {p!r} W is not positive"
        if p > top:
            return f"power {p:g} W per GPU is above {top:g} W, more than this GPU can draw"
    return None


# --- parameters <-> model -----------------------------------------------------------------


def _logit(x: float) -> float:
    x = min(max(x, 1e-4), 1.0 - 1e-4)
    return math.log(x / (1.0 - x))


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _exp(x: float) -> float:
    # exp() overflows at ~709; a fit never gets near, but a diverging step must not raise.
    return math.exp(min(x, 600.0))


def padded(z: Sequence[float]) -> list[float]:
    """``z`` with zeros for the parameters added after it was stored (a fit of 13)."""
    return [*z, *([0.0] * (N_PARAMS - len(z)))]


def floored_time_constants(tp: ThroughputParams) -> tuple[float, ...]:
    """The six time constants ``apply_params`` moves by ``z[1]``-``z[6]`` (alpha_c, beta_c,
    alpha_r, beta_r, alpha_n, beta_n), each at least its floor: a constant that is exactly
    zero (a workload whose all-reduce the fit found free) starts from 0.1 % of the prior's
    compute time at 32 samples per GPU (0.01 % per extra GPU), so a multiplicative step
    can still reach what a job shows."""
    ref_s = tp.compute_time_s(32.0)
    return (
        max(tp.alpha_c_s, 1e-3 * ref_s),
        max(tp.beta_c_s, 1e-3 / 32.0 * ref_s),
        max(tp.alpha_r_s, 1e-3 * ref_s),
        max(tp.beta_r_s, 1e-4 * ref_s),
        max(tp.alpha_n_s, 1e-3 * ref_s),
        max(tp.beta_n_s, 1e-4 * ref_s),
    )


def apply_params(prior: FittedPerfModel, z: Sequence[float], *, workload: str | None = None):
    """The prior's equations with its parameters moved by ``z`` (see the module docstring;
    the time constants from their floors, ``floored_time_constants``)."""
    tp, pw, gpu = prior.throughput, prior.power, prior.gpu
    z = padded(z)
    level = _exp(z[0])
    net_level = _exp(NETWORK_LEVEL * z[0])
    a_c, b_c, a_r, b_r, a_n, b_n = floored_time_constants(tp)
    throughput = ThroughputParams(
        alpha_c_s=a_c * level * _exp(z[1]),
        beta_c_s=b_c * level * _exp(z[2]),
        alpha_r_s=a_r * net_level * _exp(z[3]),
        beta_r_s=b_r * net_level * _exp(z[4]),
        alpha_n_s=a_n * net_level * _exp(z[5]),
        beta_n_s=b_n * net_level * _exp(z[6]),
        gamma=tp.gamma,
        # log q moved from the prior's (0 for a catalog fit; a profile's may be more) and
        # folded at 0: never below 1 (a time above the sum of its parts is no launch
        # floor, and q < 1 overflows), down to 1 from a profile's floor, and with a slope
        # either way from a prior at 1.
        compute_sharpness=_exp(abs(math.log(max(tp.compute_sharpness, 1.0)) + z[SHARPNESS])),
    )
    d = gpu.dvfs
    dvfs = replace(
        d,
        time_fixed_frac=_sigmoid(_logit(d.time_fixed_frac) + z[7]),
        peak_to_avg=d.peak_to_avg * _exp(z[8]),
        power_static_frac=_sigmoid(_logit(d.power_static_frac) + z[11]),
        power_exp=d.power_exp * _exp(z[12]),
    )
    power = PowerParams(
        busy_max_w=pw.busy_max_w * _exp(z[9]),
        batch_half=max(pw.batch_half, 1e-3) * _exp(z[10]),
        busy_floor_frac=pw.busy_floor_frac,
    )
    return FittedPerfModel(
        workload=workload or prior.workload,
        gpu=replace(gpu, dvfs=dvfs),
        batch_sizes=prior.batch_sizes,
        throughput=throughput,
        power=power,
        errors={},
        sources={"prior": f"{prior.workload}@{prior.gpu_model}"},
    )


# --- the fit ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FitSettings:
    prior_weight: float = 1.0  # k: the prior counts as this many observations
    ridge: float = 1e-4  # token pull of every parameter towards the prior
    # What a launch floor (z[13], a shape no catalog fit has) costs the fit, in the units of
    # its weighted squared log errors: the job's own measurements must pay for it. One
    # measurement per configuration never does; a round's pooled dozens do where the time
    # bends (an H100's cnn and transformer) and not where it is flat, whose knee the data
    # do not place (without it the prior's extrapolation put the MLPs' knee just past the
    # largest batch seen). 0.5-8 gave the same verdicts: docs/benchmarks.md.
    shape_ridge: float = 2.0
    config_pseudo_obs: float = 0.5  # shrinkage of a measured configuration's own residual
    # The prior's weight at the clocks a job run at set clocks has not been (the lowest and
    # the middle of the range, at its own GPU counts and batches), besides the grid's: the
    # grid sits at the observed clocks, so five observations near the top clock decided the
    # whole clock shape (an A100 that does not hold its top clock: the draw's shape
    # flattened, the energy below 7.4% off after 5 observations against 2.7% after 1;
    # with this 2.6%; docs/benchmarks.md, "The online model at set clocks").
    clock_anchor_weight: float = 1.0
    max_steps: int = 40


@dataclass(frozen=True, slots=True)
class _Cell:
    """Observations of one configuration, pooled: mean log value, total weight and the
    weighted sum of squared deviations of the logs about the mean (``ss_t``/``ss_p``)."""

    cfg: GpuConfig
    log_t: float | None
    w_t: float
    log_p: float | None
    w_p: float
    ss_t: float = 0.0
    ss_p: float = 0.0


def pool(observations: Iterable[Observation], gpus_per_node: int) -> dict[tuple, _Cell]:
    """Pool observations by configuration (weighted mean of the logs, and the weighted sum
    of squared deviations about it: each observation's own ``log_*_ss`` plus its mean's
    spread, so pooling pooled observations loses nothing)."""
    acc: dict[tuple, list] = {}
    for obs in observations:
        cfg = obs.config()
        key = config_key(cfg, gpus_per_node=gpus_per_node)
        a = acc.setdefault(key, [cfg, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        if obs.iter_time_s is not None:
            lt = math.log(obs.iter_time_s)
            a[1] += obs.weight * lt
            a[2] += obs.weight
            a[5] += obs.log_t_ss + obs.weight * lt * lt
        if obs.power_w is not None:
            lp = math.log(obs.power_w)
            a[3] += obs.weight * lp
            a[4] += obs.weight
            a[6] += obs.log_p_ss + obs.weight * lp * lp
    out = {}
    for k, a in acc.items():
        log_t = a[1] / a[2] if a[2] > 0 else None
        log_p = a[3] / a[4] if a[4] > 0 else None
        out[k] = _Cell(
            cfg=a[0],
            log_t=log_t,
            w_t=a[2],
            log_p=log_p,
            w_p=a[4],
            ss_t=_spread(a[5], a[2], log_t),
            ss_p=_spread(a[6], a[4], log_p),
        )
    return out


def _spread(sum_sq: float, weight: float, mean: float | None) -> float:
    """Sum of squared deviations from the sum of squares; a deviation below rounding is 0."""
    if mean is None or weight <= 0:
        return 0.0
    ss = sum_sq - weight * mean * mean
    return ss if ss > 1e-12 * max(sum_sq, 1.0) else 0.0


class OnlinePerfModel:
    """Implements ``PerfModel`` for one job (or workload profile) on one GPU model: the
    fitted equations plus the shrunk residual of each measured configuration.

    ``n_time_obs``/``n_power_obs`` count what it learned from; a model with none is the
    prior alone (``estimated``), unless ``prior_measured``: its prior is its workload's own
    profile, whose measurements by earlier jobs tell its compute split
    (``profiles.knows_split``), so what it predicts is learned, not guessed.
    """

    __slots__ = (
        "workload",
        "gpu_model",
        "idle_power_w",
        "clocks_mhz",
        "batch_sizes",
        "base",
        "prior",
        "params",
        "n_time_obs",
        "n_power_obs",
        "prior_measured",
        "planned_limits_w",
        "_time_corr",
        "_power_corr",
        "_cells",
        "_energy_line",
        "_bounded",
    )

    def __init__(
        self,
        *,
        prior: FittedPerfModel,
        params: Sequence[float],
        workload: str | None = None,
        time_corr: Mapping[tuple, float] | None = None,
        power_corr: Mapping[tuple, float] | None = None,
        n_time_obs: float = 0.0,
        n_power_obs: float = 0.0,
        cells: Mapping[tuple, _Cell] | None = None,
        prior_measured: bool = False,
        base: FittedPerfModel | None = None,
    ) -> None:
        self.prior = prior
        self.prior_measured = prior_measured
        self.params = tuple(float(v) for v in params)
        # ``base``: ``apply_params(prior, params, workload=workload)`` where the caller has
        # it (a rebuild with the same parameters keeps its predictions cached)
        self.base = (
            base if base is not None else apply_params(prior, self.params, workload=workload)
        )
        self.workload = self.base.workload
        self.gpu_model = prior.gpu_model
        self.idle_power_w = prior.idle_power_w
        self.clocks_mhz = prior.clocks_mhz
        self.batch_sizes = prior.batch_sizes
        self.n_time_obs = n_time_obs
        self.n_power_obs = n_power_obs
        self.planned_limits_w: tuple[float, float] | None = None  # (``with_limits``)
        self._time_corr = dict(time_corr or {})
        self._power_corr = dict(power_corr or {})
        self._cells = dict(cells or {})
        self._energy_line = (
            busy_energy_line(self._cells.values(), self.base) if ENERGY_BOUND else None
        )
        self._bounded: dict[GpuConfig, tuple[float, float]] = {}

    def __repr__(self) -> str:
        return (
            f"OnlinePerfModel({self.workload!r}, {self.gpu_model!r}, "
            f"{self.n_time_obs:g} time / {self.n_power_obs:g} power observations)"
        )

    @property
    def estimated(self) -> bool:
        """True while nothing measured backs the iteration time: a prior, not learned."""
        return self.n_time_obs <= 0 and not self.prior_measured

    @property
    def gpu(self) -> GpuSpec:
        return self.base.gpu

    @property
    def power_limits_w(self) -> tuple[float, float]:
        if self.planned_limits_w is not None:
            return self.planned_limits_w
        return self.base.power_limits_w

    def _key(self, cfg: GpuConfig) -> tuple:
        return config_key(cfg, gpus_per_node=self.base.gpu.gpus_per_node)

    def iter_time_s(self, cfg: GpuConfig) -> float:
        if self._energy_line is not None:
            return self.time_and_power(cfg)[0]
        t = self.base.iter_time_s(cfg)
        if self._time_corr:
            t *= math.exp(self._time_corr.get(self._key(cfg), 0.0))
        return t

    def power_w(self, cfg: GpuConfig) -> float:
        if self._energy_line is not None:
            return self.time_and_power(cfg)[1]
        p = self.base.power_w(cfg)
        if self._power_corr:
            p *= math.exp(self._power_corr.get(self._key(cfg), 0.0))
        return p

    def time_and_power(self, cfg: GpuConfig) -> tuple[float, float]:
        """(``iter_time_s``, ``power_w``) of ``cfg``, the configuration keyed once."""
        if self._energy_line is not None and self._key(cfg) not in self._cells:
            hit = self._bounded.get(cfg)
            if hit is None:
                if len(self._bounded) >= _BOUNDED_CACHE_LIMIT:
                    self._bounded.clear()
                hit = self._bounded[cfg] = self._energy_bounded(cfg)
            return hit
        t, p = self.base.time_and_power(cfg)
        if self._time_corr or self._power_corr:
            key = self._key(cfg)
            if self._time_corr:
                t *= math.exp(self._time_corr.get(key, 0.0))
            if self._power_corr:
                p *= math.exp(self._power_corr.get(key, 0.0))
        return t, p

    def energy_per_iter_j(self, cfg: GpuConfig) -> float:
        t, p = self.time_and_power(cfg)
        return max(cfg.n_gpus, 1) * p * t

    def fitted_energy_per_iter_j(self, cfg: GpuConfig) -> float:
        """Energy per iteration on the fitted equations alone (no per-configuration
        correction): what the fit pooled over every configuration says."""
        return self.base.energy_per_iter_j(cfg)

    def _energy_bounded(self, cfg: GpuConfig) -> tuple[float, float]:
        """(time, draw) of a configuration the job has not measured: above the largest
        per-GPU batch it measured, its compute time at least the energy bound at its batch
        (``busy_energy_line``); at or below it, the fitted equations'."""
        base = self.base
        n_gpus, n_nodes, b, clock, limit = config_parts(cfg, base.gpu.gpus_per_node)
        compute_s, compute_w = base.compute_parts(b, clock, limit)
        e0_j, e1_j, measured_b = self._energy_line
        if b <= measured_b:
            return base.combine_parts(n_gpus, n_nodes, compute_s, compute_w)
        idle_w, top_w = base.idle_power_w, base.gpu.power_limit_max_w
        top_s, top_draw_w = base.compute_parts(b, None, None)
        bound_s = (e0_j + e1_j * b) / (top_w - idle_w)
        if bound_s > top_s:
            # More work than the GPU can draw for in the equations' time: slower by the
            # ratio at every clock and limit, drawing at the top clock what the work needs
            # over that time (the highest limit), never more than the limit it runs under.
            compute_s *= bound_s / top_s
            if top_draw_w > idle_w:
                compute_w = idle_w + (compute_w - idle_w) * (top_w - idle_w) / (top_draw_w - idle_w)
            cap_w = top_w if limit is None else min(limit, top_w)
            compute_w = min(compute_w, max(cap_w, idle_w))
        return base.combine_parts(n_gpus, n_nodes, compute_s, compute_w)

    @property
    def max_measured_gpus(self) -> int:
        """The most GPUs an iteration time was measured on (0: none yet)."""
        return max((c.cfg.n_gpus for c in self._cells.values() if c.log_t is not None), default=0)

    def measured_batches(self) -> frozenset[float]:
        """The per-GPU batches an iteration time was measured at under the default limit
        and the top clock (what a batch probe adds to: ``exploration.BATCH_PROBE``)."""
        top = self.base.power_limits_w[1]
        return frozenset(
            c.cfg.global_batch / max(c.cfg.n_gpus, 1)
            for c in self._cells.values()
            if c.log_t is not None
            and c.cfg.sm_clock_mhz is None
            and (c.cfg.power_limit_w is None or c.cfg.power_limit_w >= top - 0.5)
        )

    def measured(self, cfg: GpuConfig) -> Measured | None:
        """What was measured in ``cfg`` itself (None: nothing, or no time or no power)."""
        c = self._cells.get(self._key(cfg))
        if c is None or c.log_t is None or c.log_p is None:
            return None
        return Measured(c.log_t, c.w_t, c.ss_t, c.log_p, c.w_p, c.ss_p)


@dataclass(frozen=True, slots=True)
class Measured:
    """Pooled measurements of one configuration: mean log iteration time and mean log
    per-GPU draw, the weight (number of measurements) of each, and the weighted sum of
    squared deviations of each's logs about its mean (0 where nothing was repeated)."""

    log_t: float
    w_t: float
    ss_t: float
    log_p: float
    w_p: float
    ss_p: float


# Whether a job's unmeasured configurations are held to the energy its measured ones say
# their work takes (``busy_energy_line``); docs/benchmarks.md, "The energy a batch needs".
ENERGY_BOUND = True
_BOUNDED_CACHE_LIMIT = 1 << 14  # bounded predictions remembered per model before a reset


def busy_energy_line(
    cells: Iterable[_Cell], base: FittedPerfModel
) -> tuple[float, float, float] | None:
    """(e0 J, e1 J per sample, the largest per-GPU batch measured): the energy one GPU
    spends above its idle draw per iteration, ``(P - idle) x T``, as a line in the per-GPU
    batch, fitted (weighted least squares, both coefficients at least 0) to the job's own
    measurements on one GPU at its top clock and default limit (on several, the draw counts
    the all-reduce's waiting, as ``measured_draw_span_w``'s draws leave out); None with fewer
    than two per-GPU batches so measured, or no slope.

    The work of an iteration grows with its samples, and so does the energy the GPU spends
    on it above idle; the GPU cannot draw more than its highest limit, so an iteration at
    per-GPU batch ``b`` takes at least ``(e0 + e1 b) / (limit - idle)``. The bound is read
    above the largest batch measured only, where the work outgrows anything the GPU was
    seen to do: below the measured batches the line's intercept is an extrapolation that
    the fixed part of an iteration need not follow (a V100's resnet50 measured at 64-192,
    carried to batch 8, was held 5 % too slow). A job whose time is
    flat over the batches it ran (a launch floor) while its draw climbs (the H100's lstm:
    258 -> 523 W from 128 to 512 at 9.4-11.3 ms) shows the GPU filling; the line says when
    it is full and the time must turn up (15.5 ms at 1024), which the fitted time, flat,
    and the fitted draw, saturating below what the job drew, do not."""
    idle_w, gpu = base.idle_power_w, base.gpu
    pts: dict[float, list[float]] = {}
    for c in cells:
        if c.log_t is None or c.log_p is None or c.cfg.n_gpus != 1:
            continue
        clock, limit = c.cfg.sm_clock_mhz, c.cfg.power_limit_w
        if clock is not None and clock < gpu.dvfs.max_clock_mhz:
            continue
        if limit is not None and limit < gpu.power_limit_max_w:
            continue
        b = float(max(c.cfg.global_batch, 1))
        w = min(c.w_t, c.w_p)
        acc = pts.setdefault(b, [0.0, 0.0])
        acc[0] += w * (math.exp(c.log_p) - idle_w) * math.exp(c.log_t)
        acc[1] += w
    xs = [(b, e / w, w) for b, (e, w) in pts.items() if w > 0]
    if len(xs) < 2 or not gpu.power_limit_max_w > idle_w:
        return None
    sw = sum(w for _, _, w in xs)
    mx = sum(w * x for x, _, w in xs) / sw
    my = sum(w * y for _, y, w in xs) / sw
    sxx = sum(w * (x - mx) ** 2 for x, _, w in xs)
    e1 = max(sum(w * (x - mx) * (y - my) for x, y, w in xs) / sxx, 0.0) if sxx > 0 else 0.0
    e0 = my - e1 * mx
    if e0 < 0.0:  # the line through the origin instead
        e0 = 0.0
        e1 = max(sum(w * x * y for x, y, w in xs) / sum(w * x * x for x, _, w in xs), 0.0)
    return (e0, e1, max(x for x, _, _ in xs)) if e1 > 0.0 else None


class BlendedPerfModel:
    """Implements ``PerfModel``: the geometric mean of several online models of one job,
    each fitted from the same observations against a different prior (for a GPU model no
    catalog entry covers: the workload's models on every other GPU, each carried onto
    this one). Where a handful of observations cannot tell the priors apart (a job seen at
    one batch, whose power-limit response every candidate reproduces), picking one is a
    coin toss; their consensus is the estimate whose error does not depend on the toss.
    Everything but the three predictions (GPU, limits, observation counts) is the first
    model's."""

    __slots__ = (
        "models",
        "workload",
        "gpu_model",
        "idle_power_w",
        "clocks_mhz",
        "batch_sizes",
        "planned_limits_w",
    )

    def __init__(self, models: Sequence[OnlinePerfModel]) -> None:
        if not models:
            raise ValueError("nothing to blend")
        self.models = tuple(models)
        first = self.models[0]
        self.workload = first.workload
        self.gpu_model = first.gpu_model
        self.idle_power_w = first.idle_power_w
        self.clocks_mhz = first.clocks_mhz
        self.batch_sizes = first.batch_sizes
        self.planned_limits_w: tuple[float, float] | None = None  # (``with_limits``)

    def __repr__(self) -> str:
        return f"BlendedPerfModel({self.workload!r}, {self.gpu_model!r}, {len(self.models)})"

    @property
    def estimated(self) -> bool:
        return self.models[0].estimated

    @property
    def gpu(self) -> GpuSpec:
        return self.models[0].gpu

    @property
    def power_limits_w(self) -> tuple[float, float]:
        if self.planned_limits_w is not None:
            return self.planned_limits_w
        return self.models[0].power_limits_w

    def iter_time_s(self, cfg: GpuConfig) -> float:
        logs = [math.log(m.iter_time_s(cfg)) for m in self.models]
        return math.exp(sum(logs) / len(logs))

    def power_w(self, cfg: GpuConfig) -> float:
        logs = [math.log(m.power_w(cfg)) for m in self.models]
        return math.exp(sum(logs) / len(logs))

    def energy_per_iter_j(self, cfg: GpuConfig) -> float:
        return max(cfg.n_gpus, 1) * self.power_w(cfg) * self.iter_time_s(cfg)

    def fitted_energy_per_iter_j(self, cfg: GpuConfig) -> float:
        """The geometric mean of the models' fitted-equation energies (no corrections)."""
        logs = [math.log(m.fitted_energy_per_iter_j(cfg)) for m in self.models]
        return math.exp(sum(logs) / len(logs))

    @property
    def max_measured_gpus(self) -> int:
        return self.models[0].max_measured_gpus

    def measured_batches(self) -> frozenset[float]:
        return self.models[0].measured_batches()

    def measured(self, cfg: GpuConfig) -> Measured | None:
        """The measurements (the same observations fed every model)."""
        return self.models[0].measured(cfg)


def learned_model(
    prior: FittedPerfModel,
    params: Sequence[float],
    observations: Iterable[Observation],
    *,
    settings: FitSettings = FitSettings(),  # noqa: B008 - frozen, never mutated
    workload: str | None = None,
    base: FittedPerfModel | None = None,
    prior_measured: bool = False,
) -> OnlinePerfModel:
    """The model of fitted ``params`` with each observed configuration's shrunk residual:
    what ``fit_online`` returns, rebuilt from stored parameters without refitting.
    ``base``: an earlier such model's ``base`` for the same prior, parameters and
    workload, whose predictions are then reused; ``prior_measured``: the prior is backed
    by measurements (``OnlinePerfModel``), so the model is not ``estimated`` before the
    job's own iteration times arrive."""
    fitted = base if base is not None else apply_params(prior, params, workload=workload)
    cells = pool(observations, prior.gpu.gpus_per_node)
    time_corr, power_corr = {}, {}
    k = settings.config_pseudo_obs
    for key, c in cells.items():
        if c.log_t is not None:
            res = c.log_t - math.log(fitted.iter_time_s(c.cfg))
            time_corr[key] = res * c.w_t / (c.w_t + k)
        if c.log_p is not None:
            res = c.log_p - math.log(fitted.power_w(c.cfg))
            power_corr[key] = res * c.w_p / (c.w_p + k)
    return OnlinePerfModel(
        prior=prior,
        params=params,
        workload=workload,
        time_corr=time_corr,
        power_corr=power_corr,
        n_time_obs=sum(c.w_t for c in cells.values()),
        n_power_obs=sum(c.w_p for c in cells.values()),
        cells=cells,
        base=fitted,
        prior_measured=prior_measured,
    )


# --- choosing a prior -----------------------------------------------------------------


def rescale_batch(prior: FittedPerfModel, factor: float) -> FittedPerfModel:
    """``prior`` with its per-GPU batch axis stretched by ``factor``: at per-GPU batch ``b``
    the returned model computes and draws as ``prior`` does at ``factor x b`` (the compute
    time's per-sample constant x factor, the draw's ``batch_half`` / factor). Everything
    else (all-reduce, power-limit and clock response, levels) is the prior's."""
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"batch factor {factor!r} is not a positive finite number")
    tp, pw = prior.throughput, prior.power
    return FittedPerfModel(
        workload=prior.workload,
        gpu=prior.gpu,
        batch_sizes=tuple(max(1, round(b / factor)) for b in prior.batch_sizes),
        throughput=replace(tp, beta_c_s=tp.beta_c_s * factor),
        power=replace(pw, batch_half=max(pw.batch_half, 1e-3) / factor),
        errors=prior.errors,
        sources={**prior.sources, "batch_factor": f"{factor:.6g}"},
    )


def param_scaled_prior(prior: FittedPerfModel, ratio: float, *, comm: bool = False):
    """``prior`` for a model ``ratio`` times its parameter count: the compute time per
    sample x ``ratio`` (and, with ``comm``, the all-reduce times too: gradients grow with
    the parameters). A level is learned from the job's first report anyway; what the
    ratio says before it, and after it the balance of per-sample against fixed time."""
    if not (math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"parameter ratio {ratio!r} is not a positive finite number")
    tp = prior.throughput
    tp = replace(tp, beta_c_s=tp.beta_c_s * ratio)
    if comm:
        tp = replace(
            tp,
            alpha_r_s=tp.alpha_r_s * ratio,
            beta_r_s=tp.beta_r_s * ratio,
            alpha_n_s=tp.alpha_n_s * ratio,
            beta_n_s=tp.beta_n_s * ratio,
        )
    return FittedPerfModel(
        workload=prior.workload,
        gpu=prior.gpu,
        batch_sizes=prior.batch_sizes,
        throughput=tp,
        power=prior.power,
        errors=prior.errors,
        sources={**prior.sources, "param_ratio": f"{ratio:.6g}"},
    )


def batch_matched_prior(
    prior: FittedPerfModel, local_batch: float, *, typical_local_batch: float | None = None
) -> FittedPerfModel:
    """``prior`` mapped on a normalized batch axis: the job's per-GPU batch ``local_batch``
    (the one it was submitted with) is put where the prior's own typical per-GPU batch sits
    (``typical_local_batch``; by default the median of ``prior.batch_sizes``, which are
    per-GPU batches for one-GPU sweeps such as Zeus'). A user submits a batch that suits
    the model (memory, convergence), so how far a batch is from the submitted one says
    more about how the iteration time and the draw bend than the batch's absolute size:
    ShuffleNet at 1,024 samples and BERT at 24 are both "their usual batch"."""
    if typical_local_batch is None:
        sizes = sorted(prior.batch_sizes)
        if not sizes:
            return prior
        typical_local_batch = float(sizes[len(sizes) // 2])
    if not (local_batch > 0 and typical_local_batch > 0):
        return prior
    return rescale_batch(prior, typical_local_batch / local_batch)


def at_default_power(obs: Observation, gpu: GpuSpec) -> bool:
    """True for an observation the GPU ran at its top clock and default (highest) limit."""
    clock_ok = obs.sm_clock_mhz is None or obs.sm_clock_mhz >= gpu.dvfs.max_clock_mhz
    limit_ok = obs.power_limit_w is None or obs.power_limit_w >= gpu.power_limit_max_w
    return clock_ok and limit_ok


def draw_busy_fraction(
    prior: FittedPerfModel,
    observations: Iterable[Observation],
    *,
    idle_w: float,
    busy_max_w: float,
) -> tuple[float, float] | None:
    """(per-GPU batch, busy fraction) from the job's own draw, or None where no observation
    at the top clock and default limit carries a draw. A draw need not come with a time: the
    live service pools its NVML samples apart from its progress reports (they differ in
    number, ``pooled_observations``), and only the prior's times are read here.

    A GPU draws about ``idle_w`` while it waits (on the CPU, the data loader, the host) and
    about ``busy_max_w`` while its SMs are saturated, so the fraction of an iteration's
    compute time it is busy is ``u = (P - idle_w) / (busy_max_w - idle_w)``, clipped to
    [0, 1]. Taken at the batch the job was measured at most (the first such on a tie);
    on several GPUs the draw is divided by the prior's compute share of the iteration (the
    GPU idles while it waits on the all-reduce: ``combine_parts``)."""
    span_w = busy_max_w - idle_w
    if not (math.isfinite(span_w) and span_w > 0):
        return None
    weights: dict[float, float] = {}
    logs: dict[float, list] = {}
    for obs in observations:
        if obs.power_w is None or not at_default_power(obs, prior.gpu):
            continue
        b = obs.local_batch
        weights[b] = weights.get(b, 0.0) + obs.weight
        logs.setdefault(b, []).append((obs, obs.weight * math.log(obs.power_w)))
    if not weights:
        return None
    batch = max(weights, key=lambda b: weights[b])  # dicts keep first-seen order on ties
    parts = prior.compute_parts(batch, None, None)
    share = 0.0
    for obs, _ in logs[batch]:
        t_s, _ = prior.combine_parts(obs.n_gpus, obs.n_nodes, *parts)
        share += obs.weight * (parts[0] / t_s if t_s > 0 else 1.0)
    share /= weights[batch]
    draw_w = math.exp(sum(lp for _, lp in logs[batch]) / weights[batch])
    u = (draw_w - idle_w) / (span_w * max(share, 1e-6))
    return batch, min(max(u, 0.0), 1.0)


def draw_shaped_prior(
    prior: FittedPerfModel,
    observations: Iterable[Observation],
    *,
    idle_w: float,
    busy_max_w: float,
    prior_share: float = 0.0,
    draw_shape: bool = False,
    floor_w: float | None = None,
    floor_source: str | None = None,
) -> FittedPerfModel:
    """``prior`` with its compute time's split into fixed and per-sample parts taken from the
    job's own draw (``draw_busy_fraction``) instead of from the prior's workload.

    At the per-GPU batch ``b0`` where the job drew ``P``, the GPU is busy a fraction ``u``
    of the compute time. Reading the busy time as the per-sample part and the waiting as
    the fixed part, ``beta_c x b0 = u x T_c(b0)`` and ``alpha_c = (1 - u) x T_c(b0)``: a
    job that draws idle power (waiting on its input pipeline) has an iteration time flat in
    batch, one that draws its GPU's busy maximum a time proportional to batch. The compute
    time at ``b0`` is the prior's, so nothing that was predicted at the observed batch
    changes; only how the time bends away from it. ``prior_share`` in [0, 1] averages the
    draw's split with the prior's in logit space (0: the draw's alone). Without a draw at
    the default limit, ``prior`` is returned unchanged.

    ``floor_w`` (None: ``idle_w``, one reading for both): the least any workload draws on
    this GPU, the floor the draw's batch shape starts from. A GPU that runs a job's light
    work (lookups, copies, kernels that wait on memory, with its clocks up) draws more than
    at rest but no more as that work grows with the batch. The share of the time the GPU
    works at all, ``u`` (the time's split), is read against its idle draw; the job's draw
    while it computes (``idle + (busy_max - idle) x u``: on several GPUs without the
    all-reduce's wait) is read against the floor, a share ``u_f`` of the span above it (a
    job drawing less than the floor is the least loading workload seen: its own draw is
    the floor). By default (``FLOOR_CAP`` False) the draw rises from the floor towards
    ``busy_max`` itself, half way at ``b0 (1 - u_f) / u_f``; capped, it rises with the
    per-sample share of the time (``batch_half = alpha_c / beta_c``, as with one reading)
    towards ``floor + (busy_max - floor) x u_f / u``, never past it. Either way it is the
    job's own at ``b0``, on any GPU count. A job at the floor is predicted a flat draw
    with a time that still grows per sample (ncf on an A40: 84 W at every batch from 8 to
    32,768, its time x16 from 512 to 32,768); docs/benchmarks.md, "Two readings of one
    draw" and "The floor, read live". ``floor_source``: what an estimated ``floor_w`` was
    carried from (``gpu_estimates.light_work_span_or_estimate_w``), kept with its value in
    the prior's sources as ``light_work_floor``."""
    given_floor_w = floor_w
    observations = list(observations)
    found = draw_busy_fraction(prior, observations, idle_w=idle_w, busy_max_w=busy_max_w)
    if found is None:
        return prior
    b0, u = found
    light_draw = draw_shape and reads_as_light_work(
        prior.gpu, observations, b0, idle_w + (busy_max_w - idle_w) * u, idle_w=idle_w
    )
    tp = prior.throughput
    compute_s = tp.compute_time_s(b0)
    if not compute_s > 0:
        return prior
    prior_split = tp.beta_c_s * b0 / compute_s
    split = _sigmoid((1.0 - prior_share) * _logit(u) + prior_share * _logit(prior_split))
    # The split is of a sum (the catalog's q = 1), whatever the prior's floor was.
    throughput = replace(
        tp,
        alpha_c_s=(1.0 - split) * compute_s,
        beta_c_s=split * compute_s / b0,
        compute_sharpness=1.0,
    )
    power = prior.power
    if draw_shape:
        # The same reading for the draw: busy a share b / (b + alpha_c / beta_c) of the time,
        # so P(b) = idle + (busy_max - idle) x b / (b + batch_half), batch_half = alpha / beta.
        half = throughput.alpha_c_s / throughput.beta_c_s
        low_w, top_w = idle_w, busy_max_w
        if floor_w is not None and floor_w != idle_w:
            # The job's draw while its GPU computes (on several GPUs, without the all-reduce's
            # wait, which the model puts at the idle draw): idle + span x u. Read against the
            # floor from there, so that the draw is the job's own at b0 on any GPU count; a
            # job that draws less than the floor is the least loading workload seen, its draw
            # the floor.
            busy_w = idle_w + (busy_max_w - idle_w) * u
            floor_w = min(floor_w, busy_w)
            u_f = (busy_w - floor_w) / (busy_max_w - floor_w) if busy_max_w > floor_w else 0.0
            u_f = min(max(u_f, 0.0), 1.0)
            # Capped (FLOOR_CAP): of the time the GPU works (u, read against its idle draw),
            # the share that loads it more than the floor, heavy = u_f / u, draws the busy
            # maximum, the rest the floor, so the draw rises with the per-sample share of the
            # time (batch_half alpha / beta, as the one reading has it) towards floor +
            # (busy_max - floor) x heavy, never past it.
            heavy = min(u_f / u, 1.0) if u > 0 else 0.0
            low_w, top_w = floor_w, floor_w + (busy_max_w - floor_w) * heavy
            if not FLOOR_CAP and 0.0 < u_f:
                # Uncapped: from the floor towards the busy maximum itself, at the batch
                # where the job's draw above the floor is half of the span above it.
                top_w, half = busy_max_w, b0 * (1.0 - u_f) / u_f
        if light_draw:
            # Light work throughout (``reads_as_light_work``): what it drew at b0, at every
            # batch. The time's split above is still the draw's reading.
            low_w = top_w = low_w + (top_w - low_w) * b0 / (b0 + half)
        cap_w = uncut_limit_w(prior.gpu, observations, b0) if LIMIT_BOUND else None
        if cap_w is not None:
            # The job's draw at b0 was not cut by a limit of cap_w: read as the two phases
            # above, its per-sample work draws no more than that.
            low_w, top_w, half = _limit_bounded_shape(low_w, top_w, half, cap_w, b0)
        power = PowerParams(
            busy_max_w=top_w,
            batch_half=half,
            busy_floor_frac=min(max(low_w / top_w, 0.0), 1.0) if top_w > 0 else 1.0,
        )
    sources = {**prior.sources, "draw_busy_fraction": f"{u:.4g}"}
    if light_draw:
        sources["light_work_draw"] = f"{power.busy_max_w:.4g} W at every batch"
    if floor_source is not None and given_floor_w is not None:
        sources["light_work_floor"] = f"{given_floor_w:.4g} W, estimated from {floor_source}"
    return FittedPerfModel(
        workload=prior.workload,
        gpu=prior.gpu,
        batch_sizes=prior.batch_sizes,
        throughput=throughput,
        power=power,
        errors=prior.errors,
        sources=sources,
    )


# Where a job measured at one per-GPU batch draws, above the GPU's idle draw, less than this
# share of the span from idle up to the lowest power limit that left its draw alone
# (``uncut_limit_w``), its draw is read as light work throughout: flat in batch at what it
# drew (``reads_as_light_work``). None: off. docs/benchmarks.md, "The first jobs' draw:
# light work the limits did not touch".
LIGHT_DRAW_SHARE: float | None = None


def reads_as_light_work(
    gpu: GpuSpec,
    observations: Iterable[Observation],
    batch: float,
    drawn_w: float,
    *,
    idle_w: float,
) -> bool:
    """True where ``LIGHT_DRAW_SHARE`` is set, every draw of the job was measured at one
    per-GPU ``batch``, and its draw while it computes there, ``drawn_w``, is above ``idle_w``
    by less than ``LIGHT_DRAW_SHARE`` of the span from ``idle_w`` to the lowest power limit
    that did not cut it (``uncut_limit_w``).

    Read against the idle draw and a busy maximum alone, a job drawing little is busy at
    that maximum a small share of the time and idle the rest, and its draw climbs towards
    the maximum as the batch grows. The limits it ran under say otherwise where its draw
    stayed put at a limit far above it: its busy phases need no more than that limit, and
    a job that uses little of what the limit leaves it is as likely to do light work
    (lookups, copies, kernels waiting on memory) at every batch. ncf on an A40 draws 84 W
    at batch 512 and at every limit from 300 to 200 W (0.29 of the span from 37.5 W) and
    83-91 W at every batch from 8 to 32,768; shufflenetv2 on a P100 draws 93 W at 128
    and at every limit from 250 to 150 W (0.52) and rises from 40 to 137 W with the batch.
    Nothing decides it from one batch; a second batch does, so once draws at two per-GPU
    batches are in, the fit's own shape takes over."""
    if LIGHT_DRAW_SHARE is None:
        return False
    observations = list(observations)
    if len({o.local_batch for o in observations if o.power_w is not None}) != 1:
        return False
    cap_w = uncut_limit_w(gpu, observations, batch)
    if cap_w is None or not cap_w > idle_w:
        return False
    return (drawn_w - idle_w) < LIGHT_DRAW_SHARE * (cap_w - idle_w)


# Whether a job's draw's batch shape rises no higher than the lowest power limit that did
# not cut its draw at its batch (``uncut_limit_w``): None (off), "shape" (the draw rises
# from where it started towards that limit, the job's own at b0), "floor" (the time's
# batch shape kept, the draw's start raised so that it is the job's own at b0).
# docs/benchmarks.md, "The first jobs on a new GPU model: what the job's limits say".
LIMIT_BOUND: str | None = None
# How far below its draw at the default limit a job's draw at a lower limit may be and
# still count as not cut (the Zeus sweeps' repeat noise is about 1-2%).
UNCUT_TOL = 0.03
# Whether the bound is the uncut limit over the GPU's peak-to-average draw (the model's own
# reading of a limit) rather than the limit itself.
LIMIT_PEAK = False


def uncut_limit_w(gpu: GpuSpec, observations: Iterable[Observation], batch: float) -> float | None:
    """The lowest power limit below ``gpu``'s default at which the job's draw at per-GPU
    ``batch`` (top clock, the GPU count it was measured on most at the default limit) was
    not cut: it and every limit tried above it drew at least (1 - ``UNCUT_TOL``) of the
    job's draw at the default limit. A GPU lowers its clock only where its draw would pass
    the limit, so no phase of the job's work at that batch draws much more than this.
    None: no lower limit tried there, or the highest one tried already cut the draw."""
    draws: dict[tuple[int, float | None], list[tuple[float, float]]] = {}
    times: dict[tuple[int, float | None], list[tuple[float, float]]] = {}
    for o in observations:
        if o.local_batch != batch:
            continue
        if o.sm_clock_mhz is not None and o.sm_clock_mhz < gpu.dvfs.max_clock_mhz:
            continue
        key = (o.n_gpus, None if at_default_power(o, gpu) else o.power_limit_w)
        if o.power_w is not None and o.power_w > 0:
            draws.setdefault(key, []).append((o.weight, o.power_w))
        if o.iter_time_s is not None and o.iter_time_s > 0:
            times.setdefault(key, []).append((o.weight, o.iter_time_s))

    def mean(pairs: list[tuple[float, float]]) -> float:
        total = sum(w for w, _ in pairs)
        return math.exp(sum(w * math.log(p) for w, p in pairs) / total)

    at_default = [k for k in draws if k[1] is None]
    if not at_default:
        return None
    n = max(at_default, key=lambda k: sum(w for w, _ in draws[k]))[0]
    drawn_w = mean(draws[(n, None)])
    time_s = mean(times[(n, None)]) if (n, None) in times else None
    found = None
    for limit_w in sorted((lw for k, lw in draws if k == n and lw is not None), reverse=True):
        # A limit that lowers the clock lowers the draw and does not make the job faster.
        slowed = time_s is None or (n, limit_w) not in times or mean(times[(n, limit_w)]) >= time_s
        if slowed and mean(draws[(n, limit_w)]) < drawn_w * (1.0 - UNCUT_TOL):
            break
        found = limit_w
    if found is not None and LIMIT_PEAK:
        # The model's own reading of a limit (``DvfsParams.ratio_for_limit``): it cuts a
        # draw whose peaks, peak_to_avg x the draw, pass it.
        found /= max(gpu.dvfs.peak_to_avg, 1.0)
    return found


def _limit_bounded_shape(
    low_w: float, top_w: float, half: float, cap_w: float, b0: float
) -> tuple[float, float, float]:
    """(low, top, batch_half) of a draw ``low + (top - low) b / (b + half)`` whose top is
    brought down to ``cap_w`` (``LIMIT_BOUND``), still drawing what it did at ``b0``."""
    if not (low_w < cap_w < top_w and half > 0):
        return low_w, top_w, half
    drawn_w = low_w + (top_w - low_w) * b0 / (b0 + half)
    if not drawn_w < cap_w:
        return low_w, top_w, half
    if LIMIT_BOUND == "floor":
        x = b0 / (b0 + half)
        start_w = (drawn_w - x * cap_w) / (1.0 - x) if x < 1.0 else low_w
        if start_w >= low_w:
            return start_w, cap_w, half
    if drawn_w <= low_w:
        return low_w, low_w, half
    return low_w, cap_w, b0 * (cap_w - drawn_w) / (drawn_w - low_w)


# The fewest other workloads whose draws were measured on a GPU model before their least
# draw is read as the floor of a job's light work there and their most as its busy maximum
# (``measured_draw_span_w``). docs/benchmarks.md, "The floor, read live": from 1 to 5 other
# workloads on the Zeus GPUs; with one, its most draw as the busy maximum put the time's
# never-observed error on the A40 and the RTX6000 past 15%.
FLOOR_MIN_WORKLOADS = 2


def measured_draw_span_w(
    draws: Mapping[str, Sequence[float]], *, min_workloads: int | None = None
) -> tuple[float, float] | None:
    """(floor, busy maximum) of one GPU model from ``draws``: workload -> draws of one GPU
    measured at its default limit and top clock, for other workloads than the job's (its
    catalog models' at their batch sizes, ``draw_range_w``; its profiles' measured draws):
    the least and the most, what ``draw_shaped_prior`` reads a job's draw against as
    ``floor_w`` and ``busy_max_w``. None with fewer than ``min_workloads`` workloads with a
    finite positive draw (None: ``FLOOR_MIN_WORKLOADS``, read at the call), or no span: too
    few to say where light work sits (one heavy workload alone would read every job as
    light, one light one every job as heavy)."""
    kept = {w: [d for d in ds if math.isfinite(d) and d > 0] for w, ds in draws.items()}
    kept = {w: ds for w, ds in kept.items() if ds}
    if min_workloads is None:
        min_workloads = FLOOR_MIN_WORKLOADS
    if len(kept) < max(min_workloads, 1):
        return None
    low = min(min(ds) for ds in kept.values())
    high = max(max(ds) for ds in kept.values())
    return (low, high) if high > low else None


# Whether a job's draw read against a light-work floor is capped at the share of the span
# above the floor that it loads at its batch (``draw_shaped_prior``); False: it rises
# towards the busy maximum at its own batch shape (docs/benchmarks.md, "The floor, read
# live").
FLOOR_CAP = False

# Where between the GPU's idle draw and the least draw measured on it (``measured_draw_
# span_w``) a job's light work is put (``light_work_span_w``): 1 at the least draw.
FLOOR_SHARE = 1.0


def light_work_span_w(
    idle_w: float,
    busy_max_w: float,
    draws: Mapping[str, Sequence[float]],
    *,
    share: float | None = None,
) -> tuple[float | None, float]:
    """(floor, busy maximum) a job's draw is read against by ``draw_shaped_prior``, given
    the GPU model's estimated ``idle_w`` and ``busy_max_w`` and ``draws`` of other workloads
    measured on it (``measured_draw_span_w``): with enough of them, the floor is ``share``
    (``FLOOR_SHARE``) of the way from idle to their least draw and the busy maximum their
    most; else no floor (None: the idle draw) and ``busy_max_w``."""
    span = measured_draw_span_w(draws)
    if span is None:
        return None, busy_max_w
    low_w, high_w = span
    floor_w = idle_w + (FLOOR_SHARE if share is None else share) * (low_w - idle_w)
    return (floor_w if floor_w > idle_w else None), high_w


def model_draws_w(model: FittedPerfModel) -> list[float]:
    """``model``'s draws on one GPU at its own batch sizes, top clock, default limit (what
    ``draw_range_w`` spans)."""
    return [model.power_w(config_of(1, 1, float(b))) for b in (model.batch_sizes or (32,))]


def draw_range_w(candidates: Sequence[FittedPerfModel]) -> tuple[float, float] | None:
    """(lowest, highest) draw the candidates predict on one GPU at their own batch sizes,
    top clock, default limit: the least and the most a known workload loads this GPU.
    The lowest stands for the idle draw where the GPU model's is unknown (0 in its spec)."""
    draws = [w for m in candidates for w in model_draws_w(m)]
    if not draws:
        return None
    return min(draws), max(draws)


def nearest_prior(
    candidates: Sequence[FittedPerfModel],
    observations: Sequence[Observation],
    *,
    hint: str | None = None,
    draw_spread: bool = True,
    draw_level: bool = False,
) -> FittedPerfModel:
    """The candidate whose *shape* best matches the observations: the one with the smallest
    spread of log(observed / predicted) iteration times once the level is taken out (a level
    is learned from one observation anyway), plus, where the observations carry a draw and
    ``draw_spread``, the same spread of the draws. ``draw_level`` adds the squared mean log
    ratio of the draws: for candidates measured on the job's own GPU model the draw's level
    is physical (a job that draws what its GPU draws at idle is not compute-bound, one near
    the limit is, and the candidate that loads the GPU alike bends alike with batch and
    power limit); for candidates carried over from other GPU models it is only as good as
    that carrying, so leave it off there. With fewer than two observed configurations there
    is no shape to compare, so the ``hint`` (a workload the user says it resembles) or,
    without one, the first candidate is taken."""
    if not candidates:
        raise ValueError("no candidate prior")
    by_name = {c.workload: c for c in candidates}
    timed = [o for o in observations if o.iter_time_s is not None]
    drawn = [o for o in observations if o.power_w is not None]
    keys = {o.key for o in timed}
    if len(keys) < 2:
        return by_name.get(hint or "", candidates[0])

    def spread(res: list[float]) -> tuple[float, float]:
        mean = sum(res) / len(res)
        return sum((r - mean) ** 2 for r in res) / len(res), mean

    def score(model: FittedPerfModel) -> float:
        v, _ = spread([math.log(o.iter_time_s / model.iter_time_s(o.config())) for o in timed])
        if drawn and (draw_spread or draw_level):
            vp, mp = spread([math.log(o.power_w / model.power_w(o.config())) for o in drawn])
            v += (vp if draw_spread else 0.0) + (mp * mp if draw_level else 0.0)
        return v

    return min(candidates, key=lambda m: (score(m), m.workload != hint, m.workload))


# --- JSON (the database keeps pooled observations and fitted moves as these) ------------------


def observation_to_dict(obs: Observation) -> dict[str, Any]:
    return {
        "n_gpus": obs.n_gpus,
        "n_nodes": obs.n_nodes,
        "local_batch": obs.local_batch,
        "iter_time_s": obs.iter_time_s,
        "power_w": obs.power_w,
        "sm_clock_mhz": obs.sm_clock_mhz,
        "power_limit_w": obs.power_limit_w,
        "weight": obs.weight,
        "log_t_ss": obs.log_t_ss,
        "log_p_ss": obs.log_p_ss,
    }


def observation_from_dict(data: Mapping[str, Any]) -> Observation:
    return Observation(
        n_gpus=int(data["n_gpus"]),
        n_nodes=int(data["n_nodes"]),
        local_batch=float(data["local_batch"]),
        iter_time_s=None if data.get("iter_time_s") is None else float(data["iter_time_s"]),
        power_w=None if data.get("power_w") is None else float(data["power_w"]),
        sm_clock_mhz=None if data.get("sm_clock_mhz") is None else int(data["sm_clock_mhz"]),
        power_limit_w=None if data.get("power_limit_w") is None else float(data["power_limit_w"]),
        weight=float(data.get("weight", 1.0)),
        log_t_ss=float(data.get("log_t_ss", 0.0)),
        log_p_ss=float(data.get("log_p_ss", 0.0)),
    )


def pooled_observations(
    observations: Iterable[Observation], gpus_per_node: int
) -> list[Observation]:
    """``observations`` pooled to one per configuration (geometric means, summed weights):
    what a job keeps between rounds, so its state grows with configurations, not reports.
    Each pooled value carries the weight of its own quantity; a configuration with both an
    iteration time and a power of different weights becomes two observations."""
    out = []
    for c in pool(observations, gpus_per_node).values():
        n_nodes = sum(1 for k in c.cfg.gpus_per_node if k > 0) or 1
        common = dict(
            n_gpus=c.cfg.n_gpus,
            n_nodes=n_nodes,
            local_batch=c.cfg.global_batch / c.cfg.n_gpus,
            sm_clock_mhz=c.cfg.sm_clock_mhz,
            power_limit_w=c.cfg.power_limit_w,
        )
        t = None if c.log_t is None else math.exp(c.log_t)
        p = None if c.log_p is None else math.exp(c.log_p)
        if t is not None and p is not None and c.w_t == c.w_p:
            out.append(
                Observation(
                    iter_time_s=t,
                    power_w=p,
                    weight=c.w_t,
                    log_t_ss=c.ss_t,
                    log_p_ss=c.ss_p,
                    **common,
                )
            )
            continue
        if t is not None:
            out.append(Observation(iter_time_s=t, weight=c.w_t, log_t_ss=c.ss_t, **common))
        if p is not None:
            out.append(Observation(power_w=p, weight=c.w_p, log_p_ss=c.ss_p, **common))
    return out
