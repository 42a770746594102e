"""One scheduling round: ``plan_round(snapshot, *, policy, now)``.

A short pipeline of named stages, each a plain function:

1. ``admit``: resolve each active job's GPU model and perf model and its active
   budgets; jobs that cannot run at all this round (no perf model, no such GPU,
   budget exhausted) get their reason here and never reach the policy. A spent
   budget's ``hard_limit_action`` is honoured here and nowhere else: ``pause_jobs``
   stops its jobs, ``hold_queue`` starts none but *pins* its running jobs (they keep
   their GPUs and settings, and those GPUs are taken out of what the policy and the
   placer may hand out), ``notify_only`` holds nothing back (its jobs run as if it
   were not there; until it is spent it is paced like any other).
2. ``allocate``: the policy turns admitted jobs into grants (GPU count, batch, clock
   or power limit) in priority order, and reasons for the rest.
3. ``place``: the policy's placer maps grants to GPU ids; a grant with no room left
   waits with ``NO_FREE_BLOCK``.
4. ``diff``: compare with the running allocations: start, stop, resize, retune.

Then the plan's energy and carbon over the round are predicted (busy GPUs at their
configuration's power, powered idle GPUs at idle power) and reported against the
allowances the policy used. Time comes in as ``now``; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from itertools import compress, count
from operator import attrgetter, not_

from scheduling.core.colocation import slowed_power_w
from scheduling.core.context import Estimate, JobView, PerfCache, RoundContext
from scheduling.core.exploration import explore_round
from scheduling.core.gpu_probe import probe_more_gpus
from scheduling.core.perf_models import unset_tops
from scheduling.core.placement import PLACERS, PlacementRequest, PlacementResult
from scheduling.core.registry import get_policy
from scheduling.core.types import (
    J_PER_KWH,
    Allocation,
    Budget,
    Change,
    ChangeKind,
    Cluster,
    HardLimitAction,
    Job,
    Plan,
    Policy,
    PolicyDecision,
    Snapshot,
    WaitCode,
    WaitReason,
)
from scheduling.core.waiting import join_reasons

_JOB = attrgetter("job")


class PolicyContractError(RuntimeError):
    """A policy returned a decision that breaks the contract in ``types.Policy``."""


def plan_round(
    snapshot: Snapshot, *, policy: str | Policy, now: float, memo: AdmitMemo | None = None
) -> Plan:
    """Plan one round at time ``now`` (seconds, same clock as the snapshot). ``memo``: kept
    by a caller that plans round after round (``AdmitMemo``); the plan is the same without."""
    pol = get_policy(policy) if isinstance(policy, str) else policy
    ctx, waiting = admit(snapshot, now=now, memo=memo)
    decision = allocate(ctx, pol)
    # A new job's first rounds may try other power limits (off unless the snapshot and
    # the policy turn it on; exploration.py).
    decision, explored = explore_round(ctx, decision, explores=getattr(pol, "explores", False))
    allocations, unplaced = place(ctx, decision, placement=pol.placement)
    # (a dict as ``dict.update`` makes it; a long queue's tail's reasons made when read)
    waiting = join_reasons((waiting, decision.waiting, unplaced), ctx.views_by_id)
    # A job kept beside idle GPUs at a count its model never saw beyond may try the next
    # size once (learned models only; gpu_probe.py).
    explored = probe_more_gpus(ctx, pol, allocations, explored)
    changes = diff(snapshot.jobs, allocations)
    plan = _finish(ctx, pol, decision, allocations, waiting, changes)
    return replace(plan, exploration=explored) if explored else plan


# --- stage 1: admit -----------------------------------------------------------------


def active_budgets(budgets: tuple[Budget, ...], now: float) -> tuple[Budget, ...]:
    return tuple(b for b in budgets if b.period_start_s <= now < b.period_end_s)


def _spent_action(pays: list[Budget]) -> tuple[Budget | None, HardLimitAction | None]:
    """The strictest action among the spent budgets that pay for a job (pause over
    hold over notify), with the budget that calls for it."""
    worst: tuple[Budget | None, HardLimitAction | None] = (None, None)
    for b in pays:
        if not b.exhausted:
            continue
        if _STRICTNESS[b.hard_limit_action] > _STRICTNESS.get(worst[1], -1):
            worst = (b, b.hard_limit_action)
    return worst


_STRICTNESS = {
    HardLimitAction.NOTIFY_ONLY: 0,
    HardLimitAction.HOLD_QUEUE: 1,
    HardLimitAction.PAUSE_JOBS: 2,
}


class AdmitMemo:
    """Admission's job views, kept from one round to the next by a caller that plans
    round after round and hands a job that has not changed in as the same ``Job`` object
    (the simulator keeps a waiting job's). A view is what admission resolved for its job
    (GPU model, perf model, the budgets that pay), which for a job without a learned model
    of its own depends only on its shape (workload, GPU model, least GPU count, team) and
    on the round's capacity, catalog and budgets. So where every shape the last round
    resolved resolves to the same this round (checked on one job of each: the same GPU
    model, the same perf model object, the same budgets, nothing spent), the last round's
    views of the same job objects are this round's, found by the job's ``id`` in C, and
    only the jobs new to the round (arrived, started, stopped, advanced) are walked: a long
    queue of waiting jobs is not. Not used in a round where some job has a learned model
    of its own. The memo holds its views' jobs, so no id in it is another object's."""

    __slots__ = ("views", "shapes")

    def __init__(self) -> None:
        self.views: dict[int, JobView] = {}
        # per shape: a job of it and what it resolved to (GPU model, perf model, budgets)
        self.shapes: dict[tuple[str, str | None, int, str], tuple[Job, tuple]] = {}


def admit(
    snapshot: Snapshot, *, now: float, memo: AdmitMemo | None = None
) -> tuple[RoundContext, dict[str, WaitReason]]:
    cache = PerfCache(
        snapshot.perf,
        snapshot.job_perf,
        snapshot.idle_power_w,
        snapshot.clock_steps,
        snapshot.power_limits,
    )
    capacity, node_gpus = (dict(d) for d in snapshot.cluster.schedulable_capacity)
    # A job that names no GPU model runs on the most plentiful one with a perf model.
    models_by_size = sorted(capacity, key=lambda m: (-capacity[m], m))
    budgets = active_budgets(snapshot.budgets, now)
    cluster_budgets = [b for b in budgets if b.team is None]

    pinned: list[JobView] = []
    held: dict[str, WaitReason] = {}
    waiting: dict[str, WaitReason] = {}
    # Per team, once (queues are long): the strictest spent budget that pays for its jobs,
    # its action, and the budgets that still limit a job's configuration.
    payers: dict[str | None, tuple[Budget | None, HardLimitAction | None, tuple[str, ...]]] = {}
    # A job without a learned model resolves as every job of its workload, GPU model and
    # least GPU count does (queues are long).
    resolved: dict[tuple[str, str | None, int], tuple] = {}
    # The same per (workload, GPU model, least GPU count, team), for the common case: an
    # admitted job that nothing holds, whose view needs only the model, perf and payers.
    free_to_run: dict[tuple[str, str | None, int, str], tuple] = {}
    shape_job: dict[tuple[str, str | None, int, str], Job] = {}  # a job of each (memo)
    learned = cache.learned_jobs
    # The GPU models with room for a least GPU count, by that count (queues are long).
    fitting: dict[int, list[str]] = {}

    def payer(team: str):
        known = payers.get(team)
        if known is None:
            pays = [b for b in budgets if b.team == team] + cluster_budgets
            spent, action = _spent_action(pays)
            if action == HardLimitAction.NOTIFY_ONLY:
                # Spent but only reported: it no longer limits the job's configuration.
                pays = [b for b in pays if not b.exhausted]
                spent = None
            known = payers[team] = (spent, action, tuple(b.budget_id for b in pays))
        return known

    def shape_model(job: Job):
        shape = (job.workload, job.gpu_model, job.min_gpus)
        hit = resolved.get(shape)
        if hit is None:
            hit = resolved[shape] = _resolve_model(job, models_by_size, capacity, cache, fitting)
        return hit

    # The last round's views, where every shape resolves as it did (``AdmitMemo``).
    use_memo = memo is not None and not learned
    kept: dict[int, JobView] | None = None
    if use_memo and memo.views:
        for rep, (model, perf, pay_ids) in memo.shapes.values():
            model_now, perf_now, reason = shape_model(rep)
            spent, _, pay_now = payer(rep.team)
            if (
                reason is not None
                or spent is not None
                or model_now != model
                or perf_now is not perf
                or pay_now != pay_ids
            ):
                break
        else:
            kept = memo.views
            for shape, (rep, result) in memo.shapes.items():
                free_to_run[shape] = result
                shape_job[shape] = rep
    jobs = snapshot.jobs
    if kept:
        # (in C: a job kept from the last round is found by its id; the rest walked)
        out: list[JobView | None] = list(map(kept.get, map(id, jobs)))
        todo = compress(zip(count(), jobs), map(not_, out))
    else:
        out = [None] * len(jobs)
        todo = enumerate(jobs)
    for i, job in todo:
        own = learned and job.job_id in learned  # cache.has_own_model(job), inlined
        if not own:
            hit = free_to_run.get((job.workload, job.gpu_model, job.min_gpus, job.team))
            if hit is not None:
                out[i] = JobView(job, *hit)
                continue
        if own:
            model, perf, reason = _resolve_model(job, models_by_size, capacity, cache, fitting)
        else:
            model, perf, reason = shape_model(job)
        if reason is not None:
            waiting[job.job_id] = reason
            continue
        spent, action, pay_ids = payer(job.team)
        if spent is not None:
            whose = f"team {job.team}'s" if spent.team else "the cluster's"
            reason = WaitReason(
                WaitCode.BUDGET_EXHAUSTED,
                f"Waiting: {whose} budget for this period is used up; "
                "it renews when the period ends.",
                until_s=spent.period_end_s,
            )
            if action == HardLimitAction.HOLD_QUEUE and _keeps_gpus(job, snapshot.cluster):
                pinned.append(JobView(job, model, perf, pay_ids))
                held[job.job_id] = reason
                continue
            waiting[job.job_id] = reason
            continue
        # positional: a frozen view takes a third longer to make by keywords, one per job
        out[i] = JobView(job, model, perf, pay_ids)
        if not own:
            shape = (job.workload, job.gpu_model, job.min_gpus, job.team)
            free_to_run[shape] = (model, perf, pay_ids)
            shape_job[shape] = job
    # (a job that waits or is pinned left its place empty; ``None in out`` would call a
    # view's ``__eq__`` per job)
    views = out if len(waiting) + len(pinned) == 0 else list(filter(None, out))
    if use_memo:
        # every view here is a shape's (no job has a model of its own)
        memo.views = dict(zip(map(id, map(_JOB, views)), views, strict=False))
        memo.shapes = {shape: (shape_job[shape], r) for shape, r in free_to_run.items()}
    free_cluster = snapshot.cluster
    if pinned:
        pinned_gpus = {gid for jv in pinned for gid in jv.job.allocation.gpu_ids}
        for jv in pinned:
            capacity[jv.gpu_model] -= jv.job.allocation.n_gpus
        free_cluster = _without(snapshot.cluster, pinned_gpus)
    ctx = RoundContext(
        snapshot=snapshot,
        now_s=now,
        jobs=tuple(views),
        capacity=capacity,
        node_gpus=node_gpus,
        budgets=budgets,
        cache=cache,
        policy_state=dict(snapshot.policy_state),
        pinned=tuple(pinned),
        held=held,
        cluster=free_cluster,
    )
    return ctx, waiting


def _keeps_gpus(job: Job, cluster: Cluster) -> bool:
    """A running job whose GPUs are all schedulable can be pinned where it runs (one on a
    drained or silent node is stopped as ``pause_jobs`` would)."""
    if job.allocation is None:
        return False
    ok = cluster.schedulable_model_of
    return all(gid in ok for gid in job.allocation.gpu_ids)


def _without(cluster: Cluster, gpu_ids: set[str]) -> Cluster:
    return Cluster(
        nodes=tuple(
            replace(n, gpus=tuple(g for g in n.gpus if g.gpu_id not in gpu_ids))
            for n in cluster.nodes
        )
    )


def _resolve_model(
    job: Job,
    models_by_size: list[str],
    capacity: Mapping[str, int],
    cache: PerfCache,
    fitting_memo: dict[int, list[str]] | None = None,
):
    if job.gpu_model is not None:
        if capacity.get(job.gpu_model, 0) < job.min_gpus:
            have = capacity.get(job.gpu_model, 0)
            return (
                None,
                None,
                WaitReason(
                    WaitCode.NO_MATCHING_GPU,
                    f"Waiting: needs {job.min_gpus} {job.gpu_model} GPU(s); "
                    f"the cluster has {have} schedulable.",
                ),
            )
        perf = cache.model_for(job, job.gpu_model)
        if perf is None:
            return None, None, _no_perf(job, job.gpu_model)
        return job.gpu_model, perf, None
    fitting = None if fitting_memo is None else fitting_memo.get(job.min_gpus)
    if fitting is None:
        fitting = [m for m in models_by_size if capacity[m] >= job.min_gpus]
        if fitting_memo is not None:
            fitting_memo[job.min_gpus] = fitting
    if not fitting:
        return (
            None,
            None,
            WaitReason(
                WaitCode.NO_MATCHING_GPU,
                f"Waiting: needs {job.min_gpus} GPU(s) of one model; "
                "no GPU model has that many schedulable.",
            ),
        )
    for m in fitting:
        perf = cache.model_for(job, m)
        if perf is not None:
            return m, perf, None
    return None, None, _no_perf(job, "/".join(fitting))


def _no_perf(job: Job, models: str) -> WaitReason:
    return WaitReason(
        WaitCode.NO_PERF_MODEL,
        f"Waiting: no performance model for workload {job.workload!r} on {models}, "
        "so it cannot be sized.",
    )


# --- stage 2: allocate --------------------------------------------------------------


def sharing_limit(policy: Policy) -> int:
    """Jobs one GPU may hold under ``policy`` (1 unless it declares more)."""
    return int(getattr(policy, "max_jobs_per_gpu", 1))


def _check_explicit(ctx: RoundContext, policy: Policy, decision: PolicyDecision) -> set[str]:
    """Validate grants that name their GPUs; return the distinct GPUs they use."""
    model_of = ctx.free_cluster.schedulable_model_of
    holders: dict[str, int] = {}
    limit = sharing_limit(policy)
    for g in decision.grants:
        if not g.gpu_ids:
            continue
        if len(g.gpu_ids) != g.n_gpus or len(set(g.gpu_ids)) != g.n_gpus:
            raise PolicyContractError(f"{policy.name}: {g.job_id} names {g.gpu_ids} for {g.n_gpus}")
        for gid in g.gpu_ids:
            if model_of.get(gid) != g.gpu_model:
                raise PolicyContractError(
                    f"{policy.name}: {g.job_id} names GPU {gid!r}, not a schedulable {g.gpu_model}"
                )
            holders[gid] = holders.get(gid, 0) + 1
            if holders[gid] > limit:
                raise PolicyContractError(
                    f"{policy.name}: GPU {gid!r} given to more than {limit} job(s)"
                )
    return set(holders)


def allocate(ctx: RoundContext, policy: Policy) -> PolicyDecision:
    decision = policy.allocate(ctx)
    admitted = ctx.views_by_id
    used: dict[str, int] = {}
    seen: set[str] = set()
    for g in decision.grants:
        jv = admitted.get(g.job_id)
        if jv is None or g.job_id in seen:
            raise PolicyContractError(
                f"{policy.name}: grant for unknown or repeated job {g.job_id!r}"
            )
        if g.n_gpus < 1 or g.gpu_model != jv.gpu_model:
            raise PolicyContractError(f"{policy.name}: bad grant {g}")
        seen.add(g.job_id)
        if not g.gpu_ids:
            used[g.gpu_model] = used.get(g.gpu_model, 0) + g.n_gpus
    # Named GPUs count once however many jobs time-slice them.
    model_of = ctx.snapshot.cluster.model_of
    for gid in _check_explicit(ctx, policy, decision):
        used[model_of[gid]] = used.get(model_of[gid], 0) + 1
    for model, n in used.items():
        if n > ctx.capacity.get(model, 0):
            raise PolicyContractError(
                f"{policy.name}: granted {n} {model} GPUs of {ctx.capacity.get(model, 0)}"
            )
    # (in C: a long queue's reasons need not be made to be counted in)
    missing = set(admitted).difference(seen, decision.waiting)
    if missing:
        missing = [j for j in admitted if j in missing]
        raise PolicyContractError(f"{policy.name}: no grant and no reason for {missing[:5]}")
    return decision


# --- stage 3: place -----------------------------------------------------------------


def place(
    ctx: RoundContext, decision: PolicyDecision, *, placement: str | None
) -> tuple[dict[str, Allocation], dict[str, WaitReason]]:
    views = ctx.views_by_id
    requests = []
    named = {gid for g in decision.grants for gid in g.gpu_ids}
    for g in decision.grants:
        if g.gpu_ids:
            continue
        cur = views[g.job_id].job.allocation
        requests.append(
            PlacementRequest(g.job_id, g.n_gpus, g.gpu_model, cur.gpu_ids if cur else ())
        )
    cluster = ctx.free_cluster
    if named and requests:
        # The placer shares the cluster with grants that named their GPUs: it sees
        # only the rest (block alignment is then relative to what is left).
        cluster = _without(cluster, named)
    if placement is None:
        if requests:
            raise PolicyContractError(
                f"grants without GPU ids ({requests[0].job_id}, ...) from a policy that "
                "names its GPUs itself (placement None)"
            )
        result = PlacementResult({}, ())
    else:
        result = PLACERS[placement](cluster, requests)
    # Pinned jobs keep exactly what they run (see ``admit``).
    allocations: dict[str, Allocation] = {jv.job.job_id: jv.job.allocation for jv in ctx.pinned}
    taken = ctx.snapshot.power_limits
    steps = ctx.snapshot.clock_steps
    for g in decision.grants:
        ids = g.gpu_ids or result.gpu_ids.get(g.job_id)
        if ids is not None:
            model_top_mhz, model_top_w = unset_tops(views[g.job_id].perf)
            clock = g.sm_clock_mhz
            if clock is None and g.gpu_model in steps:
                # No clock: the GPUs run up to their own top, recorded (and applied) as the
                # clock where it is below the top the job's model predicts no clock at, so
                # that the job is predicted at it (``ClockSteps.unset_for``).
                clock = steps[g.gpu_model].unset_for(model_top_mhz)
            limit = g.power_limit_w
            if limit is not None and g.gpu_model in taken:
                # A limit the policy did not take from its model's range (``fifo``'s own
                # ``power_limit_w``) is the one the GPUs run at, and predicted at it
                # (``Snapshot.power_limits``; a limit from the range is taken as it is).
                limit = taken[g.gpu_model].take(limit)
            elif limit is None and g.gpu_model in taken:
                # No limit: the GPUs run at their default, recorded (and applied) as the
                # limit so that the job is predicted at it, not unthrottled at the top
                # (``PowerLimits.unset_for``; None where the default is both their top
                # and the top the job's model predicts no limit at).
                limit = taken[g.gpu_model].unset_for(model_top_w)
            allocations[g.job_id] = Allocation(
                gpu_ids=ids,
                global_batch=g.global_batch,
                sm_clock_mhz=clock,
                power_limit_w=limit,
            )
    unplaced = {
        j: WaitReason(
            WaitCode.NO_FREE_BLOCK,
            "Waiting: enough GPUs are free in total but no suitably shaped block of them is.",
        )
        for j in result.failed
    }
    return allocations, unplaced


# --- stage 4: diff ------------------------------------------------------------------


def diff(jobs: tuple[Job, ...], allocations: Mapping[str, Allocation]) -> tuple[Change, ...]:
    changes = []
    # (a long queue's waiting jobs, neither running nor given GPUs, passed over at once)
    for job in [j for j in jobs if j.allocation is not None or j.job_id in allocations]:
        before, after = job.allocation, allocations.get(job.job_id)
        if before is None:
            kind = ChangeKind.START
        elif after is None:
            kind = ChangeKind.STOP
        elif set(before.gpu_ids) != set(after.gpu_ids):
            kind = ChangeKind.RESIZE
        elif (before.global_batch, before.sm_clock_mhz, before.power_limit_w) != (
            after.global_batch,
            after.sm_clock_mhz,
            after.power_limit_w,
        ):
            kind = ChangeKind.RETUNE
        else:
            continue
        changes.append(Change(job_id=job.job_id, kind=kind, before=before, after=after))
    return tuple(changes)


# --- prediction of what the plan costs ------------------------------------------------


def _finish(
    ctx: RoundContext,
    pol: Policy,
    decision: PolicyDecision,
    allocations: dict[str, Allocation],
    waiting: dict[str, WaitReason],
    changes: tuple[Change, ...],
) -> Plan:
    snapshot = ctx.snapshot
    round_s = snapshot.round_length_s
    ci = snapshot.carbon.ci_g_per_kwh
    views = ctx.views_by_id
    if ctx.pinned:
        views = {**views, **{jv.job.job_id: jv for jv in ctx.pinned}}
    busy_by_budget: dict[str, float] = {}
    total_j = 0.0
    busy_j = 0.0
    busy_gpus: set[str] = set()
    slowdown = {g.job_id: g.slowdown for g in decision.grants}
    for job_id, a in allocations.items():
        jv = views[job_id]
        est = ctx.estimate(jv, a.n_gpus, a.global_batch, a.sm_clock_mhz, a.power_limit_w)
        idle_w = ctx.idle_power_w(jv.gpu_model)
        s = slowdown.get(job_id, 0.0)
        guest = bool(busy_gpus.intersection(a.gpu_ids))
        if s > 0.0 or guest:
            est = _shared_estimate(est, a.n_gpus, idle_w, s, round_s, guest=guest)
        # A job that finishes inside the round leaves its GPUs idle but powered; on
        # shared GPUs its co-runner already pays their idle power.
        energy_j = est.round_energy_j
        if not guest:
            energy_j += a.n_gpus * idle_w * (round_s - est.round_busy_s)
        total_j += energy_j
        busy_j += est.round_energy_j
        busy_gpus.update(a.gpu_ids)
        for bid in jv.budget_ids:
            busy_by_budget[bid] = busy_by_budget.get(bid, 0.0) + est.round_energy_j
    idle_w_of: dict[str, float] = {}  # (looked up once a model: clusters are large)
    for node in snapshot.cluster.nodes:
        if not node.schedulable:
            continue
        if snapshot.power_off_idle_nodes and not any(g.gpu_id in busy_gpus for g in node.gpus):
            continue
        for g in node.gpus:
            if g.gpu_id not in busy_gpus:
                idle_w = idle_w_of.get(g.model)
                if idle_w is None:
                    idle_w = idle_w_of[g.model] = ctx.idle_power_w(g.model)
                total_j += idle_w * round_s
    idle_j = total_j - busy_j
    energy_by_budget: dict[str, float] = {}
    co2_by_budget: dict[str, float] = {}
    for b in ctx.budgets:
        e = busy_by_budget.get(b.budget_id, 0.0) + (idle_j if b.team is None else 0.0)
        energy_by_budget[b.budget_id] = e
        co2_by_budget[b.budget_id] = e / J_PER_KWH * ci
    e_allow = dict(decision.energy_allowance_by_budget_j)
    c_allow = dict(decision.co2_allowance_by_budget_g)
    return Plan(
        replan_at_s=decision.replan_at_s,
        allocations=allocations,
        waiting=waiting,
        held=dict(ctx.held),
        changes=changes,
        predicted_energy_j=total_j,
        predicted_co2_g=total_j / J_PER_KWH * ci,
        energy_allowance_j=_headline(ctx.budgets, e_allow),
        co2_allowance_g=_headline(ctx.budgets, c_allow),
        policy_state=dict(decision.policy_state),
        energy_allowance_by_budget_j=e_allow,
        co2_allowance_by_budget_g=c_allow,
        predicted_energy_by_budget_j=energy_by_budget,
        predicted_co2_by_budget_g=co2_by_budget,
        policy=pol.name,
        max_jobs_per_gpu=sharing_limit(pol),
    )


def _shared_estimate(
    est: Estimate,
    n: int,
    idle_w: float,
    slowdown: float,
    round_s: float,
    *,
    guest: bool,
) -> Estimate:
    """A job slowed by ``slowdown`` (time-slicing or network): it stays busy longer and
    draws :func:`~scheduling.core.colocation.slowed_power_w` (the co-location physics,
    in one place). On GPUs a co-runner already holds, only the draw above idle is
    added."""
    remaining_s = est.remaining_s * (1.0 + slowdown)
    busy_s = min(round_s, remaining_s)
    power_w = slowed_power_w(est.power_w, idle_w, slowdown, pays_idle=not guest)
    return Estimate(
        remaining_s=remaining_s,
        power_w=power_w,
        round_busy_s=busy_s,
        round_energy_j=n * power_w * busy_s,
        remaining_energy_j=n * power_w * remaining_s,
    )


def _headline(budgets: tuple[Budget, ...], allowances: Mapping[str, float]) -> float | None:
    """The cluster-wide allowance if there is one, else the sum over team budgets."""
    if not allowances:
        return None
    cluster = [
        allowances[b.budget_id] for b in budgets if b.team is None and b.budget_id in allowances
    ]
    if cluster:
        return min(cluster)
    return sum(allowances.values())
