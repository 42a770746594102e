"""PowerFlow's ranking by the marginal effect on average JCT (``rank="hesrpt"``) and its
admission's starvation bound (``starvation_s``), on hand-computed rounds.

The analytic model (corekit.AnalyticModel): one iteration at batch 64 takes ``t1_s`` on
one GPU at the top clock and scales as 1/n**scaling. No budget, so every clock step is
free and jobs run at the top clock; only the GPUs are scarce.
"""

from __future__ import annotations

import pytest
from corekit import AnalyticModel, Catalog, job, make_cluster, snapshot

from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import WaitCode

LONG = AnalyticModel("long_w", t1_s=1.0, scaling=1.0)  # scales perfectly
SHORT = AnalyticModel("short_w", t1_s=1.0, scaling=0.9)  # scales a little less
RESTART_S = 30.0  # BudgetGreedy's default restart_s


def _two_jobs():
    # a 3-GPU node: both jobs start on 1 GPU (buddy sizes 1, 2), one GPU is spare
    jobs = [
        job("long", workload="long_w", iters=3200.0, min_gpus=1, max_gpus=2),
        job("short", workload="short_w", iters=800.0, min_gpus=1, max_gpus=2),
    ]
    return snapshot(make_cluster(1, 1, 3), jobs, catalog=Catalog(LONG, SHORT))


def _mean_jct_s(n_long: int, n_short: int) -> float:
    """Mean completion time from now if each job keeps its GPUs until the first one
    finishes and the other then runs on 2 GPUs (after a restart if it is resized)."""
    rate = {"long": n_long**LONG.scaling, "short": n_short**SHORT.scaling}  # iters/s
    left = {"long": 3200.0, "short": 800.0}
    first = min(left, key=lambda k: left[k] / rate[k])
    t1 = left[first] / rate[first]
    other = "short" if first == "long" else "long"
    rest = left[other] - rate[other] * t1
    model = LONG if other == "long" else SHORT
    n_other = n_long if other == "long" else n_short
    t2 = t1 + (RESTART_S if n_other != 2 else 0.0) + rest / 2**model.scaling
    return (t1 + t2) / 2


def test_hesrpt_gives_the_spare_gpu_to_the_shorter_job_and_lowers_the_mean_jct():
    # given two waiting jobs and one GPU beyond their minimum: the long one scales better
    snap = _two_jobs()
    # when the per-GPU speedup ranks the steps (elastic's measure), the long job's
    # doubling (speedup +1.0) beats the short one's (+2**0.9 - 1 = +0.866)
    per_gpu = plan_round(snap, policy=get_policy("powerflow", rank="per_gpu"), now=0.0)
    # and when heSRPT weighs each speedup by the share of jobs not shorter than it
    # (short: 2/2 = 1; long: 1/2) to the power of the step's scaling exponent
    hesrpt = plan_round(snap, policy=get_policy("powerflow", rank="hesrpt"), now=0.0)
    # then the per-GPU rank grows the long job and heSRPT the short one (0.866 > 0.5)
    assert (per_gpu.allocations["long"].n_gpus, per_gpu.allocations["short"].n_gpus) == (2, 1)
    assert (hesrpt.allocations["long"].n_gpus, hesrpt.allocations["short"].n_gpus) == (1, 2)
    # and the mean JCT is lower: (800 + 1600) / 2 = 1200 s against
    # (428.7 + 428.7 + 30 + (3200 - 428.7) / 2) / 2 = 1136.5 s
    assert _mean_jct_s(2, 1) == pytest.approx(1200.0)
    assert _mean_jct_s(1, 2) == pytest.approx(1136.5, abs=0.1)


def test_hesrpt_ranks_as_per_gpu_among_jobs_of_equal_length():
    # given the same two jobs with equal remaining work: both weigh 1
    jobs = [
        job("a", workload="long_w", iters=800.0, min_gpus=1, max_gpus=2),
        job("b", workload="short_w", iters=800.0, min_gpus=1, max_gpus=2),
    ]
    snap = snapshot(make_cluster(1, 1, 3), jobs, catalog=Catalog(LONG, SHORT))
    per_gpu = plan_round(snap, policy=get_policy("powerflow", rank="per_gpu"), now=0.0)
    hesrpt = plan_round(snap, policy=get_policy("powerflow", rank="hesrpt"), now=0.0)
    # then heSRPT changes nothing: the better-scaling job takes the spare GPU
    assert {k: a.n_gpus for k, a in hesrpt.allocations.items()} == {"a": 2, "b": 1}
    assert {k: a.n_gpus for k, a in per_gpu.allocations.items()} == {"a": 2, "b": 1}


def _queue():
    # a 2-GPU node, three rigid 1-GPU jobs: a long one waiting since 0, two short ones
    jobs = [
        job("old_long", submit=0.0, iters=10_000.0),
        job("s1", submit=100.0, iters=100.0),
        job("s2", submit=200.0, iters=100.0),
    ]
    return snapshot(make_cluster(1, 1, 2), jobs)


def test_shortest_first_admission_passes_over_a_long_job():
    plan = plan_round(_queue(), policy=get_policy("powerflow"), now=5000.0)
    assert set(plan.allocations) == {"s1", "s2"}
    assert plan.waiting["old_long"].code == WaitCode.BEHIND_IN_QUEUE


@pytest.mark.parametrize("rank", ["per_gpu", "hesrpt"])
def test_starvation_bound_admits_a_job_waiting_past_it_before_shorter_ones(rank):
    # given the long job has waited 5000 s and the bound is an hour
    policy = get_policy("powerflow", rank=rank, starvation_s=3600.0)
    plan = plan_round(_queue(), policy=policy, now=5000.0)
    # then it is admitted first, and the later short job waits for the GPU it took
    assert set(plan.allocations) == {"old_long", "s1"}
    assert plan.waiting["s2"].code == WaitCode.BEHIND_IN_QUEUE


def test_starvation_bound_leaves_a_job_below_it_in_shortest_first_order():
    policy = get_policy("powerflow", starvation_s=6000.0)
    plan = plan_round(_queue(), policy=policy, now=5000.0)
    assert set(plan.allocations) == {"s1", "s2"}
    assert "old_long" in plan.waiting


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"starvation_s": 0.0}, "starvation_s must be positive"),
        ({"rank": "rate"}, "rank must be"),
        ({"admission": "marginal", "rank": "per_gpu"}, "admission='marginal' needs"),
    ],
)
def test_powerflow_rejects_bad_admission_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        get_policy("powerflow", **params)


def test_marginal_admission_lets_a_short_jobs_upgrade_outrank_a_long_jobs_admission():
    # given a 2-GPU node, a short job that scales perfectly on 1..2 GPUs and a long
    # rigid one, both waiting
    jobs = [job("long", iters=10_000.0), job("short", iters=100.0, min_gpus=1, max_gpus=2)]
    snap = snapshot(make_cluster(1, 1, 2), jobs)
    srtf = plan_round(snap, policy=get_policy("powerflow", rank="hesrpt"), now=0.0)
    policy = get_policy("powerflow", rank="hesrpt", admission="marginal")
    marginal = plan_round(snap, policy=policy, now=0.0)
    # then shortest-first admission starts both on 1 GPU; marginal admission weighs the
    # short job's doubling (speedup +1, weight 1) above the long job's start (speedup
    # +1, weight 1/2) and gives the short job both GPUs
    assert {k: a.n_gpus for k, a in srtf.allocations.items()} == {"long": 1, "short": 1}
    assert {k: a.n_gpus for k, a in marginal.allocations.items()} == {"short": 2}
    assert marginal.waiting["long"].code == WaitCode.BEHIND_IN_QUEUE
