"""A round's resizes that each take a GPU another resize frees are all applied, however
long the chain (``services._apply``).

Found by probing the live service: switching the policy from eaco to elastic planned
resizes in a chain of four (job 6 off the GPUs job 4 moves to, job 4 off those job 2 and
job 3 move to, job 3 off the one job 1 moves to, and a start on job 1's); the apply tried
the pending changes three times in job order and gave up, so job 1's resize and the start
failed ("GPUs are held by job(s) [3]") although every GPU they needed was free by then."""

from datetime import UTC, datetime, timedelta

from support.apply_plans import live_gpus, moves, on, running_jobs

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Job
from scheduling import adapters, services
from scheduling.core import types as core
from scheduling.models import RoundDecision

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)


def test_a_chain_of_resizes_longer_than_three_is_applied_whole(
    scheduler_settings, make_node, make_job, member, team
):
    # given jobs 0..4 each on GPU k of a 6-GPU node, GPU 5 free
    scheduler_settings("fifo")
    gpus = live_gpus(make_node, 6, now=T0)
    jobs = running_jobs(gpus, make_job, member, team, on=range(5), now=T0)
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)

    # and a plan that moves each job one GPU up: job k needs the GPU job k+1 leaves, so in
    # job order only the last can move first
    plan = moves(jobs, gpus, targets=range(1, 6))
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


def test_a_swap_no_order_can_make_is_applied_together(
    scheduler_settings, make_node, make_job, member, team
):
    # given two jobs on GPUs 0 and 1, and a plan that swaps them (neither can move first:
    # failed, a plan that stays the same failed them every round; a live probe saw a ring
    # of eight after a switch to fifo fail 8 changes a round, round after round)
    scheduler_settings("fifo")
    gpus = live_gpus(make_node, 2, now=T0)
    jobs = running_jobs(gpus, make_job, member, team, on=[0, 1], now=T0)
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)
    plan = moves(jobs, gpus, targets=[1, 0])
    round_row = services._record_round(rows, plan, now=T0, requeued=0)

    # when it is applied
    applied, failed, _ = services._apply(plan, rows, round_row, now=T0)

    # then both moved, each running on the other's GPU, its old allocation ended now
    assert (applied, failed) == (2, 0)
    for k, job in enumerate(jobs):
        job.refresh_from_db()
        assert job.state == JobState.RUNNING
        assert [g.uuid for g in job.current_allocation.gpus.all()] == [gpus[1 - k].uuid]
        assert list(job.allocations.order_by("started_at").values_list("ended_at", flat=True)) == [
            T0,
            None,
        ]
    assert not RoundDecision.objects.filter(applied=False).exists()


def test_a_ring_of_moves_one_of_which_cannot_be_made_changes_nothing(
    scheduler_settings, make_node, make_job, member, team
):
    # given a ring of three moves (0 -> 1 -> 2 -> 0), and job 2's target GPU also held by
    # a job the plan leaves where it is (a race: it came after the round read the cluster)
    scheduler_settings("fifo")
    gpus = live_gpus(make_node, 4, now=T0)
    jobs = running_jobs(gpus, make_job, member, team, on=[0, 1, 2], now=T0)
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)
    plan = moves(jobs, gpus, targets=[1, 2, 3])
    (outsider,) = running_jobs(gpus, make_job, member, team, on=[3], now=T0)
    round_row = services._record_round(rows, plan, now=T0, requeued=0)

    # when it is applied
    applied, failed, _ = services._apply(plan, rows, round_row, now=T0)

    # then none is applied (all or nothing), and every job runs where it ran
    assert (applied, failed) == (0, 3)
    for k, job in enumerate([*jobs, outsider]):
        job.refresh_from_db()
        assert job.state == JobState.RUNNING
        assert [g.uuid for g in job.current_allocation.gpus.all()] == [gpus[k].uuid]
        assert job.allocations.count() == 1


def test_a_swap_stands_when_a_start_that_waited_on_it_was_cancelled_meanwhile(
    scheduler_settings, make_node, make_job, member, team, monkeypatch
):
    # given job A on GPUs 0 and 3 moving to GPU 1, job B on GPU 1 moving to GPU 0 (a swap:
    # neither first), and a start of job D on GPU 3, which A leaves
    scheduler_settings("fifo")
    gpus = live_gpus(make_node, 4, now=T0)
    spec = {"global_batch_size": 256, "min_batch_size": 256, "max_batch_size": 256}
    a = make_job(owner=member, team=team, min_gpus=1, max_gpus=2, at=T0, **spec)
    b = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, at=T0, **spec)
    d = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, at=T0, **spec)
    earlier = T0 - timedelta(minutes=1)
    cluster_services.start_job(a, gpus=[gpus[0], gpus[3]], batch_size=256, at=earlier)
    cluster_services.start_job(b, gpus=[gpus[1]], batch_size=256, at=earlier)
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)

    plan = core.Plan(
        allocations={str(a.pk): on(gpus, 1), str(b.pk): on(gpus, 0), str(d.pk): on(gpus, 3)},
        waiting={},
        changes=(
            core.Change(
                str(a.pk), core.ChangeKind.RESIZE, before=on(gpus, 0, 3), after=on(gpus, 1)
            ),
            core.Change(str(b.pk), core.ChangeKind.RESIZE, before=on(gpus, 1), after=on(gpus, 0)),
            core.Change(str(d.pk), core.ChangeKind.START, before=None, after=on(gpus, 3)),
        ),
        policy="fifo",
    )
    round_row = services._record_round(rows, plan, now=T0, requeued=0)
    # and D cancelled by its owner after the first passes, before the swap is applied
    passes, calls = services._apply_passes, []

    def cancel_d_before_the_cycle(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            cluster_services.cancel_job(Job.objects.get(pk=d.pk), at=T0)
        return passes(*args, **kwargs)

    monkeypatch.setattr(services, "_apply_passes", cancel_d_before_the_cycle)

    # when the plan is applied
    applied, failed, _ = services._apply(plan, rows, round_row, now=T0)

    # then the swap is made (all its resizes applied), only D's start failed: the cycle was
    # given up for a change outside it, and the swap failed again every round it came
    assert (applied, failed) == (2, 1)
    assert [g.uuid for g in Job.objects.get(pk=a.pk).current_allocation.gpus.all()] == [
        gpus[1].uuid
    ]
    assert [g.uuid for g in Job.objects.get(pk=b.pk).current_allocation.gpus.all()] == [
        gpus[0].uuid
    ]
    assert Job.objects.get(pk=d.pk).state == JobState.CANCELLED
    assert list(RoundDecision.objects.filter(applied=False).values_list("job_id", flat=True)) == [
        d.pk
    ]


def test_a_stuck_resize_does_not_block_an_independent_swap(
    scheduler_settings, make_node, make_job, member, team
):
    # given jobs A and B on GPUs 0 and 1 swapping them, and job C on GPU 2 moving to GPU 3,
    # which a job the plan leaves where it is took after the round read the cluster: C
    # needs no GPU the swap holds, nor the swap one of C's (all or nothing over every
    # pending resize failed the swap too, every round for as long as C stayed stuck)
    scheduler_settings("fifo")
    gpus = live_gpus(make_node, 4, now=T0)
    a, b, c = running_jobs(gpus, make_job, member, team, on=[0, 1, 2], now=T0)
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)
    plan = moves([a, b, c], gpus, targets=[1, 0, 3])
    (outsider,) = running_jobs(gpus, make_job, member, team, on=[3], now=T0)
    round_row = services._record_round(rows, plan, now=T0, requeued=0)

    # when it is applied
    applied, failed, _ = services._apply(plan, rows, round_row, now=T0)

    # then the swap is made, and only C's resize failed, with its own error
    assert (applied, failed) == (2, 1)
    for job, k in ((a, 1), (b, 0), (c, 2), (outsider, 3)):
        job.refresh_from_db()
        assert job.state == JobState.RUNNING
        assert [g.uuid for g in job.current_allocation.gpus.all()] == [gpus[k].uuid]
    assert c.allocations.count() == 1
    (stuck,) = RoundDecision.objects.filter(applied=False)
    assert stuck.job_id == c.pk
    assert stuck.error.startswith(f"GPUs are held by job(s) [{outsider.pk}]")
    assert set(RoundDecision.objects.filter(applied=True).values_list("job_id", flat=True)) == {
        a.pk,
        b.pk,
    }


def test_a_resize_that_needs_a_gpu_a_swap_leaves_follows_the_swap(
    scheduler_settings, make_node, make_job, member, team
):
    # given job X on GPU 3 moving to GPU 2, which job B leaves in a swap with job A (A from
    # GPU 0 to 1, B from GPUs 1 and 2 to 0): X is in no ring of its own, it needs the swap
    # made first, and X has the lowest id, so it is looked at first
    scheduler_settings("fifo")
    gpus = live_gpus(make_node, 4, now=T0)
    spec = {"global_batch_size": 256, "min_batch_size": 256, "max_batch_size": 256}
    x = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, at=T0, **spec)
    a = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, at=T0, **spec)
    b = make_job(owner=member, team=team, min_gpus=1, max_gpus=2, at=T0, **spec)
    earlier = T0 - timedelta(minutes=1)
    cluster_services.start_job(x, gpus=[gpus[3]], batch_size=256, at=earlier)
    cluster_services.start_job(a, gpus=[gpus[0]], batch_size=256, at=earlier)
    cluster_services.start_job(b, gpus=[gpus[1], gpus[2]], batch_size=256, at=earlier)
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)

    plan = core.Plan(
        allocations={str(x.pk): on(gpus, 2), str(a.pk): on(gpus, 1), str(b.pk): on(gpus, 0)},
        waiting={},
        changes=(
            core.Change(str(x.pk), core.ChangeKind.RESIZE, before=on(gpus, 3), after=on(gpus, 2)),
            core.Change(str(a.pk), core.ChangeKind.RESIZE, before=on(gpus, 0), after=on(gpus, 1)),
            core.Change(
                str(b.pk), core.ChangeKind.RESIZE, before=on(gpus, 1, 2), after=on(gpus, 0)
            ),
        ),
        policy="fifo",
    )
    round_row = services._record_round(rows, plan, now=T0, requeued=0)

    # when it is applied
    applied, failed, _ = services._apply(plan, rows, round_row, now=T0)

    # then all three moved
    assert (applied, failed) == (3, 0)
    for job, k in ((x, 2), (a, 1), (b, 0)):
        job.refresh_from_db()
        assert [g.uuid for g in job.current_allocation.gpus.all()] == [gpus[k].uuid]
    assert not RoundDecision.objects.filter(applied=False).exists()
