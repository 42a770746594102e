"""``manage.py replay_trace`` submits real trace jobs through the REST API (a live server on
the test database) and refuses bad input with one line, submitting nothing."""

import pytest
from django.core.management import CommandError, call_command

from cluster.models import Job


def test_replay_submits_the_first_jobs_of_the_trace_over_rest(live_server, member, team):
    # when the first three jobs of the ElasticFlow trace are replayed 10^9 times faster, with
    # a thousandth of their iterations
    call_command(
        "replay_trace", server=live_server.url, limit=3, speedup=1e9, work_scale=0.001,
        teams="vision",
    )  # fmt: skip

    # then three jobs exist as the trace has them (data/trace/elasticflow_philly_876.csv,
    # rows 0-2), submitted by the team's member, elastic from 1 GPU up to the traced count
    jobs = list(Job.objects.order_by("pk").values_list(
        "name", "workload", "global_batch_size", "min_gpus", "max_gpus", "total_iterations",
        "owner__username", "team__slug", "state",
    ))  # fmt: skip
    assert jobs == [
        ("trace-0-vgg16", "vgg16", 256, 1, 1, 1283, "vera_member", "vision", "queued"),
        ("trace-1-vgg16", "vgg16", 64, 1, 4, 26447, "vera_member", "vision", "queued"),
        ("trace-2-vgg16", "vgg16", 64, 1, 1, 119, "vera_member", "vision", "queued"),
    ]


def test_replay_of_a_missing_trace_fails_with_one_line_and_submits_nothing(live_server, member):
    with pytest.raises(CommandError) as error:
        call_command("replay_trace", server=live_server.url, trace="data/trace/nope.csv")

    assert str(error.value).startswith("cannot read trace data/trace/nope.csv:")
    assert "\n" not in str(error.value)
    assert Job.objects.count() == 0


def test_replay_for_an_unknown_team_fails_and_submits_nothing(live_server, member):
    with pytest.raises(CommandError) as error:
        call_command("replay_trace", server=live_server.url, teams="nobody", limit=2)

    assert str(error.value) == "no team 'nobody' (run `manage.py seed_demo` first)"
    assert Job.objects.count() == 0


@pytest.mark.parametrize("option", ["--speedup", "--max-wait-s", "--wait-for-server-s"])
@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_replay_refuses_a_time_that_is_not_a_finite_positive_number(option, value):
    with pytest.raises(CommandError) as error:
        call_command("replay_trace", option, value)

    assert option in str(error.value)


def _run_from_command_line(*argv: str) -> int:
    """The command as ``manage.py replay_trace ARGV`` runs it; its exit status."""
    from scheduling.management.commands.replay_trace import Command

    with pytest.raises(SystemExit) as exited:
        Command().run_from_argv(["manage.py", "replay_trace", *argv])
    return exited.value.code


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--work-scale", "nan"], "argument --work-scale: must be a finite number > 0, got nan"),
        (["--work-scale", "0"], "argument --work-scale: must be a finite number > 0, got 0"),
        (["--work-scale", "1e308"], "argument --work-scale: must be at most 1000, got 1e308"),
        (["--speedup", "1e-300"], "argument --speedup: must be at least 0.001, got 1e-300"),
        (["--limit", "2.5"], "argument --limit: must be a whole number > 0, got 2.5"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_replay_refuses_a_bad_argument_with_one_line_not_the_usage(argv, line, capsys):
    # when the command line gives a bad argument
    status = _run_from_command_line(*argv)

    # then it exits 2 with one line saying what is wrong (no usage, no "invalid float value")
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err == f"replay_trace: error: {line}\n"
    assert captured.out == ""


def test_replay_whose_every_job_is_refused_fails_with_one_line(
    live_server, member, tmp_path, capsys
):
    # given a trace whose two jobs, at 1000x their iterations, run more than a job may (10^12)
    trace = tmp_path / "endless.csv"
    trace.write_text(
        "job_id,submit_time,real_iteration,model_name,ddl,batch_size,num_gpu,real_duration,"
        "duration,iteration\n"
        "0,0,1e10,vgg16,10,64,1,10,10,1e10\n"
        "1,1,1e10,vgg16,10,64,1,10,10,1e10\n"
    )

    # when it is replayed
    status = _run_from_command_line(
        "--server", live_server.url, "--trace", str(trace), "--teams", "vision",
        "--work-scale", "1000", "--skip-checks",  # the test settings' secret key fails a check
    )  # fmt: skip

    # then the command fails with one line (each refusal was printed on stdout) and nothing
    # was submitted
    captured = capsys.readouterr()
    assert status == 1
    assert captured.err == (
        f"CommandError: the server refused all 2 jobs of {trace} (each refusal is printed "
        "above); nothing was submitted\n"
    )
    assert captured.out.count("refused: ") == 2
    assert Job.objects.count() == 0
