"""The batch probe of exploration (issue 12 points 2 and 4): a job that may change its batch
runs one round at twice it, after its limit search and before the fill stage, then goes
back; a probe that makes no progress marks the batch as not runnable."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.core import exploration
from scheduling.core.exploration import DONE, explore_round, new_record
from scheduling.core.online_fit import fit_online
from scheduling.core.online_model import Observation
from scheduling.core.round import admit
from scheduling.core.types import Allocation, Grant, PolicyDecision
from tests.core.corekit import job, make_cluster, snapshot
from tests.core.test_exploration import CATALOG, PRIOR, _rounds


@pytest.fixture
def probe_on(monkeypatch):
    monkeypatch.setattr(exploration, "BATCH_PROBE", True)


def _tunable(**kw):
    """A resnet50 job of about 8 hours on one A100 that may run up to twice its batch, with
    a known noise scale (at which twice the batch is not worth it: the policy keeps 64)."""
    kw.setdefault("noise_scale", 64.0)
    kw.setdefault("min_batch", 64)
    kw.setdefault("max_batch", 128)
    return job("j1", workload="resnet50", iters=200_000.0, gpu_model="A100", **kw)


def test_a_job_that_may_change_its_batch_runs_one_round_at_twice_it_then_goes_back(probe_on):
    plans = _rounds(_tunable(), n_rounds=18)
    batches = [p.allocations["j1"].global_batch for p in plans]
    limits = [p.allocations["j1"].power_limit_w for p in plans]
    records = [p.exploration["j1"] for p in plans]
    # one round at 128, at the default limit, then 64 again
    assert batches.count(128) == 1 and set(batches) == {64, 128}
    k = batches.index(128)
    assert limits[k] == 400.0
    # after the limit search's measured minimum (the repeats of 400 W, the model's best,
    # its neighbours) and before the fill stage
    before = [t["limit_w"] for t in records[k]["tried"]]
    assert before == [400.0, 400.0, 400.0, 200.0, 175.0, 225.0]
    rec = records[-1]
    assert rec["status"] == DONE
    assert len(rec["tried"]) > len(before)  # the fill stage came after it
    other = rec["other_batch"]
    assert (other["batch"], other["from_batch"], other["runnable"]) == (128, 64, True)
    assert other["seconds"] == pytest.approx(300.0)
    # it cost useful samples (at a noise scale of 64, 128 teaches less per sample), counted
    # in what exploring spent, and the whole stays within the bound
    assert 0.0 < other["cost_s"] < 300.0
    assert rec["spent_s"] == pytest.approx(sum(t["cost_s"] for t in rec["tried"]) + other["cost_s"])
    assert rec["spent_s"] <= rec["budget_s"]
    # the limit's choice is at the batch the limits were explored at
    assert abs(rec["result_w"] - 200.0) <= 25.0


@pytest.mark.parametrize(
    "kw",
    [
        {"noise_scale": None},  # efficiency unknown: it keeps its submitted batch
        {"max_batch": 96},  # its range does not allow twice its batch
        {"min_batch": None, "max_batch": None},  # no range at all
        {"per_gpu_batch": 64},  # a fixed per-GPU batch
    ],
)
def test_no_probe_for_a_job_that_may_not_run_twice_its_batch(probe_on, kw):
    plans = _rounds(_tunable(**kw), n_rounds=12)
    assert {p.allocations["j1"].global_batch for p in plans} == {64}
    assert "other_batch" not in plans[-1].exploration["j1"]


def test_off_by_default_nothing_changes():
    assert exploration.BATCH_PROBE is False
    plans = _rounds(_tunable(), n_rounds=12)
    assert {p.allocations["j1"].global_batch for p in plans} == {64}
    assert all("other_batch" not in p.exploration["j1"] for p in plans)


def test_no_probe_where_the_model_measured_two_batches_already():
    one = [Observation(1, 1, 64.0, 0.1, 300.0, power_limit_w=400.0)]
    two = [*one, Observation(1, 1, 128.0, 0.18, 320.0)]
    low = [*one, Observation(1, 1, 128.0, 0.25, 200.0, power_limit_w=200.0)]
    assert fit_online(PRIOR, one).measured_batches() == {64.0}
    assert fit_online(PRIOR, two).measured_batches() == {64.0, 128.0}
    # under a lower limit it is not what the default limit's line reads
    assert fit_online(PRIOR, low).measured_batches() == {64.0}
    j = _tunable()
    assert exploration._probe_batch(j, fit_online(PRIOR, one), 64) == 128
    assert exploration._probe_batch(j, fit_online(PRIOR, two), 64) is None
    assert exploration._probe_batch(j, CATALOG.get("resnet50", "A100"), 64) is None


def test_a_probe_that_would_pass_the_bound_is_not_run_and_says_why(probe_on, monkeypatch):
    monkeypatch.setattr(exploration, "BATCH_COST_MARGIN", 1e9)
    plans = _rounds(_tunable(), n_rounds=12)
    assert {p.allocations["j1"].global_batch for p in plans} == {64}
    other = plans[-1].exploration["j1"]["other_batch"]
    assert other["runnable"] is None and other["seconds"] == 0.0
    assert other["reason"] == "it would exceed the exploration budget"


def _probing(done_iters: float, *, at_batch: int = 128, now: float = 900.0, **kw):
    """A job that explored 400 W and 200 W at batch 64 and was given its batch probe at 128
    at 600 s; the round at ``now`` (900 s), with ``done_iters`` done since."""
    cluster = make_cluster(nodes_per_switch=1)
    rec = new_record(gpu_model="A100", n_gpus=1, now_s=0.0, budget_frac=0.03)
    rec["tried"] = [
        {"limit_w": w, "n_gpus": 1, "since_s": s, "seconds": 300.0, "cost_s": 0.0,
         "energy_j": 50.0}
        for w, s in ((400.0, 0.0), (200.0, 300.0))
    ]  # fmt: skip
    rec["probe"] = {"batch": 128, "from_batch": 64, "n_gpus": 1, "limit_w": 400.0,
                    "since_s": 600.0, "seconds": 0.0, "cost_s": 10.0, "energy_j": None,
                    "runnable": None, "reason": "", "done_iters": 3000.0}  # fmt: skip
    obs = [Observation(1, 1, 64.0, 0.1, 300.0, power_limit_w=w) for w in (400.0, 200.0)]
    j = replace(
        _tunable(**kw),
        allocation=Allocation((cluster.gpus[0].gpu_id,), at_batch, power_limit_w=400.0),
        started_s=0.0,
        done_iters=done_iters,
    )
    snap = snapshot(cluster, [j], catalog=CATALOG, exploration={"j1": rec},
                    job_perf={("j1", "A100"): fit_online(PRIOR, obs)},
                    exploration_budget_frac=0.03)  # fmt: skip
    ctx, _ = admit(snap, now=now)
    return ctx


def test_a_probe_that_made_no_progress_marks_the_batch_not_runnable(probe_on):
    ctx = _probing(3000.0)  # no iteration since the probe began
    # when the policy asks for the probe's batch again
    grant = Grant("j1", 1, 128, "A100", power_limit_w=300.0)
    decision, records = explore_round(ctx, PolicyDecision((grant,), {}), explores=True)
    # then the job is back at its batch, the round counts whole, and the batch is marked
    assert decision.grants[0].global_batch == 64
    other = records["j1"]["other_batch"]
    assert (other["runnable"], other["reason"]) == (False, "no progress at batch 128")
    assert other["cost_s"] == other["seconds"] == 300.0
    assert records["j1"]["spent_s"] == 300.0
    # and once exploring is over the hook still keeps it below that batch
    done = {**records["j1"], "status": DONE}
    ctx2 = replace(ctx, snapshot=replace(ctx.snapshot, exploration={"j1": done}))
    decision, _ = explore_round(ctx2, PolicyDecision((grant,), {}), explores=True)
    assert decision.grants[0].global_batch == 64


def test_a_probe_that_ran_is_recorded_and_the_job_goes_back_to_its_batch(probe_on):
    ctx = _probing(5000.0)
    grant = Grant("j1", 1, 128, "A100", power_limit_w=300.0)  # the policy would stay at 128
    decision, records = explore_round(ctx, PolicyDecision((grant,), {}), explores=True)
    other = records["j1"]["other_batch"]
    assert other["runnable"] is True and other["seconds"] == 300.0
    assert other["energy_j"] > 0
    assert records["j1"]["status"] == "exploring"
    assert decision.grants[0].global_batch == 64  # back at 64 while it explores


def test_a_probe_the_job_did_not_run_is_not_tried_again(probe_on):
    ctx = _probing(5000.0, at_batch=64)  # the job ran at 64, not the probe's 128
    grant = Grant("j1", 1, 64, "A100", power_limit_w=300.0)
    decision, records = explore_round(ctx, PolicyDecision((grant,), {}), explores=True)
    other = records["j1"]["other_batch"]
    assert other["runnable"] is None and other["cost_s"] == 0.0
    assert other["reason"] == "the job did not run the probe"
    assert decision.grants[0].global_batch == 64


def test_a_probe_too_young_to_show_progress_is_kept_not_judged(probe_on):
    # given a round 20 s after the probe began (live rounds may come every 10 s, and a job
    # restarts at a new batch and reports its progress some seconds later), no count moved
    ctx = _probing(3000.0, now=620.0)
    grant = Grant("j1", 1, 64, "A100", power_limit_w=300.0)
    decision, records = explore_round(ctx, PolicyDecision((grant,), {}), explores=True)
    # then the probe goes on at its batch and limit, not judged, nothing charged yet
    g = decision.grants[0]
    assert (g.global_batch, g.power_limit_w) == (128, 400.0)
    rec = records["j1"]
    assert "other_batch" not in rec and rec["spent_s"] == 0.0
    assert rec["probe"]["batch"] == 128 and rec["probe"]["since_s"] == 600.0
    assert rec["probe"]["done_iters"] == 3000.0
    # and once it has run BATCH_PROBE_WAIT_S with no progress, it is judged
    later = exploration.BATCH_PROBE_WAIT_S + 600.0
    ctx2 = _probing(3000.0, now=later)
    ctx2 = replace(ctx2, snapshot=replace(ctx2.snapshot, exploration={"j1": rec}))
    decision, records = explore_round(ctx2, PolicyDecision((grant,), {}), explores=True)
    other = records["j1"]["other_batch"]
    assert (other["runnable"], other["seconds"]) == (False, exploration.BATCH_PROBE_WAIT_S)
    assert decision.grants[0].global_batch == 64


def test_a_young_probe_the_policy_resized_is_closed_not_kept(probe_on):
    ctx = _probing(3000.0, now=620.0)
    grant = Grant("j1", 2, 128, "A100", power_limit_w=300.0)  # the policy gives it two GPUs
    _, records = explore_round(ctx, PolicyDecision((grant,), {}), explores=True)
    # then the probe ends unjudged: its seconds are charged, the batch is not marked
    assert records["j1"]["probe"] is None or "batch" not in records["j1"]["probe"]
    other = records["j1"]["other_batch"]
    assert other["runnable"] is None and other["cost_s"] == other["seconds"] == 20.0
    assert other["reason"] == "the probe ended before it could show progress"


@pytest.mark.parametrize(
    ("n_gpus", "asked", "given"),
    [
        (1, 128, 64),  # the batch that made no progress: back to the one that ran
        (1, 256, 64),
        (4, 256, 256),  # 64 a GPU, as the job ran on one: kept
        (2, 256, 128),  # 128 a GPU, as the probe that stalled: 64 a GPU instead
        (4, 512, 256),
    ],
)
def test_the_mark_of_a_stalled_probe_holds_per_gpu(probe_on, n_gpus, asked, given):
    # given a probe at 128 on one GPU that made no progress (the batch did not fit a GPU)
    ctx = _probing(3000.0, max_batch=512, max_gpus=4)
    _, records = explore_round(
        ctx, PolicyDecision((Grant("j1", 1, 128, "A100"),), {}), explores=True
    )
    assert records["j1"]["other_batch"]["runnable"] is False
    done = {**records["j1"], "status": DONE}
    ctx2 = replace(ctx, snapshot=replace(ctx.snapshot, exploration={"j1": done}))
    # when the policy later gives the job more GPUs (or the same) at some batch
    grant = Grant("j1", n_gpus, asked, "A100", power_limit_w=300.0)
    decision, _ = explore_round(ctx2, PolicyDecision((grant,), {}), explores=True)
    # then what is held back is the per-GPU batch that stalled, not the global one
    assert decision.grants[0].global_batch == given
