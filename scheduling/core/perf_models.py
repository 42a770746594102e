"""Performance models: time per iteration and power per GPU for a job's configuration.

A model predicts, for one workload class on one GPU model and a ``GpuConfig`` (GPU count
and placement, global batch, SM clock or power limit), the seconds per iteration and
the average power each busy GPU draws; energy per iteration is ``n x P x T``. The
parameters are fitted to the measurements in ``data/perf/`` by ``scheduling/fitting/`` and
shipped as versioned JSON (``perf_catalog.json``); this module only evaluates them, with
plain float math so that the scheduler can call it ~10^6 times per simulated week.

The equations (units in the names; ``b`` = samples per GPU, ``r = f / f_max``)::

    compute   T_c(b, r) = (alpha_c_s + beta_c_s * b) * (phi + (1 - phi) / r)
              (with ``compute_sharpness`` q != 1, the sum is the soft maximum
              (alpha_c_s ** q + (beta_c_s * b) ** q) ** (1 / q): see ``ThroughputParams``)
    network   T_n(n)    = 0                                  if n == 1
                        = alpha_r_s + beta_r_s * (n - 2)+     if all GPUs on one node
                        = alpha_n_s + beta_n_s * (n - 2)+     if spread over nodes
    iteration T         = (T_c^gamma + T_n^gamma)^(1 / gamma)  (Pollux's overlap)
    busy draw P_c(b, r) = max(P_idle, P_b(b)) * (s + (1 - s) r^k), where
              P_b(b)    = busy_max_w * (c + (1 - c) * b / (b + batch_half))   (c: floor fraction)
    average   P         = P_idle + (P_c - P_idle) * T_c / T   (the GPU idles while it waits
                                                              on the network: reconstructed)

The throughput part is Pollux's model (Qiao et al., OSDI'21), fitted per workload to
ElasticFlow's A100 tables and Pollux's T4 profiles. The clock part (``phi``, ``s``, ``k``)
is fitted per GPU model to Perseus' 60-clock sweeps on A100 and A40. A power limit ``L``
is mapped to an effective clock: the GPU lowers its clock until its peak draw
``peak_to_avg * P_c`` fits under ``L``, which is how Zeus' measurements behave (epoch
time rises and average power falls as the limit drops below the unconstrained draw).
Where a data set lacks a dimension it is borrowed; the catalog records the source of
every borrowed number (``sources`` per GPU and per model) and ``docs/perf_models.md``
explains each.

Out of range: clocks and power limits are clamped to the GPU's supported range (the
driver refuses others); batch sizes and GPU counts outside the measured grid are
extrapolated with the same linear compute and network terms, which stay finite and
positive because every fitted coefficient is bounded to be non-negative (``alpha_c_s``
strictly positive).
"""

from __future__ import annotations

import copy
import csv
import functools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from scheduling.core.types import GpuConfig

CATALOG_PATH = Path(__file__).resolve().with_name("perf_catalog.json")
_CACHE_LIMIT = 1 << 16  # configurations remembered per model before the cache is reset


def soft_max_sum(a: float, b: float, q: float) -> float:
    """``(a ** q + b ** q) ** (1 / q)`` for a, b >= 0, scaled by the larger so that no
    power under- or overflows (a and b are seconds, ~1e-3, and q may be large)."""
    hi, lo = (a, b) if a >= b else (b, a)
    if not hi > 0.0:
        return 0.0
    return hi * (1.0 + (lo / hi) ** q) ** (1.0 / q)


@dataclass(frozen=True, slots=True)
class ThroughputParams:
    """Pollux-style iteration time at the maximum clock (seconds)."""

    alpha_c_s: float  # compute: fixed time per iteration, s
    beta_c_s: float  # compute: time per sample on one GPU, s/sample
    alpha_r_s: float  # all-reduce inside one node: time at 2 GPUs, s
    beta_r_s: float  # inside one node: extra time per GPU beyond 2, s
    alpha_n_s: float  # all-reduce across nodes: time at 2 GPUs, s
    beta_n_s: float  # across nodes: extra time per GPU beyond 2, s
    gamma: float  # overlap exponent (1 = no overlap, large = full overlap), dimensionless
    # How the fixed and the per-sample compute time combine: 1 (the catalog's fits) adds
    # them; q > 1 takes their soft maximum ``(alpha ** q + (beta * b) ** q) ** (1 / q)``,
    # a launch floor that the per-sample time takes over once the GPU fills (on an H100
    # small models' time is flat up to batch 128-256, then linear:
    # ``data/device/h100_2026-11-26``). Only the online model moves it.
    compute_sharpness: float = 1.0

    def compute_time_s(self, local_batch: float) -> float:
        q = self.compute_sharpness
        if q == 1.0:
            return self.alpha_c_s + self.beta_c_s * local_batch
        return soft_max_sum(self.alpha_c_s, self.beta_c_s * local_batch, q)

    def network_time_s(self, n_gpus: int, n_nodes: int) -> float:
        if n_gpus <= 1:
            return 0.0
        extra = n_gpus - 2 if n_gpus > 2 else 0
        if n_nodes > 1:
            return self.alpha_n_s + self.beta_n_s * extra
        return self.alpha_r_s + self.beta_r_s * extra


@dataclass(frozen=True, slots=True)
class DvfsParams:
    """How one GPU model's compute time and power scale with its SM clock."""

    max_clock_mhz: int
    min_clock_mhz: int
    time_fixed_frac: float  # phi: share of compute time that does not scale with 1/f
    power_static_frac: float  # s: share of the busy draw at f_max that does not scale with f
    power_exp: float  # k: dynamic draw ~ (f / f_max)^k
    peak_to_avg: float  # kappa: a power limit L caps kappa x average busy draw

    def time_factor(self, r: float) -> float:
        """Compute time at clock ratio ``r`` relative to the maximum clock (>= 1)."""
        return self.time_fixed_frac + (1.0 - self.time_fixed_frac) / r

    def power_factor(self, r: float) -> float:
        """Busy draw at clock ratio ``r`` relative to the maximum clock (<= 1)."""
        s = self.power_static_frac
        return s + (1.0 - s) * r**self.power_exp

    def ratio_for_limit(
        self, limit_w: float, busy_w: float, default_limit_w: float = math.inf
    ) -> float:
        """Clock ratio the GPU settles at under ``limit_w`` for a busy draw ``busy_w``.

        The throughput was measured at ``default_limit_w``: that limit (or any above it)
        leaves the clock at its maximum, and peaks never exceed it.
        """
        if limit_w >= default_limit_w:
            return 1.0
        r_min = self.min_clock_mhz / self.max_clock_mhz
        x = limit_w / min(self.peak_to_avg * busy_w, default_limit_w)
        if x >= 1.0:
            return 1.0
        s = self.power_static_frac
        if x <= s:
            return r_min
        r = ((x - s) / (1.0 - s)) ** (1.0 / self.power_exp)
        return r if r > r_min else r_min


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """A GPU model as the catalog knows it: idle draw, node size, clocks and limits."""

    name: str
    idle_power_w: float
    gpus_per_node: int
    clocks_mhz: tuple[int, ...]
    power_limit_min_w: float
    power_limit_max_w: float
    dvfs: DvfsParams
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PowerParams:
    """Busy draw of one GPU at the maximum clock as a function of its per-GPU batch."""

    busy_max_w: float  # W, the draw approached at large per-GPU batches
    batch_half: float  # samples per GPU at which the batch-dependent part is half way
    busy_floor_frac: float = 0.0  # share of busy_max_w drawn even at tiny batches


class UnknownPerfModelError(KeyError):
    """No performance model for a (workload, GPU model) pair."""

    def __init__(self, workload: str, gpu_model: str, available: Iterable[str]) -> None:
        self.workload = workload
        self.gpu_model = gpu_model
        self.available = tuple(available)
        super().__init__(workload, gpu_model)

    def __str__(self) -> str:
        return (
            f"no performance model for workload {self.workload!r} on GPU model "
            f"{self.gpu_model!r}; the catalog has: {', '.join(self.available) or 'nothing'}"
        )


class FittedPerfModel:
    """Implements ``PerfModel`` for one (workload, GPU model) from fitted parameters."""

    __slots__ = (
        "workload",
        "gpu_model",
        "idle_power_w",
        "clocks_mhz",
        "batch_sizes",
        "throughput",
        "power",
        "gpu",
        "errors",
        "sources",
        "planned_limits_w",
        "_cache",
    )

    def __init__(
        self,
        *,
        workload: str,
        gpu: GpuSpec,
        batch_sizes: tuple[int, ...],
        throughput: ThroughputParams,
        power: PowerParams,
        errors: Mapping[str, Any] | None = None,
        sources: Mapping[str, str] | None = None,
    ) -> None:
        self.workload = workload
        self.gpu_model = gpu.name
        self.idle_power_w = gpu.idle_power_w
        self.clocks_mhz = gpu.clocks_mhz
        self.batch_sizes = batch_sizes
        self.throughput = throughput
        self.power = power
        self.gpu = gpu
        self.errors = dict(errors or {})
        self.sources = dict(sources or {})
        # (min, max) power limit a round may plan in, where the GPUs take less than the
        # GPU model's range (``with_limits``); None: the GPU model's range
        self.planned_limits_w: tuple[float, float] | None = None
        self._cache: dict[GpuConfig, tuple[float, float]] = {}

    def __repr__(self) -> str:
        return f"FittedPerfModel({self.workload!r}, {self.gpu_model!r})"

    @property
    def power_limits_w(self) -> tuple[float, float]:
        """(min, max) power limit to plan in, watts: the one this GPU model accepts, or
        what its GPUs take (``planned_limits_w``)."""
        if self.planned_limits_w is not None:
            return self.planned_limits_w
        return (self.gpu.power_limit_min_w, self.gpu.power_limit_max_w)

    def iter_time_s(self, cfg: GpuConfig) -> float:
        return self._evaluate(cfg)[0]

    def power_w(self, cfg: GpuConfig) -> float:
        return self._evaluate(cfg)[1]

    def time_and_power(self, cfg: GpuConfig) -> tuple[float, float]:
        """(``iter_time_s``, ``power_w``) of ``cfg`` from one evaluation."""
        return self._evaluate(cfg)

    def energy_per_iter_j(self, cfg: GpuConfig) -> float:
        time_s, power_w = self._evaluate(cfg)
        return max(cfg.n_gpus, 1) * power_w * time_s

    def clock_ratio(self, cfg: GpuConfig) -> float:
        """Effective clock / maximum clock for ``cfg`` (after any power-limit throttling)."""
        n_gpus = cfg.n_gpus if cfg.n_gpus > 0 else 1
        local_batch = max(cfg.global_batch, 1) / n_gpus
        return self._ratio(cfg, self._busy_w(local_batch))

    def _busy_w(self, local_batch: float) -> float:
        p = self.power
        c = p.busy_floor_frac
        busy_w = p.busy_max_w * (c + (1.0 - c) * local_batch / (local_batch + p.batch_half))
        return busy_w if busy_w > self.idle_power_w else self.idle_power_w

    def _ratio(self, cfg: GpuConfig, busy_w: float) -> float:
        return self._ratio_at(cfg.sm_clock_mhz, cfg.power_limit_w, busy_w)

    def _ratio_at(self, sm_clock_mhz: int | None, power_limit_w: float | None, busy_w: float):
        dvfs = self.gpu.dvfs
        r = 1.0
        if sm_clock_mhz is not None:
            r = min(max(sm_clock_mhz, dvfs.min_clock_mhz), dvfs.max_clock_mhz)
            r = r / dvfs.max_clock_mhz
        if power_limit_w is not None:
            gpu = self.gpu
            limit_w = min(max(power_limit_w, gpu.power_limit_min_w), gpu.power_limit_max_w)
            r_limit = dvfs.ratio_for_limit(limit_w, busy_w, gpu.power_limit_max_w)
            if r_limit < r:
                r = r_limit
        return r

    def _evaluate(self, cfg: GpuConfig) -> tuple[float, float]:
        hit = self._cache.get(cfg)
        if hit is not None:
            return hit
        result = self.evaluate_parts(*config_parts(cfg, self.gpu.gpus_per_node))
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[cfg] = result
        return result

    def evaluate_parts(
        self,
        n_gpus: int,
        n_nodes: int,
        local_batch: float,
        sm_clock_mhz: int | None,
        power_limit_w: float | None,
    ) -> tuple[float, float]:
        """(iteration time s, per-GPU draw W) for a configuration given by its
        ``config_parts``, without the cache: for a model evaluated once per configuration
        (the online fit's trial models), the cache's hashing costs more than it saves."""
        compute_s, compute_w = self.compute_parts(local_batch, sm_clock_mhz, power_limit_w)
        return self.combine_parts(n_gpus, n_nodes, compute_s, compute_w)

    def compute_parts(
        self, local_batch: float, sm_clock_mhz: int | None, power_limit_w: float | None
    ) -> tuple[float, float]:
        """(compute time s, busy draw W, at least idle) at a per-GPU batch, clock and limit:
        what does not depend on the GPU count, so configurations that differ only in it
        can share it (``combine_parts``)."""
        # The arithmetic of ``_busy_w``, ``compute_time_s``, ``time_factor`` and
        # ``power_factor``, inlined (this is the hot loop of the online fit); the same
        # operations in the same order, so the same floats.
        pw = self.power
        idle_w = self.idle_power_w
        c = pw.busy_floor_frac
        busy_w = pw.busy_max_w * (c + (1.0 - c) * local_batch / (local_batch + pw.batch_half))
        if not busy_w > idle_w:
            busy_w = idle_w
        r = self._ratio_at(sm_clock_mhz, power_limit_w, busy_w)
        dvfs = self.gpu.dvfs
        tp = self.throughput
        phi = dvfs.time_fixed_frac
        q = tp.compute_sharpness
        if q == 1.0:
            base_s = tp.alpha_c_s + tp.beta_c_s * local_batch
        else:
            base_s = soft_max_sum(tp.alpha_c_s, tp.beta_c_s * local_batch, q)
        compute_s = base_s * (phi + (1.0 - phi) / r)
        s = dvfs.power_static_frac
        compute_w = busy_w * (s + (1.0 - s) * r**dvfs.power_exp)
        if compute_w < idle_w:
            compute_w = idle_w
        return compute_s, compute_w

    def combine_parts(
        self, n_gpus: int, n_nodes: int, compute_s: float, compute_w: float
    ) -> tuple[float, float]:
        """(iteration time s, per-GPU draw W) from ``compute_parts`` on ``n_gpus`` GPUs
        over ``n_nodes`` nodes (``network_time_s`` inlined)."""
        tp = self.throughput
        if n_gpus <= 1:
            network_s = 0.0
        else:
            extra = n_gpus - 2 if n_gpus > 2 else 0
            if n_nodes > 1:
                network_s = tp.alpha_n_s + tp.beta_n_s * extra
            else:
                network_s = tp.alpha_r_s + tp.beta_r_s * extra
        if network_s > 0.0:
            g = tp.gamma
            time_s = (compute_s**g + network_s**g) ** (1.0 / g)
        else:
            time_s = compute_s
        idle_w = self.idle_power_w
        power_w = idle_w + (compute_w - idle_w) * (compute_s / time_s)
        return (time_s, power_w)


def config_parts(
    cfg: GpuConfig, gpus_per_node: int
) -> tuple[int, int, float, int | None, float | None]:
    """What a model's evaluation reads from ``cfg`` on a GPU model of ``gpus_per_node``:
    (GPUs, nodes, per-GPU batch, SM clock, power limit)."""
    n_gpus = cfg.n_gpus if cfg.n_gpus > 0 else 1
    if cfg.gpus_per_node:
        n_nodes = sum(1 for k in cfg.gpus_per_node if k > 0) or 1
    else:
        n_nodes = -(-n_gpus // gpus_per_node)
    local_batch = max(cfg.global_batch, 1) / n_gpus
    return (n_gpus, n_nodes, local_batch, cfg.sm_clock_mhz, cfg.power_limit_w)


def time_to_finish_s(
    model: FittedPerfModel, cfg: GpuConfig, remaining_iters: float, iter_time_scale: float = 1.0
) -> float:
    """Seconds to run ``remaining_iters`` iterations in ``cfg`` (``iter_time_scale`` from
    online refinement multiplies the model's iteration time)."""
    return max(remaining_iters, 0.0) * model.iter_time_s(cfg) * iter_time_scale


def energy_to_finish_j(
    model: FittedPerfModel,
    cfg: GpuConfig,
    remaining_iters: float,
    iter_time_scale: float = 1.0,
    power_scale: float = 1.0,
) -> float:
    """Joules the job's GPUs draw to run ``remaining_iters`` iterations in ``cfg``."""
    per_iter_j = model.energy_per_iter_j(cfg) * iter_time_scale * power_scale
    return max(remaining_iters, 0.0) * per_iter_j


class Catalog:
    """Implements ``PerfCatalog``: the fitted models by (workload, GPU model).

    ``aliases`` map a workload key onto another workload's measured model on the same GPU
    (e.g. Pollux's ``imagenet`` is ResNet-50 on ImageNet, which ElasticFlow measured on
    A100 as ``resnet50``). A looked-up alias returns the target's model object, so its
    ``workload`` attribute is the target's name.
    """

    def __init__(
        self,
        models: Iterable[FittedPerfModel],
        *,
        version: str,
        gpus: Mapping[str, GpuSpec],
        aliases: Mapping[tuple[str, str], str] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.version = version
        self.gpus = dict(gpus)
        self.meta = dict(meta or {})
        self._models = {(m.workload, m.gpu_model): m for m in models}
        self._aliases = dict(aliases or {})
        for (workload, gpu_model), target in self._aliases.items():
            self._models.setdefault((workload, gpu_model), self._models[(target, gpu_model)])
        # The names each alias joins, on whatever GPU model it was declared (it says two
        # names are one network on one data set), closed under chains of aliases.
        self._same: dict[str, frozenset[str]] = {}
        for (workload, _), target in sorted(self._aliases.items()):
            joined = self.same_workload(workload) | self.same_workload(target)
            for name in joined:
                self._same[name] = joined

    def get(self, workload: str, gpu_model: str) -> FittedPerfModel:
        try:
            return self._models[(workload, gpu_model)]
        except KeyError:
            raise UnknownPerfModelError(
                workload, gpu_model, (f"{w}@{g}" for w, g in sorted(self._models))
            ) from None

    def has(self, workload: str, gpu_model: str) -> bool:
        return (workload, gpu_model) in self._models

    def workloads(self) -> tuple[str, ...]:
        return tuple(sorted({w for w, _ in self._models}))

    def gpu_models(self) -> tuple[str, ...]:
        return tuple(sorted({g for _, g in self._models}))

    def gpu_models_for(self, workload: str) -> tuple[str, ...]:
        return tuple(sorted(g for w, g in self._models if w == workload))

    def models(self) -> tuple[FittedPerfModel, ...]:
        """The fitted models, without alias entries, sorted by (workload, GPU model)."""
        fitted = {(m.workload, m.gpu_model): m for m in self._models.values()}
        return tuple(fitted[k] for k in sorted(fitted))

    def aliases(self) -> dict[tuple[str, str], str]:
        return dict(self._aliases)

    def same_workload(self, workload: str) -> frozenset[str]:
        """``workload`` and every name an alias makes it one with, on any GPU model
        (``imagenet`` and ``resnet50``): one workload, whichever name a job or profile
        gives it."""
        return self._same.get(workload, frozenset((workload,)))


# --- JSON -----------------------------------------------------------------------------


def gpu_from_dict(name: str, data: Mapping[str, Any]) -> GpuSpec:
    return GpuSpec(
        name=name,
        idle_power_w=float(data["idle_power_w"]),
        gpus_per_node=int(data["gpus_per_node"]),
        clocks_mhz=tuple(int(c) for c in data["clocks_mhz"]),
        power_limit_min_w=float(data["power_limit_min_w"]),
        power_limit_max_w=float(data["power_limit_max_w"]),
        dvfs=DvfsParams(**data["dvfs"]),
        sources=dict(data.get("sources", {})),
    )


def with_clocks(model: Any, clocks_mhz: tuple[int, ...]) -> Any:
    """``model`` offering ``clocks_mhz`` as its clock steps, predicting as it does: a shallow
    copy, for the service's models (``FittedPerfModel``, whose predictions scale by its
    GPU's ``dvfs`` top clock, and the online models built on one), whose predictions at a
    clock do not depend on the steps they offer; ``model`` itself where they are its steps
    already."""
    clocks_mhz = tuple(clocks_mhz)
    if tuple(model.clocks_mhz) == clocks_mhz:
        return model
    out = copy.copy(model)
    out.clocks_mhz = clocks_mhz
    return out


def with_limits(model: Any, limits_w: tuple[float, float]) -> Any:
    """``model`` offering ``limits_w`` as its (min, max) power limit (``power_limits_w``,
    the range policies plan in), predicting as it does: a shallow copy, as ``with_clocks``
    makes, whose ``planned_limits_w`` is set (the service's models, ``FittedPerfModel`` and
    the online ones, have the slot); ``model`` itself where that is its range already. A
    prediction at a limit outside the GPU model's range is clamped to it by the model as
    before, so only the limits offered change."""
    limits_w = (float(limits_w[0]), float(limits_w[1]))
    if tuple(model.power_limits_w) == limits_w:
        return model
    out = copy.copy(model)
    out.planned_limits_w = limits_w
    return out


def unset_tops(model: Any) -> tuple[int | None, float | None]:
    """(SM clock MHz, power limit W) at which ``model`` predicts a plan that sets no clock
    and no limit: its GPU model's top clock and top limit (``FittedPerfModel._ratio_at``:
    no setting is ratio 1), whatever ``with_clocks`` or ``with_limits`` offer to plan.
    None for what a model does not say (one without a ``gpu``)."""
    gpu = getattr(model, "gpu", None)
    if gpu is None:
        return None, None
    return gpu.dvfs.max_clock_mhz, gpu.power_limit_max_w


def gpu_to_dict(gpu: GpuSpec) -> dict[str, Any]:
    d = gpu.dvfs
    return {
        "idle_power_w": gpu.idle_power_w,
        "gpus_per_node": gpu.gpus_per_node,
        "clocks_mhz": list(gpu.clocks_mhz),
        "power_limit_min_w": gpu.power_limit_min_w,
        "power_limit_max_w": gpu.power_limit_max_w,
        "dvfs": {
            "max_clock_mhz": d.max_clock_mhz,
            "min_clock_mhz": d.min_clock_mhz,
            "time_fixed_frac": d.time_fixed_frac,
            "power_static_frac": d.power_static_frac,
            "power_exp": d.power_exp,
            "peak_to_avg": d.peak_to_avg,
        },
        "sources": dict(gpu.sources),
    }


def model_to_dict(model: FittedPerfModel) -> dict[str, Any]:
    tp, pw = model.throughput, model.power
    return {
        "workload": model.workload,
        "gpu_model": model.gpu_model,
        "batch_sizes": list(model.batch_sizes),
        "throughput": {
            "alpha_c_s": tp.alpha_c_s,
            "beta_c_s": tp.beta_c_s,
            "alpha_r_s": tp.alpha_r_s,
            "beta_r_s": tp.beta_r_s,
            "alpha_n_s": tp.alpha_n_s,
            "beta_n_s": tp.beta_n_s,
            "gamma": tp.gamma,
            # Written only where it is not the sum, so the catalog's JSON stays as it was.
            **({"compute_sharpness": tp.compute_sharpness} if tp.compute_sharpness != 1.0 else {}),
        },
        "power": {
            "busy_max_w": pw.busy_max_w,
            "batch_half": pw.batch_half,
            "busy_floor_frac": pw.busy_floor_frac,
        },
        "errors": dict(model.errors),
        "sources": dict(model.sources),
    }


def catalog_from_dict(data: Mapping[str, Any]) -> Catalog:
    gpus = {name: gpu_from_dict(name, g) for name, g in data["gpus"].items()}
    models = [
        FittedPerfModel(
            workload=m["workload"],
            gpu=gpus[m["gpu_model"]],
            batch_sizes=tuple(int(b) for b in m["batch_sizes"]),
            throughput=ThroughputParams(**m["throughput"]),
            power=PowerParams(**m["power"]),
            errors=m.get("errors"),
            sources=m.get("sources"),
        )
        for m in data["models"]
    ]
    aliases = {(a["workload"], a["gpu_model"]): a["target"] for a in data.get("aliases", [])}
    return Catalog(
        models, version=str(data["version"]), gpus=gpus, aliases=aliases, meta=data.get("meta")
    )


def catalog_to_dict(catalog: Catalog) -> dict[str, Any]:
    return {
        "version": catalog.version,
        "meta": dict(catalog.meta),
        "gpus": {name: gpu_to_dict(g) for name, g in sorted(catalog.gpus.items())},
        "models": [model_to_dict(m) for m in catalog.models()],
        "aliases": [
            {"workload": w, "gpu_model": g, "target": t}
            for (w, g), t in sorted(catalog.aliases().items())
        ],
    }


PARAM_COUNTS_PATH = Path(__file__).resolve().parents[2] / "data" / "perf" / "param_counts.csv"


def load_param_counts(path: Path | str | None = None) -> dict[str, float]:
    """Workload -> its model's published parameter count (``data/perf/param_counts.csv``,
    each with its source); empty where the file is absent."""
    p = Path(path) if path is not None else PARAM_COUNTS_PATH
    if not p.exists():
        return {}
    with p.open() as f:
        return {r["workload"]: float(r["params"]) for r in csv.DictReader(f)}


@functools.cache
def param_counts() -> dict[str, float]:
    """The shipped parameter counts (``load_param_counts``), read once."""
    return load_param_counts()


def nearest_by_params(
    workloads: Iterable[str], param_count: float | None, counts: Mapping[str, float]
) -> str | None:
    """Of ``workloads``, the one whose parameter count is nearest (in ratio) to
    ``param_count``; None where the count or every candidate's is unknown."""
    if not param_count or param_count <= 0:
        return None
    known = [w for w in workloads if counts.get(w, 0.0) > 0]
    if not known:
        return None
    return min(known, key=lambda w: (abs(math.log(counts[w] / param_count)), w))


def catalog_stand_in(
    catalog: Catalog,
    workload: str,
    gpu_model: str,
    *,
    resembles: str = "",
    param_count: float | None = None,
) -> FittedPerfModel | None:
    """The catalog model on ``gpu_model`` that stands for ``workload``: its own; else the
    one it ``resembles`` (the job's hint); else the one nearest in ``param_count`` among
    those with a published size; else the first on that GPU model. None where the catalog
    has no model on ``gpu_model``. The service's prior for an unprofiled workload on a
    catalog GPU (``workload_profiles.prior_for``) and the simulated agent's ground truth
    for it are this model, so that a demo job the service accepts also runs."""
    if catalog.has(workload, gpu_model):
        return catalog.get(workload, gpu_model)
    if resembles and catalog.has(resembles, gpu_model):
        return catalog.get(resembles, gpu_model)
    same_gpu = [m for m in catalog.models() if m.gpu_model == gpu_model]
    if not same_gpu:
        return None
    near = nearest_by_params([m.workload for m in same_gpu], param_count, param_counts())
    return next((m for m in same_gpu if m.workload == near), same_gpu[0])


def load_catalog(path: Path | str | None = None) -> Catalog:
    """Read a catalog JSON (default: ``perf_catalog.json`` shipped beside this module)."""
    with Path(path or CATALOG_PATH).open(encoding="utf-8") as fh:
        return catalog_from_dict(json.load(fh))


def save_catalog(catalog: Catalog, path: Path | str | None = None) -> Path:
    """Write ``catalog`` as JSON; the old file is replaced only once the new one is whole."""
    target = Path(path or CATALOG_PATH)
    text = json.dumps(catalog_to_dict(catalog), indent=1, sort_keys=False)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(text + "\n", encoding="utf-8")
    partial.replace(target)
    return target


# --- online refinement -------------------------------------------------------------------


class ScaleUpdate(NamedTuple):
    iter_time_scale: float  # observed / predicted iteration time
    power_scale: float  # observed / predicted power per GPU


def _median(values: list[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def _smooth(prior: float, ratios: list[float], alpha: float, bounds: tuple[float, float]) -> float:
    if not ratios:
        return prior
    # Each observation counts as one smoothing step, so a burst of samples moves the
    # scale further than one; the median keeps a stall or a spike from dragging it.
    weight = 1.0 - (1.0 - alpha) ** len(ratios)
    log_scale = (1.0 - weight) * math.log(prior) + weight * math.log(_median(ratios))
    return min(max(math.exp(log_scale), bounds[0]), bounds[1])


def refine_scales(
    *,
    predicted_iter_time_s: float,
    predicted_power_w: float,
    observed_iter_times_s: Iterable[float] = (),
    observed_powers_w: Iterable[float] = (),
    iter_time_scale: float = 1.0,
    power_scale: float = 1.0,
    alpha: float = 0.2,
    bounds: tuple[float, float] = (0.25, 4.0),
) -> ScaleUpdate:
    """Update a job's ``iter_time_scale`` / ``power_scale`` from telemetry.

    ``predicted_*`` are the model's raw predictions for the configuration the job ran
    in (without any scale); ``observed_*`` are the measurements since the last update
    (iteration times in seconds, per-GPU power in watts). Non-finite or non-positive
    observations are ignored. The new scale is an exponential smoothing, in log space,
    of the prior scale towards the median observed/predicted ratio, with the weight
    ``1 - (1 - alpha)^m`` for ``m`` observations, clamped to ``bounds``.
    """
    if not (predicted_iter_time_s > 0.0 and predicted_power_w > 0.0):
        raise ValueError("predictions must be positive to refine against them")
    if not 0.0 < alpha <= 1.0:
        raise ValueError("alpha must be in (0, 1]")
    t_ratios = [
        t / predicted_iter_time_s for t in observed_iter_times_s if math.isfinite(t) and t > 0
    ]
    p_ratios = [p / predicted_power_w for p in observed_powers_w if math.isfinite(p) and p > 0]
    return ScaleUpdate(
        iter_time_scale=_smooth(iter_time_scale, t_ratios, alpha, bounds),
        power_scale=_smooth(power_scale, p_ratios, alpha, bounds),
    )
