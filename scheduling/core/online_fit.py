"""The regularised fit behind ``online_model`` (see its docstring for the equations, the
prior's pseudo-observations and the parameters): Levenberg-Marquardt on log errors, the
residuals evaluated with numpy for many parameter vectors at once."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from scheduling.core import online_model as om
from scheduling.core.online_model import (
    N_PARAMS,
    POWER_LEVEL,
    SHARPNESS,
    TIME_LEVEL,
    FitSettings,
    Observation,
    OnlinePerfModel,
    _Cell,
    _logit,
    floored_time_constants,
    learned_model,
    padded,
    pool,
)
from scheduling.core.perf_models import FittedPerfModel, config_parts


def _grid_parts(prior: FittedPerfModel, cells: Sequence[_Cell]) -> list[tuple]:
    """The configurations where the prior's pseudo-observations sit (see module docstring),
    as ``config_parts`` reads them; ``_Objective`` predicts them with the prior."""
    per_node = max(prior.gpu.gpus_per_node, 1)
    counts = sorted({(1, 1), (2, 1), (per_node, 1), (2 * per_node, 2)})
    locals_ = sorted({c.cfg.global_batch / c.cfg.n_gpus for c in cells}) or [32.0]
    lo, hi = locals_[0], locals_[-1]
    batches = sorted({lo / 4, lo, (lo * hi) ** 0.5, hi, hi * 4})
    limits: set = {None, prior.gpu.power_limit_min_w}
    limits |= {c.cfg.power_limit_w for c in cells}
    clocks = sorted({c.cfg.sm_clock_mhz for c in cells}, key=lambda v: -1 if v is None else v)
    limits_ = sorted(limits, key=lambda v: -1 if v is None else v)
    # as config_parts reads config_of(n, nodes, b, clock, limit): nodes never exceed GPUs,
    # and the per-GPU batch is that of the whole batch rounded
    return [
        (n, min(nodes, n), max(1, round(b * n)) / n, clock, lim)
        for n, nodes in counts
        for b in batches
        for lim in limits_
        for clock in clocks
    ]


def _clock_anchors(prior: FittedPerfModel, cells: Sequence[_Cell]) -> list[tuple]:
    """Where the prior holds the clock shape of a job observed at set clocks: its lowest
    and middle clock, at each GPU count and per-GPU batch the job ran at set clocks (none
    for a job never run at a set clock)."""
    d = prior.gpu.dvfs
    per_node = max(prior.gpu.gpus_per_node, 1)
    shapes = {config_parts(c.cfg, per_node)[:3] for c in cells if c.cfg.sm_clock_mhz is not None}
    clocks = (d.min_clock_mhz, (d.min_clock_mhz + d.max_clock_mhz) // 2)
    return [(*shape, clock, None) for shape in sorted(shapes) for clock in clocks]


class _Objective:
    """The fit's weighted residuals for many parameter vectors at once.

    ``online_model``'s equations (``apply_params`` on the prior, then
    ``FittedPerfModel.compute_parts`` and ``combine_parts``) written over numpy arrays:
    rows are parameter vectors ``z``, columns configurations (the job's cells, then the
    prior's grid). The Jacobian's fourteen shifted vectors are then one evaluation, not
    fourteen passes of Python over every configuration. A vector whose model leaves the
    floats (``x ** gamma`` past 1e308, the log of 0) gets non-finite residuals, which the
    caller reads as worse than any finite cost.
    """

    def __init__(
        self,
        prior: FittedPerfModel,
        cells: Sequence[_Cell],
        grid: Sequence[tuple],
        grid_w: Sequence[float],
        ridge: float,
        shape_r: float,
    ) -> None:
        tp, pw, gpu = prior.throughput, prior.power, prior.gpu
        d = gpu.dvfs
        self.net_level = om.NETWORK_LEVEL  # read once: the residuals and targets agree
        self.base_time = np.array(floored_time_constants(tp))
        self.gamma = tp.gamma
        self.log_q = math.log(max(tp.compute_sharpness, 1.0))
        self.logit_phi = _logit(d.time_fixed_frac)
        self.logit_s = _logit(d.power_static_frac)
        self.kappa, self.power_exp = d.peak_to_avg, d.power_exp
        self.busy_max_w, self.batch_half = pw.busy_max_w, max(pw.batch_half, 1e-3)
        self.floor_frac = pw.busy_floor_frac
        self.idle_w = prior.idle_power_w
        self.limit_max_w = gpu.power_limit_max_w
        self.r_min = d.min_clock_mhz / d.max_clock_mhz

        per_node = gpu.gpus_per_node
        configs = [config_parts(c.cfg, per_node) for c in cells] + list(grid)
        # float arrays: a clock or limit of None (the top clock, the default limit) is NaN
        n_gpus, n_nodes, local, clock, limit = (
            np.array(v, dtype=float) for v in zip(*configs, strict=True)
        )
        self.local_batch = local
        self.extra = np.where(n_gpus > 2, n_gpus - 2, 0.0)
        self.single = n_gpus <= 1
        self.across = n_nodes > 1
        clipped = np.clip(np.nan_to_num(clock), d.min_clock_mhz, d.max_clock_mhz)
        self.r_clock = np.where(np.isnan(clock), 1.0, clipped / d.max_clock_mhz)
        self.has_limit = ~np.isnan(limit)
        self.limit_w = np.clip(
            np.where(self.has_limit, limit, gpu.power_limit_max_w),
            gpu.power_limit_min_w,
            gpu.power_limit_max_w,
        )
        # The prior's own predictions (no moves) at every configuration: the grid's
        # targets, and where a cold start puts the levels.
        raw = (tp.alpha_c_s, tp.beta_c_s, tp.alpha_r_s, tp.beta_r_s, tp.alpha_n_s, tp.beta_n_s)
        time0, power0, compute0, network0, compute_w0 = self.predict(
            np.zeros((1, N_PARAMS)), np.array(raw), with_parts=True
        )
        self.prior_log_t, self.prior_log_p = np.log(time0[0]), np.log(power0[0])
        # Where the network constants move with the level by another power than the compute
        # ones (``online_model.NETWORK_LEVEL``), the prior's time at the job's level is
        # not its time x e^z0: the two parts, each at its own level, are combined again.
        self.net_shift = self.net_level - 1.0
        with np.errstate(divide="ignore"):
            self.log_net_ratio = np.log(network0[0]) - np.log(compute0[0])  # -inf: no network
        self.prior_compute_w = compute_w0[0]
        # Time and draw residuals: (column, target, sqrt weight, 1 where the job's level
        # moves the target). The grid's targets are the prior's predictions *without*
        # level: at the job's level they hold the shape only. ``grid_w``: each grid
        # configuration's weight.
        n_cells = len(cells)
        time_rows = [(i, c.log_t, math.sqrt(c.w_t), 0.0) for i, c in enumerate(cells)]
        power_rows = [(i, c.log_p, math.sqrt(c.w_p), 0.0) for i, c in enumerate(cells)]
        for i, w in enumerate(grid_w, start=n_cells):
            wt = math.sqrt(w)
            time_rows.append((i, float(self.prior_log_t[i]), wt, 1.0))
            power_rows.append((i, float(self.prior_log_p[i]), wt, 1.0))
        self.rows = [
            _columns([r for r in rows if r[1] is not None]) for rows in (time_rows, power_rows)
        ]
        self.ridge = math.sqrt(ridge)
        self.shape_r = shape_r

    @np.errstate(all="ignore")  # a row that leaves the floats is non-finite, no warning
    def __call__(self, z: np.ndarray) -> np.ndarray:
        """The residuals of each row of ``z`` (k rows of N_PARAMS): k rows of residuals."""
        time_s, power_w = self.predict(z)
        out = []
        for (col, target, weight, moved), values, level_z in zip(
            self.rows, (time_s, power_w), (TIME_LEVEL, POWER_LEVEL), strict=True
        ):
            shift = z[:, level_z : level_z + 1] * moved
            if self.net_shift != 0.0:
                bend = self._net_bend(z[:, TIME_LEVEL : TIME_LEVEL + 1], col, level_z)
                shift = shift + moved * bend
            out.append(weight * (np.log(values[:, col]) - target - shift))
        out.append(self.ridge * z)
        out.append(self.shape_r * z[:, SHARPNESS : SHARPNESS + 1])
        return np.concatenate(out, axis=1)

    @np.errstate(all="ignore")
    def _net_bend(self, level: np.ndarray, col: np.ndarray, level_z: int) -> np.ndarray:
        """What the prior's network at its own level (``online_model.NETWORK_LEVEL``) moves
        its prediction at columns ``col`` by, in log, beyond the level's ``z0`` (time) or
        ``z9`` (draw): (k rows). The time is its compute at e^z0 and its network at
        e^(NETWORK_LEVEL z0) combined again; the draw is the prior's idle plus its compute
        draw for the compute's new share of that time."""
        g = self.gamma
        ratio = self.log_net_ratio[col]  # log(network / compute) of the prior
        has_net = np.isfinite(ratio)
        r0 = np.where(has_net, ratio, 0.0)
        moved = r0 + self.net_shift * level
        # log(time / compute) = logaddexp(0, g log(network / compute)) / g
        before, after = np.logaddexp(0.0, g * r0) / g, np.logaddexp(0.0, g * moved) / g
        if level_z == TIME_LEVEL:
            return np.where(has_net, after - before, 0.0)
        busy = self.prior_compute_w[col] - self.idle_w
        draw0 = self.idle_w + busy * np.exp(-before)
        draw = self.idle_w + busy * np.exp(-after)
        return np.where(has_net, np.log(draw) - np.log(draw0), 0.0)

    @np.errstate(all="ignore")
    def predict(
        self, z: np.ndarray, time_constants: np.ndarray | None = None, with_parts: bool = False
    ) -> tuple[np.ndarray, ...]:
        """Iteration time and per-GPU draw of each row of ``z`` at every configuration
        (k rows of columns each); ``time_constants`` in place of the floored ones that
        ``z`` moves (the prior's own, to predict as the prior does); ``with_parts``: the
        compute and network times as well."""
        base = self.base_time if time_constants is None else time_constants
        e = np.exp(np.minimum(z, 600.0))[:, :, None]  # (k, N_PARAMS, 1)
        level = e[:, 0]
        net = self.net_level
        net_level = level if net == 1.0 else np.exp(np.minimum(net * z[:, 0:1], 600.0))
        alpha_c, beta_c, alpha_r, beta_r, alpha_n, beta_n = (
            (base[i] * (level if i < 2 else net_level)) * e[:, i + 1] for i in range(6)
        )
        zc = z[:, :, None]
        q = np.exp(np.minimum(np.abs(self.log_q + zc[:, SHARPNESS]), 600.0))
        phi = _sigmoids(self.logit_phi + zc[:, 7])
        kappa = self.kappa * e[:, 8]
        busy_max = self.busy_max_w * e[:, POWER_LEVEL]
        half = self.batch_half * e[:, 10]
        s = _sigmoids(self.logit_s + zc[:, 11])
        k = self.power_exp * e[:, 12]

        # compute_parts
        b, idle = self.local_batch, self.idle_w
        c = self.floor_frac
        busy_w = busy_max * (c + (1.0 - c) * b / (b + half))
        busy_w = np.where(busy_w > idle, busy_w, idle)
        # DvfsParams.ratio_for_limit at the job's limit (the GPU's highest is the default
        # the throughput was measured at), then the lower of it and the clock's ratio. The
        # branches are written in reverse: each later np.where overrides the earlier ones.
        x = self.limit_w / np.minimum(kappa * busy_w, self.limit_max_w)
        r_lim = ((x - s) / (1.0 - s)) ** (1.0 / k)
        r_lim = np.where(r_lim > self.r_min, r_lim, self.r_min)
        r_lim = np.where(x <= s, self.r_min, r_lim)
        r_lim = np.where((x >= 1.0) | (self.limit_w >= self.limit_max_w), 1.0, r_lim)
        r = np.where(self.has_limit & (r_lim < self.r_clock), r_lim, self.r_clock)
        per_sample = beta_c * b
        hi = np.maximum(alpha_c, per_sample)
        lo = np.minimum(alpha_c, per_sample)
        soft = hi * (1.0 + (lo / hi) ** q) ** (1.0 / q)
        base_s = np.where(q == 1.0, alpha_c + per_sample, soft)
        compute_s = base_s * (phi + (1.0 - phi) / r)
        compute_w = busy_w * (s + (1.0 - s) * r**k)
        compute_w = np.where(compute_w < idle, idle, compute_w)

        # combine_parts
        network_s = np.where(
            self.across, alpha_n + beta_n * self.extra, alpha_r + beta_r * self.extra
        )
        network_s = np.where(self.single, 0.0, network_s)
        g = self.gamma
        time_s = np.where(network_s > 0.0, (compute_s**g + network_s**g) ** (1.0 / g), compute_s)
        power_w = idle + (compute_w - idle) * (compute_s / time_s)
        if with_parts:
            return time_s, power_w, compute_s, network_s, compute_w
        return time_s, power_w


def _columns(rows: Sequence[tuple[int, float, float, float]]) -> tuple[np.ndarray, ...]:
    """Rows of (column, target, sqrt weight, moved) as four arrays."""
    col, target, weight, moved = zip(*rows, strict=True) if rows else ((), (), (), ())
    return (
        np.array(col, dtype=int),
        np.array(target, dtype=float),
        np.array(weight, dtype=float),
        np.array(moved, dtype=float),
    )


def _sigmoids(x: np.ndarray) -> np.ndarray:
    """``online_model._sigmoid`` of each element."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@np.errstate(all="ignore")  # non-finite residuals are a rejected step (below)
def _least_squares(objective: _Objective, z0: np.ndarray, max_steps: int) -> list[float] | None:
    """Levenberg-Marquardt with a forward-difference Jacobian from ``z0``; None where the
    cost at ``z0`` itself is not finite (no step from it could ever be accepted).

    Each trial point is evaluated with its Jacobian's shifted points in one call: most
    trials are accepted, and the next iteration then needs no call of its own (a call's
    cost is numpy's per-operation overhead, nearly the same for one row as for fifteen)."""
    h = 1e-6
    shifts = np.vstack([np.zeros(N_PARAMS), h * np.eye(N_PARAMS)])

    def at(point: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """Residuals, Jacobian (row i: d residuals / d z[i]) and cost at ``point``."""
        rows = objective(point + shifts)
        r = rows[0]
        return r, (rows[1:] - r) / h, float(r @ r)

    z = np.array(z0, dtype=float)
    r, jac, cost = at(z)
    if not math.isfinite(cost):
        return None
    lam = 1e-3
    for _ in range(max_steps):
        jtj = jac @ jac.T
        jtr = jac @ r
        improved = False
        while lam < 1e10:
            a = jtj + np.diag(lam * (np.diag(jtj) + 1e-9))
            try:
                step = np.linalg.solve(a, -jtr)
            except np.linalg.LinAlgError:
                step = None
            if step is not None:
                z_new = z + step
                r_new, jac_new, cost_new = at(z_new)
                # A non-finite cost (the trial model left the floats) is worse than any.
                if math.isfinite(cost_new) and cost_new < cost:
                    improved = cost - cost_new > 1e-6 * max(cost, 1e-12)
                    z, r, jac, cost = z_new, r_new, jac_new, cost_new
                    lam = max(lam / 10.0, 1e-9)
                    break
            lam *= 10.0
        if not improved:
            break
    return [float(v) for v in z]


def fit_params(
    prior: FittedPerfModel,
    observations: Iterable[Observation],
    *,
    settings: FitSettings = FitSettings(),  # noqa: B008 - frozen, never mutated
    start: Sequence[float] | None = None,
) -> list[float]:
    """The parameter moves ``z`` that best explain ``observations`` given ``prior``.

    Observations must have passed ``refusal_reason``; an empty set returns zeros.
    """
    cells = list(pool(observations, prior.gpu.gpus_per_node).values())
    if not cells:
        return [0.0] * N_PARAMS
    grid = _grid_parts(prior, cells)
    grid_w = [settings.prior_weight / len(grid)] * len(grid)
    anchors = _clock_anchors(prior, cells) if settings.clock_anchor_weight > 0 else []
    if anchors:
        grid += anchors
        grid_w += [settings.prior_weight * settings.clock_anchor_weight / len(anchors)] * len(
            anchors
        )
    shape_r = math.sqrt(settings.shape_ridge)
    objective = _Objective(prior, cells, grid, grid_w, settings.ridge, shape_r)
    if start is not None:
        z = _least_squares(objective, np.array(padded(start)), settings.max_steps)
        if z is not None:
            return z
        # A stored start that leaves the floats on these configurations: the cold start.
    # Start the levels where the observations put them: the fit then only has the shape to
    # find, and one observation is matched exactly.
    z0 = np.zeros(N_PARAMS)
    at_t, at_p = objective.prior_log_t, objective.prior_log_p
    t = [c.log_t - at_t[i] for i, c in enumerate(cells) if c.log_t is not None]
    p = [c.log_p - at_p[i] for i, c in enumerate(cells) if c.log_p is not None]
    z0[TIME_LEVEL] = sum(t) / len(t) if t else 0.0
    z0[POWER_LEVEL] = sum(p) / len(p) if p else 0.0
    z = _least_squares(objective, z0, settings.max_steps)
    return z if z is not None else [float(v) for v in z0]


def fit_online(
    prior: FittedPerfModel,
    observations: Iterable[Observation],
    *,
    settings: FitSettings = FitSettings(),  # noqa: B008 - frozen, never mutated
    workload: str | None = None,
    start: Sequence[float] | None = None,
) -> OnlinePerfModel:
    """Fit ``observations`` (already screened by ``refusal_reason``) onto ``prior``."""
    observations = list(observations)
    params = fit_params(prior, observations, settings=settings, start=start)
    return learned_model(prior, params, observations, settings=settings, workload=workload)
