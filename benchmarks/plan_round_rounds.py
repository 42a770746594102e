"""Plan ``bench_plan_round.py``'s long-queue snapshot ``--rounds`` times after a first round:
a fixed amount of work for an instruction counter, whose figure does not move with the
machine's load as a timing does. The round's cost is the difference between two counts::

    for k in 1 3; do
      PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no \
        --cachegrind-out-file=/dev/null .venv/bin/python benchmarks/plan_round_rounds.py \
        --rounds $k 2>&1 | grep 'I *refs'
    done   # (count at 3 - count at 1) / 2 = instructions a round
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_plan_round as bench  # noqa: E402
from bench_args import non_negative_int, positive_int  # noqa: E402

from scheduling.core.perf_models import load_catalog  # noqa: E402
from scheduling.core.registry import get_policy, policy_names  # noqa: E402
from scheduling.core.round import plan_round  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", choices=policy_names(), default="powerflow")
    p.add_argument("--rounds", type=positive_int, default=1, help="rounds after the first")
    p.add_argument("--running", type=positive_int, default=1000)
    p.add_argument("--waiting", type=non_negative_int, default=10000)
    args = p.parse_args(argv)
    catalog, rows, now = load_catalog(), bench.trace_rows(), 2 * bench.DAY_S
    cluster = bench.build_cluster(8, 16, 8)
    get_policy(args.policy)
    first, second = (
        bench.build_snapshot(
            seed, cluster, rows, catalog, args.running, now,
            n_waiting=args.waiting, all_running=True,
        )
        for seed in range(2)
    )  # fmt: skip
    state = plan_round(first, policy=args.policy, now=now).policy_state
    snapshot = dataclasses.replace(second, policy_state=state)
    for _ in range(args.rounds):
        plan_round(snapshot, policy=args.policy, now=now)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
