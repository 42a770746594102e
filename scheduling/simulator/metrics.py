"""Per-job and overall metrics of a run, written as CSV and JSON.

JCT = finish - submit; queueing delay = first start - submit; makespan = the last
completion minus the first submission. Percentiles use numpy's default (linear
interpolation between order statistics). GPU utilisation = GPU-seconds held by jobs
(including checkpoint-restart time) / (GPUs x makespan). Statistics over JCT cover the
finished jobs only; ``n_unfinished`` says how many are missing from them.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from scheduling.core.types import G_PER_KG, J_PER_KWH
from scheduling.simulator.engine import SimResult

JOB_COLUMNS = (
    "job_id",
    "workload",
    "team",
    "requested_gpus",
    "submit_s",
    "first_start_s",
    "finish_s",
    "jct_s",
    "queueing_delay_s",
    "attained_gpu_s",
    "energy_j",
    "co2_g",
    "n_starts",
    "n_resizes",
    "n_preemptions",
    "n_retunes",
    "comm_overhead_gpu_s",
    "shared_s",
)
# Written only when some job explored (learned knowledge, and a policy that explores
# power limits or probes GPU counts), so the files of every other run stay as they were.
EXPLORATION_COLUMNS = (
    "exploration_s",
    "exploration_limits_w",
    "exploration_result_w",
    "exploration_gpu_probes",
)


def _stats(values: list[float], prefix: str) -> dict[str, float | None]:
    if not values:
        return {f"avg_{prefix}": None, f"median_{prefix}": None, f"p99_{prefix}": None}
    arr = np.asarray(values, dtype=float)
    return {
        f"avg_{prefix}": float(arr.mean()),
        f"median_{prefix}": float(np.median(arr)),
        f"p99_{prefix}": float(np.percentile(arr, 99)),
    }


def summarise(result: SimResult) -> dict[str, Any]:
    jobs = result.jobs
    finished = [r for r in jobs if r.finish_s is not None]
    started = [r for r in jobs if r.first_start_s is not None]
    first_submit = min((r.spec.submit_time_s for r in jobs), default=0.0)
    makespan_s = result.end_s - first_submit
    summary: dict[str, Any] = {
        "n_jobs": len(jobs),
        "n_finished": len(finished),
        "n_unfinished": len(jobs) - len(finished),
        "stopped_early": result.stopped_early,
        "stopped_why": result.stopped_why or None,
        **_stats([r.jct_s for r in finished], "jct_s"),
        "makespan_s": makespan_s,
        **_stats([r.queueing_delay_s for r in started], "queueing_delay_s"),
        "energy_kwh": result.energy_j / J_PER_KWH,
        "idle_energy_kwh": result.idle_energy_j / J_PER_KWH,
        "co2_kg": result.co2_g / G_PER_KG,
        "gpu_utilisation": result.busy_gpu_s / (result.n_gpus * makespan_s)
        if makespan_s > 0
        else 0.0,
        "n_gpus": result.n_gpus,
        "n_resizes": sum(r.n_resizes for r in jobs),
        "n_preemptions": sum(r.n_preemptions for r in jobs),
        "comm_overhead_gpu_h": sum(r.comm_overhead_gpu_s for r in jobs) / 3600.0,
        "n_colocated_jobs": sum(1 for r in jobs if r.shared_s > 0.0),
        "n_rounds": len(result.timeline),
        "wait_reasons": dict(sorted(result.wait_codes.items())),
        # Jobs the run stopped without: they can never run on this cluster (id -> why).
        "never_runnable": dict(sorted(result.never_runnable.items())),
    }
    return summary


def job_rows(result: SimResult) -> list[dict[str, Any]]:
    rows = []
    for r in result.jobs:
        rows.append(
            {
                "job_id": r.spec.job_id,
                "workload": r.spec.workload,
                "team": r.spec.team,
                "requested_gpus": r.spec.requested_gpus,
                "submit_s": r.spec.submit_time_s,
                "first_start_s": r.first_start_s,
                "finish_s": r.finish_s,
                "jct_s": r.jct_s,
                "queueing_delay_s": r.queueing_delay_s,
                "attained_gpu_s": r.attained_gpu_s,
                "energy_j": r.energy_j,
                "co2_g": r.co2_g,
                "n_starts": r.n_starts,
                "n_resizes": r.n_resizes,
                "n_preemptions": r.n_preemptions,
                "n_retunes": r.n_retunes,
                "comm_overhead_gpu_s": r.comm_overhead_gpu_s,
                "shared_s": r.shared_s,
                **_exploration_cells(r.exploration),
            }
        )
    if not any(r.exploration for r in result.jobs):
        for row in rows:
            for col in EXPLORATION_COLUMNS:
                del row[col]
    return rows


def _exploration_cells(record) -> dict[str, Any]:
    """Seconds the job lost exploring, the power limits it tried (``/``-separated, in order;
    ``xN`` marks a probe at another GPU count; a batch probe it ran ends them, ``bB`` at
    global batch ``B``, ``bB!`` where it made no progress), the limit exploration chose and
    the larger GPU counts it probed (``gpu_probe``; ``4>8/8>16``)."""
    if not record:
        return dict.fromkeys(EXPLORATION_COLUMNS)
    tried = "/".join(
        f"{t['limit_w']:g}" + ("" if t["n_gpus"] == record["n_gpus"] else f"x{t['n_gpus']}")
        for t in record["tried"]
    )
    other = record.get("other_batch")
    if other and other.get("runnable") is not None:
        tried += f"/b{other['batch']}" + ("" if other["runnable"] else "!")
    probes = "/".join(f"{p['from_gpus']}>{p['n_gpus']}" for p in record.get("gpu_probes", ()))
    return {
        "exploration_s": record["spent_s"],
        "exploration_limits_w": tried,
        "exploration_result_w": record["result_w"],
        "exploration_gpu_probes": probes,
    }


def write_results(
    result: SimResult, out_dir: str | Path, *, name: str, meta: dict[str, Any]
) -> dict[str, Path]:
    """Write ``<name>_jobs.csv``, ``<name>_timeline.csv`` and ``<name>_summary.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "jobs": out / f"{name}_jobs.csv",
        "timeline": out / f"{name}_timeline.csv",
        "summary": out / f"{name}_summary.json",
    }
    with paths["jobs"].open("w", newline="", encoding="utf-8") as handle:
        rows = job_rows(result)
        extra = [c for c in EXPLORATION_COLUMNS if rows and c in rows[0]]
        writer = csv.DictWriter(handle, fieldnames=[*JOB_COLUMNS, *extra])
        writer.writeheader()
        writer.writerows(rows)
    with paths["timeline"].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "t0_s",
                "t1_s",
                "energy_j",
                "co2_g",
                "busy_gpus",
                "running_jobs",
                "waiting_jobs",
                "predicted_energy_j",
                "energy_allowance_j",
                "co2_allowance_g",
                "budget_price",
            ]
        )
        for s in result.timeline:
            writer.writerow(
                [
                    s.t0_s,
                    s.t1_s,
                    s.energy_j,
                    s.co2_g,
                    s.busy_gpus,
                    s.running_jobs,
                    s.waiting_jobs,
                    s.predicted_energy_j,
                    s.energy_allowance_j,
                    s.co2_allowance_g,
                    s.budget_price,
                ]
            )
    paths["summary"].write_text(
        strict_json({"meta": meta, "summary": summarise(result)}) + "\n", encoding="utf-8"
    )
    return paths


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def strict_json(value: Any) -> str:
    """``value`` as standard JSON (indented, keys sorted), a non-finite number as ``null``:
    Python writes ``Infinity`` and ``NaN``, which strict JSON readers refuse (a report's
    ``bound_avg_jct_s`` was ``Infinity`` whenever team budgets were below the bound's
    energy)."""
    return json.dumps(_finite(value), indent=2, sort_keys=True, allow_nan=False)
