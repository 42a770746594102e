"""Every policy under ``learned`` and ``oracle`` knowledge (issue 12, point 7): how much
each policy's result depends on perfect knowledge of the performance models.

    nice .venv/bin/python benchmarks/bench_knowledge.py \\
        [--scenario philly|pollux-1..8 ...] [--policy NAME ...] [--max-jobs N] \\
        [--measurement-noise 0.05] [--out var/bench_knowledge.jsonl]

For each scenario and policy it runs the simulator twice (the same trace, seed and
settings; only ``SimConfig.knowledge`` differs) and prints average JCT, energy and the
learned / oracle ratios, plus each run's wall time and, for ``learned``, how many fits and
observations it took. Each line is also appended to ``--out`` as JSON as soon as it is
measured, so a long run that is cut short keeps what it measured. Pure: no Django.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.core.registry import policy_names  # noqa: E402
from scheduling.simulator.engine import SimConfig, Simulator  # noqa: E402
from scheduling.simulator.metrics import summarise  # noqa: E402
from scheduling.simulator.scenario import core_planner, load_scenario  # noqa: E402

SCENARIOS = {
    "philly": ("elasticflow_philly_876.csv", "n16g8_a100.json"),
    **{f"pollux-{i}": (f"pollux_workload-{i}.csv", "n16g4_t4.json") for i in range(1, 9)},
}


def run(scenario, policy: str, knowledge: str, noise: float):
    config = replace(scenario.config, knowledge=knowledge, measurement_noise=noise)
    sim = Simulator(
        scenario.jobs,
        cluster=scenario.cluster,
        catalog=scenario.catalog,
        planner=core_planner(policy),
        config=config,
        intensity=scenario.intensity,
    )
    started = time.perf_counter()
    result = sim.run()
    wall_s = time.perf_counter() - started
    fits = None if sim.knowledge is None else sim.knowledge.n_fits
    obs = None if sim.knowledge is None else sim.knowledge.n_observations
    return summarise(result), wall_s, fits, obs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--policy", action="append", choices=policy_names())
    parser.add_argument("--max-jobs", type=int)
    parser.add_argument("--measurement-noise", type=float, default=0.05)
    parser.add_argument("--out", default="var/bench_knowledge.jsonl")
    args = parser.parse_args()
    names = args.scenario or list(SCENARIOS)
    policies = args.policy or list(policy_names())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=len(names) * len(policies), unit="pair", leave=False)
    for name in names:
        trace, cluster = SCENARIOS[name]
        scenario = load_scenario(
            ROOT / "data" / "trace" / trace,
            ROOT / "data" / "clusters" / cluster,
            config=SimConfig(),
            max_jobs=args.max_jobs,
        )
        for policy in policies:
            oracle, o_wall, _, _ = run(scenario, policy, "oracle", args.measurement_noise)
            learned, l_wall, fits, obs = run(scenario, policy, "learned", args.measurement_noise)

            def ratio(key, a=learned, b=oracle):
                return a[key] / b[key] if a[key] is not None and b[key] else None

            line = {
                "scenario": name,
                "jobs": len(scenario.jobs),
                "policy": policy,
                "noise": args.measurement_noise,
                "oracle_avg_jct_h": None
                if oracle["avg_jct_s"] is None
                else oracle["avg_jct_s"] / 3600,
                "learned_avg_jct_h": None
                if learned["avg_jct_s"] is None
                else learned["avg_jct_s"] / 3600,
                "jct_ratio": ratio("avg_jct_s"),
                "oracle_energy_kwh": oracle["energy_kwh"],
                "learned_energy_kwh": learned["energy_kwh"],
                "energy_ratio": ratio("energy_kwh"),
                "unfinished": [oracle["n_unfinished"], learned["n_unfinished"]],
                "wall_s": [round(o_wall, 1), round(l_wall, 1)],
                "fits": fits,
                "observations": obs,
            }
            with out.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
            bar.write(
                f"{name:<9} {policy:<14} avg JCT {line['oracle_avg_jct_h']:.3f} -> "
                f"{line['learned_avg_jct_h']:.3f} h (x{line['jct_ratio']:.3f})  energy "
                f"{oracle['energy_kwh']:.1f} -> {learned['energy_kwh']:.1f} kWh "
                f"(x{line['energy_ratio']:.3f})  unfinished {line['unfinished']}  "
                f"wall {o_wall:.1f} / {l_wall:.1f} s  fits {fits}"
            )
            bar.update(1)
    bar.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
