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
