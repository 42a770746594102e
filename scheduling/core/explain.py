"""Why a round made each change, in a sentence a person can read.

A wait already carries its reason (``Plan.waiting``); a start, resize or retune does not, so
the round table's "why" column would be empty for them. ``explain_change`` says what the plan
gave the job against what it asked for or had, and the facts of the round that bear on it:
what the job's budgets allow this round against what the plan spends (the pacing every
budget-aware policy does), and for a grown job how many GPUs the round's stops left free. It
states only what the plan and the snapshot hold; it does not guess the policy's motive.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduling.core.types import (
    J_PER_KWH,
    Allocation,
    Budget,
    Change,
    ChangeKind,
    HardLimitAction,
    Job,
    Plan,
    Snapshot,
)


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _setting(a: Allocation) -> str:
    if a.sm_clock_mhz is not None:
        return f"{a.sm_clock_mhz} MHz"
    if a.power_limit_w is not None:
        return f"{a.power_limit_w:.0f} W"
    return "default clocks"


def _paying_budgets(snapshot: Snapshot, team: str, now: float) -> list[Budget]:
    """The budgets in force that limit a job of ``team``: a spent ``notify_only`` budget
    limits nothing (``round.admit``), and a start was explained by its 0 g allowance."""
    return [
        b
        for b in snapshot.budgets
        if b.period_start_s <= now < b.period_end_s
        and b.team in (None, team)
        and not (b.exhausted and b.hard_limit_action == HardLimitAction.NOTIFY_ONLY)
    ]


def _budget_part(budget: Budget, plan: Plan) -> str:
    whose = f"team {budget.team}'s budget" if budget.team else "the cluster's budget"
    bid = budget.budget_id
    if bid in plan.energy_allowance_by_budget_j:
        allowed = plan.energy_allowance_by_budget_j[bid] / J_PER_KWH
        spent = plan.predicted_energy_by_budget_j.get(bid, 0.0) / J_PER_KWH
        return f"{whose} allows {allowed:.3g} kWh this round, the plan spends {spent:.3g} kWh"
    if bid in plan.co2_allowance_by_budget_g:
        allowed = plan.co2_allowance_by_budget_g[bid]
        spent = plan.predicted_co2_by_budget_g.get(bid, 0.0)
        return f"{whose} allows {allowed:.3g} g CO2e this round, the plan spends {spent:.3g} g"
    return ""


def gpu_models(snapshot: Snapshot) -> dict[str, str]:
    """GPU id -> GPU model, for ``explain_change`` (build it once for a round's changes)."""
    return {g.gpu_id: g.model for g in snapshot.cluster.gpus}


def _estimated_on(
    snapshot: Snapshot, job: Job, alloc: Allocation, model_of: Mapping[str, str]
) -> bool:
    """Whether the job's model on the GPU model it was given is a prior alone
    (``estimated``: a learned model before any measurement of its own)."""
    gpu_model = model_of.get(alloc.gpu_ids[0]) if alloc.gpu_ids else None
    model = snapshot.job_perf.get((job.job_id, gpu_model))
    return bool(getattr(model, "estimated", False))


def explain_change(
    change: Change,
    snapshot: Snapshot,
    plan: Plan,
    *,
    now: float,
    model_of: Mapping[str, str] | None = None,
) -> str:
    """One sentence (or two) on why ``change`` happened; "" for a stop (its wait says why).
    ``model_of``: ``gpu_models(snapshot)``, where the caller explains many changes."""
    after, before = change.after, change.before
    if after is None or change.kind == ChangeKind.STOP:
        return ""
    job = next((j for j in snapshot.jobs if j.job_id == change.job_id), None)
    policy = plan.policy or "the policy"
    parts: list[str] = []
    if change.kind == ChangeKind.START:
        asked = job.requested_gpus if job else after.n_gpus
        verb = "Resumed" if job is not None and job.done_iters > 0 else "Started"
        if after.n_gpus == asked:
            grant = f"the {_gpus(asked)} it asked for"
        else:
            grant = f"{_gpus(after.n_gpus)} of the {asked} it asked for"
            if job is not None and job.min_gpus != job.max_gpus:
                grant += f" (it runs on {job.min_gpus} to {job.max_gpus})"
        parts.append(f"{verb} by {policy} on {grant}, at {_setting(after)}")
    elif before is not None:
        what = []
        if before.n_gpus != after.n_gpus:
            what.append(f"{_gpus(before.n_gpus)} → {after.n_gpus}")
        elif set(before.gpu_ids) != set(after.gpu_ids):
            what.append(f"moved to other {_gpus(after.n_gpus)}")
        if before.global_batch != after.global_batch:
            what.append(f"batch {before.global_batch} → {after.global_batch}")
        if _setting(before) != _setting(after):
            what.append(f"{_setting(before)} → {_setting(after)}")
        parts.append(f"{policy} re-planned it: " + ", ".join(what or ["same configuration"]))
        if after.n_gpus > before.n_gpus:
            freed = sum(
                c.before.n_gpus
                for c in plan.changes
                if c.kind == ChangeKind.STOP and c.before is not None
            )
            if freed:
                parts.append(f"this round's stops freed {_gpus(freed)}")
    probe = plan.policy_state.get("prior_probes", {}).get(change.job_id)
    if change.kind == ChangeKind.START and probe is not None and abs(probe["at_s"] - now) < 1e-6:
        # budget_greedy's probe of a job its prior alone holds back ("Probes")
        parts.append(
            f"a probe of {probe['until_s'] - now:.0f} s (its performance is still an "
            "estimate from another workload, whose cost does not fit its budget, so it runs "
            "at its minimum until it is measured)"
        )
    elif (
        change.kind == ChangeKind.START
        and job is not None
        and after.n_gpus < job.max_gpus
        and _estimated_on(snapshot, job, after, model_of or gpu_models(snapshot))
    ):
        parts.append("its speed there is still an estimate: nothing of its own measured yet")
    record = plan.exploration.get(change.job_id) or {}
    gpu_probe = next(
        (p for p in record.get("gpu_probes", ()) if abs(p["since_s"] - now) < 1e-6), None
    )
    if gpu_probe is not None and change.kind == ChangeKind.RESIZE:
        # gpu_probe's round at a larger count on GPUs that would idle
        parts.append(
            f"a probe of {_gpus(gpu_probe['n_gpus'])} for one round on GPUs that would "
            "otherwise idle (its model has measured no more than "
            f"{_gpus(gpu_probe.get('measured_gpus', gpu_probe['from_gpus']))}, "
            "so it cannot tell whether more would pay)"
        )
    if job is not None:
        for budget in _paying_budgets(snapshot, job.team, now):
            part = _budget_part(budget, plan)
            if part:
                parts.append(part)
    return "; ".join(parts) + "."
