"""netdelay: sensitivity from the perf model, delay timers, preemption, auto-tuning."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from corekit import job, make_cluster, running, snapshot

from scheduling.core.netdelay_tuner import arrivals_to_jobs, replay_jobs, tune_delay
from scheduling.core.perf_models import load_catalog
from scheduling.core.policies.netdelay import NetDelay, spread_shape
from scheduling.core.round import admit, plan_round
from scheduling.core.types import GpuConfig, WaitCode

CATALOG = load_catalog()
NOW = 10_000.0
CLUSTER = make_cluster(1, 2, 4)  # two nodes of four A100s


def _sens(n: int = 4, **kw):
    kw.setdefault("iters", 1e6)
    return job("s", workload="resnet50_cifar10", n=n, global_batch=128 * n, **kw)


def _filler(job_id: str, gpu: str):
    return running(job(job_id, workload="bert", global_batch=64, iters=1e6), (gpu,))


def _view(j, cluster=CLUSTER):
    ctx, _ = admit(snapshot(cluster, [j], catalog=CATALOG), now=NOW)
    return ctx, ctx.jobs[0]


def test_sensitivity_is_the_spread_slowdown_scaled_by_congestion():
    ctx, jv = _view(_sens())
    model = CATALOG.get("resnet50_cifar10", "A100")
    cons = model.iter_time_s(GpuConfig(4, 512))
    spread = model.iter_time_s(GpuConfig(4, 512, gpus_per_node=(2, 2)))
    assert spread_shape(4) == (2, 2)
    assert NetDelay().sensitivity(ctx, jv, 4) == pytest.approx(spread / cons - 1)
    assert NetDelay(congestion=3.0).sensitivity(ctx, jv, 4) == pytest.approx(
        3 * (spread / cons - 1)
    )
    assert NetDelay().sensitivity(ctx, jv, 1) == 0.0


def test_consolidated_placement_is_taken_when_free():
    plan = plan_round(snapshot(CLUSTER, [_sens()], catalog=CATALOG), policy=NetDelay(), now=NOW)
    nodes = {g.split("/")[0] for g in plan.allocations["s"].gpu_ids}
    assert len(nodes) == 1


def _fragmented(extra=(), **job_kw):
    # One GPU busy on each node: four free GPUs, but not on one node.
    return [_filler("f0", "s0n0/0"), _filler("f1", "s0n1/0"), _sens(**job_kw), *extra]


def test_job_waits_for_locality_until_its_timer_and_later_jobs_go_first():
    pol = NetDelay(preempt=False)
    small = job("late", workload="bert", global_batch=64, submit=NOW - 5.0)
    snap = snapshot(CLUSTER, _fragmented([small], submit=NOW - 60.0), catalog=CATALOG)
    plan = plan_round(snap, policy=pol, now=NOW)
    ctx, jv = _view(_sens())
    timer = pol.timer_s(pol.sensitivity(ctx, jv, 4), pol.delay_per_sensitivity_s)
    assert timer > 60.0
    reason = plan.waiting["s"]
    assert reason.code == WaitCode.DELAYED_FOR_LOCALITY
    assert reason.until_s == pytest.approx(NOW - 60.0 + timer)
    assert "s" not in plan.allocations
    assert "late" in plan.allocations  # delay scheduling lets a later job go first


def test_after_its_timer_the_job_accepts_a_spread_placement():
    pol = NetDelay(preempt=False)
    ctx, jv = _view(_sens())
    timer = pol.timer_s(pol.sensitivity(ctx, jv, 4), pol.delay_per_sensitivity_s)
    snap = snapshot(CLUSTER, _fragmented(submit=NOW - timer - 1.0), catalog=CATALOG)
    plan = plan_round(snap, policy=pol, now=NOW)
    nodes = {g.split("/")[0] for g in plan.allocations["s"].gpu_ids}
    assert nodes == {"s0n0", "s0n1"}


def test_zero_delay_spreads_at_once():
    snap = snapshot(CLUSTER, _fragmented(submit=NOW), catalog=CATALOG)
    plan = plan_round(snap, policy=NetDelay(delay_per_sensitivity_s=0.0, preempt=False), now=NOW)
    assert plan.allocations["s"].n_gpus == 4


CONGESTED = NetDelay(congestion=4.0)  # sensitivity ~0.45, above the 0.2 threshold


def test_after_its_timer_a_sensitive_job_preempts_a_less_sensitive_one():
    snap = snapshot(CLUSTER, _fragmented(submit=0.0), catalog=CATALOG)
    plan = plan_round(snap, policy=CONGESTED, now=NOW)
    assert plan.allocations["s"].gpu_ids == ("s0n0/0", "s0n0/1", "s0n0/2", "s0n0/3")
    assert plan.waiting["f0"].code == WaitCode.PREEMPTED
    # A user sees the reason their job waits; it must not name another (maybe
    # another team's) job.
    assert "job can run on one node" in plan.waiting["f0"].message
    assert not re.search(r"\bs\b", plan.waiting["f0"].message), plan.waiting["f0"].message
    assert plan.allocations["f1"].gpu_ids == ("s0n1/0",)
    assert plan.policy_state["victims"] == ["f0"]


def test_below_the_sensitivity_threshold_nothing_is_preempted():
    snap = snapshot(CLUSTER, _fragmented(submit=0.0), catalog=CATALOG)
    plan = plan_round(snap, policy=NetDelay(), now=NOW)  # sensitivity ~0.11 < 0.2
    assert plan.allocations["f0"].gpu_ids == ("s0n0/0",)
    assert plan.policy_state["victims"] == []


def test_a_job_that_was_preempted_never_preempts_in_turn():
    snap = snapshot(
        CLUSTER, _fragmented(submit=0.0), catalog=CATALOG, policy_state={"victims": ["s"]}
    )
    plan = plan_round(snap, policy=CONGESTED, now=NOW)
    assert plan.allocations["f0"].gpu_ids == ("s0n0/0",)
    assert plan.allocations["f1"].gpu_ids == ("s0n1/0",)
    assert {g.split("/")[0] for g in plan.allocations["s"].gpu_ids} == {"s0n0", "s0n1"}


def test_no_preemption_before_the_timer_runs_out():
    snap = snapshot(CLUSTER, _fragmented(submit=NOW), catalog=CATALOG)
    plan = plan_round(snap, policy=CONGESTED, now=NOW)
    assert plan.allocations["f0"].gpu_ids == ("s0n0/0",)
    assert plan.waiting["s"].code == WaitCode.DELAYED_FOR_LOCALITY


def test_recently_moved_jobs_are_not_preempted():
    jobs = _fragmented(submit=0.0)
    jobs[0] = replace(jobs[0], last_change_s=NOW - 60.0)
    jobs[1] = replace(jobs[1], last_change_s=NOW - 60.0)
    plan = plan_round(snapshot(CLUSTER, jobs, catalog=CATALOG), policy=CONGESTED, now=NOW)
    assert set(plan.allocations) == {"f0", "f1", "s"}
    assert {g.split("/")[0] for g in plan.allocations["s"].gpu_ids} == {"s0n0", "s0n1"}


def test_no_preemption_when_the_gain_is_below_the_restart_cost():
    # A nearly finished job gains little from consolidation: it spreads instead.
    snap = snapshot(CLUSTER, _fragmented(submit=0.0, iters=10.0), catalog=CATALOG)
    plan = plan_round(snap, policy=CONGESTED, now=NOW)
    assert plan.allocations["f0"].gpu_ids == ("s0n0/0",)
    assert plan.allocations["f1"].gpu_ids == ("s0n1/0",)
    assert plan.allocations["s"].n_gpus == 4


def _replay_jobs():
    rows = []
    for i in range(8):
        n = (1, 4, 2, 4)[i % 4]
        w = ("bert", "resnet50_cifar10", "vgg16", "resnet50")[i % 4]
        rows.append([f"r{i}", w, 5000.0 + 120.0 * i, 3000.0, 64 * n, n, "A100"])
    return arrivals_to_jobs(rows)


def test_arrivals_are_rebased_to_zero():
    jobs = _replay_jobs()
    assert [j.submit_time_s for j in jobs[:3]] == [0.0, 120.0, 240.0]
    assert jobs[1].requested_gpus == 4 and jobs[1].gpu_model == "A100"


def test_the_auto_tuner_is_deterministic_and_picks_the_best_replay():
    kw = dict(cluster=CLUSTER, catalog=CATALOG, candidates_s=(0.0, 3000.0, 1e9), congestion=4.0)
    first = tune_delay(_replay_jobs(), **kw)
    second = tune_delay(_replay_jobs(), **kw)
    assert first == second
    assert set(first.scores) == {0.0, 3000.0, 1e9}
    assert first.scores[first.best_s] == min(first.scores.values())


def test_policy_tunes_its_timers_from_recent_arrivals():
    jobs = [replace(j, submit_time_s=NOW - 1000 + j.submit_time_s) for j in _replay_jobs()]
    pol = NetDelay(tune_every_s=3600.0, tune_candidates_s=(0.0, 3000.0))
    plan = plan_round(snapshot(CLUSTER, jobs, catalog=CATALOG), policy=pol, now=NOW)
    state = plan.policy_state
    assert state["tuned_at_s"] == NOW
    assert state["delay_per_sensitivity_s"] in (0.0, 3000.0)
    assert [row[0] for row in state["arrivals"]] == [j.job_id for j in jobs]
    # Within the hour the timers are kept, not re-tuned.
    later = replace(snapshot(CLUSTER, jobs, catalog=CATALOG), policy_state=state)
    again = plan_round(later, policy=pol, now=NOW + 600.0)
    assert again.policy_state["tuned_at_s"] == NOW


def test_replay_starts_from_the_present_then_repeats_recent_arrivals():
    active = [
        replace(job("late", workload="bert", submit=50.0, iters=100.0), done_iters=0.0),
        replace(job("early", workload="bert", submit=10.0, iters=100.0), done_iters=40.0),
    ]
    rows = [["x", "bert", 5000.0, 10.0, 64, 1, "A100"], ["y", "vgg16", 5300.0, 20.0, 64, 2, "A100"]]
    jobs = replay_jobs(active, rows, round_length_s=300.0)
    assert [(j.job_id, j.submit_time_s, j.total_iters) for j in jobs] == [
        ("early", 0.0, 60.0),
        ("late", 0.001, 100.0),
        ("next:x", 300.0, 10.0),
        ("next:y", 600.0, 20.0),
    ]
    assert all(j.allocation is None and j.done_iters == 0.0 for j in jobs)
