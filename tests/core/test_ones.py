"""ONES: batch size follows GPU count, caps, padding, epochs between changes, search state."""

from __future__ import annotations

from dataclasses import replace

import pytest
from corekit import AnalyticModel, Catalog, job, make_cluster, random_snapshot, running, snapshot

from scheduling.core.policies.ones import Ones, global_batch_for, learning_rate_for
from scheduling.core.registry import get_policy
from scheduling.core.round import admit, plan_round
from scheduling.core.types import Allocation

NOW = 10_000.0
CAT = Catalog(AnalyticModel("w", scaling=0.9))


def test_global_batch_follows_gpus_until_the_learning_rate_cap():
    j = job("a", n=2, global_batch=64, per_gpu_batch=32, base_lr=0.1, max_lr=0.4)
    assert [global_batch_for(j, n) for n in (1, 2, 4, 8, 16)] == [32, 64, 128, 256, 256]
    assert learning_rate_for(j, 4) == pytest.approx(0.2)
    assert learning_rate_for(j, 16) == pytest.approx(0.4)


def test_extreme_learning_rates_leave_the_batch_uncapped_and_the_round_runs():
    # 1e308 / 1e-300 overflowed int() and rolled back every round (issue 16)
    j = job("a", n=2, global_batch=64, per_gpu_batch=32, base_lr=1e-300, max_lr=1e308)
    assert [global_batch_for(j, n) for n in (1, 2, 8)] == [32, 64, 256]
    snap = snapshot(make_cluster(1, 1, 8), [j], catalog=CAT)
    plan = plan_round(snap, policy=get_policy("ones"), now=NOW)
    assert plan.allocations["a"].n_gpus == 2


def test_without_a_learning_rate_the_batch_is_n_times_per_gpu():
    j = job("a", n=2, global_batch=64)
    assert [global_batch_for(j, n) for n in (1, 3, 8)] == [32, 96, 256]
    assert learning_rate_for(j, 8) is None


def test_caps_double_once_reached_up_to_four_times_the_request():
    pol = Ones()
    # (a max_gpus above 4x the request: the job allows what ONES would give it)
    j = job("a", n=2, max_gpus=16)
    snap = snapshot(make_cluster(1, 1, 8), [running(j, ("s0n0/0", "s0n0/1"))])
    ctx, _ = admit(snap, now=NOW)
    views = list(ctx.jobs)
    caps = pol.next_caps(views, {})
    assert caps == {"a": 4}  # running at its request of 2: reached, doubled
    assert pol.next_caps(views, {"a": 4}) == {"a": 4}  # runs at 2 < 4: unchanged
    at_cap = replace(views[0], job=replace(views[0].job, allocation=Allocation(("x",) * 8, 64)))
    assert pol.next_caps([at_cap], {"a": 8}) == {"a": 8}  # 4x request is the ceiling


def test_alone_a_job_grows_to_its_cap_and_batch_follows():
    snap = snapshot(make_cluster(1, 1, 8), [job("a", n=2, global_batch=64)], catalog=CAT)
    plan = plan_round(snap, policy=get_policy("ones"), now=NOW)
    a = plan.allocations["a"]
    # Cap is the request (2) until reached; the batch is 2 x 32.
    assert a.n_gpus == 2 and a.global_batch == 64
    assert plan.policy_state["ones"]["caps"] == {"a": 2}


def test_new_jobs_get_one_gpu_then_shortest_remaining_first_is_topped_up():
    jobs = [
        job("long", n=4, min_gpus=1, iters=100_000.0, global_batch=128),
        job("short", n=4, min_gpus=1, iters=100.0, global_batch=128, submit=1.0),
    ]
    plan = plan_round(snapshot(make_cluster(1, 1, 5), jobs, catalog=CAT), policy=Ones(), now=NOW)
    # One GPU each, then the short job is topped up to its cap of 4.
    assert {j: a.n_gpus for j, a in plan.allocations.items()} == {"long": 1, "short": 4}


def test_the_largest_long_running_job_is_shrunk_for_a_new_job():
    ids = tuple(f"s0n0/{i}" for i in range(4))
    big = job("big", n=4, min_gpus=1, iters=100_000.0, global_batch=128)
    big = replace(running(big, ids), started_s=0.0)
    big = replace(big, last_change_s=0.0, total_iters=1e9)
    snap = snapshot(make_cluster(1, 1, 4), [big, job("new", n=1, submit=NOW)], catalog=CAT)
    plan = plan_round(snap, policy=Ones(long_running_s=3600.0, epochs_per_job=10**9), now=NOW)
    # Halved to 2 for the new job's GPU, then topped up with the one left over: 3,
    # keeping the start of its block.
    assert plan.allocations["big"].gpu_ids == ("s0n0/0", "s0n0/1", "s0n0/2")
    assert plan.allocations["new"].gpu_ids == ("s0n0/3",)


def test_a_job_keeps_its_size_until_it_has_run_an_epoch():
    ids = tuple(f"s0n0/{i}" for i in range(4))
    big = replace(running(job("big", n=4, iters=1e6, global_batch=128), ids), started_s=0.0)
    # Changed 10 s ago; one epoch (1/20 of 1e6 iterations) takes far longer.
    big = replace(big, last_change_s=NOW - 10.0)
    snap = snapshot(make_cluster(1, 1, 4), [big, job("new", n=1, submit=NOW)], catalog=CAT)
    plan = plan_round(snap, policy=Ones(), now=NOW)
    assert plan.allocations["big"].gpu_ids == ids
    assert "new" not in plan.allocations
    assert plan.waiting["new"].message.startswith("Waiting: ")


def _advance(snap, plan, now):
    """The next round's snapshot: the plan's allocations applied, its state carried."""
    jobs = []
    for j in snap.jobs:
        a = plan.allocations.get(j.job_id)
        changed = (j.allocation.gpu_ids if j.allocation else None) != (a.gpu_ids if a else None)
        jobs.append(
            replace(
                j,
                allocation=a,
                started_s=(j.started_s if j.started_s is not None else now) if a else None,
                last_change_s=now if changed else j.last_change_s,
                done_iters=min(j.done_iters + 50.0, j.total_iters - 1) if a else j.done_iters,
            )
        )
    return replace(snap, jobs=tuple(jobs), policy_state=plan.policy_state)


@pytest.mark.parametrize("seed", (1, 2, 3))
def test_over_many_rounds_no_job_exceeds_its_cap_and_the_population_is_carried(seed):
    cluster = make_cluster(2, 2, 8)
    snap = random_snapshot(seed, cluster, n_jobs=20, running_share=0.0, now=NOW)
    pol = Ones(seed=seed, epochs_per_job=10**6)
    now = NOW
    for _ in range(6):
        plan = plan_round(snap, policy=pol, now=now)
        state = plan.policy_state["ones"]
        for j in snap.jobs:
            cap = state["caps"].get(j.job_id)
            if j.job_id in plan.allocations:
                n = plan.allocations[j.job_id].n_gpus
                assert n <= cap <= 4 * j.requested_gpus, (j.job_id, n, cap)
        population = state["population"]["A100"]
        assert 1 <= len(population) <= 16
        for ind in population:
            assert sum(ind.values()) <= 32
            assert all(n <= state["caps"][jid] for jid, n in ind.items())
        now += 300.0
        snap = _advance(snap, plan, now)
    assert state["generation"] == 6


def test_same_state_gives_the_same_plan_and_another_seed_may_differ():
    cluster = make_cluster(1, 2, 8)
    snap = random_snapshot(7, cluster, n_jobs=14, running_share=0.0, now=NOW)
    a = plan_round(snap, policy=Ones(seed=1), now=NOW)
    b = plan_round(snap, policy=Ones(seed=1), now=NOW)
    assert a == b


def test_blocks_are_contiguous_inside_a_node():
    cluster = make_cluster(1, 2, 8)
    snap = random_snapshot(3, cluster, n_jobs=6, running_share=0.0, now=NOW)
    plan = plan_round(snap, policy=Ones(), now=NOW)
    index = {g.gpu_id: (g.node, g.index) for g in cluster.gpus}
    for a in plan.allocations.values():
        nodes = {index[g][0] for g in a.gpu_ids}
        if len(nodes) == 1:
            idx = sorted(index[g][1] for g in a.gpu_ids)
            assert idx == list(range(idx[0], idx[0] + len(idx))), a


def test_padding_never_gives_a_job_fewer_gpus_than_its_minimum():
    # Given a 2..8-GPU job and three free GPUs taken by one rigid 1-GPU job first
    jobs = [
        job("rigid", n=1, submit=0.0, iters=1e6),
        job("wide", n=8, min_gpus=2, global_batch=256, submit=1.0, min_batch=128),
    ]
    plan = plan_round(snapshot(make_cluster(1, 1, 3), jobs, catalog=CAT), policy=Ones(), now=NOW)
    # Then the wide job gets its minimum of 2, at a batch inside its range
    assert plan.allocations["wide"].n_gpus == 2
    assert plan.allocations["wide"].global_batch == 128
    assert plan.allocations["rigid"].n_gpus == 1


def test_a_job_whose_minimum_does_not_fit_waits_and_a_later_one_is_padded():
    jobs = [
        job("rigid", n=2, submit=0.0, iters=1e6),
        job("wide", n=8, min_gpus=4, global_batch=256, submit=1.0),
        job("small", n=1, submit=2.0),
    ]
    plan = plan_round(snapshot(make_cluster(1, 1, 4), jobs, catalog=CAT), policy=Ones(), now=NOW)
    assert "wide" not in plan.allocations
    assert plan.waiting["wide"].message.startswith("Waiting: ")
    assert plan.allocations["small"].n_gpus == 1


def test_sparse_individuals_rank_as_the_dense_totals_and_count_lists_would():
    """The search keeps only running jobs in an individual; its ranking must be the one
    the full form gives: total remaining GPU-time over every job (r * T(r) for those
    that wait), ties by the GPU counts listed in job-id order."""
    import random

    from scheduling.core.policies.ones import _Search

    cluster = make_cluster(1, 4, 8)
    snap = random_snapshot(11, cluster, n_jobs=30, running_share=0.3, now=NOW)
    ctx, _ = admit(snap, now=NOW)
    pol = Ones(seed=3)
    jobs = list(ctx.jobs)
    caps = pol.next_caps(jobs, {})
    search = _Search(pol, ctx, jobs, caps, 32, random.Random(5))
    ids = sorted(search.ids)
    rng = random.Random(9)
    inds = []
    for _ in range(300):
        chosen = rng.sample(search.ids, rng.randrange(0, 8))
        inds.append({j: rng.randint(1, 3) for j in chosen})
    inds += [dict(inds[0]), {}]  # an exact duplicate and the all-waiting plan

    def dense_total(ind):
        return sum(ind[j] * search.t(j, ind[j]) if j in ind else search.wait_cost(j) for j in ids)

    dense = sorted(
        range(len(inds)),
        key=lambda i: (round(dense_total(inds[i]), 6), tuple(inds[i].get(j, 0) for j in ids)),
    )
    sparse = sorted(
        range(len(inds)),
        key=lambda i: (round(search.fitness(inds[i]), 6), search.tie_key(inds[i])),
    )
    assert [inds[i] for i in sparse] == [inds[i] for i in dense]
    assert search.tie_key(inds[0]) == search.tie_key(inds[-2])


def test_padding_and_repair_never_store_a_waiting_job():
    cluster = make_cluster(1, 2, 8)
    snap = random_snapshot(4, cluster, n_jobs=40, running_share=0.2, now=NOW)
    for r in range(3):
        plan = plan_round(snap, policy=Ones(seed=r), now=NOW)
        for ind in plan.policy_state["ones"]["population"]["A100"]:
            assert ind and all(n > 0 for n in ind.values())
            assert sum(ind.values()) <= 16


def test_a_job_is_never_grown_past_its_max_gpus():
    # An independent sweep ran ``ones`` with ``--max-gpus 2``: jobs that asked 4 GPUs and
    # may hold at most 4 were doubled to 8 and 16, and finished below their contention-free
    # time, which takes ``max_gpus`` as the ceiling (as does the live job's contract).
    pol = Ones()
    snap = snapshot(
        make_cluster(1, 1, 8),
        [running(job("a", n=2, max_gpus=3), ("s0n0/0", "s0n0/1"))],
        catalog=CAT,
    )
    ctx, _ = admit(snap, now=NOW)
    assert pol.next_caps(list(ctx.jobs), {}) == {"a": 3}  # not 4: its max_gpus is 3
    alone = snapshot(make_cluster(1, 1, 8), [job("b", n=2, max_gpus=2)], catalog=CAT)
    state = None
    for k in range(4):  # round after round, the cap would double each time it is reached
        plan = plan_round(replace(alone, policy_state=state or {}), policy=pol, now=NOW + k)
        state = plan.policy_state
        b = plan.allocations["b"]
        alone = replace(
            alone, jobs=(replace(alone.jobs[0], allocation=b, started_s=NOW, last_change_s=0.0),)
        )
        assert b.n_gpus <= 2
