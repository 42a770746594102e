"""A waiting job's expected start past any calendar is no expected start
(``scheduling.services._until``), not a failed round.

Found by probing the live service: a job of an unknown workload with 10^12 iterations of
a 2^24 batch (accepted: an unknown workload's submit skips the longest-job check, its
estimate being too rough) held the GPUs that a queued job needed; Tiresias forecast that
job's start at 3e16 s (the year 974,114,704), and every round raised ``ValueError: year
974114704 is out of range`` while recording the wait: no job of any team was scheduled
again until the queue changed."""

from datetime import UTC, datetime, timedelta

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, Job, Node
from scheduling import services

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)


def test_a_start_forecast_past_any_date_is_recorded_as_none_and_the_round_goes_on(
    scheduler_settings, make_node, make_job, member, team
):
    # given a node of 4 A100s held by a job predicted to run for longer than any calendar
    scheduler_settings("tiresias")
    node = make_node("node-01", gpus=4)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)
    endless = make_job(
        owner=member, team=team, workload="gpt-x", param_count=10**14, resembles="bert",
        min_gpus=4, max_gpus=4, global_batch_size=2**24, min_batch_size=2**24,
        max_batch_size=2**24, total_iterations=10**12, at=T0 - timedelta(minutes=10),
    )  # fmt: skip
    cluster_services.start_job(
        endless, gpus=list(Gpu.objects.filter(node=node)), batch_size=2**24,
        at=T0 - timedelta(minutes=5),
    )  # fmt: skip
    # and a queued job that needs all 4 of them
    waiting = make_job(
        owner=member, team=team, min_gpus=4, max_gpus=4, global_batch_size=256,
        min_batch_size=256, max_batch_size=256, at=T0 - timedelta(minutes=1),
    )  # fmt: skip

    # when a round runs
    result = services.run_scheduling_round(now=T0)

    # then it runs through, and the waiting job says why it waits, with no expected start
    assert result.ran
    waiting.refresh_from_db()
    assert waiting.state == JobState.QUEUED
    assert waiting.pending_reason_code != ""
    assert waiting.pending_until is None
    assert waiting.pending_until is None
    assert Job.objects.get(pk=endless.pk).state == JobState.RUNNING
