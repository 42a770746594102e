"""A job known only by a prior that overestimates its cost is probed once, within a
bound, instead of waiting for good (``budget_greedy``, "Probes"). Before the probe a
learned team-budget run left every ncf job unstarted: its prior (another workload) said it
would cost more than ncf's whole budget, and a job that never runs is never observed."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from scheduling.core.explain import explain_change
from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget
from tests.core.corekit import (
    AnalyticModel,
    Catalog,
    PriorOnly,
    RoundSpy,
    job,
    make_cluster,
    running,
    snapshot,
)

# The prior says 1,000 s per iteration at 40 W: 10 iterations cost 400 kJ, far beyond the
# team's 12 kJ for the period, and a 300 s round at the lowest clock 20 W x 300 s = 6 kJ,
# over the round's paced allowance (12 kJ x 300 / 24,000 x 1.25 = 187.5 J).
PRIOR = PriorOnly("w", t1_s=1000.0, idle_power_w=10.0, busy_power_w=40.0)
MEASURED = replace(PRIOR, estimated=False)
# The GPU's idle draw comes from the catalog (the lowest of its models').
CATALOG = Catalog(AnalyticModel("w", idle_power_w=10.0, busy_power_w=40.0))


def _snap(model=PRIOR, *, limit_j=12_000.0, used_j=0.0, state=None, jobs=None, round_s=300.0):
    """One node, job "a" (10 iterations) known by ``model``, team t's 12 kJ over 24,000 s."""
    budget = Budget("b", "t", 0.0, 24_000.0, energy_limit_j=limit_j, energy_used_j=used_j)
    jobs = jobs or [job("a", iters=10.0)]
    return snapshot(
        make_cluster(1, 1, 8),
        jobs,
        CATALOG,
        budgets=(budget,),
        job_perf={(j.job_id, "A100"): model for j in jobs},
        policy_state=state or {},
        round_length_s=round_s,
    )


def _round(model, *, now=0.0, limit_j=12_000.0, state=None, jobs=None, round_s=300.0, **policy):
    snap = _snap(model, limit_j=limit_j, state=state, jobs=jobs, round_s=round_s)
    return plan_round(snap, policy=get_policy("powerflow", **policy), now=now)


def _probed(plan, job_id="a"):
    """The job as the next round sees it: running where the plan put it."""
    alloc = plan.allocations[job_id]
    return running(job(job_id, iters=10.0), alloc.gpu_ids, clock=alloc.sm_clock_mhz)


def test_a_job_held_only_by_its_prior_starts_for_a_bounded_probe():
    plan = _round(PRIOR)
    alloc = plan.allocations["a"]
    assert alloc.n_gpus == 1 and alloc.sm_clock_mhz == 1000  # its minimum configuration
    assert plan.replan_at_s == pytest.approx(60.0)  # the probe ends after probe_s
    probe = plan.policy_state["prior_probes"]["a"]
    # lowest clock: 10 + 30 x 0.25 = 17.5 W for 60 s
    assert probe["predicted_energy_j"] == pytest.approx(17.5 * 60.0)
    assert probe["until_s"] == pytest.approx(60.0)


def test_a_measured_model_that_does_not_fit_still_waits():
    # (the probe's rule alone: a measured job larger than every period of its budget runs
    # in parts, test_run_in_parts.py)
    plan = _round(MEASURED, run_in_parts=False)
    assert "a" not in plan.allocations
    assert plan.waiting["a"].code == "over_round_allowance"
    assert plan.replan_at_s is None


def test_a_job_is_probed_once():
    first = _round(PRIOR)
    # the probe ran (a round saw the job running) and, out of extensions, was stopped
    # without an observation (the model is still the prior): no second probe
    ran = _round(
        PRIOR, state=first.policy_state, jobs=[_probed(first)], now=60.0, probe_extensions=0
    )
    assert "a" not in ran.allocations
    later = _round(PRIOR, state=ran.policy_state, now=300.0)
    assert "a" not in later.allocations
    assert later.policy_state["prior_probes"]["a"]["ran"]


def test_a_probe_granted_but_never_started_is_not_used_up():
    # the grant was not carried out (no block was placed, the executor failed): the next
    # round finds the job still waiting, never seen running, and probes it afresh
    first = _round(PRIOR)
    again = _round(PRIOR, state=first.policy_state, now=300.0)
    assert again.allocations["a"].n_gpus == 1
    assert again.policy_state["prior_probes"]["a"]["at_s"] == pytest.approx(300.0)
    assert again.replan_at_s == pytest.approx(360.0)


def test_a_round_is_charged_its_own_part_of_a_longer_probe():
    # 10 s rounds: the 60 s probe is bounded as a whole (1,050 J) but this round pays
    # only its own 10 s (175 J), so other work of the budget is not crowded out
    spy = RoundSpy()
    plan = plan_round(_snap(round_s=10.0), policy=spy, now=0.0)
    assert plan.policy_state["prior_probes"]["a"]["predicted_energy_j"] == pytest.approx(1050.0)
    assert spy.rnd.spent_e[0] == pytest.approx(175.0)


def test_a_probe_must_fit_a_share_of_what_the_period_has_left():
    # 1,050 J is more than a quarter of 4,000 J
    plan = _round(PRIOR, limit_j=4_000.0)
    assert "a" not in plan.allocations
    # and its wait says why: its prior's cost, and a probe's, not jobs ahead of it
    assert "its prior (a guess from other workloads)" in plan.waiting["a"].message
    assert "more than 25% of what that budget has left" in plan.waiting["a"].message
    # and spent budget counts: 12 kJ limit, 8 kJ used leaves the same 4 kJ
    snap = _snap(used_j=8_000.0)
    assert "a" not in plan_round(snap, policy=get_policy("powerflow"), now=0.0).allocations


@dataclass(frozen=True)
class LimitedPrior(PriorOnly):
    """A prior on a GPU whose power limit range NVML reports: it draws at most 60 W."""

    power_limits_w: tuple[float, float] = (20.0, 60.0)


def test_a_probe_may_take_what_the_period_has_left_at_its_gpus_top_draw_if_nothing_else_runs():
    # given the probe of the test above (1,050 J at the prior's draw, over a quarter of
    # 4,000 J), on a GPU that draws at most 60 W: 60 s at 60 W is 3,600 J
    prior = LimitedPrior("w", t1_s=1000.0, idle_power_w=10.0, busy_power_w=40.0)
    # then with nothing else of the team running it starts: the quarter kept for the team's
    # other work keeps nothing from anyone (a team period small beside a probe never
    # learned its jobs: ncf's 67 jobs never started under learned team budgets)
    plan = _round(prior, limit_j=4_000.0)
    assert plan.allocations["a"].n_gpus == 1
    assert plan.waiting == {}
    # and it is counted at the most its GPU can draw, so a prior that underestimates the
    # draw cannot overspend: with 3,000 J left (50 s of it) the probe is as long as that
    # pays with min_probe_s (10 s) to spare for a live round's lateness, 40 s
    plan = _round(prior, limit_j=3_000.0)
    assert plan.allocations["a"].n_gpus == 1
    assert plan.replan_at_s == pytest.approx(40.0)
    assert plan.policy_state["prior_probes"]["a"]["until_s"] == pytest.approx(40.0)
    # and where that leaves less than min_probe_s it waits, and says why
    plan = _round(prior, limit_j=1_190.0)
    assert "a" not in plan.allocations
    assert "would draw more, at its GPUs' highest power limit, than that budget has left" in (
        plan.waiting["a"].message
    )
    # and where the quarter at the prior's draw fits, that is the test, as before: with
    # 4,800 J (a quarter is 1,200 J) it starts charged its prior's draw, not its top
    spy = RoundSpy()
    assert "a" in plan_round(_snap(prior, limit_j=4_800.0), policy=spy, now=0.0).allocations
    assert spy.rnd.spent_e[0] == pytest.approx(1_050.0)


def test_a_probe_at_its_top_draw_holds_its_later_rounds_back_from_other_probes():
    # given 10 s rounds (the service's) and 4,000 J: "a" starts at its top draw, charged
    # 600 J this round (10 s at 60 W) and holding 3,000 J for its next 50 s; "b", a lighter
    # job (10 W: 600 J for its probe), would fit a quarter of 3,400 J (850 J) but not of
    # what is left once a's later rounds are held (400 J: a quarter is 100 J)
    heavy = LimitedPrior("w", t1_s=1000.0, idle_power_w=10.0, busy_power_w=40.0)
    light = LimitedPrior("w", t1_s=1000.0, idle_power_w=10.0, busy_power_w=10.0)
    jobs = [job("a", iters=10.0), job("b", iters=10.0)]
    snap = _snap(heavy, limit_j=4_000.0, jobs=jobs, round_s=10.0)
    snap = replace(snap, job_perf={**snap.job_perf, ("b", "A100"): light})
    first = plan_round(snap, policy=get_policy("powerflow"), now=0.0)
    assert sorted(first.allocations) == ["a"]
    # and the probe's next round is charged at its top draw too (was: its prior's)
    probes = first.policy_state["prior_probes"]
    assert probes["a"]["top_w"] == pytest.approx(60.0)
    spy = RoundSpy()
    state = {**first.policy_state}
    snap2 = _snap(heavy, limit_j=4_000.0, state=state, round_s=10.0, jobs=[_probed(first)])
    snap2 = replace(snap2, budgets=(replace(snap2.budgets[0], energy_used_j=600.0),))
    plan_round(snap2, policy=spy, now=10.0)
    assert spy.rnd.spent_e[0] == pytest.approx(600.0)  # 175 J at its prior's draw


def test_probes_can_be_turned_off():
    plan = _round(PRIOR, probe_s=None)
    assert "a" not in plan.allocations


def test_a_budgeted_job_known_only_by_its_prior_gets_no_more_gpus():
    # A generous budget: the job fits at once. Elastic up to 8 GPUs; with a measured model
    # the greedy buys GPUs, with its prior alone it stays at its minimum GPU count until
    # observed; its clock is chosen as any job's (here the top one: the budget is ample)
    elastic = [job("a", iters=10.0, min_gpus=1, max_gpus=8)]
    fast = replace(PRIOR, t1_s=1.0)
    learned = _round(replace(fast, estimated=False), limit_j=1e9, jobs=elastic)
    assert learned.allocations["a"].n_gpus > 1
    prior = _round(fast, limit_j=1e9, jobs=elastic)
    assert (prior.allocations["a"].n_gpus, prior.allocations["a"].sm_clock_mhz) == (1, 2000)


def test_without_a_budget_a_job_known_only_by_its_prior_keeps_its_minimum_gpu_count():
    # No budget pays for it: its clock may rise, but the GPUs, which other jobs could use,
    # are not given on its prior's guess of its scaling. Once measured the greedy grows it;
    # with prior_box="requested" it may take the 4 GPUs it asked for, at once.
    elastic = [job("a", n=4, iters=10.0, min_gpus=1, max_gpus=8)]
    fast = replace(PRIOR, t1_s=1.0)

    def unbudgeted(model, name="powerflow", **policy):
        snap = snapshot(make_cluster(1, 1, 8), elastic, CATALOG, job_perf={("a", "A100"): model})
        return plan_round(snap, policy=get_policy(name, **policy), now=0.0).allocations["a"]

    for name in ("powerflow", "greenflow"):
        alloc = unbudgeted(fast, name)
        assert (alloc.n_gpus, alloc.sm_clock_mhz) == (1, 2000), name  # its top clock
    assert unbudgeted(replace(fast, estimated=False)).n_gpus == 8
    assert unbudgeted(fast, prior_box="requested").n_gpus == 4


def test_with_prior_box_requested_a_prior_only_job_may_grow_to_what_it_asked_for():
    # The same elastic job, asking for 4 GPUs: with its prior alone it may take up to the
    # 4 GPUs it asked for (a user's own choice bounds what the prior's guess can cost) and
    # any clock, never more GPUs; once measured the greedy may give it 8.
    elastic = [job("a", n=4, iters=10.0, min_gpus=1, max_gpus=8)]
    fast = replace(PRIOR, t1_s=1.0)
    prior = _round(fast, limit_j=1e9, jobs=elastic, prior_box="requested")
    assert prior.allocations["a"].n_gpus == 4
    learned = _round(replace(fast, estimated=False), limit_j=1e9, jobs=elastic)
    assert learned.allocations["a"].n_gpus == 8
    with pytest.raises(ValueError, match="prior_box"):
        get_policy("powerflow", prior_box="all")


def test_a_probe_outlasts_a_short_round_and_a_round_before_its_end_keeps_it():
    # Live rounds may come every 10 s: the probe still lasts probe_s, and a round inside
    # it keeps the job at its minimum and asks again for the probe's end.
    first = _round(PRIOR, round_s=10.0)
    assert first.replan_at_s == pytest.approx(60.0)
    mid = _round(PRIOR, round_s=10.0, state=first.policy_state, jobs=[_probed(first)], now=20.0)
    assert mid.allocations["a"].n_gpus == 1 and mid.allocations["a"].sm_clock_mhz == 1000
    assert mid.replan_at_s == pytest.approx(60.0)
    assert mid.policy_state["prior_probes"]["a"].get("extensions", 0) == 0


def test_a_probe_that_ends_unobserved_goes_on_a_bounded_number_of_times():
    # A slow start: at the probe's end the job runs but has not reported yet.
    plan = _round(PRIOR)
    for k in (1, 2):
        now = plan.replan_at_s
        plan = _round(PRIOR, state=plan.policy_state, jobs=[_probed(plan)], now=now)
        probe = plan.policy_state["prior_probes"]["a"]
        assert probe["extensions"] == k
        assert plan.replan_at_s == pytest.approx(now + 60.0)
        assert probe["predicted_energy_j"] == pytest.approx(17.5 * 60.0 * (k + 1))
    # out of extensions (probe_extensions=2): it waits like any other job
    last = _round(PRIOR, state=plan.policy_state, jobs=[_probed(plan)], now=plan.replan_at_s)
    assert "a" not in last.allocations
    assert last.waiting["a"].code == "over_round_allowance"
    assert last.replan_at_s is None


def test_an_extension_must_fit_the_probe_bound_too():
    # 4,400 J: a first probe's 1,050 J fits a quarter (1,100 J); once the period has spent
    # 1,050 J more, another 1,050 J is over a quarter of what is left.
    plan = _round(PRIOR, limit_j=4_400.0)
    assert "a" in plan.allocations
    snap = _snap(limit_j=4_400.0, used_j=1_050.0, state=plan.policy_state, jobs=[_probed(plan)])
    later = plan_round(snap, policy=get_policy("powerflow"), now=60.0)
    assert "a" not in later.allocations


def test_extensions_can_be_turned_off():
    plan = _round(PRIOR)
    later = _round(
        PRIOR, state=plan.policy_state, jobs=[_probed(plan)], now=60.0, probe_extensions=0
    )
    assert "a" not in later.allocations


def test_a_probe_start_says_it_is_a_probe_and_why():
    plan = _round(PRIOR)
    snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=10.0)], CATALOG)
    (start,) = plan.changes
    text = explain_change(start, snap, plan, now=0.0)
    assert "a probe of 60 s" in text
    assert "estimate from another workload" in text
    # a measured job's start says nothing of a probe
    measured = _round(MEASURED, limit_j=1e9)
    assert "probe" not in explain_change(measured.changes[0], snap, measured, now=0.0)


def test_a_start_held_to_its_minimum_by_its_prior_says_its_speed_is_an_estimate():
    # No budget: the job known by its prior alone starts on 1 of the 4 GPUs it asked for,
    # and the round's "why" says its speed is an estimate; a measured job's start does not
    elastic = [job("a", n=4, iters=10.0, min_gpus=1, max_gpus=8)]
    fast = replace(PRIOR, t1_s=1.0)
    for model, held in ((fast, True), (replace(fast, estimated=False), False)):
        snap = snapshot(make_cluster(1, 1, 8), elastic, CATALOG, job_perf={("a", "A100"): model})
        plan = plan_round(snap, policy=get_policy("powerflow"), now=0.0)
        (start,) = plan.changes
        text = explain_change(start, snap, plan, now=0.0)
        assert ("its speed there is still an estimate" in text) is held, text
        assert ("1 GPU of the 4 it asked for" in text) is held, text


def test_a_start_on_a_gpu_model_where_the_job_is_measured_says_nothing_of_an_estimate():
    # estimated on the V100 only: its start on A100s, where its model is the catalog's or
    # measured, is no guess; the same start with the A100 model estimated says so
    elastic = [job("a", n=4, iters=10.0, min_gpus=1, max_gpus=8)]
    fast = replace(PRIOR, t1_s=1.0)
    v100 = {("a", "V100"): replace(fast, gpu_model="V100")}
    for a100, said in (({}, False), ({("a", "A100"): replace(fast, estimated=False)}, False),
                       ({("a", "A100"): fast}, True)):  # fmt: skip
        perf = {**a100, **v100}
        snap = snapshot(make_cluster(1, 1, 8), elastic, CATALOG, job_perf=perf)
        plan = plan_round(snap, policy="fifo", now=0.0)  # the 4 GPUs it asked for
        text = explain_change(plan.changes[0], snap, plan, now=0.0)
        assert "on the 4 GPUs it asked for" in text
        assert ("still an estimate" in text) is said, text


@pytest.mark.parametrize("policy", ["powerflow", "greenflow", "elastic"])
def test_a_running_job_its_prior_alone_knows_is_not_shrunk_to_its_minimum(policy):
    # it runs on 4 GPUs (started before this policy, or by a scheduler that trusted the
    # prior) and has not reported yet: the box keeps what it runs on rather than restarting
    # it on one GPU, and gives it no more
    elastic = [
        running(job("a", iters=10.0, min_gpus=1, max_gpus=8), [f"s0n0/{i}" for i in range(4)])
    ]
    fast = replace(PRIOR, t1_s=1.0)
    snap = snapshot(make_cluster(1, 1, 8), elastic, CATALOG, job_perf={("a", "A100"): fast})
    assert plan_round(snap, policy=get_policy(policy), now=0.0).allocations["a"].n_gpus == 4


def test_a_start_the_period_could_not_pay_a_whole_round_of_at_its_top_draw_waits():
    # given a 600 s period with 12 kJ left and a job known by another workload's prior
    # that says it draws 11 W (3.3 kJ a 300 s round, inside the round's allowance) on a GPU
    # that can draw 60 W (18 kJ a round: more than the period has left)
    light = LimitedPrior("w", t1_s=1000.0, idle_power_w=10.0, busy_power_w=11.0)
    budget = Budget("b", "t", 0.0, 600.0, energy_limit_j=12_000.0, energy_used_j=0.0)

    def plan(model):
        snap = snapshot(make_cluster(1, 1, 8), [job("a", iters=10.0)], CATALOG,
                        budgets=(budget,), job_perf={("a", "A100"): model},
                        round_length_s=300.0)  # fmt: skip
        return plan_round(snap, policy=get_policy("powerflow", probe_s=None), now=0.0)

    # then it does not start as a round's job (a cifar10 job on ncf's prior drew 3.4 times
    # what it was charged, in a period's last rounds)
    assert "a" not in plan(light).allocations
    # while the same figures, measured, start it
    assert "a" in plan(replace(light, estimated=False)).allocations
