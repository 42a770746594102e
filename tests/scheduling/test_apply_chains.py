"""A round's resizes that each take a GPU another resize frees are all applied, however
long the chain (``services._apply``).

Found by probing the live service: switching the policy from eaco to elastic planned
resizes in a chain of four (job 6 off the GPUs job 4 moves to, job 4 off those job 2 and
job 3 move to, job 3 off the one job 1 moves to, and a start on job 1's); the apply tried
the pending changes three times in job order and gave up, so job 1's resize and the start
failed ("GPUs are held by job(s) [3]") although every GPU they needed was free by then."""

from datetime import UTC, datetime, timedelta

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, Node
from scheduling import adapters, services
from scheduling.core import types as core
from scheduling.models import RoundDecision

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)


def test_a_chain_of_resizes_longer_than_three_is_applied_whole(
    scheduler_settings, make_node, make_job, member, team
):
    # given jobs 0..4 each on GPU k of a 6-GPU node, GPU 5 free
    scheduler_settings("fifo")
    node = make_node("node-01", gpus=6)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    jobs = []
    for k in range(5):
        job = make_job(
            owner=member, team=team, min_gpus=1, max_gpus=1, global_batch_size=256,
            min_batch_size=256, max_batch_size=256, at=T0 - timedelta(minutes=5),
        )  # fmt: skip
        cluster_services.start_job(
            job, gpus=[gpus[k]], batch_size=256, at=T0 - timedelta(minutes=1)
        )
        jobs.append(job)
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)

    # and a plan that moves each job one GPU up: job k needs the GPU job k+1 leaves, so in
    # job order only the last can move first
    def on(k):
        return core.Allocation(gpu_ids=(gpus[k].uuid,), global_batch=256)

    moves = tuple(
        core.Change(job_id=str(job.pk), kind=core.ChangeKind.RESIZE, before=on(k), after=on(k + 1))
        for k, job in enumerate(jobs)
    )
    plan = core.Plan(
        allocations={str(job.pk): on(k + 1) for k, job in enumerate(jobs)},
        waiting={},
        changes=moves,
        policy="fifo",
    )
    round_row = services._record_round(rows, plan, now=T0, requeued=0)

    # when the plan is applied
    applied, failed, _ = services._apply(plan, rows, round_row, now=T0)

    # then every move is made: job k runs on GPU k+1
    assert (applied, failed) == (5, 0)
    for k, job in enumerate(jobs):
        job.refresh_from_db()
        assert job.state == JobState.RUNNING
        assert [g.uuid for g in job.current_allocation.gpus.all()] == [gpus[k + 1].uuid]
    assert not RoundDecision.objects.filter(applied=False).exists()


def test_a_swap_no_order_can_make_fails_its_changes_and_keeps_both_jobs_running(
    scheduler_settings, make_node, make_job, member, team
):
    # given two jobs on GPUs 0 and 1, and a plan that swaps them (neither can move first)
    scheduler_settings("fifo")
    node = make_node("node-01", gpus=2)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    jobs = []
    for k in range(2):
        job = make_job(
            owner=member, team=team, min_gpus=1, max_gpus=1, global_batch_size=256,
            min_batch_size=256, max_batch_size=256, at=T0 - timedelta(minutes=5),
        )  # fmt: skip
        cluster_services.start_job(
            job, gpus=[gpus[k]], batch_size=256, at=T0 - timedelta(minutes=1)
        )
        jobs.append(job)
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)

    def on(k):
        return core.Allocation(gpu_ids=(gpus[k].uuid,), global_batch=256)

    plan = core.Plan(
        allocations={str(jobs[0].pk): on(1), str(jobs[1].pk): on(0)},
        waiting={},
        changes=(
            core.Change(str(jobs[0].pk), core.ChangeKind.RESIZE, before=on(0), after=on(1)),
            core.Change(str(jobs[1].pk), core.ChangeKind.RESIZE, before=on(1), after=on(0)),
        ),
        policy="fifo",
    )
    round_row = services._record_round(rows, plan, now=T0, requeued=0)

    # when it is applied
    applied, failed, _ = services._apply(plan, rows, round_row, now=T0)

    # then both changes are recorded as failed, and both jobs run where they ran
    assert (applied, failed) == (0, 2)
    for k, job in enumerate(jobs):
        job.refresh_from_db()
        assert job.state == JobState.RUNNING
        assert [g.uuid for g in job.current_allocation.gpus.all()] == [gpus[k].uuid]
