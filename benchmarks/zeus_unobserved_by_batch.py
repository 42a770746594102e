"""Zeus leave one workload out after 5 observations: where the never-observed error lies.

    nice .venv/bin/python benchmarks/zeus_unobserved_by_batch.py [--idle split|lowest|catalog]

Scores the replays of ``bench_online_model`` (its Zeus cases and ``fit_case``) and splits
each never-observed configuration by its per-GPU batch relative to the one batch the job
ran at in its first 5 observations; "power" is the error of the draw alone.
"""

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_online_model as b  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--idle", choices=b.IDLE_MODES, default=b.IDLE, help="bench_online_model's")
b.IDLE = parser.parse_args().idle
cases = b._zeus_cases(gpu_out=False)
rows = defaultdict(list)
for case in cases:
    seen = case.configs[:5]
    model = b.fit_case(case, seen)
    b0 = seen[0].local_batch
    for obs, (t, e) in list(zip(case.configs, case.truth, strict=True))[5:]:
        cfg = obs.config()
        te = abs(model.iter_time_s(cfg) / t - 1)
        ee = abs(model.energy_per_iter_j(cfg) / e - 1)
        # power part of the energy error alone
        pe = abs(model.power_w(cfg) / obs.power_w - 1)
        r = obs.local_batch / b0
        if r == 1:
            where = "same batch"
        elif 0.5 <= r <= 2:
            where = "batch x<=2"
        elif 0.125 <= r <= 8:
            where = "batch x<=8"
        else:
            where = "batch x>8"
        for key in (("all", where), (case.workload, "all"), (case.workload, where)):
            rows[key].append((te, ee, pe))


def med(v, i):
    return 100 * statistics.median(x[i] for x in v)


b.say(f"{'workload':20} {'where':12} {'n':>5} {'time':>7} {'energy':>7} {'power':>7}")
for key in sorted(rows):
    v = rows[key]
    b.say(
        f"{key[0]:20} {key[1]:12} {len(v):5} {med(v, 0):6.1f}% {med(v, 1):6.1f}% {med(v, 2):6.1f}%"
    )
