"""Write the fourth sweep's inputs (traces, clusters) and its cases files.

    PYTHONPATH=. .venv/bin/python benchmarks/sweep4_gen.py DIR
    PYTHONPATH=. .venv/bin/python benchmarks/sim_sweep_check.py DIR/cases_a.txt --work W
    PYTHONPATH=. .venv/bin/python benchmarks/sweep3_budgets.py DIR/cases_b.txt --work W

Shapes the three earlier sweeps did not try, each seeded (a rerun writes the same bytes):

* ``secmonth``: one-second jobs (a few iterations) beside a 30-day job and jobs of hours,
  on one A100 (a single-GPU cluster) and one node of 4 A100, under budget periods of
  one hour and of 30 days;
* ``wide``: T4 jobs of 8, 16 and 32 GPUs beside 1-2 GPU ones on 16 nodes of one T4 over
  two switches (every job of more than one GPU spans nodes; the 32-GPU ones exceed the
  cluster) and on one node of 4 T4 (most jobs exceed the cluster);
* ``hourburst``: T4 jobs arriving in bursts exactly on the hour (and a tenth of a second
  before it), for one-hour budget periods, fixed and per team;
* ``philly_week_sweep4teams``: Philly rows over 16 virtual clusters (many small teams),
  one of one second and one of 30 days; ``philly_week_sweep4one``: every row one team;
* ``pollux_workload-94``: Pollux rows asking more replicas than the cluster has, in
  bursts, with equal times;
* ``dup`` (a repeated job id) and clusters of mixed GPU models or a GPU model the catalog
  lacks (V100): refusals, one line each.

Carbon: ``US-CAL-CISO`` from July 2022 (the zone the earlier sweeps used least) with one
hour carbon periods; ``--carbon-kind lca``. Learned observations noisy (sigma 0.5 and 1,
the most the CLI takes).
The cases files hold one simulator command a line with absolute paths into ``DIR``:
``cases_a.txt`` (every policy on every shape, both knowledges; the refusals),
``cases_b.txt`` (budgets: 1-h and 30-d periods, cluster and team, energy and carbon),
``cases_c.txt`` (noise, exploration, replanning, bursts), ``cases_m.txt`` (PowerFlow at
``elastic``'s and ``fifo_lowclock``'s energy and GreenFlow at their carbon: the table).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep3_gen import POLICIES, job, write_cluster, write_trace  # noqa: E402

DAY_S = 86_400.0
HOUR_S = 3_600.0
# seconds per iteration at the trace's batch on one GPU (the catalog's, rounded down so
# that a job is no shorter than named)
ITER_S = {"resnet50": 0.28, "bert": 0.107, "gpt2": 0.0378, "vgg16": 0.39}
T4 = ("cifar10", "ncf", "imagenet", "yolov3", "deepspeech2", "bert")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20261208_4)
    t: dict[str, Path] = {}
    c: dict[str, Path] = {}

    def ef(name, rows):
        t[name] = write_trace(out, name, rows)

    def cluster(name, gpu_model, switches, nodes, gpus):
        c[name] = write_cluster(out, name, gpu_model, switches, nodes, gpus)

    # one-second jobs beside a 30-day one (A100)
    rows = [job(f"s{i}", 60.0 * i, "bert", 1, 10) for i in range(6)]
    rows.append(job("month", 30.0, "resnet50", 1, 30 * DAY_S / ITER_S["resnet50"]))
    for i in range(5):
        w = rng.choice(("resnet50", "bert", "gpt2", "vgg16"))
        hours = rng.choice((0.5, 2.0, 6.0))
        rows.append(job(f"h{i}", rng.uniform(0, 2 * HOUR_S), w, 1, hours * HOUR_S / ITER_S[w]))
    rows.sort(key=lambda r: r["submit_time"])
    ef("secmonth", rows)

    # wide T4 jobs: bigger than a node, bigger than the cluster
    rows = []
    for i in range(20):
        w = rng.choice(T4)
        g = rng.choice((1, 1, 2, 8, 16))
        rows.append(job(f"w{i}", rng.uniform(0, 3 * HOUR_S), w, g, rng.choice((500, 2000, 6000))))
    rows[4] = job("w4_x32", rows[4]["submit_time"], "cifar10", 32, 3000)
    rows[13] = job("w13_x32", rows[13]["submit_time"], "ncf", 32, 30000)
    ef("wide", rows)

    # bursts on the hour (and a tenth of a second before it), T4
    rows = []
    for k in range(1, 7):
        for j in range(6):
            w = rng.choice(T4)
            rows.append(
                job(f"b{k}_{j}", k * HOUR_S, w, rng.choice((1, 2, 4)), rng.choice((300, 1500)))
            )
        rows.append(job(f"b{k}_early", k * HOUR_S - 0.1, "ncf", 1, 20000))
    ef("hourburst", rows)

    # Philly: 16 virtual clusters, one one-second row and one 30-day row
    ph = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(46):
        d = rng.choice((60.0, 900.0, 3600.0, 3 * 3600.0))
        g = rng.choice((1, 1, 2, 4))
        ph.append(f"2017-10-09 {i % 12:02d}:{(11 * i) % 60:02d}:00,{d},{g},{d * g},vc{i % 16:02d}")
    ph.append("2017-10-09 01:00:00,1.0,1,1.0,vc03")
    ph.append(f"2017-10-09 00:30:00,{30 * DAY_S},1,{30 * DAY_S},vc07")
    (out / "philly_week_sweep4teams.csv").write_text("\n".join(ph) + "\n", encoding="utf-8")
    t["teams"] = out / "philly_week_sweep4teams.csv"
    one = [ph[0]] + [",".join(r.split(",")[:4] + ["solo"]) for r in ph[1:-1]]
    (out / "philly_week_sweep4one.csv").write_text("\n".join(one) + "\n", encoding="utf-8")
    t["one"] = out / "philly_week_sweep4one.csv"

    # Pollux: more replicas than the cluster, bursts, equal times
    po = ["name,time,application,num_replicas,batch_size"]
    pollux_batch = {"cifar10": 128, "ncf": 1024, "imagenet": 200, "yolov3": 8, "bert": 12}
    for i in range(24):
        a = rng.choice(tuple(pollux_batch))
        r = rng.choice((1, 2, 4, 4, 32))
        po.append(f"{a}-{i},{(i // 6) * 1800},{a},{r},{pollux_batch[a] * r}")
    (out / "pollux_workload-94.csv").write_text("\n".join(po) + "\n", encoding="utf-8")
    t["pollux94"] = out / "pollux_workload-94.csv"

    # the same bursts with a first job at 0, so that the periods (which start in the round
    # of the first arrival) begin on the hour and each burst lands on a period's edge
    # (a separate generator, so that the inputs above keep their bytes)
    rows0 = [job("b0_first", 0.0, "ncf", 1, 2000)] + rows
    ef("hourburst0", rows0)

    # a repeated id (refused)
    ef("dup", [job("x", 10.0, "bert", 1, 100), job("x", 20.0, "gpt2", 1, 100)])

    cluster("n1g1_a100", "A100", 1, 1, 1)
    cluster("n1g4_a100", "A100", 1, 1, 4)
    cluster("sw2n8g1_t4", "T4", 2, 8, 1)
    cluster("n1g4_t4", "T4", 1, 1, 4)
    cluster("n2g4_t4", "T4", 1, 2, 4)
    cluster("n4g2_t4", "T4", 1, 4, 2)
    cluster("n1g1_t4", "T4", 1, 1, 1)
    # refused on purpose: a mixed cluster (A100 + T4 + V100 nodes), a V100 one
    mixed = {
        "name": "mixed_nodes",
        "nodes": [{"gpu_model": m, "gpus": 4} for m in ("A100", "T4", "V100")],
        "switches": 1,
    }
    (out / "mixed_nodes.json").write_text(json.dumps(mixed) + "\n", encoding="utf-8")
    c["mixed_nodes"] = out / "mixed_nodes.json"
    cluster("mixed_list", ["A100", "T4", "V100"], 1, 3, 4)
    cluster("v100", "V100", 1, 2, 4)

    cases: dict[str, list[str]] = {k: [] for k in "abcm"}

    def case(into, trace, clus, policy, *opts):
        cases[into].append(
            f"--trace {t[trace]} --cluster {c[clus]} --policy {policy} " + " ".join(opts)
        )

    case("a", "secmonth", "mixed_nodes", "fifo")
    case("a", "secmonth", "mixed_list", "fifo")
    case("a", "wide", "v100", "fifo")
    case("a", "dup", "n1g1_a100", "fifo")
    shapes = (
        ("secmonth", "n1g1_a100", ""),
        ("secmonth", "n1g4_a100", ""),
        ("wide", "sw2n8g1_t4", ""),
        ("wide", "n1g4_t4", ""),
        ("hourburst", "n2g4_t4", ""),
        ("teams", "n4g2_t4", "--carbon-zone US-CAL-CISO --start 2022-07-01T00:00:00+00:00"),
        ("pollux94", "n2g4_t4", ""),
    )
    for p in POLICIES:
        for trace, clus, extra in shapes:
            case("a", trace, clus, p, "--knowledge both", extra)

    # budgets: one hour and 30 days, cluster and team, energy and carbon
    for p in POLICIES:
        case("b", "secmonth", "n1g4_a100", p, "--energy-budget-kwh 0.5 --budget-period-h 1")
        case("b", "secmonth", "n1g4_a100", p, "--energy-budget-kwh 500 --budget-period-h 720")
        case(
            "b",
            "hourburst",
            "n2g4_t4",
            p,
            "--energy-budget-kwh 0.4 --budget-period-h 1 --team-budgets --team-rule workload",
        )
        case(
            "b",
            "teams",
            "n4g2_t4",
            p,
            "--energy-budget-kwh 0.5 --budget-period-h 1 --team-budgets --knowledge learned",
        )
        case(
            "b",
            "one",
            "n4g2_t4",
            p,
            "--energy-budget-kwh 0.5 --budget-period-h 1 --team-budgets --knowledge learned",
        )
        case(
            "b",
            "teams",
            "n4g2_t4",
            p,
            "--carbon-budget-kg 0.05 --budget-period-h 1 --carbon-zone US-CAL-CISO "
            "--carbon-kind lca --start 2022-07-01T00:00:00+00:00",
        )
    for p in ("powerflow", "greenflow", "fifo"):
        case(
            "b",
            "teams",
            "n4g2_t4",
            p,
            "--match-baseline fifo --team-budgets --carbon-zone US-CAL-CISO --budget-kind carbon",
        )
        case("b", "wide", "sw2n8g1_t4", p, "--match-baseline elastic --horizon-factor 0.2")
        case("b", "secmonth", "n1g4_a100", p, "--energy-budget-kwh 200 --budget-period-h 720")

    # noise, exploration, replanning on events at the bursts
    for p in ("powerflow", "greenflow", "zeus", "elastic", "fifo"):
        case(
            "c",
            "wide",
            "sw2n8g1_t4",
            p,
            "--knowledge learned --measurement-noise 1.0 --exploration-budget 0.5",
        )
        case(
            "c",
            "pollux94",
            "n2g4_t4",
            p,
            "--knowledge learned --measurement-noise 0.5 --exploration-budget 0",
        )
        case(
            "c",
            "hourburst",
            "n2g4_t4",
            p,
            "--replan-on-events --energy-budget-kwh 0.3 --budget-period-h 1 --knowledge both",
        )
        case("c", "secmonth", "n1g1_a100", p, "--replan-on-events --knowledge oracle")
        case(
            "c",
            "hourburst0",
            "n2g4_t4",
            p,
            "--energy-budget-kwh 0.3 --budget-period-h 1 --team-budgets --team-rule workload "
            "--knowledge both",
        )

    # the table: PowerFlow at equal energy, GreenFlow at equal carbon, both knowledges
    for trace, clus, _ in shapes:
        case("m", trace, clus, "powerflow", "--match-baseline elastic,fifo_lowclock")
        case(
            "m",
            trace,
            clus,
            "greenflow",
            "--match-baseline elastic,fifo_lowclock --carbon-zone US-CAL-CISO "
            "--start 2022-07-01T00:00:00+00:00",
        )
    for k, lines in cases.items():
        text = "".join(" ".join(line.split()) + "\n" for line in lines)
        (out / f"cases_{k}.txt").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", metavar="DIR", help="the folder to write the inputs into")
    main(Path(parser.parse_args().dir))
