"""The benchmark scripts refuse a bad argument before any work, with argparse's error line
(``--repeats 0`` ended in an IndexError after building a 1,024-GPU cluster, an unknown
policy in a KeyError), and ``--help`` prints help (``bench_whatif.py`` ran instead)."""

import json
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
        # An independent sweep: these ended in tracebacks (ValueError after the baseline's
        # run, TraceError, an arrival scale of -1 read by the trace code).
        (
            "budget_variants.py",
            [
                "--trace",
                "benchmarks/sweep/elasticflow_empty.csv",
                "--cluster",
                "benchmarks/sweep/n4g6_t4.json",
            ],
            "budget_variants.py: error: elasticflow_empty.csv: the trace has no jobs",
        ),
        (
            "powerflow_variants.py",
            [
                "--trace",
                "benchmarks/sweep/elasticflow_t4mix18.csv",
                "--cluster",
                "benchmarks/sweep/h100_n2g8.json",
            ],
            "powerflow_variants.py: error: elasticflow_t4mix18.csv: the perf catalog has no "
            "GPU model 'H100', so the simulator cannot run 'bert', 'cifar10', 'deepspeech2', "
            "'imagenet', 'ncf' ... on it (its GPU models: A100, T4)",
        ),
        (
            "instrument_rounds.py",
            ["--arrival-scale", "-1"],
            "instrument_rounds.py: error: argument --arrival-scale: '-1' must be a finite "
            "positive number",
        ),
        (
            "powerflow_variants.py",
            ["--trace", "t.csv", "--cluster", "c.json", "--variants", "[1]"],
            "powerflow_variants.py: error: --variants must map names to parameter objects",
        ),
        # the fourth sweep's generator without its folder ended in an IndexError
        (
            "sweep4_gen.py",
            [],
            "sweep4_gen.py: error: the following arguments are required: DIR",
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


def test_match_baseline_table_says_one_line_for_help_a_missing_file_and_a_plain_report(
    tmp_path,
):
    # An independent sweep: "--help" and a missing file ended in FileNotFoundError, a JSON
    # that is no report in KeyError 'runs', and a report without --match-baseline printed
    # a header and no row with exit 0.
    assert _bench("match_baseline_table.py", "--help").stdout.startswith("usage: ")
    missing = _bench("match_baseline_table.py", str(tmp_path / "none.json"))
    plain = tmp_path / "plain_report.json"
    plain.write_text(json.dumps({"runs": {"fifo": {}}, "comparisons": []}), encoding="utf-8")
    other = tmp_path / "other.json"
    other.write_text("{}", encoding="utf-8")

    for result, words in (
        (missing, "cannot read"),
        (_bench("match_baseline_table.py", str(other)), "not a simulator report"),
        (_bench("match_baseline_table.py", str(plain)), "no comparison"),
    ):
        assert result.returncode == 2
        assert len(result.stderr.splitlines()) == 1 and words in result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""


def test_match_baseline_table_gives_no_share_of_the_gain_for_a_run_with_jobs_left():
    # The candidate's average covers only the jobs it finished; the comparison's ratio is
    # then n/a, and the share of the bound's gain (from the same averages) must be too.
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from match_baseline_table import rows

    comparison = {
        "kind": "energy", "baseline": "fifo", "candidate": "powerflow",
        "avg_jct_ratio": None, "candidate_max_period_share": 0.9,
        "candidate_energy_in_period_kwh": 1.0, "budget_energy_kwh": 2.0,
        "candidate_energy_kwh": 1.0, "candidate_finished_in_period": True,
        "candidate_unfinished_jobs": 3, "baseline_unfinished_jobs": 0,
        "baseline_avg_jct_s": 7200.0, "candidate_avg_jct_s": 3600.0,
        "bound_avg_jct_s": 1800.0, "best_possible_ratio": 4.0,
        "candidate_periods_over_budget": 0,
    }  # fmt: skip
    run = {"avg_jct_s": 7200.0, "p99_jct_s": 9000.0, "energy_kwh": 2.0, "n_resizes": 0}
    report = {"runs": {"fifo": run, "powerflow@fifo-energy": run}, "comparisons": [comparison]}

    (row,) = rows(report)[2:]

    assert row.endswith("| n/a |")
    assert "3 unfinished" in row


def test_knowledge_table_refuses_what_is_not_a_learned_and_oracle_run(tmp_path):
    # An independent sweep: an `--knowledge oracle` run was printed in the "learned" column
    # beside an oracle of n/a (with --workloads, a FileNotFoundError), and a folder that
    # does not exist, or holds no run of the policy it is named after, gave a header and
    # exit 0.
    entry = {"avg_jct_s": 3600.0, "p99_jct_s": 3600.0, "energy_kwh": 1.0, "makespan_s": 1.0}
    entry |= {"n_unfinished": 0, "wall_s": 1.0, "knowledge": "oracle"}
    oracle_only = tmp_path / "fifo"
    oracle_only.mkdir()
    (oracle_only / "t_c_report.json").write_text(
        json.dumps({"scenario": {"knowledge": ["oracle"]}, "runs": {"fifo": entry}}),
        encoding="utf-8",
    )
    empty = tmp_path / "zeus"
    empty.mkdir()

    for folder, words in (
        (oracle_only, "not a --knowledge both run"),
        (empty, "no run of zeus"),
        (tmp_path / "elastic", "no run of elastic"),
    ):
        result = _bench("knowledge_table.py", str(folder))
        assert result.returncode == 2, result.stdout
        assert len(result.stderr.splitlines()) == 1 and words in result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""


class _TwoHours:
    """200 g/kWh in the first hour, 100 after (the ``HourlyIntensity.co2_g`` call)."""

    def co2_g(self, power_w: float, t0_s: float, t1_s: float) -> float:
        def integral(t: float) -> float:
            return 200.0 * min(t, 3600.0) + 100.0 * max(t - 3600.0, 0.0)

        return power_w * (integral(t1_s) - integral(t0_s)) / 3.6e6


@pytest.mark.parametrize(
    ("lam", "jct_s", "grams"),
    [
        (0.0, 3600.0, 200.0),  # free carbon: it starts at once, in the dirty hour
        (50.0, 7200.0, 100.0),  # 100 g saved outweigh an hour's wait, not the period's
        (1e6, 14400.0, 0.0),  # no gram is worth it: it waits for the next period
    ],
)
def test_team_carbon_bound_starts_a_job_where_its_wait_and_priced_carbon_are_least(
    lam, jct_s, grams
):
    # given one job of 1 kWh over an hour, arriving at 0, in a period of 3 h
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from team_carbon_bound import choose

    jobs = [(0.0, [(3.6e6, 3600.0)])]

    total_s, total_g = choose(jobs, lam, intensity=_TwoHours(), period_end_s=10800.0, step_s=3600.0)

    assert (total_s, total_g) == pytest.approx((jct_s, grams))


def test_budget_variants_gives_no_ratio_where_a_run_left_jobs_unfinished(monkeypatch):
    # given the variant script's summary line helpers (loaded from its file)
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "budget_variants.py"
    monkeypatch.syspath_prepend(str(path.parent))
    spec = importlib.util.spec_from_file_location("budget_variants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    done = {"n_unfinished": 0, "avg_jct_s": 7200.0}
    # when a baseline or a variant left a job unfinished (averages over other jobs, or
    # none where none finished: a TypeError before)
    left = {"n_unfinished": 2, "avg_jct_s": 3600.0}
    nothing = {"n_unfinished": 5, "avg_jct_s": None}
    # then the line says n/a instead of a ratio of averages over different jobs
    assert module._ratio(done, left) == "n/a"
    assert module._ratio(nothing, done) == "n/a"
    assert module._ratio(done, {"n_unfinished": 0, "avg_jct_s": 3600.0}) == "2.000x"
    assert module._hours(None) == "n/a"
