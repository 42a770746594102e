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
    report = json.loads((tmp_path / "pollux_workload-3_n16g4_t4_report.json").read_text())
    (line,) = report["comparisons"]
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
