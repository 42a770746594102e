"""Does just-in-time exploration (``scheduling/core/exploration.py``) find the energy-optimal
power limit of a workload it has never seen, within a bounded cost?

    nice .venv/bin/python benchmarks/bench_exploration.py [--budget 0.03] [--step 0.01]
        [--fill-budget] [--known noise-aware|model|observed|fitted] [--only workload|gpu]
        [--noise SIGMA] [--seed N] [--misses] [--idle split|lowest|catalog] [--batch-probe]
        [--light-draw-share S]

For every Zeus power-limit sweep (GPU x workload x batch size), a job of that workload and
batch starts at the default (highest) limit with the prior of ``bench_online_model``
(leave one workload out: the other Zeus workloads on that GPU; or leave one GPU out: the
same workload on the nearest GPU). Each exploration step runs ``--step`` of the job's
predicted completion time at the limit ``exploration.next_step`` picks and observes the
sweep's measured time and power there; the job's online model is refitted after each.
Exploration ends at a measured minimum (or, with ``--fill-budget``, as rounds run it, when
every limit is measured or no other fits) or when the next step would take the cost past
``--budget`` of the predicted completion time. The limit then chosen is the one of least
known energy (``exploration.chosen_limit``): with ``--known noise-aware`` (the default,
what rounds keep) a tried limit's energy is ``exploration.estimate`` (the fitted curve plus
the limit's measured deviation, shrunk by the measurement noise against the curve's
misfit; the search repeats its fastest limit to learn the noise and, where it would stop,
measures again the candidates it cannot yet rank); with ``--known model`` it is the model's
prediction there once observed; with ``--known observed`` the last observation itself.
``--noise SIGMA``: each probe observes the sweep's time and draw times seeded log-normal
noise ``exp(N(0, SIGMA))`` (as the simulator's ``--measurement-noise``); found still
compares with the noise-free sweep's optimum. A sweep counts as found when the choice
is within one 25 W step of the measured energy-optimal limit. The cost is measured: the
time the tried limits ran slower than the fastest limit tried before them, over the job's
time at the chosen limit.

``--batch-probe`` (``exploration.BATCH_PROBE``): once the search without its fill stage
reaches a measured minimum, the job is observed once at twice its per-GPU batch at the
default limit (the sweep at that batch, where Zeus measured it), one step long, before the
search goes on. Its cost is the useful samples it loses at a noise scale of the batch
itself (``goodput.efficiency``): ``step x max(1 - G(2b) / G(b), 0)``, ``G(b) = b / T(b) x
E(b)``, from the measured times.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bench_online_model as bom  # noqa: E402
from bench_args import add_light_draw_arg, apply_light_draw_arg  # noqa: E402
from tqdm import tqdm  # noqa: E402

from scheduling.core import exploration  # noqa: E402
from scheduling.core.exploration import (  # noqa: E402
    chosen_limit,
    estimate,
    fitted_energy_j,
    next_step,
    predicted_energy_j,
)
from scheduling.core.online_model import (  # noqa: E402
    Observation,
    config_of,
)
from scheduling.fitting import perf_data  # noqa: E402

MAX_STEPS = 40
FILL_MARGIN = float("inf")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")


def run(
    cases: list[bom.Case],
    budget: float,
    step_frac: float,
    known: str,
    fill: bool,
    noise: float = 0.0,
    seed: int = 0,
    batch_probe: bool = False,
) -> dict:
    out: dict = defaultdict(list)
    for case in tqdm(cases, desc=cases[0].dataset[:8], unit="pair", file=sys.stderr):
        by_batch: dict[float, list[Observation]] = defaultdict(list)
        for obs in case.configs:
            by_batch[obs.local_batch].append(obs)
        for batch, sweep in sorted(by_batch.items()):
            measured = {o.power_limit_w: o for o in sweep}
            limits = sorted(measured)
            top = max(limits)
            energy = {w: o.iter_time_s * o.power_w for w, o in measured.items()}
            optimum = min(limits, key=lambda w: (energy[w], -w))
            cfg = config_of(1, 1, batch)
            rng = random.Random(f"{seed}:{case.dataset}:{case.workload}:{batch}")

            def observe(w: float, rng=rng, measured=measured) -> Observation:
                o = measured[w]
                if noise <= 0:
                    return o
                return replace(
                    o,
                    iter_time_s=o.iter_time_s * math.exp(rng.gauss(0.0, noise)),
                    power_w=o.power_w * math.exp(rng.gauss(0.0, noise)),
                )

            probe_rng = random.Random(f"{seed}:probe:{case.dataset}:{case.workload}:{batch}")

            def observe_at(o: Observation, rng=probe_rng) -> Observation:
                if noise <= 0:
                    return o
                return replace(
                    o,
                    iter_time_s=o.iter_time_s * math.exp(rng.gauss(0.0, noise)),
                    power_w=o.power_w * math.exp(rng.gauss(0.0, noise)),
                )

            seen = [observe(top)]
            probes = {top: 1}
            model = bom.fit_case(case, seen)

            def known_of(model, w: float, obs: Observation, cfg=cfg) -> float:
                # What the job knows of a tried limit: the observation itself, or the
                # model's prediction there once it was observed.
                if known == "observed":
                    return obs.iter_time_s * obs.power_w
                if known == "fitted":
                    return fitted_energy_j(model, cfg, w)
                return predicted_energy_j(model, cfg, w)

            known_j = {top: known_of(model, top, seen[0])}
            est = estimate(model, cfg, set(known_j)) if known == "noise-aware" else None
            spent_s = 0.0
            double = {o.power_limit_w: o for o in by_batch.get(2 * batch, ())}
            probe_obs = double.get(top) if batch_probe else None
            probed = False
            for _ in range(MAX_STEPS):
                if est is not None:
                    known_j = dict(est.known_j)
                jct_s = model.iter_time_s(cfg) / step_frac  # a step is step_frac of the job
                if probe_obs is not None and not probed:
                    search = next_step(model, cfg, limits, set(known_j), step_s=step_frac * jct_s,
                                       spent_s=spent_s, predicted_jct_s=jct_s,
                                       budget_frac=budget, measured=known_j)  # fmt: skip
                    if search.limit_w is None:
                        probed = True
                        t1, t2 = measured[top].iter_time_s, probe_obs.iter_time_s
                        # goodput at a noise scale of the batch: E(2b) = 2/3
                        ratio = (2 * batch / t2 * (2.0 / 3.0)) / (batch / t1)
                        spent_s += step_frac * jct_s * max(1.0 - ratio, 0.0)
                        seen.append(observe_at(probe_obs))
                        model = bom.fit_case(case, seen)
                        if known == "noise-aware":
                            est = estimate(model, cfg, set(known_j))
                            known_j = dict(est.known_j) if est is not None else known_j
                        continue
                step = next_step(model, cfg, limits, set(known_j), step_s=step_frac * jct_s,
                                 spent_s=spent_s, predicted_jct_s=jct_s, budget_frac=budget,
                                 measured=known_j, fill_budget=fill,
                                 fill_margin=FILL_MARGIN, estimate=est,
                                 probes=probes)  # fmt: skip
                if step.limit_w is None:
                    break
                obs = observe(step.limit_w)
                fastest = min(measured[w].iter_time_s for w in known_j)
                spent_s += (
                    step_frac * jct_s * max(1.0 - fastest / measured[step.limit_w].iter_time_s, 0.0)
                )
                probes[step.limit_w] = probes.get(step.limit_w, 0) + 1
                seen.append(obs)
                model = bom.fit_case(case, seen)
                known_j[step.limit_w] = known_of(model, step.limit_w, obs)
                if known == "fitted":  # every tried limit on the curve refitted to all
                    known_j = {w: fitted_energy_j(model, cfg, w) for w in known_j}
                if known == "noise-aware":
                    est = estimate(model, cfg, set(known_j))
            if est is not None:
                known_j = dict(est.known_j)
            chosen = chosen_limit(model, cfg, limits, set(known_j), known_j)
            jct_s = measured[chosen].iter_time_s / step_frac
            out[case.dataset].append(
                {
                    "found": abs(chosen - optimum) <= 25.0 + 1e-9,
                    "tried": len(known_j),
                    "probes": sum(probes.values()),
                    "cost_frac": spent_s / jct_s,
                    "energy_excess": energy[chosen] / energy[optimum] - 1.0,
                    "miss": (case.workload, batch, chosen, optimum),
                    "probed": probed,
                    "chosen": chosen,
                }
            )
    return out


def report(title: str, results: dict) -> None:
    say(f"\n{title}")
    say(f"{'data set':18} {'sweeps':>6} {'found':>7} {'limits tried':>13} {'probes':>7} "
        f"{'cost (max)':>16} {'energy excess (max)':>22}")  # fmt: skip
    everything = []
    for dataset, rows in sorted(results.items()):
        everything += rows
        _line(dataset, rows)
    _line("all", everything)


def _line(name: str, rows: list[dict]) -> None:
    found = sum(r["found"] for r in rows) / len(rows)
    probed = sum(r.get("probed", False) for r in rows)
    tried = statistics.mean(r["tried"] for r in rows)
    probes = statistics.mean(r["probes"] for r in rows)
    cost = [r["cost_frac"] for r in rows]
    excess = [r["energy_excess"] for r in rows]
    say(
        f"{name:18} {len(rows):>6} {100 * found:6.0f}% {tried:13.1f} {probes:7.1f} "
        f"{100 * statistics.mean(cost):7.2f}% ({100 * max(cost):5.2f}%) "
        f"{100 * statistics.mean(excess):12.2f}% ({100 * max(excess):5.1f}%)"
        + (f"  batch probes {probed}" if probed else "")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=0.03, help="share of predicted JCT")
    parser.add_argument("--step", type=float, default=0.01, help="share of the job per step")
    parser.add_argument("--known", choices=("noise-aware", "model", "observed", "fitted"),
                        default="noise-aware",
                        help="a tried limit's energy: noise-aware (as rounds keep it), the "
                        "model's view, the raw observation, or the fitted curve")  # fmt: skip
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="sigma of log-normal noise on each observed time and draw",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--misses", action="store_true", help="list the sweeps missed")
    parser.add_argument(
        "--fill-budget",
        action="store_true",
        help="after a measured minimum, keep measuring while the bound allows",
    )
    parser.add_argument("--only", choices=("workload", "gpu"), help="run one of the two priors")
    parser.add_argument(
        "--batch-probe",
        action="store_true",
        help="observe twice the batch at the default limit once the search reaches a "
        "measured minimum (above)",
    )
    parser.add_argument(
        "--curve-params",
        type=int,
        default=exploration.CURVE_PARAMS,
        help="parameters of the curve's local shape for its own error at a limit (0: the "
        "curve taken as exact, as before 26 Nov)",
    )
    parser.add_argument("--fill-margin", type=float, default=float("inf"),
                        help="fill only with limits predicted within this share of the least "
                        "energy known")  # fmt: skip
    parser.add_argument(
        "--idle",
        choices=bom.IDLE_MODES,
        default=bom.IDLE,
        help="what the job's draw is read against (bench_online_model's --idle)",
    )
    parser.add_argument(
        "--floor-pool",
        type=int,
        help="bench_online_model's --floor-pool: each case once per K-subset of the other "
        "workloads as the ones measured on the GPU (0: none, the first job on it)",
    )
    parser.add_argument(
        "--floor-estimate",
        choices=bom.FLOOR_ESTIMATES,
        default=bom.FLOOR_ESTIMATE,
        help="bench_online_model's --floor-estimate",
    )
    add_light_draw_arg(parser)
    parser.add_argument("--dump", type=Path, help="write every sweep's result here (JSON)")
    args = parser.parse_args()
    apply_light_draw_arg(args)
    bom.IDLE = args.idle
    bom.FLOOR_ESTIMATE = args.floor_estimate
    if not (0 < args.budget < 1 and 0 < args.step < 1):
        parser.error("--budget and --step must be between 0 and 1")
    assert perf_data.ZEUS_GPUS  # the data these cases come from
    global FILL_MARGIN
    FILL_MARGIN = args.fill_margin
    exploration.CURVE_PARAMS = args.curve_params
    for name, gpu_out in (("leave one workload out", False), ("leave one GPU out", True)):
        if args.only is not None and gpu_out != (args.only == "gpu"):
            continue
        cases = bom._floor_pools(bom._zeus_cases(gpu_out=gpu_out), args.floor_pool)
        results = run(cases, args.budget, args.step, args.known, args.fill_budget,
                      args.noise, args.seed, args.batch_probe)  # fmt: skip
        report(f"{name}: budget {args.budget:.0%} of JCT, steps of {args.step:.0%}, "
               f"known energy: {args.known}, fill budget: {args.fill_budget}, "
               f"noise {args.noise:g}, curve params {args.curve_params}",
               results)  # fmt: skip
        if args.dump is not None:
            import json

            dumped = {d: [{**r, "miss": list(r["miss"])} for r in rows]
                      for d, rows in results.items()}  # fmt: skip
            args.dump.write_text(json.dumps(dumped) + "\n")
        if args.misses:
            for dataset, rows in sorted(results.items()):
                for r in rows:
                    if not r["found"]:
                        w, b, chosen, best = r["miss"]
                        say(
                            f"  miss {dataset} {w} batch {b:g}: chose {chosen:g} W, "
                            f"optimum {best:g} W, +{100 * r['energy_excess']:.1f}% energy"
                        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
