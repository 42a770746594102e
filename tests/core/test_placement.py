"""Placement: buddy blocks, network packing, keeping jobs in place, first fit."""

from __future__ import annotations

import pytest
from corekit import make_cluster

from scheduling.core.placement import (
    FreeGpus,
    PlacementRequest,
    buddy_sizes,
    place_buddy,
    place_first_fit,
)


def req(job_id, n, current=()):
    return PlacementRequest(job_id, n, "A100", tuple(current))


def ids(node, positions):
    return tuple(f"{node}/{p}" for p in positions)


def test_buddy_sizes_are_powers_of_two_then_whole_nodes():
    assert buddy_sizes(8, 64) == (1, 2, 4, 8, 16, 32, 64)
    assert buddy_sizes(8, 40) == (1, 2, 4, 8, 16, 32)
    assert buddy_sizes(6, 24) == (1, 2, 4, 6, 12, 24)
    assert buddy_sizes(4, 2) == (1, 2)


def test_buddy_places_largest_first_in_aligned_blocks():
    # given one 8-GPU node and jobs of 1, 4, 2 and 1 GPUs (8 in all)
    cluster = make_cluster(1, 1, 8)
    # when placed
    result = place_buddy(cluster, [req("a", 1), req("b", 4), req("c", 2), req("d", 1)])
    # then every block is aligned at a multiple of its size and nothing is left out
    assert result.failed == ()
    assert result.gpu_ids == {
        "b": ids("s0n0", range(0, 4)),
        "c": ids("s0n0", (4, 5)),
        "a": ids("s0n0", (6,)),
        "d": ids("s0n0", (7,)),
    }


def test_buddy_keeps_a_free_half_whole_rather_than_splitting_it():
    # given a node where GPU 0 is taken by a running job
    cluster = make_cluster(1, 1, 8)
    result = place_buddy(cluster, [req("r", 1, ids("s0n0", (0,))), req("x", 1), req("y", 4)])
    # then the single GPU goes next to the used one and the upper half stays a 4-block
    assert result.gpu_ids["r"] == ids("s0n0", (0,))
    assert result.gpu_ids["y"] == ids("s0n0", (4, 5, 6, 7))
    assert result.gpu_ids["x"] == ids("s0n0", (1,))


def test_buddy_prefers_the_fullest_node_that_fits():
    # given node 0 half used by a running job and node 1 empty
    cluster = make_cluster(1, 2, 8)
    result = place_buddy(cluster, [req("r", 4, ids("s0n0", range(4))), req("x", 2)])
    # then the new 2-GPU job fills node 0 and keeps node 1 whole
    assert result.gpu_ids["x"] == ids("s0n0", (4, 5))


def test_multi_node_job_goes_on_one_partly_used_switch():
    # given two switches of 4 nodes; switch s1 already runs a job on one node
    cluster = make_cluster(2, 4, 8)
    running = req("r", 8, ids("s1n0", range(8)))
    # when a 16-GPU job arrives
    result = place_buddy(cluster, [running, req("big", 16)])
    # then it gets two whole nodes of the partly used switch s1, not the empty s0
    assert result.gpu_ids["big"] == ids("s1n1", range(8)) + ids("s1n2", range(8))


def test_multi_node_job_spans_the_fewest_switches():
    # given three switches of 2 nodes, one node busy on s0
    cluster = make_cluster(3, 2, 8)
    busy = req("r", 8, ids("s0n0", range(8)))
    # when a 32-GPU job (4 nodes) needs more than one switch
    result = place_buddy(cluster, [busy, req("big", 32)])
    nodes = {g.split("/")[0] for g in result.gpu_ids["big"]}
    # then it uses two whole switches (s1, s2), not three
    assert nodes == {"s1n0", "s1n1", "s2n0", "s2n1"}


def test_running_job_with_unchanged_size_stays_where_it_is():
    cluster = make_cluster(1, 2, 8)
    current = ("s0n1/2", "s0n1/3")
    result = place_buddy(cluster, [req("new", 8), req("r", 2, current)])
    assert result.gpu_ids["r"] == current
    assert result.gpu_ids["new"] == ids("s0n0", range(8))


def test_shrinking_job_keeps_part_of_its_block():
    # given a job on GPUs 4..7 of node 1 that shrinks to 2 GPUs
    cluster = make_cluster(1, 2, 8)
    result = place_buddy(cluster, [req("r", 2, ids("s0n1", (4, 5, 6, 7)))])
    # then its new block lies inside the old one
    assert result.gpu_ids["r"] == ids("s0n1", (4, 5))


def test_fragmented_layout_is_repacked_when_a_block_is_missing():
    # given two nodes each holding a 1-GPU job at GPU 0 and GPU 4 (no free aligned 8)
    cluster = make_cluster(1, 2, 8)
    a = req("a", 1, ids("s0n0", (0,)))
    b = req("b", 1, ids("s0n1", (4,)))
    # when an 8-GPU job must fit alongside them
    result = place_buddy(cluster, [a, b, req("big", 8)])
    # then a repack moves one small job so that a whole node is free
    assert result.failed == ()
    assert len(set(result.gpu_ids["big"])) == 8
    assert result.gpu_ids["a"] == ids("s0n0", (0,)) or result.gpu_ids["b"] == ids("s0n1", (4,))
    used = [g for v in result.gpu_ids.values() for g in v]
    assert len(used) == len(set(used)) == 10


def test_buddy_reports_a_job_that_cannot_fit():
    cluster = make_cluster(1, 1, 8)
    result = place_buddy(cluster, [req("a", 8), req("b", 1)])
    assert result.failed == ("b",)
    assert "b" not in result.gpu_ids


def test_non_power_of_two_request_goes_on_fewest_nodes():
    cluster = make_cluster(1, 2, 8)
    result = place_buddy(cluster, [req("r", 2, ids("s0n0", (0, 1))), req("x", 3)])
    # the 3-GPU job fits on node 0 (6 free) rather than opening node 1
    assert result.gpu_ids["x"] == ids("s0n0", (2, 3, 4))


def test_a_job_of_one_node_s_size_takes_a_whole_node_when_nodes_are_not_a_power_of_two():
    # 6-GPU nodes, 2 GPUs busy on each: 8 free, but no whole node. A 6-GPU job is one
    # whole node (a buddy size), never the emptiest GPUs of two nodes: the running jobs
    # are repacked onto one node to free the other.
    cluster = make_cluster(1, 2, 6)
    running = [req("r0", 2, ids("s0n0", (0, 1))), req("r1", 2, ids("s0n1", (0, 1)))]
    result = place_buddy(cluster, [*running, req("x", 6)])
    assert len({g.split("/")[0] for g in result.gpu_ids["x"]}) == 1


def test_first_fit_takes_the_first_free_gpus_in_node_order_across_nodes():
    cluster = make_cluster(1, 2, 4)
    result = place_first_fit(cluster, [req("r", 2, ids("s0n0", (1, 2))), req("x", 3)])
    assert result.gpu_ids["r"] == ids("s0n0", (1, 2))
    assert result.gpu_ids["x"] == ("s0n0/0", "s0n0/3", "s0n1/0")


def test_unschedulable_node_gets_nothing():
    from dataclasses import replace

    cluster = make_cluster(1, 2, 8)
    drained = replace(cluster.nodes[0], schedulable=False)
    cluster = replace(cluster, nodes=(drained, cluster.nodes[1]))
    result = place_buddy(cluster, [req("r", 2, ids("s0n0", (0, 1))), req("x", 4), req("y", 4)])
    # the job on the drained node moves to node 1 first (it comes first in priority);
    # the last 4-GPU job no longer fits
    assert result.gpu_ids == {"r": ids("s0n1", (0, 1)), "x": ids("s0n1", range(4, 8))}
    assert result.failed == ("y",)


@pytest.mark.parametrize("placer", [place_buddy, place_first_fit])
def test_other_gpu_model_is_never_used(placer):
    cluster = make_cluster(1, 1, 8, model="V100")
    result = placer(cluster, [req("a", 1)])
    assert result.gpu_ids == {}
    assert result.failed == ("a",)


def test_rounds_on_one_cluster_share_its_layout_but_never_its_free_state():
    # The simulator plans every round on the same cluster object: its layout is built once
    # (a 4,096-GPU cluster spent most of each round rebuilding it), what is free is not.
    cluster = make_cluster(1, 2, 4)
    first = FreeGpus(cluster)
    taken = first.take(["s0n0/0", "s0n0/1", "s0n1/3"])
    second = FreeGpus(cluster)
    assert second.gpu_ids is first.gpu_ids and second.where is first.where
    assert taken == ("s0n0/0", "s0n0/1", "s0n1/3")
    assert first.count("A100") == 5 and second.count("A100") == 8
    assert first.free_ids(0) == ["s0n0/2", "s0n0/3"]
    assert second.free_ids(0) == ["s0n0/0", "s0n0/1", "s0n0/2", "s0n0/3"]
    assert second.is_free is not first.is_free
    assert second.buckets is not first.buckets
    # an equal but distinct cluster (the live service builds one a round) is laid out alike
    third = FreeGpus(make_cluster(1, 2, 4))
    assert third.gpu_ids == first.gpu_ids and third.count("A100") == 8
    assert cluster.schedulable_capacity == ({"A100": 8}, {"A100": 4})
    assert (
        cluster.model_of == cluster.schedulable_model_of == {g.gpu_id: "A100" for g in cluster.gpus}
    )
