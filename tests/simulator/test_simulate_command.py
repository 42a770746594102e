"""``manage.py simulate`` is the pure CLI behind Django's command interface."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

DATA = Path(__file__).resolve().parents[2] / "data"


def test_simulate_command_runs_a_policy_and_writes_its_results(tmp_path):
    out = StringIO()
    call_command(
        "simulate",
        "--trace", str(DATA / "trace" / "pollux_workload-2.csv"),
        "--cluster", str(DATA / "clusters" / "n16g4_t4.json"),
        "--policy", "fifo", "--max-jobs", "12", "--no-progress", "--out", str(tmp_path),
        stdout=out,
    )  # fmt: skip
    report = json.loads((tmp_path / "pollux_workload-2_n16g4_t4_report.json").read_text())
    assert report["runs"]["fifo"]["n_jobs"] == 12
    assert report["runs"]["fifo"]["n_finished"] == 12
    assert out.getvalue().startswith("fifo ")


def test_simulate_command_refuses_bad_arguments_and_writes_nothing(tmp_path):
    common = ["--trace", str(DATA / "trace" / "pollux_workload-2.csv"), "--out", str(tmp_path)]
    with pytest.raises(CommandError, match="the following arguments are required: --cluster"):
        call_command("simulate", *common, "--policy", "fifo")
    with pytest.raises(CommandError, match="unknown policy 'slowest'"):
        call_command(
            "simulate", *common, "--cluster", str(DATA / "clusters" / "n16g4_t4.json"),
            "--policy", "slowest",
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_simulate_command_matches_team_budgets_and_reports_the_spend_per_period(tmp_path):
    # given pollux jobs with a team per workload, each team matched to what its jobs drew
    out = StringIO()
    call_command(
        "simulate",
        "--trace", str(DATA / "trace" / "pollux_workload-3.csv"),
        "--cluster", str(DATA / "clusters" / "n16g4_t4.json"),
        "--policy", "powerflow", "--match-baseline", "fifo", "--team-budgets",
        "--team-rule", "workload", "--max-jobs", "30", "--no-progress", "--out", str(tmp_path),
        stdout=out,
    )  # fmt: skip
    text = (tmp_path / "pollux_workload-3_n16g4_t4_report.json").read_text()

    def strict(constant):  # Infinity / NaN are not JSON (the bound's JCT was Infinity)
        raise AssertionError(f"{constant} in the report")

    report = json.loads(text, parse_constant=strict)
    (line,) = report["comparisons"]
    assert "at equal energy per team (jobs only)" in out.getvalue()
    assert line["per_team"] is True
    jobs = (tmp_path / "pollux_workload-3_n16g4_t4_fifo_jobs.csv").read_text().splitlines()[1:]
    workloads = {row.split(",")[1] for row in jobs}
    # then there is one budget per team under both knowledge modes, and with the catalog's
    # predictions no period went over, and the line says so
    assert line["knowledge"] == "learned" and line["oracle"]["knowledge"] == "oracle"
    for run in (line, line["oracle"]):
        assert run["team_budgets"] == len(workloads) > 1
        # and no period of any team went over, with learned models too (a period that
        # started a rounding step after the previous one ended was planned with no budget
        # in force: 290% of ncf's period; test_budget_periods.py)
        assert run["candidate_periods_over_budget"] == 0
        assert run["candidate_max_period_share"] <= 1.0
    assert line["oracle"]["candidate_unfinished_jobs"] == 0
    # Every learned job finishes too. Before the bounded probe (budget_greedy, "Probes")
    # ncf's 12 jobs never started: before any observation its prior (imagenet) predicted
    # more energy than ncf's whole period budget, and a job that never runs is never
    # observed. Now the first ncf job runs 60 s at its minimum, is measured, and the rest
    # start from what it taught.
    learned = tmp_path / "pollux_workload-3_n16g4_t4_powerflow@fifo-energy_jobs.csv"
    rows = [r.split(",") for r in learned.read_text().splitlines()[1:]]
    assert line["candidate_unfinished_jobs"] == sum(1 for r in rows if r[6] == "") == 0
    assert {r[1] for r in rows} >= {"ncf"}
    assert "inside the period" in out.getvalue()
    assert report["scenario"]["team_rule"] == "workload"


@pytest.mark.parametrize(
    ("share", "text"),
    [
        (None, "n/a"),
        (0.5, "50.0%"),
        (1.0, "100.0%"),
        (1.000154, "100.02%"),
        (1.2, "120.0%"),
        (1.0 + 1e-12, "100.0% (over by less than 1e-6 of it)"),
    ],
)
def test_a_period_over_its_budget_never_prints_as_100_percent(share, text):
    # Philly's GreenFlow US-CAL-CISO run spent 100.0154% and printed "100.0%".
    from scheduling.simulator.cli import _share

    assert _share(share) == text


def _small_t4_cluster(tmp_path: Path) -> Path:
    spec = {"name": "n2g4_t4", "description": "2 x 4 T4", "gpu_model": "T4", "switches": 1,
            "nodes_per_switch": 2, "gpus_per_node": 4}  # fmt: skip
    path = tmp_path / "n2g4_t4.json"
    path.write_text(json.dumps(spec))
    return path


def _powerflow_teams_on_8_t4s(tmp_path: Path, *budget: str) -> str:
    """PowerFlow on the first 60 pollux_workload-1 jobs on 2 x 4 T4, a team per workload,
    with ``budget``'s options; what the command printed."""
    out = StringIO()
    try:
        call_command(
            "simulate",
            "--trace", str(DATA / "trace" / "pollux_workload-1.csv"),
            "--cluster", str(_small_t4_cluster(tmp_path)), "--policy", "powerflow", *budget,
            "--team-budgets", "--team-rule", "workload", "--knowledge", "oracle",
            "--max-jobs", "60", "--no-progress", "--out", str(tmp_path),
            stdout=out,
        )  # fmt: skip
    except CommandError as exc:
        exc.printed = out.getvalue()  # a run that stopped early still printed its lines
        raise
    return out.getvalue()


def test_a_team_whose_jobs_drew_nothing_under_the_baseline_gets_nothing(tmp_path):
    # given 60 pollux jobs on 8 T4s, under fifo 19 of them ask for more GPUs than there are
    # (imagenet's and bert's among them: those teams draw nothing), and team budgets matched
    printed = _powerflow_teams_on_8_t4s(tmp_path, "--match-baseline", "fifo")
    (line,) = json.loads((tmp_path / "pollux_workload-1_n2g4_t4_report.json").read_text())[
        "comparisons"
    ]
    jobs = tmp_path / "pollux_workload-1_n2g4_t4_powerflow@fifo-energy_jobs.csv"
    rows = [r.split(",") for r in jobs.read_text().splitlines()[1:]]
    drew = {}
    for row in rows:
        drew[row[2]] = drew.get(row[2], 0.0) + float(row[10])
    # then every team has a budget, the two that drew nothing one of nothing, and their jobs
    # drew nothing here either (left out, PowerFlow shrank them and ran them with no budget
    # at all: 12.5 kWh of imagenet)
    assert line["team_budgets"] == len(drew) == 6
    assert drew["imagenet"] == drew["bert"] == 0.0
    # and no ratio is printed over different sets of finished jobs (it read 0.404x)
    assert line["baseline_unfinished_jobs"] == 19 and line["avg_jct_ratio"] is None
    assert "avg JCT ratio n/a (fifo left 19 job(s) unfinished)" in printed
    # and the two jobs no budget pays for are named as never runnable under PowerFlow, whose
    # run stops when only they are left (it went on for the 7-day stall limit, said
    # "stopped early: no job progressed" and failed without naming them)
    unfinished = sorted(row[0] for row in rows if not row[6])
    assert len(unfinished) == 2
    assert (
        f"2 job(s) can never run on this cluster under powerflow@fifo-energy "
        f"({', '.join(unfinished)}); the run stopped when only they were left. Job "
        f"{unfinished[0]}: Waiting: team "
    ) in printed
    assert "'s budget is nothing in every period" in printed


def test_a_fixed_budget_split_by_team_pays_for_each_teams_jobs_whole_gpus(tmp_path):
    # given a fixed 2 kWh a day split over teams by workload on 8 T4s
    printed = _powerflow_teams_on_8_t4s(
        tmp_path, "--energy-budget-kwh", "2", "--budget-period-h", "24"
    )
    summary = tmp_path / "pollux_workload-1_n2g4_t4_powerflow_summary.json"
    run = json.loads(summary.read_text())["summary"]
    # then every job finishes: split by the energy above idle, ncf's share (269 J a day)
    # was below what one of its jobs is charged (its GPUs' whole draw, about 666 J), and
    # its 24 jobs never started
    assert run["n_unfinished"] == 0
    assert "budget period(s); worst spent" in printed and "over" not in printed


@pytest.mark.parametrize("baselines", ["", " ", ","])
def test_an_empty_match_baseline_is_refused_not_run_without_one(tmp_path, baselines):
    # "--match-baseline ''" ran the policy with no budget at all, exit 0 (a seventh probe)
    with pytest.raises(CommandError, match="--match-baseline needs at least one policy name"):
        call_command(
            "simulate",
            "--trace", str(DATA / "trace" / "pollux_workload-2.csv"),
            "--cluster", str(DATA / "clusters" / "n16g4_t4.json"),
            "--policy", "powerflow", "--match-baseline", baselines, "--max-jobs", "2",
            "--no-progress", "--out", str(tmp_path),
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_data_dir_that_is_no_folder_is_refused_where_the_run_reads_nothing_from_it(
    tmp_path, kind
):
    # an Elasticflow trace with no carbon zone reads nothing from --data-dir: a missing
    # folder was taken without a word (a seventh probe)
    data_dir = tmp_path / "nowhere"
    if kind == "file":
        data_dir.write_text("")
    out = tmp_path / "out"
    with pytest.raises(
        CommandError, match=rf"--data-dir {data_dir}: (no such folder|not a folder)"
    ):
        call_command(
            "simulate",
            "--trace", str(DATA / "trace" / "elasticflow_philly_876.csv"),
            "--cluster", str(DATA / "clusters" / "n16g8_a100.json"),
            "--policy", "fifo", "--max-jobs", "2", "--data-dir", str(data_dir),
            "--no-progress", "--out", str(out),
        )  # fmt: skip
    assert not out.exists()
