"""A long queue's round does not make a reason, nor a job view, per waiting job:

- FIFO, blocked without backfilling, stops its queue loop there and hands the rest over as
  a ``waiting.QueueTail`` whose reasons are made when read; read, they are the eager loop's
  to the byte (keys in order, values, ``repr``), and their codes are counted unmade;
- ``plan_round(..., memo=AdmitMemo())`` keeps the last round's job views for job objects
  handed in again, where every shape resolves as before; the plans are those without it.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

import scheduling.core.policies.base as base
import scheduling.core.round as round_mod
from scheduling.core.perf_models import load_catalog
from scheduling.core.round import AdmitMemo, admit, plan_round
from scheduling.core.types import (
    Allocation,
    Budget,
    Cluster,
    Gpu,
    HardLimitAction,
    Job,
    Node,
    Snapshot,
    WaitCode,
)
from scheduling.core.waiting import (
    QueueTail,
    WaitingReasons,
    join_reasons,
    wait_code_counts,
)


def cluster(models=("T4", "T4", "V100", "V100")) -> Cluster:
    return Cluster(
        nodes=(
            Node(
                name="n0",
                switch="s0",
                gpus=tuple(Gpu(f"g{i}", "n0", i, m) for i, m in enumerate(models)),
            ),
        )
    )


def queue_jobs(n: int, seed: int, *, models=("T4", "V100", None)) -> tuple[Job, ...]:
    rnd = random.Random(seed)
    jobs = []
    for i in range(n):
        jobs.append(
            Job(
                job_id=f"j{i:04d}",
                workload=rnd.choice(("bert", "cifar10")),
                team=rnd.choice(("red", "blue")),
                submit_time_s=float(rnd.randrange(50)),
                total_iters=100.0,
                global_batch=32,
                # now and then one too big for its model: it waits as such in the tail too
                requested_gpus=rnd.choice((1, 1, 1, 2, 3)),
                priority=rnd.choice((0, 0, 0, 1)) if seed % 2 else 0,
                gpu_model=rnd.choice(models),
            )
        )
    return tuple(jobs)


CATALOG = load_catalog()


def snapshot(jobs, *, budgets=(), gpus=("T4", "T4", "V100", "V100")) -> Snapshot:
    # (one catalog, as a run has: its perf model objects are the memo's to compare)
    return Snapshot(
        cluster=cluster(gpus),
        jobs=tuple(jobs),
        perf=CATALOG,
        round_length_s=300.0,
        budgets=tuple(budgets),
    )


def eager(ctx, queue, start):
    """The queue loop as it was: every job walked, every reason made."""
    return base.serve_queue(ctx, queue, start)


@pytest.mark.parametrize("seed", range(12))
def test_fifo_tail_reads_as_the_eager_loop_made_it(seed, monkeypatch):
    # given a FIFO round over a queue of 300 jobs on 4 GPUs (two models), some too big
    snap = snapshot(queue_jobs(300, seed))

    # when planned as now (the tail settled), and with serve_queue made to walk it all
    lazy = plan_round(snap, policy="fifo", now=100.0)
    monkeypatch.setattr(
        "scheduling.core.policies.fifo.serve_queue",
        lambda ctx, queue, start, settled=None: eager(ctx, queue, start),
    )
    walked = plan_round(snap, policy="fifo", now=100.0)

    # then the waiting reasons are the walked ones: the same keys in the same order, equal
    # reasons, the same repr (what plan_identity.py digests), the same plan
    assert isinstance(walked.waiting, dict)
    assert isinstance(lazy.waiting, WaitingReasons)
    assert list(lazy.waiting) == list(walked.waiting)
    assert dict(lazy.waiting.items()) == walked.waiting
    assert len(lazy.waiting) == len(walked.waiting) > 250
    assert repr(lazy) == repr(walked)
    assert lazy == walked
    # and the codes counted without sentences are Counter's over the reasons, in order
    counts = wait_code_counts(lazy.waiting)
    assert list(counts.items()) == list(Counter(r.code for r in walked.waiting.values()).items())
    # a lookup by id, membership and get behave as the dict's
    for job_id in list(walked.waiting)[::37]:
        assert lazy.waiting[job_id] == walked.waiting[job_id]
        assert job_id in lazy.waiting
    assert "nope" not in lazy.waiting and lazy.waiting.get("nope") is None


def test_fifo_makes_no_reason_for_the_jobs_behind_the_block(monkeypatch):
    # given 2,000 jobs queued on 4 GPUs, FIFO blocked after the first few
    snap = snapshot(queue_jobs(2000, 3, models=("T4",)))
    made = Counter()
    real = base.behind_in_queue

    def counting(*args):
        made["behind"] += 1
        return real(*args)

    monkeypatch.setattr("scheduling.core.policies.fifo.behind_in_queue", counting)

    # when the round is planned and the simulator's reading of it (codes counted) done
    plan = plan_round(snap, policy="fifo", now=100.0)
    counts = wait_code_counts(plan.waiting)

    # then only the blocked job's reason was made (1, not one per waiting job: 1,998)
    assert made["behind"] <= 1
    assert sum(counts.values()) == len(plan.waiting) == 2000 - len(plan.allocations)
    # and reading one reason makes that one, which names its place in the queue
    last = list(plan.waiting)[-1]
    assert f"{1999} job(s) ahead" in plan.waiting[last].message
    assert made["behind"] <= 2


@pytest.mark.parametrize("seed", range(6))
def test_elastic_tail_past_the_last_free_gpu_reads_as_the_walk_made_it(seed, monkeypatch):
    import scheduling.core.policies.elastic as elastic

    # given a queue of 300 jobs on 4 T4s, every GPU given out (a V100 left free would keep
    # the walk going: some jobs could still fit)
    snap = snapshot(queue_jobs(300, seed, models=("T4", None)), gpus=("T4",) * 4)
    # when planned as now (the queue past the last free GPU a tail), and walked whole (the
    # early stop needs every job left to need a GPU: made never so)
    lazy = plan_round(snap, policy="elastic", now=100.0)
    monkeypatch.setattr(elastic, "_MIN_GPUS", lambda jv: 0)
    walked = plan_round(snap, policy="elastic", now=100.0)
    # then the reasons are the walk's, to the byte
    assert isinstance(walked.waiting, dict)
    assert isinstance(lazy.waiting, WaitingReasons)
    assert repr(lazy) == repr(walked)
    assert list(wait_code_counts(lazy.waiting).items()) == list(
        Counter(r.code for r in walked.waiting.values()).items()
    )


def test_backfilling_fifo_still_walks_its_queue():
    # backfill lets later jobs start: nothing is settled, the reasons are a plain dict
    from scheduling.core.policies.fifo import Fifo

    plan = plan_round(snapshot(queue_jobs(200, 5)), policy=Fifo(backfill=True), now=100.0)
    assert isinstance(plan.waiting, dict)


def test_join_reasons_falls_back_to_dict_update_where_parts_share_a_key():
    from scheduling.core.types import WaitReason

    r1 = WaitReason(WaitCode.NO_PERF_MODEL, "a")
    r2 = WaitReason(WaitCode.NO_FREE_BLOCK, "b")
    snap = snapshot(queue_jobs(50, 1, models=("T4",)))
    plan = plan_round(snap, policy="fifo", now=100.0)
    lazy = plan.waiting
    assert isinstance(lazy, WaitingReasons)
    tail_key = list(lazy)[-1]
    admitted = {j.job_id for j in snap.jobs}
    # a later plain part naming a key of the lazy one: dict.update's result (first place,
    # last value)
    joined = join_reasons(({"x": r1}, lazy, {tail_key: r2}), admitted)
    expect = {"x": r1}
    expect.update(lazy.items())
    expect[tail_key] = r2
    assert isinstance(joined, dict)
    assert list(joined.items()) == list(expect.items())
    # disjoint parts stay lazy, in order
    joined = join_reasons(({"x": r1}, lazy, {"y": r2}), admitted)
    assert isinstance(joined, WaitingReasons)
    assert list(joined) == ["x", *lazy, "y"]
    assert joined["y"] == r2 and joined["x"] == r1


def test_queue_tail_counts_codes_of_jobs_too_big_for_their_model():
    snap = snapshot(queue_jobs(40, 2, models=("T4",)))
    ctx, _ = admit(snap, now=0.0)
    views = list(ctx.jobs)
    tail = QueueTail(
        views,
        7,
        lambda pos, jv, n: base.behind_in_queue(pos, n, jv.gpu_model, 0, None),
        WaitCode.BEHIND_IN_QUEUE,
        {"T4": 2, "V100": 2},
    )
    counts = wait_code_counts(tail)
    assert counts == Counter(r.code for r in tail.values())
    assert counts[WaitCode.NO_MATCHING_GPU] == sum(jv.job.requested_gpus > 2 for jv in views) > 0


# --- the admission memo ---------------------------------------------------------------


def advance(jobs: tuple[Job, ...], plan, now: float) -> tuple[Job, ...]:
    """The next round's jobs as the simulator hands them in: a waiting job that did not
    change is the same object; one started or running is a new one; one finished leaves."""
    out = []
    for job in jobs:
        a = plan.allocations.get(job.job_id)
        if a is None and job.allocation is None:
            out.append(job)  # unchanged: the same object
            continue
        if job.allocation is not None and a is not None:
            continue  # ran a round: finished
        out.append(
            dataclasses.replace(job, allocation=a, started_s=now if a else None, last_change_s=now)
        )
    return tuple(out)


def rounds(policy: str, jobs, budgets, *, memo, n_rounds=4):
    plans = []
    for r in range(n_rounds):
        now = 100.0 + 300.0 * r
        if r:
            jobs = advance(jobs, plans[-1], now)
            # arrivals: a few new jobs each round
            jobs = jobs + tuple(
                dataclasses.replace(j, job_id=f"{j.job_id}-r{r}", submit_time_s=now)
                for j in queue_jobs(5, 100 + r)
            )
        snap = snapshot(jobs, budgets=budgets)
        plans.append(plan_round(snap, policy=policy, now=now, memo=memo))
    return plans


BUDGETS = {
    "none": (),
    "teams": (
        Budget("red", "red", 0.0, 1e6, energy_limit_j=1e12),
        Budget("all", None, 0.0, 1e6, energy_limit_j=1e12),
    ),
    "red-spent": (
        Budget(
            "red",
            "red",
            0.0,
            1e6,
            energy_limit_j=1.0,
            energy_used_j=2.0,
            hard_limit_action=HardLimitAction.PAUSE_JOBS,
        ),
    ),
}


@pytest.mark.parametrize("policy", ["fifo", "elastic", "tiresias", "powerflow", "eaco"])
@pytest.mark.parametrize("budgets", sorted(BUDGETS))
def test_admission_memo_gives_the_plans_made_without_it(policy, budgets):
    jobs = queue_jobs(120, 9)
    without = rounds(policy, jobs, BUDGETS[budgets], memo=None)
    memo = AdmitMemo()
    with_memo = rounds(policy, jobs, BUDGETS[budgets], memo=memo)
    assert [repr(p) for p in with_memo] == [repr(p) for p in without]
    assert memo.views  # it was used


def test_admission_memo_makes_views_only_for_jobs_new_to_the_round(monkeypatch):
    made = Counter()
    real = round_mod.JobView

    def counting(*args):
        made["views"] += 1
        return real(*args)

    monkeypatch.setattr(round_mod, "JobView", counting)
    # given 1,000 jobs waiting on 4 GPUs (two of them T4s, which they all ask for),
    # planned once with a memo
    jobs = queue_jobs(1000, 4, models=("T4",))
    memo = AdmitMemo()
    first = plan_round(snapshot(jobs), policy="fifo", now=100.0, memo=memo)
    assert made["views"] == 1000
    # when the next round hands the waiting jobs in as the same objects, and the started
    # ones as new objects
    nxt = advance(jobs, first, 400.0)
    made.clear()
    second = plan_round(snapshot(nxt), policy="fifo", now=400.0, memo=memo)
    # then views were made only for the started jobs (new objects), not the waiting ones
    assert made["views"] == len(first.allocations) <= 4
    assert second == plan_round(snapshot(nxt), policy="fifo", now=400.0)


def test_admission_memo_is_dropped_when_a_shape_resolves_otherwise(monkeypatch):
    # the cluster's budget for red jobs is spent in the second round: the kept views
    # would be wrong, so the memo is not used, and the plan is the one made without it
    jobs = queue_jobs(200, 6)
    memo = AdmitMemo()
    first = plan_round(snapshot(jobs), policy="fifo", now=100.0, memo=memo)
    nxt = advance(jobs, first, 400.0)
    spent = BUDGETS["red-spent"]
    second = plan_round(snapshot(nxt, budgets=spent), policy="fifo", now=400.0, memo=memo)
    assert second == plan_round(snapshot(nxt, budgets=spent), policy="fifo", now=400.0)
    assert any(r.code == WaitCode.BUDGET_EXHAUSTED for r in second.waiting.values())


def test_admission_memo_is_not_used_with_learned_models_of_jobs_own():
    from scheduling.core.online_model import N_PARAMS, OnlinePerfModel

    jobs = queue_jobs(30, 8, models=("T4",))
    prior = CATALOG.get(jobs[0].workload, "T4")
    own = {(jobs[0].job_id, "T4"): OnlinePerfModel(prior=prior, params=[0.0] * N_PARAMS)}
    memo = AdmitMemo()
    snap = dataclasses.replace(snapshot(jobs), job_perf=own)
    plan = plan_round(snap, policy="fifo", now=100.0, memo=memo)
    assert memo.views == {}
    assert plan == plan_round(snap, policy="fifo", now=100.0)


def test_a_running_job_kept_by_a_spent_hold_queue_budget_is_pinned_with_a_memo():
    jobs = list(queue_jobs(20, 10, models=("T4",)))
    red = next(i for i, j in enumerate(jobs) if j.team == "red" and j.requested_gpus == 1)
    jobs[red] = dataclasses.replace(jobs[red], allocation=Allocation(("g0",), 32), started_s=0.0)
    hold = (
        Budget(
            "red",
            "red",
            0.0,
            1e6,
            energy_limit_j=1.0,
            energy_used_j=2.0,
            hard_limit_action=HardLimitAction.HOLD_QUEUE,
        ),
    )
    memo = AdmitMemo()
    for now in (100.0, 400.0):
        plan = plan_round(snapshot(jobs, budgets=hold), policy="fifo", now=now, memo=memo)
        assert plan == plan_round(snapshot(jobs, budgets=hold), policy="fifo", now=now)
        assert jobs[red].job_id in plan.held


def test_queue_order_reads_a_job_of_a_queue_without_priorities_five_times_at_most():
    # a view whose job is counted each time it is read
    reads = Counter()

    class Counted:
        def __init__(self, jv):
            self._jv = jv
            self.gpu_model = jv.gpu_model

        @property
        def job(self):
            reads["job"] += 1
            return self._jv.job

    snap = snapshot(queue_jobs(1000, 0, models=("T4",)))
    ctx, _ = admit(snap, now=0.0)
    views = [Counted(jv) for jv in ctx.jobs]
    for keep_running in (True, False):
        reads.clear()
        got = base.queue_order(views, keep_running=keep_running)
        # the order by_priority gives (running jobs first where kept)
        ordered = base.submit_order(views)
        if keep_running:
            want = base.by_priority(base.running_first(ordered), keep_running_ahead=True)
        else:
            want = base.by_priority(ordered)
        assert got == want
        reads.clear()
        base.queue_order(views, keep_running=keep_running)
        # the sort's key (two), the priority test, running jobs apart (two filters): 5
        # reads a job, where by_priority tested the priorities and split the running jobs
        # off again (7)
        assert reads["job"] <= 5 * len(views)
