"""``Job.priority`` orders the jobs every policy considers for starting (issue 15).

A higher priority goes first; jobs of equal priority keep the policy's own order
(``scheduling.core.policies.base.by_priority``, docs/scheduling.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from corekit import job, make_cluster, running, snapshot

from scheduling.core.registry import get_policy, policy_names
from scheduling.core.round import plan_round


def two_jobs_one_fits(high_priority: int):
    # One 4-GPU node; two identical rigid 4-GPU jobs, so exactly one can run. The
    # low-priority one was submitted first and has the smaller id, so every policy's
    # own order (submit time, service, remaining time, then id) puts it first.
    low = job("a-low", n=4, submit=0.0)
    high = replace(job("b-high", n=4, submit=10.0), priority=high_priority)
    return snapshot(make_cluster(1, 1, 4), [low, high])


@pytest.mark.parametrize("name", policy_names())
def test_with_equal_priorities_each_policy_keeps_its_own_order(name):
    plan = plan_round(two_jobs_one_fits(0), policy=get_policy(name), now=100.0)
    assert set(plan.allocations) == {"a-low"}
    assert set(plan.waiting) == {"b-high"}


@pytest.mark.parametrize("name", policy_names())
def test_a_high_priority_job_submitted_last_starts_first(name):
    plan = plan_round(two_jobs_one_fits(5), policy=get_policy(name), now=100.0)
    assert set(plan.allocations) == {"b-high"}
    assert set(plan.waiting) == {"a-low"}


def test_a_negative_priority_goes_behind_the_default():
    snap = snapshot(
        make_cluster(1, 1, 4),
        [replace(job("a", n=4, submit=0.0), priority=-1), job("b", n=4, submit=10.0)],
    )
    plan = plan_round(snap, policy=get_policy("fifo"), now=100.0)
    assert set(plan.allocations) == {"b"}


def test_non_preemptive_fifo_keeps_a_running_job_ahead_of_a_higher_priority_one():
    # given a low-priority job running on the only node and a high-priority one waiting
    low = running(job("a-low", n=4, submit=0.0), tuple(f"s0n0/{i}" for i in range(4)))
    high = replace(job("b-high", n=4, submit=10.0), priority=5)
    snap = snapshot(make_cluster(1, 1, 4), [low, high])
    # when non-preemptive FIFO plans, the running job keeps its GPUs
    plan = plan_round(snap, policy=get_policy("fifo"), now=100.0)
    assert set(plan.allocations) == {"a-low"}
    # and preemptive FIFO, which reconsiders every job each round, runs the higher one
    plan = plan_round(snap, policy=get_policy("fifo", preemptive=True), now=100.0)
    assert set(plan.allocations) == {"b-high"}


def test_priority_orders_the_waiting_jobs_behind_the_ones_that_keep_running():
    # given one of two nodes busy with a running job, and two waiting jobs for the other
    busy = running(job("r", n=4, submit=0.0), tuple(f"s0n0/{i}" for i in range(4)))
    low = job("a-low", n=4, submit=1.0)
    high = replace(job("b-high", n=4, submit=2.0), priority=1)
    snap = snapshot(make_cluster(1, 2, 4), [busy, low, high])
    for name in ("fifo", "eaco", "elastic", "netdelay", "powerflow"):
        plan = plan_round(snap, policy=get_policy(name), now=100.0)
        assert set(plan.allocations) == {"r", "b-high"}, name
