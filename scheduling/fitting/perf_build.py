"""Builds the performance catalog from the measurements: which fit feeds which model.

``build_catalog`` runs every fit of ``perf_fit`` on the data in ``data/perf/`` and
assembles one ``FittedPerfModel`` per (workload, GPU model). What each GPU model takes
from where (the catalog's ``sources`` record the same in words):

A100 (ElasticFlow's servers, 8 per node)
    iteration time: Pollux model fitted to ``elasticflow_a100/<workload>.csv``;
    clock: ``phi``, ``s``, ``k`` = medians of the Perseus A100 series fits; clock steps
    = the Perseus A100 sweep (855-1410 MHz); peak-to-average ratio of a power limit =
    median of the Zeus fits in which the limit binds (Zeus has no A100);
    busy power: the Zeus A40 draw of the closest measured workload (A40 is the same
    Ampere generation), times the A100/A40 ratio of the draw Perseus measured for the
    same pipeline stages at each GPU's top clock.
T4 (Pollux's g4dn.12xlarge, 4 per node)
    iteration time: Pollux model fitted to ``pollux_t4/<workload>/`` (placements and
    scalability rows together); clock and power-limit behaviour: the medians of the Zeus
    RTX6000 fits (Turing, the T4's architecture), since no T4 clock or power data
    exists; busy power: the RTX6000 draw of the closest Zeus workload as a fraction of
    the RTX6000's top limit, times the T4's 70 W board limit.

Parameters without any measurement in ``data/`` (idle power, the T4's clock range and
board limit, the A100's power-limit range) are constants below with their source.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from statistics import median
from typing import Any

from scheduling.core.perf_models import (
    Catalog,
    DvfsParams,
    FittedPerfModel,
    GpuSpec,
    PowerParams,
    ThroughputParams,
)
from scheduling.fitting import perf_data
from scheduling.fitting.perf_fit import (
    ClockFit,
    PowerLimitFit,
    fit_clock_series,
    fit_power_limit,
    fit_throughput,
)

CATALOG_VERSION = "2"  # 2: busy draw has a floor share (busy_floor_frac)

# Each catalog workload borrows power behaviour from the closest workload Zeus measured.
ZEUS_PROXY = {
    "resnet50": "resnet50",
    "imagenet": "resnet50",  # Pollux's imagenet is ResNet-50 on ImageNet
    "vgg16": "resnet50",  # image CNNs without their own power data
    "inception3": "resnet50",
    "yolov3": "resnet50",
    "resnet50_cifar10": "shufflenetv2",  # small-image CNNs: Zeus' CIFAR-100 network
    "cifar10": "shufflenetv2",
    "bert": "bert",
    "gpt2": "bert",  # transformer language model
    "deepspeech2": "deepspeech2",
    "ncf": "ncf",
}

# Assumed values: nothing in data/ measures them. Override with telemetry when known.
IDLE_POWER_W = {"A100": 50.0, "T4": 10.0}
IDLE_SOURCE = (
    "assumption: typical draw of a powered, unloaded GPU as reported by nvidia-smi; "
    "no idle measurement exists in data/"
)
A100_POWER_LIMITS_W = (100.0, 400.0)  # NVIDIA A100 SXM4 40GB datasheet: TDP 400 W
T4_BOARD_LIMIT_W = 70.0  # NVIDIA T4 datasheet: 70 W board power
T4_POWER_LIMITS_W = (60.0, 70.0)  # nvidia-smi's min/max enforceable limit on a T4
T4_MAX_CLOCK_MHZ = 1590  # NVIDIA T4 datasheet: boost clock
CLOCK_STEP_MHZ = 15  # Perseus' sweep step, reused for the T4


def _by(items: Iterable[Any], key: Callable[[Any], Any]) -> dict[Any, list[Any]]:
    groups: dict[Any, list[Any]] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    return dict(groups)


def perseus_fits(rows: list[perf_data.ClockRow]) -> dict[tuple[str, str, int, str], ClockFit]:
    """One clock fit per (model, GPU, stage, instruction); the ratio's 1 is the top clock."""
    top = {
        g: max(r.clock_mhz for r in rows if r.gpu_model == g) for g in {r.gpu_model for r in rows}
    }
    series = _by(rows, lambda r: (r.model, r.gpu_model, r.stage, r.instruction))
    return {k: fit_clock_series(v, top[k[1]]) for k, v in sorted(series.items())}


def zeus_fits(rows: list[perf_data.PowerLimitRow]) -> dict[tuple[str, str], PowerLimitFit]:
    """One power-limit fit per (Zeus GPU, workload); the top limit is the unthrottled one."""
    groups = _by(rows, lambda r: (r.gpu, r.workload))
    top = {g: max(r.power_limit_w for r in rows if r.gpu == g) for g in {r.gpu for r in rows}}
    return {k: fit_power_limit(v, top[k[0]]) for k, v in sorted(groups.items())}


def limit_binds(rows: list[perf_data.PowerLimitRow], fit: PowerLimitFit) -> bool:
    """Whether the lowest limit slowed the sweep by 10 % or more (else the fit's limit
    parameters are unidentified and must not be borrowed)."""
    low = min(r.power_limit_w for r in rows)
    slow = [
        r.time_per_epoch_s / fit.unthrottled_epoch_s(r.batch_size)
        for r in rows
        if r.power_limit_w == low
    ]
    return median(slow) >= 1.10


def _power_ratio_a100_a40(rows: list[perf_data.ClockRow]) -> float:
    """Median A100/A40 draw of the same Perseus pass, each at its GPU's top clock."""
    top = {g: max(r.clock_mhz for r in rows if r.gpu_model == g) for g in ("A100", "A40")}
    at_top = {
        (r.gpu_model, r.model, r.stage, r.instruction): r.power_w
        for r in rows
        if r.clock_mhz == top[r.gpu_model]
    }
    ratios = [
        at_top[("A100", *k[1:])] / p
        for k, p in at_top.items()
        if k[0] == "A40" and ("A100", *k[1:]) in at_top
    ]
    return median(ratios)


def _clock_steps(low_mhz: int, high_mhz: int) -> tuple[int, ...]:
    return tuple(range(high_mhz, low_mhz - 1, -CLOCK_STEP_MHZ))[::-1]


def build_gpus(
    clock_rows: list[perf_data.ClockRow],
    zeus_rows: list[perf_data.PowerLimitRow],
    zfits: dict[tuple[str, str], PowerLimitFit],
) -> dict[str, GpuSpec]:
    pfits = perseus_fits(clock_rows)
    zgroups = _by(zeus_rows, lambda r: (r.gpu, r.workload))
    binding = {k: f for k, f in zfits.items() if limit_binds(zgroups[k], f)}
    kappa_all = median(f.peak_to_avg for f in binding.values())

    a100 = [f for (_, g, _, _), f in pfits.items() if g == "A100"]
    a100_clocks = tuple(sorted({r.clock_mhz for r in clock_rows if r.gpu_model == "A100"}))
    a100_dvfs = DvfsParams(
        max_clock_mhz=a100_clocks[-1],
        min_clock_mhz=a100_clocks[0],
        time_fixed_frac=median(f.time_fixed_frac for f in a100),
        power_static_frac=median(f.power_static_frac for f in a100),
        power_exp=median(f.power_exp for f in a100),
        peak_to_avg=kappa_all,
    )
    turing = [f for (g, _), f in binding.items() if g == "rtx6000"]
    t4_min = int(round(T4_MAX_CLOCK_MHZ * a100_clocks[0] / a100_clocks[-1] / CLOCK_STEP_MHZ))
    t4_clocks = _clock_steps(t4_min * CLOCK_STEP_MHZ, T4_MAX_CLOCK_MHZ)
    t4_dvfs = DvfsParams(
        max_clock_mhz=t4_clocks[-1],
        min_clock_mhz=t4_clocks[0],
        time_fixed_frac=median(f.time_fixed_frac for f in turing),
        power_static_frac=median(f.power_static_frac for f in turing),
        power_exp=median(f.power_exp for f in turing),
        peak_to_avg=median(f.peak_to_avg for f in turing),
    )
    return {
        "A100": GpuSpec(
            name="A100",
            idle_power_w=IDLE_POWER_W["A100"],
            gpus_per_node=perf_data.ELASTICFLOW_GPUS_PER_NODE,
            clocks_mhz=a100_clocks,
            power_limit_min_w=A100_POWER_LIMITS_W[0],
            power_limit_max_w=A100_POWER_LIMITS_W[1],
            dvfs=a100_dvfs,
            sources={
                "idle_power_w": IDLE_SOURCE,
                "clocks_mhz": "Perseus A100-SXM sweep (data/perf/perseus)",
                "dvfs": f"medians of {len(a100)} Perseus A100 series fits (phi, s, k); "
                f"peak_to_avg: median of {len(binding)} Zeus fits where the limit binds",
                "power_limits_w": "NVIDIA A100 SXM4 datasheet (not in data/)",
                "gpus_per_node": "ElasticFlow's Azure ND96asr servers (data/README.md)",
            },
        ),
        "T4": GpuSpec(
            name="T4",
            idle_power_w=IDLE_POWER_W["T4"],
            gpus_per_node=perf_data.POLLUX_GPUS_PER_NODE,
            clocks_mhz=t4_clocks,
            power_limit_min_w=T4_POWER_LIMITS_W[0],
            power_limit_max_w=T4_POWER_LIMITS_W[1],
            dvfs=t4_dvfs,
            sources={
                "idle_power_w": IDLE_SOURCE,
                "clocks_mhz": "top clock from the NVIDIA T4 datasheet; the bottom is the same "
                "fraction of the top as Perseus' A100 sweep (no T4 clock data in data/)",
                "dvfs": f"medians of {len(turing)} Zeus RTX6000 fits (Turing, as the T4) "
                "where the limit binds",
                "power_limits_w": "NVIDIA T4 datasheet / nvidia-smi limits (not in data/)",
                "gpus_per_node": "Pollux's AWS g4dn.12xlarge servers (data/README.md)",
            },
        ),
    }


def _power_params(fit: PowerLimitFit, scale: float, gpu: GpuSpec) -> PowerParams:
    """Borrowed busy draw, scaled to the target GPU and capped so that its peaks fit under
    the GPU's default (highest) limit: Perseus' A100s drew up to ~500 W, more than the
    400 W A100s of ElasticFlow's servers may."""
    cap_w = gpu.power_limit_max_w / gpu.dvfs.peak_to_avg
    return PowerParams(
        busy_max_w=min(fit.busy_max_w * scale, cap_w),
        batch_half=fit.batch_half,
        busy_floor_frac=fit.busy_floor_frac,
    )


def inter_node_ratios(params: dict[str, ThroughputParams]) -> tuple[float, float]:
    """Median inter/intra-node ratios of alpha and beta over workloads that measured both."""
    ra = [p.alpha_n_s / p.alpha_r_s for p in params.values() if p.alpha_r_s > 0]
    rb = [p.beta_n_s / p.beta_r_s for p in params.values() if p.beta_r_s > 0]
    return (median(ra) if ra else 1.0, median(rb) if rb else 1.0)


def fit_throughputs(
    rows: list[perf_data.ThroughputRow], progress: Callable[[str], None] | None = None
) -> dict[str, ThroughputParams]:
    """Pollux fits per workload; a workload without multi-node rows borrows the others'
    inter/intra-node ratios."""
    groups = _by(rows, lambda r: r.workload)
    fitted: dict[str, ThroughputParams] = {}
    missing: list[str] = []
    for workload, rs in sorted(groups.items()):
        if any(r.n_nodes > 1 for r in rs):
            fitted[workload] = fit_throughput(rs)
        else:
            missing.append(workload)
        if progress:
            progress(workload)
    ratios = inter_node_ratios(fitted)
    for workload in missing:
        fitted[workload] = fit_throughput(groups[workload], inter_node_fallback=ratios)
    return dict(sorted(fitted.items()))


def build_catalog(
    data_dir: Path | str | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    errors: dict[tuple[str, str], dict[str, Any]] | None = None,
    version: str = CATALOG_VERSION,
) -> Catalog:
    """Fit everything in ``data/perf/`` and return the catalog (deterministic).

    ``progress`` is called with a short label after each fitted unit; ``errors`` (from
    ``perf_report.cross_validate``) are attached to the models they belong to.
    """
    clock_rows = perf_data.read_perseus(data_dir)
    zeus_rows = perf_data.read_zeus(data_dir)
    zfits = zeus_fits(zeus_rows)
    if progress:
        progress("zeus")
    gpus = build_gpus(clock_rows, zeus_rows, zfits)
    if progress:
        progress("perseus")
    ratio = _power_ratio_a100_a40(clock_rows)
    rtx_top = max(r.power_limit_w for r in zeus_rows if r.gpu == "rtx6000")
    errors = errors or {}

    models: list[FittedPerfModel] = []
    ef = perf_data.read_elasticflow(data_dir)
    for workload, tp in fit_throughputs(ef, progress).items():
        proxy = ZEUS_PROXY[workload]
        batches = tuple(sorted({int(round(r.global_batch)) for r in ef if r.workload == workload}))
        models.append(
            FittedPerfModel(
                workload=workload,
                gpu=gpus["A100"],
                batch_sizes=batches,
                throughput=tp,
                power=_power_params(zfits[("a40", proxy)], ratio, gpus["A100"]),
                errors=errors.get((workload, "A100")),
                sources={
                    "throughput": f"data/perf/elasticflow_a100/{workload}.csv",
                    "power": f"Zeus A40 {proxy} x Perseus A100/A40 draw ratio {ratio:.3f}, "
                    "capped at the 400 W limit / peak_to_avg",
                },
            )
        )
    pollux = perf_data.read_pollux(data_dir)
    for workload, tp in fit_throughputs(pollux, progress).items():
        proxy = ZEUS_PROXY[workload]
        models.append(
            FittedPerfModel(
                workload=workload,
                gpu=gpus["T4"],
                batch_sizes=perf_data.pollux_batch_sizes(workload, data_dir),
                throughput=tp,
                power=_power_params(
                    zfits[("rtx6000", proxy)], T4_BOARD_LIMIT_W / rtx_top, gpus["T4"]
                ),
                errors=errors.get((workload, "T4")),
                sources={
                    "throughput": f"data/perf/pollux_t4/{workload}/",
                    "power": f"Zeus RTX6000 {proxy} x T4/RTX6000 board limit "
                    f"{T4_BOARD_LIMIT_W:.0f}/{rtx_top:.0f} W",
                },
            )
        )
    for m in models:
        _check_finite(m)
    return Catalog(
        models,
        version=version,
        gpus=gpus,
        aliases={("imagenet", "A100"): "resnet50"},
        meta={
            "data": "data/perf (see data/README.md for attribution)",
            "a100_a40_power_ratio": ratio,
            "aliases": "imagenet@A100 -> resnet50@A100: Pollux's imagenet job is ResNet-50 on "
            "ImageNet, which ElasticFlow measured on A100",
        },
    )


def _check_finite(model: FittedPerfModel) -> None:
    tp, pw = model.throughput, model.power
    values = [getattr(tp, n) for n in tp.__slots__] + [getattr(pw, n) for n in pw.__slots__]
    if not all(math.isfinite(v) and v >= 0.0 for v in values):
        raise ValueError(f"fit for {model.workload}@{model.gpu_model} is not finite: {values}")
