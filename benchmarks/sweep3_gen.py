"""Write the third sweep's inputs (traces, clusters) and its cases files.

    PYTHONPATH=. .venv/bin/python benchmarks/sweep3_gen.py DIR
    PYTHONPATH=. .venv/bin/python benchmarks/sim_sweep_check.py DIR/cases_a.txt --work W

Shapes the first two sweeps and the derived traces did not try, each seeded (a rerun
writes the same bytes), none copied from ``data/``:

* ``diurnal``: 120 ElasticFlow jobs on A100 over four days, arriving at a rate that
  follows the day (peak at noon, a tenth of it at night), run under budgets of a day, of
  six hours and of six minutes (periods much shorter than the jobs);
* ``heavytail``: 60 jobs whose iterations are Pareto-distributed (alpha 1.1), most on one
  or two GPUs, three asking 64 GPUs, on 16 A100 (a cluster smaller than its largest
  jobs); ``heavytail_fit`` is the same with the three at 16 GPUs;
* ``gpt2only`` (A100) and ``ncfonly`` (T4): 40 jobs of one workload each;
* ``longjobs``: 12 jobs of 10-40 hours on 8 A100, for budget periods of 0.1 h;
* ``philly_week_sweep3starve.csv``: Philly rows whose virtual cluster ``big`` has 30 jobs
  and ``tiny`` one job of one minute, for team budgets where one team starves;
* ``teamtoobig``: ElasticFlow rows where one workload's only job asks more GPUs than
  the cluster has, for team budgets by workload;
* clusters: 4 x 4 A100, 2 x 4 T4, 1 x 8 A100, 3 x 8 A100; a list of three GPU models
  (A100, V100, T4), a one-model list, a V100 cluster (the catalog has A100 and T4 only).

Carbon zones: BR and NO (the zones of ``data/carbon`` the earlier sweeps used least),
``--carbon-kind lca``, and a start on 30 Dec 2022 whose run wraps past the series' end.
The cases files hold one simulator command a line with absolute paths into ``DIR``:
``cases_a.txt`` (every policy, both knowledges, on the shapes), ``cases_b.txt`` (budgets:
fixed, short periods, team, carbon), ``cases_c.txt`` (odd corners: a restart longer than a
period, a period off the round grid, baselines that leave jobs unfinished, one GPU a job,
noisy observations, dense arrivals), ``cases_d.txt`` (a binding budget with a restart
longer than its period, work from day 200 under six-minute periods, arrivals on period
edges, jobs spread over two switches under congestion, nodes of one GPU and one node of
64, bigger batches), ``cases_m.txt`` (PowerFlow and GreenFlow matched to
``elastic`` and ``fifo_lowclock``: the measurement).
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

A100 = ("bert", "deepspeech2", "gpt2", "inception3", "resnet50", "vgg16")
# the batch and trace columns the second sweep's inputs use (one place for both sweeps)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep2_gen import BATCH, EF_HEAD  # noqa: E402

POLICIES = (
    "fifo",
    "tiresias",
    "elastic",
    "fifo_lowclock",
    "zeus",
    "powerflow",
    "greenflow",
    "eaco",
    "ones",
    "netdelay",
)
DAY_S = 86_400.0


def csv_text(head, rows) -> str:
    lines = [",".join(head)]
    for r in rows:
        lines.append(",".join(str(r.get(h, "")) for h in head))
    return "\n".join(lines) + "\n"


def write_trace(out: Path, name: str, rows) -> Path:
    """An ElasticFlow-format trace ``elasticflow_<name>.csv`` of ``rows`` in ``out``."""
    path = out / f"elasticflow_{name}.csv"
    path.write_text(csv_text(EF_HEAD, rows), encoding="utf-8")
    return path


def write_cluster(out: Path, name: str, gpu_model: str, switches, nodes, gpus) -> Path:
    """A cluster spec ``<name>.json`` in ``out``."""
    spec = {
        "name": name,
        "gpu_model": gpu_model,
        "switches": switches,
        "nodes_per_switch": nodes,
        "gpus_per_node": gpus,
    }
    path = out / f"{name}.json"
    path.write_text(json.dumps(spec) + "\n", encoding="utf-8")
    return path


def job(jid, t, w, g, iters):
    return {
        "job_id": jid,
        "submit_time": round(t, 1),
        "model_name": w,
        "batch_size": BATCH[w] * g,
        "num_gpu": g,
        "iteration": int(iters),
    }


def diurnal_times(rng: random.Random, n: int, days: int) -> list[float]:
    """``n`` arrival instants over ``days`` days from a rate peaking at noon, a tenth of
    the peak at midnight (thinning a uniform stream)."""
    times: list[float] = []
    while len(times) < n:
        t = rng.uniform(0, days * DAY_S)
        rate = 0.55 - 0.45 * math.cos(2 * math.pi * (t % DAY_S) / DAY_S)  # 0.1 .. 1.0
        if rng.random() < rate:
            times.append(t)
    return sorted(times)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20261207_3)
    t: dict[str, Path] = {}
    c: dict[str, Path] = {}

    def ef(name, rows):
        t[name] = write_trace(out, name, rows)

    def cluster(name, gpu_model, switches, nodes, gpus):
        c[name] = write_cluster(out, name, gpu_model, switches, nodes, gpus)

    # diurnal arrivals over four days, A100
    rows = []
    for i, s in enumerate(diurnal_times(rng, 120, 4)):
        w = rng.choice(A100)
        g = rng.choice((1, 1, 2, 2, 4, 8))
        rows.append(job(f"d{i}", s, w, g, rng.choice((2000, 8000, 20000, 60000))))
    ef("diurnal", rows)
    # heavy-tailed sizes; three jobs ask 64 GPUs of a 16-GPU cluster
    rows = []
    for i in range(60):
        w = rng.choice(A100)
        g = rng.choice((1, 1, 1, 2, 2, 4))
        iters = min(4000 * rng.paretovariate(1.1), 5_000_000)
        rows.append(job(f"h{i}", rng.uniform(0, 2 * DAY_S), w, g, iters))
    for k, i in enumerate((5, 30, 55)):
        rows[i] = job(f"h{i}_big", rows[i]["submit_time"], A100[k], 64, 200_000)
    ef("heavytail", rows)
    ef(
        "heavytail_fit",
        [
            {**r, "num_gpu": 16, "batch_size": BATCH[r["model_name"]] * 16}
            if r["num_gpu"] == 64
            else r
            for r in rows
        ],
    )
    # one workload only
    ef(
        "gpt2only",
        [
            job(
                f"g{i}",
                rng.uniform(0, DAY_S / 2),
                "gpt2",
                rng.choice((1, 2, 4, 8)),
                rng.choice((5000, 30000, 120000)),
            )
            for i in range(40)
        ],
    )
    ef(
        "ncfonly",
        [
            job(
                f"n{i}",
                rng.uniform(0, DAY_S),
                "ncf",
                rng.choice((1, 2, 4)),
                rng.choice((20000, 200000, 800000)),
            )
            for i in range(40)
        ],
    )
    # long jobs (10-40 h at their request) for periods of 0.1 h
    ef(
        "longjobs",
        [
            job(f"L{i}", i * 1800.0, w, rng.choice((1, 2, 4)), rng.choice((300_000, 800_000)))
            for i, w in enumerate([rng.choice(("resnet50", "vgg16", "bert")) for _ in range(12)])
        ],
    )
    # a team whose only job can never run: one workload's job asks 32 of 16 GPUs
    rows = [job(f"a{i}", i * 600.0, rng.choice(("resnet50", "bert")), 2, 4000) for i in range(16)]
    rows.append(job("v_only", 1200.0, "vgg16", 32, 4000))
    ef("teamtoobig", rows)
    # Philly rows: one virtual cluster of 30 jobs, one of a single one-minute job
    ph = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(30):
        d = rng.choice((600.0, 3600.0, 4 * 3600.0, 10 * 3600.0))
        g = rng.choice((1, 2, 4))
        ph.append(f"2017-10-09 {i % 24:02d}:{(7 * i) % 60:02d}:00,{d},{g},{d * g},big")
    ph.append("2017-10-09 03:30:00,60.0,1,60.0,tiny")
    (out / "philly_week_sweep3starve.csv").write_text("\n".join(ph) + "\n", encoding="utf-8")
    t["starve"] = out / "philly_week_sweep3starve.csv"

    cluster("n4g4_a100", "A100", 1, 4, 4)
    cluster("n2g4_t4", "T4", 1, 2, 4)
    cluster("n1g8_a100", "A100", 1, 1, 8)
    cluster("n3g8_a100", "A100", 1, 3, 8)
    cluster("n4g4_t4", "T4", 1, 4, 4)
    cluster("mixed3", ["A100", "V100", "T4"], 1, 3, 4)
    cluster("listone_t4", ["T4"], 1, 2, 4)
    cluster("v100", "V100", 1, 2, 4)

    cases_a: list[str] = []
    cases_b: list[str] = []
    cases_m: list[str] = []

    def case(into, trace, clus, policy, *opts):
        into.append(f"--trace {t[trace]} --cluster {c[clus]} --policy {policy} " + " ".join(opts))

    # refusals
    case(cases_a, "diurnal", "mixed3", "fifo")
    case(cases_a, "diurnal", "v100", "fifo")
    case(cases_a, "ncfonly", "listone_t4", "fifo")
    # every policy on each shape, learned and oracle
    for p in POLICIES:
        case(cases_a, "diurnal", "n4g4_a100", p, "--knowledge both")
        case(cases_a, "heavytail", "n4g4_a100", p, "--knowledge both")
        case(cases_a, "gpt2only", "n1g8_a100", p, "--knowledge both")
        case(cases_a, "ncfonly", "n2g4_t4", p, "--knowledge both")
        case(cases_a, "starve", "n4g4_t4", p, "--knowledge both --carbon-zone BR")
    # budgets: a day's and six hours' on the diurnal trace, six minutes on long jobs
    for p in POLICIES:
        case(
            cases_b,
            "diurnal",
            "n4g4_a100",
            p,
            "--energy-budget-kwh 60 --budget-period-h 24 --knowledge oracle",
        )
        case(
            cases_b,
            "diurnal",
            "n4g4_a100",
            p,
            "--carbon-budget-kg 0.15 --budget-period-h 6 --carbon-zone NO --knowledge learned",
        )
        case(
            cases_b,
            "longjobs",
            "n1g8_a100",
            p,
            "--energy-budget-kwh 0.2 --budget-period-h 0.1 --knowledge both",
        )
        case(
            cases_b,
            "starve",
            "n4g4_t4",
            p,
            "--energy-budget-kwh 0.3 --budget-period-h 1 --team-budgets --knowledge both",
        )
        case(
            cases_b,
            "teamtoobig",
            "n4g4_a100",
            p,
            "--energy-budget-kwh 2 --budget-period-h 2 --team-budgets --team-rule workload "
            "--knowledge oracle",
        )
    for p in ("powerflow", "greenflow", "fifo"):
        case(
            cases_b,
            "heavytail",
            "n3g8_a100",
            p,
            "--carbon-budget-kg 1 --budget-period-h 12 --carbon-zone BR --carbon-kind lca "
            "--start 2022-12-30T00:00:00+00:00 --knowledge both",
        )
        case(
            cases_b,
            "diurnal",
            "n4g4_a100",
            p,
            "--match-baseline fifo --team-budgets --team-rule workload --carbon-zone NO "
            "--budget-kind carbon --knowledge both",
        )
        case(
            cases_b,
            "teamtoobig",
            "n4g4_a100",
            p,
            "--match-baseline fifo --team-budgets --team-rule workload --knowledge oracle",
        )
        case(
            cases_b,
            "longjobs",
            "n1g8_a100",
            p,
            "--match-baseline elastic --horizon-factor 0.05 --knowledge oracle",
        )
        case(
            cases_b,
            "diurnal",
            "n4g4_a100",
            p,
            "--replan-on-events --power-off-idle-nodes --energy-budget-kwh 30 "
            "--budget-period-h 24 --knowledge learned",
        )
    # the measurement: PowerFlow at equal energy, GreenFlow at equal carbon
    for trace, clus in (
        ("diurnal", "n4g4_a100"),
        ("heavytail_fit", "n4g4_a100"),
        ("gpt2only", "n1g8_a100"),
        ("ncfonly", "n2g4_t4"),
        ("longjobs", "n1g8_a100"),
        ("starve", "n4g4_t4"),
    ):
        case(
            cases_m,
            trace,
            clus,
            "powerflow",
            "--match-baseline elastic,fifo_lowclock --knowledge oracle",
        )
        for zone in ("NO", "BR"):
            case(
                cases_m,
                trace,
                clus,
                "greenflow",
                f"--match-baseline elastic,fifo_lowclock --carbon-zone {zone} --knowledge oracle",
            )
    # odd corners: a restart longer than a period, a period off the round grid, baselines
    # that leave jobs unfinished, a cap of one GPU, very noisy observations, dense arrivals
    cases_c: list[str] = []
    for p in ("powerflow", "greenflow", "zeus", "fifo"):
        case(
            cases_c,
            "diurnal",
            "n4g4_a100",
            p,
            "--restart-cost-s 400 --energy-budget-kwh 1 --budget-period-h 0.1 --knowledge oracle",
        )
        case(
            cases_c,
            "diurnal",
            "n4g4_a100",
            p,
            "--round-length-s 299 --energy-budget-kwh 5 --budget-period-h 0.3333333 "
            "--knowledge oracle",
        )
        case(cases_c, "gpt2only", "n1g8_a100", p, "--max-gpus 1 --knowledge both")
        case(
            cases_c,
            "ncfonly",
            "n2g4_t4",
            p,
            "--measurement-noise 1.0 --exploration-budget 0.5 --knowledge learned",
        )
        case(cases_c, "diurnal", "n4g4_a100", p, "--arrival-scale 0.05 --knowledge both")
    for p in ("powerflow", "greenflow"):
        for base in ("fifo", "elastic", "tiresias,elastic"):
            case(
                cases_c,
                "heavytail",
                "n4g4_a100",
                p,
                f"--match-baseline {base} --carbon-zone BR --knowledge oracle",
            )
        case(
            cases_c,
            "heavytail",
            "n4g4_a100",
            p,
            "--match-baseline elastic --team-budgets --team-rule workload --carbon-zone NO "
            "--knowledge both",
        )
        case(
            cases_c,
            "starve",
            "n4g4_t4",
            p,
            "--match-baseline fifo --team-budgets --budget-kind carbon --carbon-zone BR "
            "--knowledge both",
        )
        case(
            cases_c,
            "longjobs",
            "n1g8_a100",
            p,
            "--match-baseline fifo_lowclock --horizon-factor 0.1 --budget-kind carbon "
            "--carbon-zone NO --carbon-kind lca --knowledge both",
        )
    # a second round of corners: a binding budget with a restart longer than its period,
    # work that begins on day 200 under six-minute periods, arrivals on period edges,
    # jobs spread over switches under congestion, one node of 64 GPUs, bigger batches
    cases_d: list[str] = []
    late = [
        job(f"late{i}", 200 * DAY_S + i * 360.0, rng.choice(A100), rng.choice((1, 2, 4)), 20000)
        for i in range(10)
    ]
    ef("late", late)
    ef(
        "edges",
        [job(f"e{i}", (i // 3) * 360.0, rng.choice(A100), 2, 30000) for i in range(18)],
    )
    ef(
        "spread",
        [
            job(f"s{i}", i * 900.0, rng.choice(A100), rng.choice((4, 8, 12, 16)), 30000)
            for i in range(24)
        ],
    )
    cluster("sw2n2g4_a100", "A100", 2, 2, 4)
    cluster("n4g1_a100", "A100", 1, 4, 1)
    cluster("n1g64_a100", "A100", 1, 1, 64)
    for p in ("powerflow", "greenflow", "fifo", "elastic"):
        case(
            cases_d,
            "diurnal",
            "n4g4_a100",
            p,
            "--restart-cost-s 400 --energy-budget-kwh 0.5 --budget-period-h 0.1 --knowledge oracle",
        )
        case(
            cases_d,
            "late",
            "n4g4_a100",
            p,
            "--energy-budget-kwh 0.3 --budget-period-h 0.1 --carbon-zone BR --knowledge both",
        )
        case(
            cases_d,
            "edges",
            "n4g4_a100",
            p,
            "--replan-on-events --energy-budget-kwh 0.4 --budget-period-h 0.1 --knowledge both",
        )
    for p in POLICIES:
        case(cases_d, "spread", "sw2n2g4_a100", p, "--congestion 3 --knowledge both")
        case(cases_d, "spread", "n4g1_a100", p, "--knowledge oracle")
        case(cases_d, "heavytail", "n1g64_a100", p, "--knowledge oracle")
    for p in ("ones", "powerflow", "elastic"):
        case(
            cases_d,
            "diurnal",
            "n4g4_a100",
            p,
            "--max-batch-factor 4 --batch-efficiency free --knowledge both",
        )
        case(
            cases_d,
            "ncfonly",
            "n2g4_t4",
            p,
            "--max-batch-factor 4 --batch-probe --colocation-noise 0.5 --knowledge learned",
        )
    for p in ("powerflow", "greenflow"):
        case(
            cases_d,
            "spread",
            "sw2n2g4_a100",
            p,
            "--match-baseline elastic,fifo_lowclock --congestion 3 --carbon-zone BR "
            "--power-off-idle-nodes --knowledge both",
        )
    for name, body in (
        ("a", cases_a),
        ("b", cases_b),
        ("c", cases_c),
        ("d", cases_d),
        ("m", cases_m),
    ):
        (out / f"cases_{name}.txt").write_text("\n".join(body) + "\n", encoding="utf-8")
    sys.stdout.write(
        f"{len(cases_a)} + {len(cases_b)} + {len(cases_c)} + {len(cases_d)} + {len(cases_m)} "
        f"commands in cases_a/b/c/d/m, under {out}\n"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
