"""The regularised fit behind ``online_model`` (see its docstring for the equations, the
prior's pseudo-observations and the parameters): Levenberg-Marquardt on log errors, in
plain Python so the core needs no numerical library for it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from operator import mul

from scheduling.core.online_model import (
    N_PARAMS,
    POWER_LEVEL,
    SHARPNESS,
    TIME_LEVEL,
    FitSettings,
    Observation,
    OnlinePerfModel,
    _Cell,
    apply_params,
    config_of,
    learned_model,
    padded,
    pool,
)
from scheduling.core.perf_models import FittedPerfModel, config_parts


def _prior_grid(prior: FittedPerfModel, cells: Sequence[_Cell]) -> list[_Cell]:
    """The configurations where the prior's pseudo-observations sit (see module docstring);
    their ``log_t``/``log_p`` are the prior's predictions *without* level."""
    per_node = max(prior.gpu.gpus_per_node, 1)
    counts = sorted({(1, 1), (2, 1), (per_node, 1), (2 * per_node, 2)})
    locals_ = sorted({c.cfg.global_batch / c.cfg.n_gpus for c in cells}) or [32.0]
    lo, hi = locals_[0], locals_[-1]
    batches = sorted({lo / 4, lo, (lo * hi) ** 0.5, hi, hi * 4})
    limits: set = {None, prior.gpu.power_limit_min_w}
    limits |= {c.cfg.power_limit_w for c in cells}
    clocks = {c.cfg.sm_clock_mhz for c in cells}
    grid = []
    for n, nodes in counts:
        for b in batches:
            for lim in sorted(limits, key=lambda v: -1 if v is None else v):
                for clock in sorted(clocks, key=lambda v: -1 if v is None else v):
                    cfg = config_of(n, nodes, b, clock, lim)
                    grid.append(
                        _Cell(
                            cfg=cfg,
                            log_t=math.log(prior.iter_time_s(cfg)),
                            w_t=1.0,
                            log_p=math.log(prior.power_w(cfg)),
                            w_p=1.0,
                        )
                    )
    return grid


def _residuals(
    prior: FittedPerfModel,
    z: Sequence[float],
    cells: Sequence[tuple[_Cell, tuple]],
    grid: tuple[Sequence[tuple[_Cell, int, int, int]], Sequence[tuple]],
    grid_w: float,
    ridge: float,
    shape_r: float,
) -> list[float]:
    """``cells`` pair each cell with its configuration's ``config_parts``; ``grid`` is
    (its cells with GPU count, node count and an index into ``grid_compute``, the distinct
    (per-GPU batch, clock, limit) of the grid, whose compute part is evaluated once)."""
    model = apply_params(prior, z)
    evaluate = model.evaluate_parts
    combine = model.combine_parts
    compute = model.compute_parts
    log = math.log
    out = []
    append = out.append
    for c, parts in cells:
        t, p = evaluate(*parts)
        if c.log_t is not None:
            append(math.sqrt(c.w_t) * (log(t) - c.log_t))
        if c.log_p is not None:
            append(math.sqrt(c.w_p) * (log(p) - c.log_p))
    # The prior's pseudo-observations, moved to the job's levels: they hold the shape only.
    wt = math.sqrt(grid_w)
    zt, zp = z[TIME_LEVEL], z[POWER_LEVEL]
    grid_cells, grid_compute = grid
    shared = [compute(*k) for k in grid_compute]
    for c, n_gpus, n_nodes, i in grid_cells:
        t, p = combine(n_gpus, n_nodes, *shared[i])
        append(wt * (log(t) - c.log_t - zt))
        append(wt * (log(p) - c.log_p - zp))
    r = math.sqrt(ridge)
    out.extend(r * zi for zi in z)
    out.append(shape_r * z[SHARPNESS])
    return out


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the matrix is small and well posed:
    the damping keeps it positive definite)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[piv] = m[piv], m[col]
        p = m[col][col]
        if p == 0.0:
            continue
        for r in range(col + 1, n):
            f = m[r][col] / p
            if f:
                for k in range(col, n + 1):
                    m[r][k] -= f * m[col][k]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        s = m[r][n] - sum(m[r][k] * x[k] for k in range(r + 1, n))
        x[r] = s / m[r][r] if m[r][r] else 0.0
    return x


def _least_squares(prior, cells, grid, grid_w, ridge, z0, max_steps, shape_r) -> list[float]:
    """Levenberg-Marquardt with a forward-difference Jacobian."""
    z = list(z0)
    per_node = prior.gpu.gpus_per_node
    cells = [(c, config_parts(c.cfg, per_node)) for c in cells]
    index: dict[tuple, int] = {}
    grid_cells = []
    for c in grid:
        n_gpus, n_nodes, local_batch, clock, limit = config_parts(c.cfg, per_node)
        i = index.setdefault((local_batch, clock, limit), len(index))
        grid_cells.append((c, n_gpus, n_nodes, i))
    grid = (grid_cells, list(index))

    def residuals(zz: Sequence[float]) -> list[float]:
        return _residuals(prior, zz, cells, grid, grid_w, ridge, shape_r)

    r = residuals(z)
    cost = sum(v * v for v in r)
    lam = 1e-3
    h = 1e-6
    for _ in range(max_steps):
        jac = []  # columns
        for i in range(N_PARAMS):
            zi = z[:]
            zi[i] += h
            ri = residuals(zi)
            jac.append([(a - b) / h for a, b in zip(ri, r, strict=True)])
        # J'J is symmetric (x * y == y * x exactly): each entry once, mirrored.
        jtj = [[0.0] * N_PARAMS for _ in range(N_PARAMS)]
        for i, ci in enumerate(jac):
            for j in range(i, N_PARAMS):
                jtj[i][j] = jtj[j][i] = sum(map(mul, ci, jac[j]))
        jtr = [sum(map(mul, ci, r)) for ci in jac]
        improved = False
        while lam < 1e10:
            a = [row[:] for row in jtj]
            for i in range(N_PARAMS):
                a[i][i] += lam * (jtj[i][i] + 1e-9)
            step = _solve(a, [-v for v in jtr])
            z_new = [zi + si for zi, si in zip(z, step, strict=True)]
            try:
                r_new = residuals(z_new)
            except (OverflowError, ValueError):
                # A step so long that the trial model's time or draw leaves the floats
                # (x ** gamma past 1e308, the log of 0): worse than any finite cost.
                r_new = None
            cost_new = math.inf if r_new is None else sum(v * v for v in r_new)
            if math.isfinite(cost_new) and cost_new < cost:
                improved = cost - cost_new > 1e-6 * max(cost, 1e-12)
                z, r, cost = z_new, r_new, cost_new
                lam = max(lam / 10.0, 1e-9)
                break
            lam *= 10.0
        if not improved:
            break
    return z


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
    grid = _prior_grid(prior, cells)
    grid_w = settings.prior_weight / len(grid)
    z0 = padded(start if start is not None else [])
    if start is None:
        # Start the levels where the observations put them: the fit then only has the
        # shape to find, and one observation is matched exactly.
        model = prior
        t = [c.log_t - math.log(model.iter_time_s(c.cfg)) for c in cells if c.log_t is not None]
        p = [c.log_p - math.log(model.power_w(c.cfg)) for c in cells if c.log_p is not None]
        z0[TIME_LEVEL] = sum(t) / len(t) if t else 0.0
        z0[POWER_LEVEL] = sum(p) / len(p) if p else 0.0
    shape_r = math.sqrt(settings.shape_ridge)
    return _least_squares(
        prior, cells, grid, grid_w, settings.ridge, z0, settings.max_steps, shape_r
    )


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
