"""A fixed-size policy runs a job at the top of its GPU range, or at what the cluster has of
its GPU model where the top is more (``adapters.job_from_row``).

Found by probing the live service: a job submitted as "1 to 256 GPUs" on a 32-GPU cluster
(accepted: its minimum fits) waited for good under fifo, tiresias, zeus and the other
fixed-size policies ("it asks for 256 A100 GPU(s) but the cluster has only 32
schedulable"), and a running one was stopped when an admin switched to such a policy."""

from datetime import UTC, datetime, timedelta

import pytest

from cluster.choices import JobState
from cluster.models import Node
from scheduling import adapters, services

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)


@pytest.fixture
def two_live_nodes(make_node):
    for name in ("node-01", "node-02"):
        node = make_node(name, gpus=4)
        Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)


def _submit(make_job, member, team, **range_):
    return make_job(
        owner=member,
        team=team,
        global_batch_size=256,
        min_batch_size=256,
        max_batch_size=256,
        at=T0 - timedelta(minutes=5),
        **range_,
    )


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "zeus", "netdelay"])
def test_a_range_topping_the_cluster_runs_on_what_the_cluster_has(
    scheduler_settings, two_live_nodes, make_job, member, team, policy
):
    # given 8 live A100s, a fixed-size policy and a job of 1 to 256 GPUs
    scheduler_settings(policy)
    job = _submit(make_job, member, team, min_gpus=1, max_gpus=256)

    # when a round runs
    services.run_scheduling_round(now=T0)

    # then the job runs, on the cluster's 8 GPUs, not waiting for 256 that never come
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, job.pending_reason
    assert job.current_allocation.gpus.count() == 8


def test_the_fixed_size_request_is_the_top_of_the_range_where_the_cluster_has_it(
    two_live_nodes, make_job, member, team
):
    # given jobs of 1 to 4 and 2 to 64 GPUs of any model, on 8 A100s
    within = _submit(make_job, member, team, min_gpus=1, max_gpus=4)
    above = _submit(make_job, member, team, min_gpus=2, max_gpus=64)

    # when the round's snapshot is read
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)
    requested = {j.job_id: (j.requested_gpus, j.min_gpus, j.max_gpus) for j in rows.snapshot.jobs}

    # then a top the cluster has is the request; one above it is the cluster's 8, and the
    # range itself is kept (elastic policies still see 2 to 64)
    assert requested[str(within.pk)] == (4, 1, 4)
    assert requested[str(above.pk)] == (8, 2, 64)


def test_the_what_if_reads_the_request_the_round_reads(two_live_nodes, make_job, member, team):
    # given a job of 2 to 64 GPUs on 8 A100s
    from frontend.predictions import _whatif_cluster, _whatif_jobs

    job = _submit(make_job, member, team, min_gpus=2, max_gpus=64)

    # when the budget what-if reads the team's jobs, and the round its snapshot
    replayed = _whatif_jobs(team, _whatif_cluster(T0))
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)

    # then both see the same request: the cluster's 8
    assert [j.requested_gpus for j in replayed] == [8]
    assert [j.requested_gpus for j in rows.snapshot.jobs if j.job_id == str(job.pk)] == [8]
