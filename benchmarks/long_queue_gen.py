"""Write long queues of tiny jobs, to time how the simulator scales with the queue.

    PYTHONPATH=. .venv/bin/python benchmarks/long_queue_gen.py DIR [--jobs 5000,20000,50000]

Writes ``DIR/elasticflow_tiny<N>.csv`` for each N: N one-iteration T4 jobs, one every
1.7 s, cycling through the catalog's T4 workloads at their usual per-GPU batch, one GPU
each (the rows of ``sweep2_gen.py``'s ``tiny50k``, so its first 5,000 are ``tiny5k``);
and ``DIR/n5g3_t4.json``, 5 nodes x 3 T4. On those 15 GPUs a 300 s round starts about
15 of the 176 jobs that arrive in it, so the queue grows to most of the trace: each
round's cost in the queue's length is what these inputs show. The rows are a pure
function of N (no randomness), so a rerun writes the same bytes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

T4 = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
BATCH = {"bert": 32, "cifar10": 128, "deepspeech2": 32, "imagenet": 256, "ncf": 1024, "yolov3": 32}
HEAD = "job_id,submit_time,model_name,batch_size,num_gpu,iteration"
GAP_S = 1.7


def tiny_trace(n: int) -> str:
    lines = [HEAD]
    for i in range(n):
        w = T4[i % len(T4)]
        lines.append(f"t{i},{round(i * GAP_S, 1)},{w},{BATCH[w]},1,1")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--jobs", default="5000,20000,50000", help="comma-separated job counts")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.jobs.split(",") if x.strip()]
    if not sizes or min(sizes) < 1:
        ap.error("--jobs: one or more positive counts")
    args.out.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        (args.out / f"elasticflow_tiny{n}.csv").write_text(tiny_trace(n))
    cluster = {"gpu_model": "T4", "switches": 1, "nodes_per_switch": 5, "gpus_per_node": 3}
    (args.out / "n5g3_t4.json").write_text(json.dumps(cluster, indent=1) + "\n")


if __name__ == "__main__":
    main()
