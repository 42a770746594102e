"""Write the second reviewer's sweep inputs (traces, clusters) and its cases files.

    PYTHONPATH=. .venv/bin/python benchmarks/sweep2_gen.py DIR
    PYTHONPATH=. .venv/bin/python benchmarks/sim_sweep_check.py DIR/cases_a.txt --work W

Every input is written here, none copied from ``data/`` or ``benchmarks/sweep/``: CSV
with reordered, unknown and missing optional columns, CRLF line ends, a byte-order mark,
trailing blank lines, quoted fields, submit times out of order and equal, one job, no
job, 50,000 one-iteration jobs, a job larger than the cluster, jobs of one second and of
ten years, GPU counts that are not powers of two, a workload the catalog lacks; clusters
of one GPU and of 1,024 nodes, two GPU models, a GPU model the catalog lacks. The cases
files hold one simulator command a line, with absolute paths into ``DIR``. Seeded, so a
rerun writes the same bytes.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

A100 = ("bert", "deepspeech2", "gpt2", "imagenet", "inception3", "resnet50", "vgg16")
T4 = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
BATCH = {
    "bert": 32,
    "deepspeech2": 32,
    "gpt2": 16,
    "imagenet": 256,
    "inception3": 128,
    "resnet50": 128,
    "vgg16": 128,
    "cifar10": 128,
    "ncf": 1024,
    "yolov3": 32,
}
EF_HEAD = ("job_id", "submit_time", "model_name", "batch_size", "num_gpu", "iteration")
POLICIES = (
    "fifo",
    "tiresias",
    "zeus",
    "fifo_lowclock",
    "elastic",
    "powerflow",
    "greenflow",
    "eaco",
    "ones",
    "netdelay",
)


def write(path: Path, text: str, *, bom: bool = False, crlf: bool = False) -> None:
    if crlf:
        text = text.replace("\n", "\r\n")
    data = text.encode("utf-8")
    if bom:
        data = b"\xef\xbb\xbf" + data
    path.write_bytes(data)


def ef_rows(rng: random.Random, n: int, workloads, *, span_s: float, gpus=(1, 2, 3, 4, 6)):
    rows = []
    for i in range(n):
        w = rng.choice(workloads)
        g = rng.choice(gpus)
        rows.append(
            {
                "job_id": f"j{i}",
                "submit_time": round(rng.uniform(0, span_s), 1),
                "model_name": w,
                "batch_size": BATCH[w] * max(1, g),
                "num_gpu": g,
                "iteration": rng.choice((50, 300, 2000, 8000)),
            }
        )
    return rows


def csv_text(head, rows) -> str:
    lines = [",".join(head)]
    for r in rows:
        lines.append(",".join(str(r.get(h, "")) for h in head))
    return "\n".join(lines) + "\n"


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20261207)
    t = {}  # name -> path

    def ef(name, text, **kw):
        path = out / f"elasticflow_{name}.csv"
        write(path, text, **kw)
        t[name] = path

    base = ef_rows(rng, 24, A100, span_s=7200)
    base_t4 = ef_rows(rng, 24, T4, span_s=7200)
    # reordered columns, unknown ones (ddl, notes), the optional ElasticFlow ones missing
    head = ("iteration", "notes", "num_gpu", "model_name", "job_id", "ddl", "batch_size")
    head += ("submit_time",)
    rows = [{**r, "notes": "x", "ddl": 99} for r in base]
    ef("reorder", csv_text(head, rows))
    ef("reorder_t4", csv_text(head, [{**r, "notes": "y", "ddl": 1} for r in base_t4]))
    # CRLF, a byte-order mark, trailing blank lines
    ef("crlf_bom", csv_text(EF_HEAD, base) + "\n\n\n", bom=True, crlf=True)
    # every field quoted, an id holding a comma
    q = [",".join(f'"{h}"' for h in EF_HEAD)]
    for r in base[:10]:
        q.append(",".join(f'"{r[h]}"' if h != "job_id" else f'"{r[h]}, a"' for h in EF_HEAD))
    ef("quoted", "\n".join(q) + "\n")
    # out of order, equal submit times
    dup = [dict(r) for r in base[:12]]
    for i, r in enumerate(dup):
        r["submit_time"] = [300.0, 0.0, 300.0, 60.0][i % 4]
    ef("unsorted_dup", csv_text(EF_HEAD, list(reversed(dup))))
    ef("one", csv_text(EF_HEAD, base[:1]))
    ef("zero", csv_text(EF_HEAD, []))
    ef("zero_blank", csv_text(EF_HEAD, []) + "\n\n")
    # 50,000 one-iteration jobs over a day on T4
    tiny = []
    for i in range(50_000):
        w = T4[i % len(T4)]
        tiny.append(
            {
                "job_id": f"t{i}",
                "submit_time": round(i * 1.7, 1),
                "model_name": w,
                "batch_size": BATCH[w],
                "num_gpu": 1,
                "iteration": 1,
            }
        )
    ef("tiny50k", csv_text(EF_HEAD, tiny))
    ef("tiny5k", csv_text(EF_HEAD, tiny[:5000]))
    # a job larger than every cluster here beside small ones
    big = [dict(r) for r in base[:4]]
    big.append({**base[4], "job_id": "huge", "num_gpu": 2048, "batch_size": 4096})
    ef("toobig", csv_text(EF_HEAD, big))
    # GPU counts not powers of two
    odd = [
        {**r, "num_gpu": g, "batch_size": BATCH[r["model_name"]] * g}
        for r, g in zip(base[:10], (3, 5, 7, 9, 11, 12, 13, 6, 10, 15), strict=True)
    ]
    ef("oddgpus", csv_text(EF_HEAD, odd))
    # a workload the catalog lacks, beside known ones
    ef("llama", csv_text(EF_HEAD, [*base[:3], {**base[3], "model_name": "llama7b"}]))
    # one-iteration and ten-year jobs (resnet50 at 1 GPU: ~0.1 s an iteration)
    ef(
        "longshort",
        csv_text(
            EF_HEAD,
            [
                {**base[0], "job_id": "short", "iteration": 1, "submit_time": 0},
                {
                    **base[1],
                    "job_id": "decade",
                    "model_name": "resnet50",
                    "batch_size": 128,
                    "num_gpu": 1,
                    "iteration": 3_000_000_000,
                    "submit_time": 10,
                },
            ],
        ),
    )
    # Philly rows: CRLF + BOM, quoted timestamps, 1 s and 10 years, 3 / 5 / 7 GPUs
    ph = ["timestamp,duration,num_gpus,gpu_time,cluster,extra"]
    for i in range(30):
        d = rng.choice((1.0, 60.0, 900.0, 7200.0))
        g = rng.choice((1, 3, 5, 7))
        ph.append(f'"2017-10-09 0{i % 10}:{i:02d}:00",{d},{g},{d * g},vc{i % 3},z')
    write(out / "philly_week_sweep2.csv", "\n".join(ph) + "\n\n", bom=True, crlf=True)
    t["philly"] = out / "philly_week_sweep2.csv"
    decade = 10 * 365.25 * 86400
    ph10 = [*ph[:6], f'"2017-10-09 05:00:00",{decade},1,{decade},vc0,z']
    write(out / "philly_week_sweep2decade.csv", "\n".join(ph10) + "\n")
    t["philly_decade"] = out / "philly_week_sweep2decade.csv"
    ph1 = ph[:1] + ['"2017-10-09 00:00:00",1.0,1,1.0,vc0,z']
    write(out / "philly_week_sweep2one.csv", "\n".join(ph1) + "\n")
    t["philly_one"] = out / "philly_week_sweep2one.csv"
    # Pollux rows: reordered, extra column, equal times
    px = ["batch_size,application,extra,name,num_replicas,time"]
    for i, (app, b, g) in enumerate(
        [("cifar10", 2048, 6), ("ncf", 32768, 1), ("bert", 384, 6), ("yolov3", 64, 4)] * 3
    ):
        px.append(f"{b},{app},q,px{i},{g},{(i // 2) * 400}")
    write(out / "pollux_workload-77.csv", "\n".join(px) + "\n", crlf=True)
    t["pollux"] = out / "pollux_workload-77.csv"

    c = {}

    def cluster(name, spec, raw=None):
        path = out / f"{name}.json"
        path.write_text(raw if raw is not None else json.dumps(spec), encoding="utf-8")
        c[name] = path

    cluster(
        "one_a100", {"gpu_model": "A100", "switches": 1, "nodes_per_switch": 1, "gpus_per_node": 1}
    )
    cluster("one_t4", {"gpu_model": "T4", "switches": 1, "nodes_per_switch": 1, "gpus_per_node": 1})
    cluster(
        "n3g3_a100", {"gpu_model": "A100", "switches": 1, "nodes_per_switch": 3, "gpus_per_node": 3}
    )
    cluster(
        "n5g3_t4", {"gpu_model": "T4", "switches": 1, "nodes_per_switch": 5, "gpus_per_node": 3}
    )
    cluster(
        "n1024_a100",
        {"gpu_model": "A100", "switches": 4, "nodes_per_switch": 256, "gpus_per_node": 1},
    )
    cluster(
        "n1024g4_t4",
        {"gpu_model": "T4", "switches": 2, "nodes_per_switch": 512, "gpus_per_node": 4},
    )
    cluster(
        "mixed",
        {"gpu_model": ["A100", "T4"], "switches": 1, "nodes_per_switch": 2, "gpus_per_node": 2},
    )
    cluster("h200", {"gpu_model": "H200", "switches": 1, "nodes_per_switch": 2, "gpus_per_node": 8})
    bom = (
        '\ufeff{\r\n "gpu_model": "A100", "switches": 1, "nodes_per_switch": 2,\r\n'
        ' "gpus_per_node": 4\r\n}\r\n'
    )
    cluster("bom_a100", None, raw=bom)
    cluster(
        "str_nums_t4",
        {"gpu_model": "T4", "switches": "1", "nodes_per_switch": "4", "gpus_per_node": "2"},
    )
    cluster(
        "neg_t4", {"gpu_model": "T4", "switches": 1, "nodes_per_switch": -4, "gpus_per_node": 2}
    )
    cluster("empty", None, raw="")

    cases: list[str] = []

    def case(trace, clus, policy, *opts):
        cases.append(f"--trace {t[trace]} --cluster {c[clus]} --policy {policy} " + " ".join(opts))

    # refusals: one line each
    cases.append("# refusals")
    case("zero", "n3g3_a100", "fifo")
    case("zero_blank", "n3g3_a100", "powerflow", "--energy-budget-kwh 5")
    case("llama", "n3g3_a100", "fifo")
    case("reorder", "mixed", "fifo")
    case("reorder", "h200", "fifo")
    case("reorder", "neg_t4", "fifo")
    case("reorder", "empty", "fifo")
    case("reorder", "n3g3_a100", "fifo", "--arrival-scale -2")
    case("reorder", "n3g3_a100", "fifo", "--arrival-scale nan")
    case("reorder", "n3g3_a100", "fifo", "--arrival-scale inf")
    case("reorder", "n3g3_a100", "powerflow", "--energy-budget-kwh nan")
    case("reorder", "n3g3_a100", "powerflow", "--energy-budget-kwh inf")
    case("reorder", "n3g3_a100", "powerflow", "--carbon-budget-kg 1e400 --carbon-zone ES")
    case("reorder", "n3g3_a100", "powerflow", "--energy-budget-kwh 5 --budget-period-h nan")
    case("reorder", "n3g3_a100", "powerflow", "--energy-budget-kwh 5 --budget-period-h 0")
    case("reorder", "n3g3_a100", "fifo", "--round-length-s inf")
    case("reorder", "n3g3_a100", "fifo", "--round-length-s nan")
    case("reorder", "n3g3_a100", "fifo", "--restart-cost-s nan")
    case("reorder", "n3g3_a100", "fifo", "--congestion nan")
    case("reorder", "n3g3_a100", "elastic", "--congestion inf")
    case("reorder", "n3g3_a100", "fifo", "--colocation-noise nan")
    case("reorder", "n3g3_a100", "zeus", "--measurement-noise inf --knowledge learned")
    case("reorder", "n3g3_a100", "zeus", "--exploration-budget nan --knowledge learned")
    case("reorder", "n3g3_a100", "powerflow", "--match-baseline fifo --horizon-factor nan")
    case("reorder", "n3g3_a100", "powerflow", "--match-baseline fifo --horizon-factor inf")
    case("reorder", "n3g3_a100", "fifo", "--max-gpus 0")
    case("reorder", "n3g3_a100", "fifo", "--start 2022-01-01T00:00:00+25:00")
    case("reorder", "n3g3_a100", "powerflow", "--policy-param pricing=maybe")
    case("reorder", "n3g3_a100", "powerflow", "--policy-param power_limit_step_w=nan")
    case(
        "reorder",
        "n3g3_a100",
        "greenflow",
        "--carbon-budget-kg 5 --carbon-zone ES --team-budgets --team-rule nosuch",
    )
    # every policy, each input shape, oracle and learned
    cases.append("# every policy on the shapes")
    for p in POLICIES:
        case("reorder", "n3g3_a100", p, "--knowledge both")
        case("reorder_t4", "n5g3_t4", p, "--knowledge oracle")
        case("oddgpus", "n3g3_a100", p, "--knowledge oracle")
        case("philly", "n5g3_t4", p, "--knowledge oracle")
    for p in ("fifo", "powerflow", "greenflow", "zeus"):
        case("crlf_bom", "bom_a100", p, "--knowledge learned")
        case("quoted", "n3g3_a100", p, "--knowledge both")
        case("unsorted_dup", "one_a100", p, "--knowledge both")
        case("one", "one_a100", p, "--knowledge both")
        case("toobig", "n3g3_a100", p, "--knowledge oracle")
        case("longshort", "one_a100", p, "--knowledge oracle")
        case("pollux", "str_nums_t4", p, "--knowledge both")
        case("philly_one", "one_t4", p, "--knowledge both")
    # budgets: fixed energy / carbon, cluster and team, matched; pause_jobs is the default
    cases.append("# budgets")
    for p in POLICIES:
        case(
            "reorder",
            "n3g3_a100",
            p,
            "--energy-budget-kwh 3 --budget-period-h 1 --knowledge oracle",
        )
        case(
            "reorder_t4",
            "n5g3_t4",
            p,
            "--carbon-budget-kg 0.4 --budget-period-h 2 --carbon-zone ES --knowledge oracle",
        )
        case(
            "philly",
            "n5g3_t4",
            p,
            "--energy-budget-kwh 2 --budget-period-h 2 --team-budgets --knowledge oracle",
        )
    for p in ("powerflow", "greenflow"):
        for k in ("learned", "oracle"):
            case("reorder", "n3g3_a100", p, f"--match-baseline fifo --knowledge {k}")
            case(
                "reorder",
                "n3g3_a100",
                p,
                f"--match-baseline tiresias --budget-kind carbon --carbon-zone NO --knowledge {k}",
            )
            case(
                "reorder",
                "n3g3_a100",
                p,
                f"--match-baseline fifo_lowclock --horizon-factor 0.5 --knowledge {k}",
            )
            case(
                "philly",
                "n5g3_t4",
                p,
                f"--match-baseline fifo --team-budgets --team-rule trace --knowledge {k}",
            )
            case(
                "reorder_t4",
                "n5g3_t4",
                p,
                f"--match-baseline zeus --team-budgets --team-rule workload --knowledge {k}",
            )
            case(
                "oddgpus",
                "n3g3_a100",
                p,
                f"--carbon-budget-kg 2 --budget-period-h 6 --carbon-zone US-CAL-CISO "
                f"--team-budgets --team-rule workload --knowledge {k}",
            )
    # arrival scales
    cases.append("# arrival scales")
    for s in ("0.01", "0.3", "5", "400"):
        for p in ("fifo", "elastic", "powerflow"):
            case("reorder", "n3g3_a100", p, f"--arrival-scale {s} --knowledge oracle")
        case(
            "reorder",
            "n3g3_a100",
            "powerflow",
            f"--arrival-scale {s} --energy-budget-kwh 3 --budget-period-h 1 --knowledge learned",
        )
    # the big ones
    cases.append("# size")
    for p in ("fifo", "elastic", "powerflow", "tiresias"):
        case("reorder", "n1024_a100", p, "--knowledge oracle")
    case("reorder_t4", "n1024g4_t4", "powerflow", "--knowledge oracle")
    case(
        "reorder_t4",
        "n1024g4_t4",
        "greenflow",
        "--carbon-zone ES --match-baseline fifo --knowledge oracle",
    )
    case("tiny5k", "n5g3_t4", "fifo", "--knowledge oracle")
    case("tiny5k", "n5g3_t4", "powerflow", "--knowledge oracle")
    case(
        "tiny5k",
        "n5g3_t4",
        "powerflow",
        "--energy-budget-kwh 1 --budget-period-h 1 --knowledge oracle",
    )
    cases_big = [
        f"--trace {t['philly_decade']} --cluster {c['n5g3_t4']} --policy fifo --knowledge oracle",
        f"--trace {t['philly_decade']} --cluster {c['n5g3_t4']} --policy powerflow "
        "--knowledge oracle",
        f"--trace {t['longshort']} --cluster {c['one_a100']} --policy fifo --knowledge oracle "
        "--round-length-s 86400",
        f"--trace {t['tiny50k']} --cluster {c['n1024g4_t4']} --policy fifo --knowledge oracle",
        f"--trace {t['tiny50k']} --cluster {c['n5g3_t4']} --policy fifo --knowledge oracle",
        f"--trace {t['tiny50k']} --cluster {c['n5g3_t4']} --policy powerflow --knowledge oracle",
    ]
    # a second file, after reading the first's exits: GreenFlow matched with a zone (eight
    # of cases_a/b lacked one and were refused, rightly), learned on 1,024 nodes, the
    # other policies under budgets learned, replanning and idle nodes off, Pollux rows
    body = [x for x in cases if not x.startswith("#")]
    cases.clear()
    for k in ("learned", "oracle"):
        case(
            "reorder",
            "n3g3_a100",
            "greenflow",
            f"--match-baseline fifo --carbon-zone ES --knowledge {k}",
        )
        case(
            "reorder",
            "n3g3_a100",
            "greenflow",
            f"--match-baseline fifo_lowclock --horizon-factor 0.5 --carbon-zone BR --knowledge {k}",
        )
        case(
            "philly",
            "n5g3_t4",
            "greenflow",
            "--match-baseline fifo --team-budgets --team-rule trace --carbon-zone US-CAL-CISO "
            f"--knowledge {k}",
        )
        case(
            "reorder_t4",
            "n5g3_t4",
            "greenflow",
            "--match-baseline zeus --team-budgets --team-rule workload --carbon-zone NO "
            f"--knowledge {k}",
        )
    for p in ("powerflow", "greenflow", "elastic"):
        case("reorder", "n1024_a100", p, "--carbon-zone ES --knowledge learned")
    for p in ("eaco", "ones", "netdelay", "zeus", "tiresias", "fifo_lowclock"):
        case(
            "reorder",
            "n3g3_a100",
            p,
            "--energy-budget-kwh 2 --budget-period-h 1 --knowledge learned",
        )
        case(
            "philly",
            "n5g3_t4",
            p,
            "--carbon-budget-kg 0.3 --budget-period-h 3 --carbon-zone ES "
            "--team-budgets --knowledge learned",
        )
    for p in ("powerflow", "greenflow", "fifo", "elastic"):
        case(
            "oddgpus",
            "n3g3_a100",
            p,
            "--replan-on-events --power-off-idle-nodes --carbon-zone ES --knowledge both",
        )
        case(
            "pollux",
            "n5g3_t4",
            p,
            "--energy-budget-kwh 1 --budget-period-h 1 --carbon-zone ES --knowledge both",
        )
        case(
            "unsorted_dup",
            "n3g3_a100",
            p,
            "--arrival-scale 0.001 --carbon-budget-kg 0.5 "
            "--budget-period-h 1 --carbon-zone ES --team-budgets --team-rule workload "
            "--knowledge both",
        )
        case(
            "quoted",
            "one_a100",
            p,
            "--match-baseline fifo --horizon-factor 0.25 --carbon-zone ES --knowledge oracle",
        )
    (out / "cases_c.txt").write_text("\n".join(cases) + "\n", encoding="utf-8")
    (out / "cases_a.txt").write_text("\n".join(body[0::2]) + "\n", encoding="utf-8")
    (out / "cases_b.txt").write_text("\n".join(body[1::2]) + "\n", encoding="utf-8")
    (out / "cases_big.txt").write_text("\n".join(cases_big) + "\n", encoding="utf-8")
    sys.stdout.write(
        f"{len(body)} commands in cases_a/b, {len(cases_big)} in cases_big, under {out}\n"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
