"""plan_round's pipeline (admit, allocate, place, diff) and the registry, with fifo."""

from __future__ import annotations

from dataclasses import replace

import pytest
from corekit import AnalyticModel, Catalog, job, make_cluster, running, snapshot

from scheduling.core.registry import get_policy, policy_names, register_policy
from scheduling.core.round import PolicyContractError, diff, plan_round
from scheduling.core.types import (
    Allocation,
    Budget,
    ChangeKind,
    Grant,
    PolicyDecision,
    WaitCode,
)


def test_fifo_runs_jobs_in_submit_order_and_blocks_behind_the_first_misfit():
    # given 16 GPUs and jobs of 4, 8, 8 and 1 GPUs, all 3600 iterations of 1 s on 1 GPU
    cluster = make_cluster(1, 2, 8)
    jobs = [job("a", n=4), job("b", submit=1, n=8), job("c", submit=2, n=8), job("d", submit=3)]
    # when fifo plans at t=100
    plan = plan_round(snapshot(cluster, jobs), policy="fifo", now=100.0)
    # then a and b run on the first free GPUs, c waits for a GPU count and blocks d
    assert plan.allocations == {
        "a": Allocation(tuple(f"s0n0/{i}" for i in range(4)), 64),
        "b": Allocation(
            tuple(f"s0n0/{i}" for i in (4, 5, 6, 7)) + ("s0n1/0", "s0n1/1", "s0n1/2", "s0n1/3"), 64
        ),
    }
    assert set(plan.waiting) == {"c", "d"}
    assert plan.waiting["c"].code == WaitCode.BEHIND_IN_QUEUE
    # c needs 8 GPUs: 4 are free now, 8 more when b ends (3600 iters / 8 GPUs = 450 s)
    assert plan.waiting["c"].until_s == 550.0
    assert plan.waiting["d"].code == WaitCode.BEHIND_IN_QUEUE
    assert plan.waiting["d"].until_s is None
    assert [(c.job_id, c.kind) for c in plan.changes] == [
        ("a", ChangeKind.START),
        ("b", ChangeKind.START),
    ]
    # energy: 12 busy GPUs x 250 W x 300 s + 4 idle GPUs x 50 W x 300 s
    assert plan.predicted_energy_j == pytest.approx(12 * 250 * 300 + 4 * 50 * 300)
    assert plan.policy == "fifo"


def test_fifo_with_backfill_lets_a_small_job_pass_a_blocked_one():
    cluster = make_cluster(1, 1, 8)
    jobs = [job("a", n=4), job("b", submit=1, n=8), job("c", submit=2, n=2)]
    plan = plan_round(snapshot(cluster, jobs), policy=get_policy("fifo", backfill=True), now=10.0)
    assert set(plan.allocations) == {"a", "c"}
    assert plan.waiting["b"].code == WaitCode.BEHIND_IN_QUEUE


def test_fifo_keeps_a_running_job_and_reports_no_change_for_it():
    cluster = make_cluster(1, 1, 8)
    r = running(job("r", submit=5, n=2), ("s0n0/6", "s0n0/7"))
    plan = plan_round(snapshot(cluster, [r, job("a", n=8)]), policy="fifo", now=10.0)
    # the running job keeps its GPUs although a is older (fifo is not preemptive)
    assert plan.allocations == {"r": r.allocation}
    assert plan.changes == ()
    assert plan.waiting["a"].code == WaitCode.BEHIND_IN_QUEUE


def test_fifo_lowclock_sets_the_clock_snapped_to_a_supported_step():
    cluster = make_cluster(1, 1, 8)
    plan = plan_round(
        snapshot(cluster, [job("a")]), policy=get_policy("fifo", sm_clock_mhz=1400), now=0.0
    )
    assert plan.allocations["a"].sm_clock_mhz == 1000


def test_job_without_perf_model_waits_with_a_reason():
    cluster = make_cluster(1, 1, 8)
    plan = plan_round(snapshot(cluster, [job("a", workload="unknown")]), policy="fifo", now=0.0)
    assert plan.allocations == {}
    assert plan.waiting["a"].code == WaitCode.NO_PERF_MODEL
    assert "unknown" in plan.waiting["a"].message


def test_job_asking_for_a_missing_gpu_model_or_too_many_gpus_waits():
    cluster = make_cluster(1, 1, 8)
    jobs = [job("v", gpu_model="V100"), job("big", n=16)]
    plan = plan_round(snapshot(cluster, jobs), policy="fifo", now=0.0)
    assert plan.allocations == {}
    assert plan.waiting["v"].code == WaitCode.NO_MATCHING_GPU
    assert plan.waiting["big"].code == WaitCode.NO_MATCHING_GPU


def test_team_with_exhausted_budget_waits_until_the_period_ends_and_others_run():
    cluster = make_cluster(1, 1, 8)
    spent = Budget("b1", "red", 0.0, 86_400.0, energy_limit_j=1e6, energy_used_j=1e6)
    jobs = [job("r", team="red"), job("b", team="blue")]
    plan = plan_round(snapshot(cluster, jobs, budgets=(spent,)), policy="fifo", now=50.0)
    assert set(plan.allocations) == {"b"}
    assert plan.waiting["r"].code == WaitCode.BUDGET_EXHAUSTED
    assert plan.waiting["r"].until_s == 86_400.0


def test_expired_budget_does_not_block():
    cluster = make_cluster(1, 1, 8)
    old = Budget("b0", "red", 0.0, 100.0, energy_limit_j=1.0, energy_used_j=1.0)
    plan = plan_round(
        snapshot(cluster, [job("r", team="red")], budgets=(old,)), policy="fifo", now=100.0
    )
    assert set(plan.allocations) == {"r"}


def test_running_job_that_loses_its_gpus_is_stopped_with_a_reason():
    cluster = make_cluster(1, 1, 8)
    r = running(job("r", n=2), ("s0n0/0", "s0n0/1"))
    spent = Budget("b1", "t", 0.0, 1000.0, co2_limit_g=5.0, co2_used_g=7.0)
    plan = plan_round(snapshot(cluster, [r], budgets=(spent,)), policy="fifo", now=1.0)
    assert plan.allocations == {}
    assert [(c.job_id, c.kind, c.after) for c in plan.changes] == [("r", ChangeKind.STOP, None)]
    assert plan.waiting["r"].code == WaitCode.BUDGET_EXHAUSTED


def test_diff_tells_resize_from_retune():
    a = Allocation(("g0", "g1"), 64)
    jobs = (
        replace(job("x"), allocation=a),
        replace(job("y"), allocation=a),
        replace(job("z"), allocation=a),
    )
    after = {
        "x": Allocation(("g1", "g0"), 64),
        "y": Allocation(("g0", "g1"), 64, sm_clock_mhz=900),
        "z": Allocation(("g0",), 64),
    }
    changes = {c.job_id: c.kind for c in diff(jobs, after)}
    assert changes == {"y": ChangeKind.RETUNE, "z": ChangeKind.RESIZE}


def test_registry_knows_fifo_and_rejects_unknown_names():
    assert "fifo" in policy_names()
    with pytest.raises(KeyError, match="unknown policy 'nope'"):
        get_policy("nope")


def test_policy_object_is_accepted_and_its_state_is_carried():
    class Counter:
        name = "counter"
        placement = "first_fit"

        def allocate(self, ctx):
            seen = ctx.policy_state.get("rounds", 0)
            grants = tuple(Grant(jv.job.job_id, 1, 64, jv.gpu_model) for jv in ctx.jobs)
            return PolicyDecision(grants=grants, waiting={}, policy_state={"rounds": seen + 1})

    cluster = make_cluster(1, 1, 8)
    snap = snapshot(cluster, [job("a")], policy_state={"rounds": 4})
    plan = plan_round(snap, policy=Counter(), now=0.0)
    assert plan.policy_state == {"rounds": 5}
    assert plan.allocations["a"].gpu_ids == ("s0n0/0",)


def test_policy_that_forgets_a_job_breaks_the_contract():
    class Forgetful:
        name = "forgetful"
        placement = "first_fit"

        def allocate(self, ctx):
            return PolicyDecision(grants=(), waiting={})

    with pytest.raises(PolicyContractError, match="no grant and no reason"):
        plan_round(snapshot(make_cluster(), [job("a")]), policy=Forgetful(), now=0.0)


def test_policy_that_overbooks_breaks_the_contract():
    class Greedy:
        name = "greedy"
        placement = "first_fit"

        def allocate(self, ctx):
            return PolicyDecision(
                grants=tuple(Grant(jv.job.job_id, 8, 64, jv.gpu_model) for jv in ctx.jobs),
                waiting={},
            )

    with pytest.raises(PolicyContractError, match="granted 24 A100 GPUs of 16"):
        plan_round(
            snapshot(make_cluster(), [job("a"), job("b"), job("c")]), policy=Greedy(), now=0.0
        )


def test_registering_a_second_class_under_a_taken_name_fails():
    with pytest.raises(ValueError, match="already registered"):

        @register_policy("fifo")
        class Other:
            pass


def test_job_naming_no_gpu_model_runs_on_the_model_with_a_perf_model():
    from scheduling.core.types import Cluster, Gpu, Node

    a100 = make_cluster(1, 1, 8)
    v100 = Node("v", "s0", tuple(Gpu(f"v/{i}", "v", i, "V100") for i in range(4)))
    cluster = Cluster(nodes=a100.nodes + (v100,))
    cat = Catalog(AnalyticModel("w", gpu_model="V100"))
    plan = plan_round(snapshot(cluster, [job("a")], catalog=cat), policy="fifo", now=0.0)
    assert plan.allocations["a"].gpu_ids == ("v/0",)


@pytest.mark.parametrize(("off", "idle_gpus"), [(False, 15), (True, 7)])
def test_idle_gpus_cost_energy_unless_their_node_is_powered_down(off, idle_gpus):
    # given two 8-GPU nodes and one 1-GPU job (250 W busy, idle GPUs 50 W)
    snap = snapshot(make_cluster(1, 2, 8), [job("a")], power_off_idle_nodes=off)
    plan = plan_round(snap, policy="fifo", now=0.0)
    # then the round costs the busy GPU plus every powered idle one
    assert plan.predicted_energy_j == pytest.approx(250 * 300 + idle_gpus * 50 * 300)


@pytest.mark.parametrize("policy", policy_names())
@pytest.mark.parametrize(
    ("action", "held_runs"), [("pause_jobs", False), ("hold_queue", True), ("notify_only", True)]
)
def test_a_spent_budget_does_what_its_hard_limit_action_says_under_every_policy(
    policy, action, held_runs
):
    # given team t's job running on s0n0/0-3 and its budget spent, and team u's jobs queued
    cluster = make_cluster(1, 1, 8)
    held = running(job("held", n=4, min_gpus=1, max_gpus=8), tuple(f"s0n0/{i}" for i in range(4)))
    others = [job(f"u{k}", submit=k, n=4, min_gpus=1, max_gpus=8, team="u") for k in range(3)]
    budget = Budget(
        "b", "t", 0.0, 1e6, energy_limit_j=1.0, energy_used_j=1.0, hard_limit_action=action
    )
    snap = snapshot(cluster, [held, *others], budgets=(budget,))

    # when the policy plans
    plan = plan_round(snap, policy=policy, now=100.0)

    # then pause_jobs stops the held job; hold_queue keeps it exactly where and how it
    # runs, and no other job gets its GPUs; notify_only lets it run as if unbudgeted
    if not held_runs:
        assert plan.waiting["held"].code == WaitCode.BUDGET_EXHAUSTED
        assert "held" not in plan.allocations
    elif action == "hold_queue":
        assert plan.allocations["held"] == held.allocation
        assert not any(c.job_id == "held" for c in plan.changes)
    else:
        assert "held" in plan.allocations
    taken = [g for a in plan.allocations.values() for g in a.gpu_ids]
    assert len(taken) == len(set(taken)) or plan.max_jobs_per_gpu > 1
    if action == "hold_queue":
        others_gpus = {g for j, a in plan.allocations.items() if j != "held" for g in a.gpu_ids}
        assert others_gpus.isdisjoint(held.allocation.gpu_ids)
        assert any(j != "held" for j in plan.allocations)  # the other team still runs
