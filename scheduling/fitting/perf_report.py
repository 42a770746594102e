"""Held-out accuracy of the performance models, per data set, with parity plots.

Every prediction scored here comes from a fit that did not see the scored row:

* ``elasticflow_a100``: leave one configuration (GPU count x batch) out, per workload.
* ``pollux_t4``: 5-fold over configurations, per workload (500-2,100 rows each, too many
  to refit once per row); fold = position in a fixed sort order modulo 5.
* ``perseus_<gpu>``: leave one clock out, per pipeline stage and pass.
* ``zeus_<gpu>``: 5-fold over (batch, power limit) rows, per workload. Zeus reports
  time per epoch; at a fixed batch an epoch is a fixed number of iterations, so the
  relative error of epoch time and epoch energy is that of time and energy per iteration.

ElasticFlow and Pollux measured no power, so for them only iteration time is scored.
Deterministic: the folds are fixed and every fit is.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from scheduling.core.perf_models import Catalog
from scheduling.fitting import perf_data
from scheduling.fitting.perf_build import (
    CATALOG_VERSION,
    build_catalog,
    fit_throughputs,
    inter_node_ratios,
    limit_binds,
    zeus_fits,
)
from scheduling.fitting.perf_fit import (
    fit_clock_series,
    fit_power_limit,
    fit_throughput,
    predict_throughput_row,
)

TARGET_MEDIAN_ERROR = 0.10  # the target: median |error| <= 10 % on held-out rows
QUANTITIES = ("iter_time", "power", "energy")
K_FOLDS = 5


@dataclass(frozen=True, slots=True)
class HeldOut:
    """One held-out prediction."""

    dataset: str  # elasticflow_a100, pollux_t4, perseus_A100, zeus_a40, ...
    workload: str
    gpu_model: str
    quantity: str  # iter_time, power or energy
    observed: float
    predicted: float

    @property
    def abs_error(self) -> float:
        return abs(self.predicted / self.observed - 1.0)


@dataclass(frozen=True, slots=True)
class Summary:
    dataset: str
    quantity: str
    n: int
    median_abs_error: float
    p90_abs_error: float

    @property
    def meets_target(self) -> bool:
        return self.median_abs_error <= TARGET_MEDIAN_ERROR


def _p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def _by(items: Iterable[Any], key: Callable[[Any], Any]) -> dict[Any, list[Any]]:
    groups: dict[Any, list[Any]] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    return dict(sorted(groups.items()))


def _folds(rows: Sequence[Any], sort_key: Callable[[Any], Any], k: int) -> list[list[int]]:
    order = sorted(range(len(rows)), key=lambda i: sort_key(rows[i]))
    return [order[f::k] for f in range(k)]


def cv_elasticflow(data_dir: Path | str | None = None) -> list[HeldOut]:
    rows = perf_data.read_elasticflow(data_dir)
    # The inter/intra ratio borrowed by workloads without multi-node rows comes from the
    # full fits of the other workloads, which never contain the held-out row.
    full = fit_throughputs(rows)

    out: list[HeldOut] = []
    for workload, rs in _by(rows, lambda r: r.workload).items():
        others = {w: p for w, p in full.items() if w != workload}
        fallback = inter_node_ratios(others)
        for i, held in enumerate(rs):
            params = fit_throughput(rs[:i] + rs[i + 1 :], inter_node_fallback=fallback)
            out.append(
                HeldOut(
                    "elasticflow_a100",
                    workload,
                    "A100",
                    "iter_time",
                    held.iter_time_s,
                    predict_throughput_row(params, held),
                )
            )
    return out


def cv_pollux(data_dir: Path | str | None = None) -> list[HeldOut]:
    out: list[HeldOut] = []
    rows = perf_data.read_pollux(data_dir)
    for workload, rs in _by(rows, lambda r: r.workload).items():
        for fold in _folds(rs, lambda r: (r.n_nodes, r.n_gpus, r.local_batch, r.source), K_FOLDS):
            held = set(fold)
            params = fit_throughput([r for i, r in enumerate(rs) if i not in held])
            for i in fold:
                r = rs[i]
                out.append(
                    HeldOut(
                        "pollux_t4",
                        workload,
                        "T4",
                        "iter_time",
                        r.iter_time_s,
                        predict_throughput_row(params, r),
                    )
                )
    return out


def cv_perseus(data_dir: Path | str | None = None) -> list[HeldOut]:
    out: list[HeldOut] = []
    rows = perf_data.read_perseus(data_dir)
    top = {g: max(r.clock_mhz for r in rows if r.gpu_model == g) for g in perf_data.PERSEUS_GPUS}
    series = _by(rows, lambda r: (r.gpu_model, r.model, r.stage, r.instruction))
    for (gpu, model, _, _), rs in series.items():
        for i, held in enumerate(rs):
            fit = fit_clock_series(rs[:i] + rs[i + 1 :], top[gpu])
            t, p = fit.time_s(held.clock_mhz), fit.power_w(held.clock_mhz)
            for quantity, obs, pred in (
                ("iter_time", held.time_s, t),
                ("power", held.power_w, p),
                ("energy", held.energy_j, t * p),
            ):
                out.append(HeldOut(f"perseus_{gpu}", model, gpu, quantity, obs, pred))
    return out


def cv_zeus(data_dir: Path | str | None = None) -> list[HeldOut]:
    out: list[HeldOut] = []
    rows = perf_data.read_zeus(data_dir)
    top = {g: max(r.power_limit_w for r in rows if r.gpu == g) for g in perf_data.ZEUS_GPUS}
    for (gpu, workload), rs in _by(rows, lambda r: (r.gpu, r.workload)).items():
        for fold in _folds(rs, lambda r: (r.batch_size, r.power_limit_w), K_FOLDS):
            held = set(fold)
            fit = fit_power_limit([r for i, r in enumerate(rs) if i not in held], top[gpu])
            for i in fold:
                r = rs[i]
                t = fit.time_per_epoch_s(r.batch_size, r.power_limit_w)
                p = fit.average_power_w(r.batch_size, r.power_limit_w)
                for quantity, obs, pred in (
                    ("iter_time", r.time_per_epoch_s, t),
                    ("power", r.average_power_w, p),
                    ("energy", r.energy_per_epoch_j, t * p),
                ):
                    out.append(HeldOut(f"zeus_{gpu}", workload, gpu, quantity, obs, pred))
    return out


CROSS_VALIDATIONS: dict[str, Callable[[Path | str | None], list[HeldOut]]] = {
    "elasticflow_a100": cv_elasticflow,
    "pollux_t4": cv_pollux,
    "perseus": cv_perseus,
    "zeus": cv_zeus,
}


def cross_validate(
    data_dir: Path | str | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    datasets: Iterable[str] | None = None,
) -> list[HeldOut]:
    """Held-out predictions of the named data sets (all by default; ``progress`` is called
    after each)."""
    names = list(CROSS_VALIDATIONS) if datasets is None else list(datasets)
    unknown = [n for n in names if n not in CROSS_VALIDATIONS]
    if unknown:
        raise ValueError(
            f"unknown data set(s) {', '.join(unknown)}; known: {', '.join(CROSS_VALIDATIONS)}"
        )
    out: list[HeldOut] = []
    for name in names:
        out.extend(CROSS_VALIDATIONS[name](data_dir))
        if progress:
            progress(name)
    return out


def count_fit_steps(data_dir: Path | str | None = None, *, validate: bool = True) -> int:
    """How many times ``fit_and_validate`` calls its ``progress`` (for a progress bar)."""
    throughput_workloads = {r.workload for r in perf_data.read_elasticflow(data_dir)}
    throughput_workloads |= {f"t4:{w}" for w in perf_data.POLLUX_WORKLOADS}
    steps = 2 + len(throughput_workloads)  # zeus, perseus, one per throughput fit
    return steps + (len(CROSS_VALIDATIONS) if validate else 0)


def fit_and_validate(
    data_dir: Path | str | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    validate: bool = True,
    version: str | None = None,
) -> tuple[Catalog, list[HeldOut]]:
    """Cross-validate every data set (unless ``validate`` is false), then fit the catalog
    on all rows with each model's held-out errors attached (``manage.py fit_perf_models``)."""
    results = cross_validate(data_dir, progress=progress) if validate else []
    catalog = build_catalog(
        data_dir,
        progress=progress,
        errors=model_errors(results),
        version=version or CATALOG_VERSION,
    )
    return catalog, results


def summarise(
    results: Iterable[HeldOut], key: Callable[[HeldOut], str] = lambda h: h.dataset
) -> list[Summary]:
    """Median and 90th-percentile absolute relative error per (key, quantity)."""
    groups = _by(results, lambda h: (key(h), h.quantity))
    return [
        Summary(
            name,
            quantity,
            len(hs),
            median(h.abs_error for h in hs),
            _p90([h.abs_error for h in hs]),
        )
        for (name, quantity), hs in sorted(
            groups.items(), key=lambda kv: (kv[0][0], QUANTITIES.index(kv[0][1]))
        )
    ]


def model_errors(results: Iterable[HeldOut]) -> dict[tuple[str, str], dict[str, Any]]:
    """Held-out iteration-time errors of each catalog model (from ElasticFlow / Pollux)."""
    own = [
        h
        for h in results
        if h.dataset in ("elasticflow_a100", "pollux_t4") and h.quantity == "iter_time"
    ]
    errors: dict[tuple[str, str], dict[str, Any]] = {}
    for (workload, gpu), hs in _by(own, lambda h: (h.workload, h.gpu_model)).items():
        errs = [h.abs_error for h in hs]
        errors[(workload, gpu)] = {
            "dataset": hs[0].dataset,
            "method": "leave-one-out" if hs[0].dataset == "elasticflow_a100" else f"{K_FOLDS}-fold",
            "n_heldout": len(hs),
            "iter_time_median_abs_error": round(median(errs), 4),
            "iter_time_p90_abs_error": round(_p90(errs), 4),
        }
    return errors


def format_table(summaries: Sequence[Summary]) -> str:
    """A plain-text table: one line per (data set, quantity), with the target verdict."""
    width = max([22, *(len(s.dataset) for s in summaries)])
    head = f"{'data set':<{width}} {'quantity':<10} {'n':>6} {'median':>8} {'p90':>8}  target"
    lines = [head, "-" * len(head)]
    for s in summaries:
        verdict = "ok" if s.meets_target else f"MISSES {TARGET_MEDIAN_ERROR:.0%}"
        lines.append(
            f"{s.dataset:<{width}} {s.quantity:<10} {s.n:>6} {s.median_abs_error:>8.1%} "
            f"{s.p90_abs_error:>8.1%}  {verdict}"
        )
    return "\n".join(lines)


def binding_zeus_groups(data_dir: Path | str | None = None) -> list[tuple[str, str]]:
    """(GPU, workload) Zeus sweeps in which the lowest power limit slows training >= 10 %."""
    rows = perf_data.read_zeus(data_dir)
    fits = zeus_fits(rows)
    groups = _by(rows, lambda r: (r.gpu, r.workload))
    return [k for k, f in fits.items() if limit_binds(groups[k], f)]


def write_parity_plots(results: Sequence[HeldOut], out_dir: Path | str) -> list[Path]:
    """One PNG per data set family: observed vs held-out prediction, log-log, ±10 % band."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    families = _by(results, lambda h: h.dataset.split("_")[0])
    for family, hs in families.items():
        quantities = [q for q in QUANTITIES if any(h.quantity == q for h in hs)]
        fig, axes = plt.subplots(
            1, len(quantities), figsize=(5 * len(quantities), 4.6), squeeze=False
        )
        for ax, quantity in zip(axes[0], quantities, strict=True):
            mine = [h for h in hs if h.quantity == quantity]
            # One data set in the family: colour by workload instead, to show who misses.
            attr = "workload" if len({h.dataset for h in mine}) == 1 else "dataset"
            for name, group in _by(mine, operator.attrgetter(attr)).items():
                ax.scatter(
                    [h.observed for h in group],
                    [h.predicted for h in group],
                    s=6,
                    alpha=0.5,
                    label=f"{name} (median {median(h.abs_error for h in group):.1%})",
                )
            lo = min(min(h.observed, h.predicted) for h in mine)
            hi = max(max(h.observed, h.predicted) for h in mine)
            line = [lo, hi]
            ax.plot(line, line, color="black", linewidth=0.8)
            ax.fill_between(
                line, [v * 0.9 for v in line], [v * 1.1 for v in line], color="grey", alpha=0.25
            )
            ax.set_xscale("log")
            ax.set_yscale("log")
            unit = {"iter_time": "s", "power": "W", "energy": "J"}[quantity]
            ax.set_xlabel(f"measured {quantity} [{unit}]")
            ax.set_ylabel(f"predicted, held out [{unit}]")
            ax.legend(fontsize=7, loc="upper left")
        fig.suptitle(f"{family}: held out vs measured (grey band: ±10 %)", fontsize=10)
        fig.tight_layout()
        path = out_dir / f"perf_parity_{family}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
