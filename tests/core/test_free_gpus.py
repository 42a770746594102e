"""The one free-GPU state (``placement.FreeGpus``), its named pickers, and policies that
name their own GPUs (``placement = None``)."""

from __future__ import annotations

import pytest
from corekit import job, make_cluster, running, snapshot

from scheduling.core.placement import (
    PICKERS,
    FreeGpus,
    pick_buddy,
    pick_contiguous,
    pick_first_fit,
    pick_packed,
    pick_spread,
)
from scheduling.core.registry import get_policy, policy_names
from scheduling.core.round import PolicyContractError, admit, plan_round
from scheduling.core.types import Grant, PolicyDecision


def ids(node, positions):
    return tuple(f"{node}/{p}" for p in positions)


def test_every_picker_is_registered_by_name():
    assert set(PICKERS) == {"buddy", "first_fit", "packed", "spread", "contiguous"}


def test_taking_and_giving_keeps_the_per_node_state_and_the_counts_in_step():
    # given two 4-GPU nodes
    free = FreeGpus(make_cluster(1, 2, 4))
    # when three GPUs of the first node are taken and one is given back
    taken = free.take(ids("s0n0", (2, 0, 1)))
    free.give(ids("s0n0", (1,)))
    # then the ids come back in the order given, and both views agree
    assert taken == ids("s0n0", (2, 0, 1))
    assert free.count("A100") == 6
    assert free.free_ids(0) == ["s0n0/1", "s0n0/3"]
    assert free.valid(ids("s0n0", (1, 3)), "A100")
    assert not free.valid(ids("s0n0", (0,)), "A100")
    assert not free.valid(("nowhere/0",), "A100")


def test_counting_view_reserves_without_naming_gpus():
    # given the count side seeded from a capacity, as GpuLedger uses it
    free = FreeGpus(make_cluster(1, 1, 8), counts={"A100": 8})
    # when 6 GPUs are reserved by count
    free.reserve("A100", 6)
    # then only 2 fit, and no GPU is named as used
    assert free.fits("A100", 2) and not free.fits("A100", 3)
    assert free.free_count == [8]


def test_pickers_choose_without_taking_and_differ_as_named():
    # given node s0n0 with GPUs 1 and 2 used, and an empty node s0n1
    free = FreeGpus(make_cluster(1, 2, 4))
    free.take(ids("s0n0", (1, 2)))
    # then for two GPUs:
    # first fit takes the first free ones in node order, even split by a used GPU
    assert pick_first_fit(free, "A100", 2) == ids("s0n0", (0, 3))
    # buddy wants an aligned pair: none is free on s0n0, so s0n1's first pair
    assert pick_buddy(free, "A100", 2) == ids("s0n1", (0, 1))
    # packed: one node, an aligned block on the fullest node that has one
    assert pick_packed(free, "A100", 2) == ids("s0n1", (0, 1))
    # ...and the fullest node that fits when no node has an aligned block
    free.take(ids("s0n1", (1, 2)))
    assert pick_packed(free, "A100", 2) == ids("s0n0", (0, 3))
    free.give(ids("s0n1", (1, 2)))
    # spread: the emptiest node first
    assert pick_spread(free, "A100", 2) == ids("s0n1", (0, 1))
    # contiguous: the smallest run of consecutive free GPUs that holds it
    assert pick_contiguous(free, "A100", 2) == ids("s0n1", (0, 1))
    # and nothing was taken by choosing
    assert free.count("A100") == 6


def test_contiguous_grows_a_running_job_in_place():
    free = FreeGpus(make_cluster(1, 1, 8))
    free.take(ids("s0n0", (0,)))
    assert pick_contiguous(free, "A100", 4, ids("s0n0", (2, 3))) == ids("s0n0", (1, 2, 3, 4))


@pytest.mark.parametrize("name", ["eaco", "ones", "netdelay"])
def test_policies_that_name_their_gpus_declare_no_placer(name):
    # given a policy that names the GPUs of every grant
    policy = get_policy(name)
    snap = snapshot(
        make_cluster(1, 2, 4), [job("a", n=2), running(job("b", n=2), ids("s0n1", (0, 1)))]
    )
    # then it declares no placer, and every grant it makes names its GPUs
    assert policy.placement is None
    ctx, _ = admit(snap, now=0.0)
    decision = policy.allocate(ctx)
    assert decision.grants and all(g.gpu_ids for g in decision.grants)


def test_every_other_policy_names_a_placer():
    for name in policy_names():
        placement = get_policy(name).placement
        assert placement is None or placement in ("buddy", "first_fit"), name


def test_a_self_placing_policy_that_leaves_a_grant_unnamed_breaks_the_contract():
    class Sloppy:
        name = "sloppy"
        placement = None

        def allocate(self, ctx):
            grants = tuple(Grant(jv.job.job_id, 1, 64, jv.gpu_model) for jv in ctx.jobs)
            return PolicyDecision(grants=grants, waiting={})

    with pytest.raises(PolicyContractError, match="names its GPUs itself"):
        plan_round(snapshot(make_cluster(), [job("a")]), policy=Sloppy(), now=0.0)
