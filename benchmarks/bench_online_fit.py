"""Time the online model's fit (``scheduling.core.online_fit``), cold and warm-started.

    .venv/bin/python benchmarks/bench_online_fit.py [--cases 400] [--dump FILE]

Two sets of seeded cases on the catalog's models:

* cold fits: a catalog prior and a catalog truth on one GPU model, 1-8 observations at
  random GPU counts, per-GPU batches, clocks and power limits, the truth times a
  log-normal level (sigma 1) and noise (sigma 0.05), some times or draws missing, weights
  1-60; half capped at 10 steps (the simulator's refits), half at 40 (the live default);
* warm refits as a live round makes them (``workload_profiles.record_observations``): a
  job on A100s measured at two GPU counts, a round's 3-20 samples each, refitted from the
  fit of its first two thirds with the live settings.

Prints milliseconds per fit. ``--dump`` writes the cold fits' parameters as JSON, so two
checkouts can be compared fit by fit (run this script from each, then diff the files).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduling.core.online_fit import fit_online, fit_params  # noqa: E402
from scheduling.core.online_model import (  # noqa: E402
    FitSettings,
    Observation,
    config_of,
    pooled_observations,
)
from scheduling.core.perf_models import load_catalog  # noqa: E402


def cold_cases(rng: random.Random, n: int):
    models = list(load_catalog().models())
    gpus = sorted({m.gpu_model for m in models})
    for _ in range(n):
        on_gpu = [m for m in models if m.gpu_model == rng.choice(gpus)]
        prior, truth = rng.choice(on_gpu), rng.choice(on_gpu)
        gpu = truth.gpu
        per = gpu.gpus_per_node
        mid_clock = gpu.clocks_mhz[len(gpu.clocks_mhz) // 2] if gpu.clocks_mhz else None
        obs = []
        for _ in range(rng.randint(1, 8)):
            n_gpus = rng.choice([1, 2, per, 2 * per])
            nodes = 1 if n_gpus <= per else 2
            batch = rng.choice([4, 16, 32, 64, 128, 512])
            clock = rng.choice([None, None, mid_clock])
            limit = rng.choice([None, None, gpu.power_limit_min_w, 0.8 * gpu.power_limit_max_w])
            cfg = config_of(n_gpus, nodes, batch, clock, limit)
            t = truth.iter_time_s(cfg) * math.exp(rng.gauss(0, 1.0) + rng.gauss(0, 0.05))
            p = truth.power_w(cfg) * math.exp(rng.gauss(0, 0.05))
            obs.append(
                Observation(
                    n_gpus,
                    nodes,
                    batch,
                    iter_time_s=t if rng.random() > 0.1 else None,
                    power_w=p if rng.random() > 0.1 else None,
                    sm_clock_mhz=clock,
                    power_limit_w=limit,
                    weight=rng.choice([1.0, 5.0, 60.0]),
                )
            )
        if any(o.iter_time_s is not None or o.power_w is not None for o in obs):
            yield prior, obs, FitSettings(max_steps=rng.choice([10, 40]))


def warm_cases(rng: random.Random, n: int):
    models = [m for m in load_catalog().models() if m.gpu_model == "A100"]
    for _ in range(n):
        prior, truth = rng.sample(models, 2)
        obs = []
        for n_gpus in rng.sample([1, 2, 4, 8], 2):
            batch = rng.choice([16, 32, 64])
            cfg = config_of(n_gpus, 1, batch)
            for _ in range(rng.randint(3, 20)):
                obs.append(
                    Observation(
                        n_gpus,
                        1,
                        batch,
                        iter_time_s=truth.iter_time_s(cfg) * math.exp(rng.gauss(0, 0.03)),
                        power_w=truth.power_w(cfg) * math.exp(rng.gauss(0, 0.03)),
                    )
                )
        per = truth.gpu.gpus_per_node
        last = fit_online(prior, pooled_observations(obs[: len(obs) * 2 // 3], per))
        yield prior, pooled_observations(obs, per), last.params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--dump", type=Path, help="write the cold fits' parameters here")
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error("--cases must be at least 1")

    cold, spent = [], 0.0
    for prior, obs, settings in cold_cases(random.Random(1), args.cases):
        t0 = time.perf_counter()
        cold.append(fit_params(prior, obs, settings=settings))
        spent += time.perf_counter() - t0
    sys.stdout.write(f"cold fits: {len(cold)}, {1000 * spent / len(cold):.2f} ms each\n")

    n_warm, spent = 0, 0.0
    for prior, pooled, start in warm_cases(random.Random(5), max(args.cases // 2, 1)):
        t0 = time.perf_counter()
        fit_online(prior, pooled, start=start)
        spent += time.perf_counter() - t0
        n_warm += 1
    sys.stdout.write(
        f"warm refits (live settings): {n_warm}, {1000 * spent / n_warm:.2f} ms each\n"
    )
    if args.dump:
        args.dump.write_text(json.dumps(cold), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
