"""The benchmark scripts refuse a bad argument before any work, with argparse's error line
(``--repeats 0`` ended in an IndexError after building a 1,024-GPU cluster, an unknown
policy in a KeyError), and ``--help`` prints help (``bench_whatif.py`` ran instead)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(script: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("script", "argv", "line"),
    [
        (
            "bench_plan_round.py",
            ["--repeats", "0"],
            "bench_plan_round.py: error: argument --repeats: '0' must be at least 1",
        ),
        (
            "bench_plan_round.py",
            ["--policy", "slowest"],
            "bench_plan_round.py: error: argument --policy: invalid choice: 'slowest' (choose "
            "from 'eaco', 'elastic', 'fifo', 'fifo_lowclock', 'greenflow', 'netdelay', 'ones', "
            "'powerflow', 'tiresias', 'zeus')",
        ),
        (
            "plan_round_rounds.py",
            ["--rounds", "0"],
            "plan_round_rounds.py: error: argument --rounds: '0' must be at least 1",
        ),
        (
            "instrument_rounds.py",
            ["--baselines", "elastic,slowest"],
            "instrument_rounds.py: error: argument --baselines: 'elastic,slowest': unknown "
            "slowest; known: eaco, elastic, fifo, fifo_lowclock, greenflow, netdelay, ones, "
            "powerflow, tiresias, zeus",
        ),
        (
            "budget_variants.py",
            ["--trace", "t.csv", "--cluster", "c.json", "--budget-kind", "carbon"],
            "budget_variants.py: error: a carbon budget needs --carbon-zone",
        ),
    ],
)
def test_a_benchmark_refuses_a_bad_argument_before_any_work(script, argv, line):
    result = _bench(script, *argv)

    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == line
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_bench_whatif_help_prints_help_instead_of_running():
    result = _bench("bench_whatif.py", "--help")

    assert result.returncode == 0
    assert result.stdout.startswith("usage: bench_whatif.py [-h]\n")
    assert "jobs 0-15" not in result.stdout  # no queue was replayed


def test_plan_round_rounds_plans_the_long_queue_and_exits_0():
    result = _bench("plan_round_rounds.py", "--rounds", "1", "--running", "50", "--waiting", "200")

    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


def test_plan_identity_digests_do_not_depend_on_the_hash_seed():
    # ONES's carried population follows string hashing: without the script's fixed seed
    # these two processes wrote different digests of the same plans.
    runs = [
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "plan_identity.py"),
                "--only",
                "ones-1k-energy",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )  # fmt: skip
        for seed in ("1", "2")
    ]

    for run in runs:
        assert run.returncode == 0, run.stderr
    lines = runs[0].stdout.splitlines()
    assert [line.split(" plan=")[0] for line in lines] == [
        f"ones-1k-energy-catalog round={r}" for r in range(3)
    ]
    assert runs[1].stdout == runs[0].stdout


def test_plan_identity_refuses_a_filter_that_matches_no_case():
    result = _bench("plan_identity.py", "--only", "no-such-case")

    assert result.returncode == 2
    assert result.stderr == "no case matches 'no-such-case'\n"
    assert result.stdout == ""
