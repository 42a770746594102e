"""The first jobs on a GPU model the catalog lacks (``bench_online_model.py --floor-pool 0``:
no other workload's draw measured there), Zeus leave one workload out: where each held-out
workload's never-observed energy error comes from (docs/benchmarks.md, "The first jobs on a
new GPU model: what the job's own limits say").

    OPENBLAS_CORETYPE=Haswell nice .venv/bin/python benchmarks/zeus_first_jobs.py \
        [--after 5] [--gpus a40,rtx6000,p100,v100] [--weight 1] \
        [--limit-bound shape|floor [--uncut-tol 0.03] [--limit-peak]] [--light-draw-share S]
        [--shrink LAMBDA|u|2u|u2|ucap|ucap2|ucap3|ucap4] [--cap-read] [--light-split S]

Per workload and pooled over a GPU's workloads, after ``--after`` observations, the median
relative error on the never-observed configurations of the time, the draw and the energy per
iteration, and the energy's error were one part of the model right (the part replaced by the
truth, the rest as predicted):

* ``E|draw batch``: the draw's batch shape at the top limit (predicted draw x true / predicted
  draw at the same batch and the top limit);
* ``E|time batch``: the time's batch shape at the top limit, likewise;
* ``E|draw limit``: the draw's response to the limit (predicted draw at the top limit x true
  draw at the limit / true draw at the top limit).

``u``: the busy share the job's draw was read as (``draw_busy_fraction``, in the prior's
sources). The pooled median equals ``bench_online_model.py --no-gpu-out --zeus-only --steps 5
--floor-pool 0``'s row for the GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_online_model as bom  # noqa: E402
from bench_args import (  # noqa: E402
    add_light_draw_arg,
    apply_light_draw_arg,
    fraction,
    positive_int,
)

from scheduling.core import online_model as om  # noqa: E402
from scheduling.core.perf_models import FittedPerfModel, PowerParams  # noqa: E402
from scheduling.fitting import perf_data  # noqa: E402

PARTS = ("time", "draw", "energy", "E|draw batch", "E|time batch", "E|draw limit")

# Diagnostic readings of the job's draw, measured and not kept (docs/benchmarks.md, "The
# first jobs' draw: light work the limits did not touch"); set from the command line.
# --shrink: the draw's batch shape pulled towards flat at the job's own draw, P0 + lambda x
# (P(b) - P0), the time's split unchanged, while the job's draws are at one batch; lambda a
# number, or a rule of the busy share u (u, 2u, u2) or of u_cap, the job's draw above idle
# over the span up to its lowest uncut limit (ucap, ucap2, ucap3, ucap4; 1 without one).
SHRINK_RULES = {
    "u": lambda u, uc: u,
    "2u": lambda u, uc: min(1.0, 2.0 * u),
    "u2": lambda u, uc: u * u,
    "ucap": lambda u, uc: 1.0 if uc is None else uc,
    "ucap2": lambda u, uc: 1.0 if uc is None else uc**2,
    "ucap3": lambda u, uc: 1.0 if uc is None else uc**3,
    "ucap4": lambda u, uc: 1.0 if uc is None else uc**4,
}
SHRINK = None
# --cap-read: the busy maximum the draw is read against no higher than the job's lowest
# uncut limit (``online_model.uncut_limit_w``), for the time's split and the draw alike.
CAP_READ = False
# --light-split S (with --light-draw-share): a job read as light work takes its time's split
# S of the way (in logit) from its draw's reading to its prior's own.
LIGHT_SPLIT = None
_SHAPED = bom.draw_shaped_prior


def _diagnostic_shaped(prior, observations, *, idle_w, busy_max_w, **kw):
    """``draw_shaped_prior`` under the diagnostic readings above."""
    observations = list(observations)
    found = om.draw_busy_fraction(prior, observations, idle_w=idle_w, busy_max_w=busy_max_w)
    if found is None:
        return _SHAPED(prior, observations, idle_w=idle_w, busy_max_w=busy_max_w, **kw)
    cap_w = om.uncut_limit_w(prior.gpu, observations, found[0])
    if CAP_READ and cap_w is not None and idle_w < cap_w < busy_max_w:
        busy_max_w = cap_w
        found = om.draw_busy_fraction(prior, observations, idle_w=idle_w, busy_max_w=busy_max_w)
    b0, u = found
    drawn_w = idle_w + (busy_max_w - idle_w) * u
    if LIGHT_SPLIT is not None and om.reads_as_light_work(
        prior.gpu, observations, b0, drawn_w, idle_w=idle_w
    ):
        kw["prior_share"] = LIGHT_SPLIT
    model = _SHAPED(prior, observations, idle_w=idle_w, busy_max_w=busy_max_w, **kw)
    one_batch = len({o.local_batch for o in observations if o.power_w is not None}) == 1
    if SHRINK is None or not one_batch or not kw.get("draw_shape"):
        return model
    if isinstance(SHRINK, float):
        lam = SHRINK
    else:
        u_cap = None
        if cap_w is not None and idle_w < cap_w < busy_max_w:
            u_cap = min(max((drawn_w - idle_w) / (cap_w - idle_w), 0.0), 1.0)
        lam = SHRINK_RULES[SHRINK](u, u_cap)
    pw = model.power
    top_w, half = pw.busy_max_w, pw.batch_half
    low_w = top_w * pw.busy_floor_frac
    at_b0 = low_w + (top_w - low_w) * b0 / (b0 + half)
    low_w, top_w = at_b0 - lam * (at_b0 - low_w), at_b0 + lam * (top_w - at_b0)
    power = PowerParams(
        busy_max_w=top_w,
        batch_half=half,
        busy_floor_frac=min(max(low_w / top_w, 0.0), 1.0) if top_w > 0 else 1.0,
    )
    return FittedPerfModel(
        workload=model.workload,
        gpu=model.gpu,
        batch_sizes=model.batch_sizes,
        throughput=model.throughput,
        power=power,
        errors=model.errors,
        sources=model.sources,
    )


def say(line: str) -> None:
    sys.stdout.write(line + "\n")


def errors(case, k: int, weight: float) -> tuple[dict[str, list[float]], str]:
    seen = [replace(o, weight=weight) for o in case.configs[:k]]
    model = bom.fit_case(case, seen)
    top_w = max(o.power_limit_w for o in case.configs)
    truth, pred = {}, {}
    for o, (t_s, e_j) in zip(case.configs, case.truth, strict=True):
        key = (o.local_batch, o.power_limit_w)
        truth[key] = (t_s, e_j / t_s)
        pred[key] = (model.iter_time_s(o.config()), model.power_w(o.config()))
    out: dict[str, list[float]] = defaultdict(list)
    for o in case.configs[k:]:
        key, at_top = (o.local_batch, o.power_limit_w), (o.local_batch, top_w)
        (t_true, p_true), (t_pred, p_pred) = truth[key], pred[key]
        out["time"].append(abs(t_pred / t_true - 1.0))
        out["draw"].append(abs(p_pred / p_true - 1.0))
        out["energy"].append(abs(t_pred * p_pred / (t_true * p_true) - 1.0))
        if at_top not in truth:
            continue
        (t_top, p_top), (t_top_pred, p_top_pred) = truth[at_top], pred[at_top]
        right = {
            "E|draw batch": (t_pred, p_pred * p_top / p_top_pred),
            "E|time batch": (t_pred * t_top / t_top_pred, p_pred),
            "E|draw limit": (t_pred, p_top_pred * p_true / p_top),
        }
        for name, (t_s, p_w) in right.items():
            out[name].append(abs(t_s * p_w / (t_true * p_true) - 1.0))
    return out, model.prior.sources.get("draw_busy_fraction", "-")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--after", type=positive_int, default=5, help="observations")
    p.add_argument("--gpus", default=",".join(perf_data.ZEUS_GPUS), help="comma-separated")
    p.add_argument("--weight", type=float, default=1.0, help="measurements per configuration")
    p.add_argument("--limit-bound", choices=("shape", "floor"), help="online_model.LIMIT_BOUND")
    p.add_argument("--uncut-tol", type=fraction, default=om.UNCUT_TOL)
    p.add_argument("--limit-peak", action="store_true", help="online_model.LIMIT_PEAK = True")
    add_light_draw_arg(p)
    p.add_argument(
        "--shrink",
        help="diagnostic: the draw's batch shape pulled towards flat by LAMBDA (0 flat, 1 as "
        f"read) or by a rule: {', '.join(SHRINK_RULES)}",
    )
    p.add_argument("--cap-read", action="store_true", help="diagnostic: busy max <= uncut limit")
    p.add_argument(
        "--light-split",
        type=fraction,
        help="diagnostic, with --light-draw-share: a light job's time split this far towards "
        "its prior's",
    )
    args = p.parse_args()
    apply_light_draw_arg(args)
    global SHRINK, CAP_READ, LIGHT_SPLIT
    if args.shrink is not None and args.shrink not in SHRINK_RULES:
        try:
            args.shrink = fraction(args.shrink)
        except argparse.ArgumentTypeError as exc:
            p.error(f"--shrink: {exc}, nor a rule ({', '.join(SHRINK_RULES)})")
    if args.light_split is not None and args.light_draw_share is None:
        p.error("--light-split needs --light-draw-share")
    SHRINK, CAP_READ, LIGHT_SPLIT = args.shrink, args.cap_read, args.light_split
    if SHRINK is not None or CAP_READ or LIGHT_SPLIT is not None:
        bom.draw_shaped_prior = _diagnostic_shaped
    gpus = [g for g in args.gpus.split(",") if g]
    unknown = [g for g in gpus if g not in perf_data.ZEUS_GPUS]
    if unknown or not gpus:
        p.error(f"--gpus: not Zeus GPUs: {','.join(unknown) or '(none)'}")
    if not args.weight > 0 or args.weight == float("inf"):
        p.error("--weight must be a finite positive number")
    om.LIMIT_BOUND, om.UNCUT_TOL, om.LIMIT_PEAK = args.limit_bound, args.uncut_tol, args.limit_peak
    cases = bom._floor_pools(bom._zeus_cases(gpu_out=False), 0)

    def med(vals: list[float]) -> str:
        return f"{100 * statistics.median(vals):5.1f}" if vals else "    -"

    head = " ".join(f"{n:>12}" for n in PARTS)
    for gpu in gpus:
        say(f"\n{gpu}, after {args.after}, median error % on the never-observed configurations")
        say(f"{'workload':18} {'n':>4} {head} {'u':>6}")
        pooled: dict[str, list[float]] = defaultdict(list)
        for case in (c for c in cases if c.dataset == f"zeus_{gpu}"):
            errs, u = errors(case, args.after, args.weight)
            for name, vals in errs.items():
                pooled[name] += vals
            cells = " ".join(f"{med(errs[n]):>12}" for n in PARTS)
            say(f"{case.workload:18} {len(errs['time']):>4} {cells} {u:>6.6}")
        cells = " ".join(f"{med(pooled[n]):>12}" for n in PARTS)
        say(f"{'all':18} {len(pooled['time']):>4} {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
