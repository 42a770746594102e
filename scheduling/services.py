"""The live scheduling round and node liveness: multi-row writes under a lock.

``run_scheduling_round(now=...)`` is the whole round, in one transaction:

1. take the PostgreSQL advisory lock ``ROUND_LOCK_KEY`` with ``pg_try_advisory_xact_lock``;
   a round started while another holds it returns at once (``RoundResult.ran`` false);
2. re-queue the jobs of nodes that stopped heart-beating (``mark_silent_nodes``), and let the
   executor (``WATTFLOW_EXECUTOR``: the agents, or Slurm) repair drift between what runs and
   the allocations (``Executor.reconcile``);
3. fold new telemetry into each running job's refinement scales;
4. build the snapshot (``scheduling.adapters``), call the core's ``plan_round`` with the
   configured policy, and apply the plan through ``cluster.services`` (conditional updates:
   a job cancelled or finished meanwhile makes its change a recorded, skipped decision);
5. record the round, its decisions and each waiting job's reason, keep the policy's state,
   and publish ``ROUND_FINISHED`` (``config/events.py``) after commit; a budget found spent
   for the first time in its period becomes an alert to its team's leads
   (``scheduling.budget_alerts``: dashboard, and e-mail after commit).

After the commit, the executor carries the round out (``Executor.carry_out``: for Slurm,
submit and cancel jobs; for the agents nothing, as they poll their assignments).

The lock is transaction-scoped, so it is released by the commit or rollback that ends the
round, even if the worker dies mid-round.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from graphlib import TopologicalSorter
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import (
    Count,
    F,
    Q,
    Sum,
)
from django.utils import timezone

from cluster import services as cluster_services
from cluster.choices import (
    ACTIVE_JOB_STATES,
    TERMINAL_JOB_STATES,
    WAITING_JOB_STATES,
    HardLimitAction,
    JobState,
    WaitCode,
)
from cluster.models import Job, JobAllocation
from config import events
from scheduling import adapters, budget_alerts, workload_profiles
from scheduling.choices import DecisionAction, RoundOutcome
from scheduling.core import types as core
from scheduling.core.explain import explain_change, gpu_models
from scheduling.core.exploration import DONE, EXPLORING
from scheduling.core.round import plan_round
from scheduling.core.types import J_PER_KWH
from scheduling.executors import Executor, get_executor
from scheduling.liveness import mark_silent_nodes
from scheduling.models import (
    JobSchedulingState,
    RoundDecision,
    SchedulerSettings,
    SchedulingRound,
)
from scheduling.summaries import round_summary
from telemetry import accounting, usage
from telemetry.carbon import CarbonUnavailable, intensity_for_hour

log = logging.getLogger(__name__)

# Key of the advisory lock that makes rounds mutually exclusive ("wattflow" in ASCII, as an
# int8), chosen so that it collides with no other lock of this database.
ROUND_LOCK_KEY = 0x77617474666C6F77


@dataclass(frozen=True)
class RoundResult:
    """What ``run_scheduling_round`` did. ``ran`` is false when it did not plan: the lock was
    held by another round (``skipped="locked"``), the round was not due yet (``"not_due"``)
    or the scheduler is paused (``"paused"``)."""

    ran: bool
    skipped: str = ""
    round_id: int | None = None
    plan: core.Plan | None = None
    applied: int = 0
    failed: int = 0
    requeued: int = 0
    reconciled: int = 0


def try_round_lock() -> bool:
    """Take the round lock for the current transaction; False if another holds it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [ROUND_LOCK_KEY])
        return bool(cursor.fetchone()[0])


def wait_for_round_lock() -> None:
    """Take the round lock for the current transaction, waiting for a round under way to
    commit first: for a write that must not fall inside a round (one that moves what the
    round reads and writes back, ``telemetry.services``' re-keying of a GPU model). Take
    it before any row lock a round may take, so the two never wait on each other."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ROUND_LOCK_KEY])


# --- node liveness ---------------------------------------------------------------------------


def check_liveness(*, now: datetime) -> list[int] | None:
    """Beat's liveness check between rounds: ``mark_silent_nodes`` under the round lock, so it
    never re-queues a job while a round is applying its plan. Returns None when a round holds
    the lock (that round checks liveness itself)."""
    with transaction.atomic():
        if not try_round_lock():
            return None
        return mark_silent_nodes(now=now)


# --- the round -------------------------------------------------------------------------------


def _round_due(config: SchedulerSettings, now: datetime) -> bool:
    """Beat ticks every WATTFLOW_ROUND_INTERVAL_S; a tick earlier than the configured interval
    since the last round is skipped, unless the last round's plan asked to be revisited by
    now (``SchedulingRound.replan_at``: a probe ended) or a spent ``pause_jobs`` budget's jobs
    still run (``_spent_with_jobs_running``, checked by the caller). Half a tick of slack
    absorbs beat's jitter."""
    last = (
        SchedulingRound.objects.order_by("-started_at", "-id")
        .values_list("started_at", "replan_at")
        .first()
    )
    if last is None:
        return True
    last_at, replan_at = last
    # Exactly at or after it: a round earlier than the probe's end would find the probe
    # still under way and keep it, so a probe lasts up to one beat tick beyond probe_s.
    if replan_at is not None and now >= replan_at:
        return True
    slack_s = settings.WATTFLOW_ROUND_INTERVAL_S / 2
    return (now - last_at).total_seconds() >= config.round_interval_s - slack_s


def _spent_with_jobs_running(now: datetime) -> bool:
    """The hard-limit watch between rounds: True where a running ``pause_jobs`` budget of a
    team with jobs still on GPUs is spent by its ledger (brought up to the newest samples
    first where it is near its limit), so that the round that pauses them runs at the next
    beat tick, not after the configured interval. A round's plan paces by predictions, and
    a job learned online can draw or run far from its prediction (in the simulator, a model
    taught on one GPU count and run on another spent 224% of a team's period); the watch
    holds the budget by what was drawn. The simulator's engine does the same
    (``Simulator._hard_limit_watch``). ``hold_queue`` and ``notify_only`` keep their jobs
    running once spent, so they need no early round."""
    budgets = list(
        usage.running_budgets(now=now).filter(hard_limit_action=HardLimitAction.PAUSE_JOBS)
    )
    if not budgets:
        return False
    running = set(
        JobAllocation.objects.filter(
            ended_at__isnull=True, job__team_id__in=[b.team_id for b in budgets]
        ).values_list("job__team_id", flat=True)
    )
    watched = [b for b in budgets if b.team_id in running]
    if not watched:
        return False
    _account_budgets_near_their_limits(
        now,
        round_interval_s=float(settings.WATTFLOW_ROUND_INTERVAL_S),
        team_ids=[b.team_id for b in watched],
    )
    return any(lim.over_hard for b in watched for lim in usage.budget_usage(b).limits)


def _account_budgets_near_their_limits(
    now: datetime, *, round_interval_s: float, team_ids: list[int] | None = None
) -> None:
    """Bring the ledger up to the newest samples of the GPUs of teams whose running budget
    may be past its soft limit (and is not yet known spent), before the round reads budgets.
    Accounting runs on its own interval (``TELEMETRY_ACCOUNTING_INTERVAL_S``), so the
    ledger a round reads lags by up to that and the round's own: a demo team held at its
    hard limit had spent 3.5% more by then, and a round started a job with the period's
    budget already spent (a live-service probe). A budget is near when what the ledger
    shows plus what the team's GPUs could draw at their highest power limits over that lag
    reaches its soft limit: read at the ledger alone, a small budget went from below its
    soft limit to 104-126% between two accountings, and rounds started jobs on it (a
    second probe). Far from every limit the lag costs nothing, and a spent budget is spent
    whatever more it drew: accounting stays with its task. Run outside the round's
    transaction, so that ingestion, which marks the hours, waits on no mark for longer than
    accounting it takes."""
    lag_s = settings.TELEMETRY_ACCOUNTING_INTERVAL_S + round_interval_s
    budgets = list(usage.running_budgets(now=now, team_ids=team_ids))
    if not budgets:
        return
    top_w = dict(
        JobAllocation.objects.filter(
            ended_at__isnull=True, job__team_id__in=[b.team_id for b in budgets]
        )
        .values("job__team_id")
        .annotate(w=Sum("gpus__max_power_limit_w"))
        .values_list("job__team_id", "w")
    )
    ci_g_per_kwh = None
    near = []
    for budget in budgets:
        may_draw_j = float(top_w.get(budget.team_id) or 0.0) * lag_s
        for lim in usage.budget_usage(budget).limits:
            if lim.over_hard:
                continue
            ahead = may_draw_j
            if lim.kind == "carbon":
                if ci_g_per_kwh is None:
                    try:
                        ci_g_per_kwh = intensity_for_hour(
                            settings.TELEMETRY_CARBON_ZONE, now
                        ).ci_g_per_kwh
                    except CarbonUnavailable:  # the round still runs: account to be sure
                        ci_g_per_kwh = math.inf
                ahead = may_draw_j / J_PER_KWH * ci_g_per_kwh
            if lim.used + ahead >= lim.soft_limit:
                near.append(budget.team_id)
                break
    if not near:
        return
    hour = now.replace(minute=0, second=0, microsecond=0)
    since = hour - timedelta(hours=1)
    gpu_ids = set(
        JobAllocation.objects.filter(job__team_id__in=near)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=since))
        .values_list("gpus", flat=True)
    )
    gpu_ids.discard(None)
    if not gpu_ids:
        return
    try:
        accounting.process_dirty_hours(limit=10_000, since=since, gpu_ids=gpu_ids)
    except Exception:  # the round still runs on the ledger as it stands
        log.exception("accounting before the round failed")


def refresh_online_models(rows: list[Job], *, catalog, now: datetime) -> int:
    """Fold new telemetry of running jobs into their online models (observations refused as
    absurd are logged and dropped); returns how many models were refitted."""
    JobSchedulingState.objects.bulk_create(
        [JobSchedulingState(job_id=job.pk) for job in rows], ignore_conflicts=True
    )
    states = JobSchedulingState.objects.in_bulk([job.pk for job in rows])
    return _fold_telemetry_of(
        [(job, states[job.pk], job.current_allocation) for job in rows], catalog=catalog, now=now
    )


# How far back a round looks for allocations that ended since the round before (a round
# that did not run for longer leaves their last stretch untaught).
ENDED_LOOKBACK = timedelta(hours=6)


def refresh_ended_allocations(*, catalog, now: datetime) -> int:
    """Fold the last stretch of every allocation that ended since it was last read: a job
    that finished, was paused or requeued, or was resized between two rounds. Its progress
    reports and samples after the round before would otherwise never be read, and a job
    whose whole allocation fell between two rounds (a short job, the last piece after a
    resize) would teach nothing, nor its workload's profile (a recording of a real H100 in
    ``tests/telemetry/test_device_recording.py``). Each such allocation is read to its end
    once its last samples can have come (``adapters.SAMPLE_LAG_S`` after it ended); then
    ``observed_until`` moves to its end. Returns how many models were refitted."""
    ended = list(
        JobAllocation.objects.filter(
            ended_at__isnull=False,
            ended_at__lte=now,
            ended_at__gt=now - ENDED_LOOKBACK,
            job__scheduling__profile_version__isnull=True,  # (or no state row yet)
        )
        .filter(
            Q(job__scheduling__observed_until__isnull=True)
            | Q(ended_at__gt=F("job__scheduling__observed_until"))
        )
        .order_by("job_id", "ended_at")
        .select_related("job")
        .prefetch_related("gpus")
    )
    JobSchedulingState.objects.bulk_create(
        [JobSchedulingState(job_id=a.job_id) for a in ended], ignore_conflicts=True
    )
    states = JobSchedulingState.objects.in_bulk([a.job_id for a in ended])
    # Each job's allocations in the order they ended: its k-th of them in the k-th wave,
    # read with every other job's k-th (a job's next read starts where its last ended).
    waves: list[list[JobAllocation]] = []
    count: dict[int, int] = defaultdict(int)
    for alloc in ended:
        k = count[alloc.job_id]
        count[alloc.job_id] += 1
        if k == len(waves):
            waves.append([])
        waves[k].append(alloc)
    moved = 0
    for wave in waves:
        moved += _fold_telemetry_of(
            [(alloc.job, states[alloc.job_id], alloc) for alloc in wave], catalog=catalog, now=now
        )
        read = [a for a in wave if (now - a.ended_at).total_seconds() > adapters.SAMPLE_LAG_S]
        if not read:
            continue  # (the rest: their last samples may be on their way, read next round)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {JobSchedulingState._meta.db_table} AS state "
                "SET observed_until = ended.at "
                "FROM unnest(%s::bigint[], %s::timestamptz[]) AS ended (id, at) "
                f"WHERE state.{JobSchedulingState._meta.pk.column} = ended.id "
                "AND (state.observed_until IS NULL OR state.observed_until < ended.at)",
                [[states[a.job_id].pk for a in read], [a.ended_at for a in read]],
            )
        for alloc in read:
            state = states[alloc.job_id]
            state.observed_until = max(state.observed_until or alloc.ended_at, alloc.ended_at)
    return moved


def _fold_telemetry_of(
    items: list[tuple[Job, JobSchedulingState, JobAllocation | None]], *, catalog, now: datetime
) -> int:
    """Fold each allocation's telemetry since its ``state.observed_until`` into its job's
    online model (a job once at most): read for all at once, then recorded job by job in
    their order, and the new states written together; how many models were refitted."""
    found_of = adapters.observed_measurements_of(items, now=now)
    profiles = None
    writes = workload_profiles.StateWrites()
    draws = workload_profiles.MeasuredDraws(catalog)
    refitted = 0
    for (job, state, alloc), found in zip(items, found_of, strict=True):
        if found is None:
            continue
        if not found.observations:  # (read, nothing of its own: read on from there)
            writes.add(state.pk, observed_until=found.until)
            state.observed_until = found.until
            continue
        if profiles is None:
            # The newest profiles the jobs' priors may come from, read for all at the first
            # job with something to fold: each job's workload and the one it resembles, on
            # its GPUs' models.
            profiles = workload_profiles.latest_profiles(
                {w for job, _, _ in items for w in (job.workload, job.resembles or "")},
                {g.model for *_, a in items if a is not None for g in a.gpus.all()},
            )
        model = workload_profiles.refit_observations(
            job,
            state,
            gpu_model=found.gpu_model,
            observations=found.observations,
            until=found.until,
            catalog=catalog,
            nvml=workload_profiles.nvml_gpus(alloc.gpus.all()).get(found.gpu_model),
            writes=writes,
            newest=profiles,
            draws=draws,
        )
        refitted += model is not None
    writes.save()
    return refitted


def run_scheduling_round(
    *, now: datetime, policy: str | None = None, force: bool = False
) -> RoundResult:
    """Run one round at ``now`` (see the module docstring). ``policy`` overrides the configured
    one for this round only (tests, comparisons); ``force`` ignores the interval and pause."""
    t0 = time.perf_counter()
    config = SchedulerSettings.load()
    # Between rounds, a pause_jobs budget found spent with its jobs running makes the round
    # due now (its ledger was just accounted).
    watched = False
    if force or (not config.paused and _round_due(config, now)):
        _account_budgets_near_their_limits(now, round_interval_s=float(config.round_interval_s))
    elif not config.paused:
        watched = _spent_with_jobs_running(now)
        if watched:
            # the round plans every team: each near its limit is accounted, as for any round
            _account_budgets_near_their_limits(now, round_interval_s=float(config.round_interval_s))
    with transaction.atomic():
        if not try_round_lock():
            return RoundResult(ran=False, skipped="locked")
        config = SchedulerSettings.load()
        if not force and config.paused:
            return RoundResult(ran=False, skipped="paused")
        if not force and not watched and not _round_due(config, now):
            return RoundResult(ran=False, skipped="not_due")
        requeued = mark_silent_nodes(now=now)
        executor = get_executor()
        reconciled = executor.reconcile(now=now)
        catalog = adapters.current_catalog()
        running = list(
            Job.objects.filter(state=JobState.RUNNING, current_allocation__isnull=False)
            .select_related("current_allocation")
            .prefetch_related("current_allocation__gpus")
        )
        refresh_ended_allocations(catalog=catalog, now=now)
        refresh_online_models(running, catalog=catalog, now=now)
        # (once a finished job's last samples can have come, as its allocation is read)
        workload_profiles.fold_finished_jobs(now=now, settled_s=adapters.SAMPLE_LAG_S)
        policy_name = policy or config.policy
        rows = adapters.build_snapshot(
            now=now,
            round_length_s=float(config.round_interval_s),
            policy_state=config.policy_state if policy_name == config.policy else {},
            catalog=catalog,
        )
        plan = plan_round(rows.snapshot, policy=policy_name, now=now.timestamp())
        # A budget spent now, or found spent after its period ended (its last minutes were
        # accounted after its last round), is announced to its team's leads once; e-mail
        # after the commit (and again after a later round if it failed).
        budget_alerts.record(rows.snapshot.budgets, now=now)
        if budget_alerts.unsent(now=now).exists():
            transaction.on_commit(lambda: budget_alerts.send_pending(now=now), robust=True)
        round_row = _record_round(rows, plan, now=now, requeued=len(requeued))
        applied, failed, decisions = _apply(plan, rows, round_row, now=now)
        _record_waiting(plan, rows, round_row, now=now)
        _record_exploration(plan, rows, now=now)
        if policy_name == config.policy:
            # Only while the policy is still the one that planned: an admin who switched it
            # during this round reset the state for the new policy (it was handed this one's).
            SchedulerSettings.objects.filter(pk=config.pk, policy=policy_name).update(
                policy_state=_json_safe(plan.policy_state)
            )
        # Counts after the plan was carried out: a change that lost a race, or a running job a
        # hold_queue budget lets finish, is counted as it is, not as planned.
        # (Of the active jobs only: over every job, each round read the whole history.)
        counts = Job.objects.filter(state__in=ACTIVE_JOB_STATES).aggregate(
            queued=Count("pk", filter=Q(state=JobState.QUEUED)),
            running=Count("pk", filter=Q(state=JobState.RUNNING)),
            waiting=Count("pk", filter=Q(pending_round=round_row, state__in=WAITING_JOB_STATES)),
        )
        SchedulingRound.objects.filter(pk=round_row.pk).update(
            queued_jobs=counts["queued"],
            running_jobs=counts["running"],
            waiting_jobs=counts["waiting"],
            outcome=RoundOutcome.PARTIAL if failed else RoundOutcome.APPLIED,
            failed_changes=failed,
            # On the round's own clock (``now`` is passed in), so the two stamps agree.
            finished_at=now + timedelta(seconds=time.perf_counter() - t0),
            plan_duration_s=time.perf_counter() - t0,
        )
        round_row.refresh_from_db()
        # Built from what the round stored, by the function pages use too.
        summary = round_summary(round_row)
        # Dashboards learn of the round through the event (the frontend subscribes), once
        # it is committed.
        events.publish_on_commit(events.ROUND_FINISHED, summary)
        if executor.carries_out:
            # robust: a failing executor is logged and repaired by the next round; the round's
            # own work has committed and stands.
            transaction.on_commit(lambda: carry_out(executor), robust=True)
    log.info(
        "round %s (%s): %d running, %d waiting, %d changes applied, %d failed",
        round_row.pk, plan.policy, len(plan.allocations), len(plan.waiting), applied, failed,
    )  # fmt: skip
    return RoundResult(
        ran=True,
        round_id=round_row.pk,
        plan=plan,
        applied=applied,
        failed=failed,
        requeued=len(requeued),
        reconciled=reconciled.changes,
    )


def carry_out(executor: Executor | None = None):
    """Let the executor make running work match the open allocations (after a round's commit;
    also callable alone, e.g. by a test or a command)."""
    executor = executor or get_executor()
    report = executor.carry_out(now=timezone.now())
    for error in report.errors:
        log.warning("executor %s: %s", executor.name, error)
    return report


def _json_safe(state: Any) -> Any:
    """The policy's state as stored JSON (tuples become lists, keys text)."""
    return json.loads(json.dumps(state, default=str))


def _record_round(
    rows: adapters.SnapshotRows, plan: core.Plan, *, now: datetime, requeued: int
) -> SchedulingRound:
    snap = rows.snapshot
    return SchedulingRound.objects.create(
        started_at=now,
        finished_at=now,
        policy=plan.policy,
        round_length_s=snap.round_length_s,
        schedulable_gpus=len(snap.cluster.schedulable_gpus),
        active_jobs=len(snap.jobs),
        running_jobs=len(plan.allocations),
        waiting_jobs=len(plan.waiting),
        changes=len(plan.changes),
        requeued_jobs=requeued,
        predicted_energy_j=plan.predicted_energy_j,
        predicted_co2_g=plan.predicted_co2_g,
        energy_allowance_j=plan.energy_allowance_j,
        co2_allowance_g=plan.co2_allowance_g,
        ci_g_per_kwh=snap.carbon.ci_g_per_kwh,
        ci_estimated=snap.carbon.estimated,
        plan_duration_s=0.0,
        replan_at=None
        if plan.replan_at_s is None
        else datetime.fromtimestamp(plan.replan_at_s, tz=UTC),
    )


@dataclass
class _Passes:
    applied: int
    failed: int
    decisions: list[RoundDecision]
    pending: list[adapters.RowChange]
    errors: dict[int, str]


def _apply_passes(
    pending: list[adapters.RowChange],
    why: dict[int, str],
    round_row: SchedulingRound,
    plan: core.Plan,
    errors: dict[int, str],
    *,
    now: datetime,
) -> _Passes:
    """Apply ``pending`` pass after pass while a pass applies anything (see ``_apply``);
    what is still pending comes back with its error in ``errors``."""
    decisions: list[RoundDecision] = []
    applied = failed = 0
    while pending:
        retry = []
        for change in pending:
            try:
                _apply_one(
                    change,
                    now=now,
                    max_jobs_per_gpu=plan.max_jobs_per_gpu,
                    round_id=round_row.pk,
                )
            except cluster_services.AllocationError as exc:
                errors[change.job.pk] = str(exc)
                retry.append(change)
                continue
            except cluster_services.InvalidTransition as exc:
                errors[change.job.pk] = str(exc)
                decisions.append(_decision(round_row, change, why, applied=False, error=str(exc)))
                failed += 1
                continue
            errors.pop(change.job.pk, None)
            decisions.append(_decision(round_row, change, why, applied=True))
            applied += 1
        progress = len(retry) < len(pending)
        pending = retry
        if not progress:
            break
    return _Passes(applied, failed, decisions, pending, errors)


class _CycleNotApplied(Exception):
    pass


def _apply_cycle(
    pending: list[adapters.RowChange],
    why: dict[int, str],
    round_row: SchedulingRound,
    plan: core.Plan,
    *,
    now: datetime,
) -> _Passes | None:
    """One group of resizes (``_resize_groups``) applied together: their jobs' open
    allocations end at ``now``, then the passes run over the group. None, with nothing
    changed, unless every one of them then applies."""
    resizes = {c.job.pk for c in pending if c.kind == core.ChangeKind.RESIZE}
    try:
        with transaction.atomic():
            # The jobs' rows first (in id order), then their allocations: the order every
            # job change takes them in (``transition_job``, ``set_allocation``). Ended
            # first, a cancel that came between locked the job, waited on its allocation,
            # and the set_allocation below waited on the job: a deadlock, the cancel a 500.
            list(
                Job.objects.select_for_update()
                .filter(pk__in=resizes)
                .order_by("pk")
                .values_list("pk", flat=True)
            )
            JobAllocation.objects.filter(
                job_id__in=resizes, job__state=JobState.RUNNING, ended_at__isnull=True
            ).update(ended_at=now)
            outcome = _apply_passes(list(pending), why, round_row, plan, {}, now=now)
            # Only its own resizes decide (the group holds nothing else now; a start refused
            # meanwhile, its job cancelled, gave up a swap that applied whole, round after
            # round, when the starts ran inside it).
            refused = {d.job_id for d in outcome.decisions if not d.applied}
            if any(c.job.pk in resizes for c in outcome.pending) or refused & resizes:
                raise _CycleNotApplied
    except _CycleNotApplied:
        return None
    return outcome


def _resize_groups(resizes: list[adapters.RowChange]) -> list[list[adapters.RowChange]]:
    """``resizes`` (pending, of running jobs) in the groups that stand or fall together: the
    strongly connected components of "needs a GPU another of them holds" (a swap, a ring;
    a resize in no ring is a group of its own), each group after the groups holding GPUs it
    needs. All of them as one group, a resize stuck for its own reasons (a GPU retired, or
    held by a job outside the plan) failed an independent swap with it, round after round."""
    held_by: dict[int, set[int]] = defaultdict(set)
    for job_id, gpu_id in JobAllocation.objects.filter(
        job_id__in=[c.job.pk for c in resizes], ended_at__isnull=True
    ).values_list("job_id", "gpus"):
        if gpu_id is not None:
            held_by[gpu_id].add(job_id)
    by_job = {c.job.pk: c for c in resizes}
    needs = {
        c.job.pk: sorted({h for g in c.gpus for h in held_by.get(g.pk, ()) if h != c.job.pk})
        for c in resizes
    }
    # The strong components (scipy), then their order: a component after every component
    # holding GPUs its members need (the stdlib's topological sort of the condensation).
    # (scipy imported here: a ring is rare, and every web and worker process imports this
    # module at start-up)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    ids = list(by_job)
    at = {job_id: k for k, job_id in enumerate(ids)}
    edges = [(at[j], at[h]) for j in ids for h in needs[j]]
    rows, cols = zip(*edges, strict=False) if edges else ((), ())
    graph = csr_matrix(([1] * len(edges), (rows, cols)), shape=(len(ids), len(ids)))
    _, label = connected_components(graph, directed=True, connection="strong")
    order: TopologicalSorter = TopologicalSorter()
    for k in range(len(ids)):
        order.add(int(label[k]))
    for r, c in edges:
        if label[r] != label[c]:
            order.add(int(label[r]), int(label[c]))  # r's component after c's
    members: dict[int, list[adapters.RowChange]] = defaultdict(list)
    for i, job_id in enumerate(ids):
        members[int(label[i])].append(by_job[job_id])
    return [sorted(members[c], key=lambda ch: ch.job.pk) for c in order.static_order()]


def _apply(
    plan: core.Plan, rows: adapters.SnapshotRows, round_row: SchedulingRound, *, now: datetime
) -> tuple[int, int, list[RoundDecision]]:
    """Carry out the plan's changes; returns (applied, failed, decisions). A change that loses
    a race (job moved, GPUs taken) is recorded with its error and the round goes on. A change
    whose GPUs another change of the plan frees is retried once the others have moved, pass
    after pass while a pass applies anything: a chain of resizes each taking the GPU the
    next one leaves needs as many passes as it is long in the wrong order (three passes
    failed the end of a chain of four, found by a live probe). Resizes no order can make
    (a swap, a ring) are then applied together (``_apply_cycle``), or, where one of them
    still cannot be, none of them; each ring on its own (``_resize_groups``), so a resize
    stuck for its own reasons fails only the rings that need its GPUs."""
    pending = adapters.allocation_changes(plan, rows)
    # Why each start, resize or retune happened (a stop's reason is its wait reason).
    model_of = gpu_models(rows.snapshot)
    why = {
        rows.jobs[c.job_id].pk: explain_change(
            c, rows.snapshot, plan, now=now.timestamp(), model_of=model_of
        )
        for c in plan.changes
    }
    decisions: list[RoundDecision] = []
    errors: dict[int, str] = {}
    outcome = _apply_passes(pending, why, round_row, plan, errors, now=now)
    applied, failed, pending = outcome.applied, outcome.failed, outcome.pending
    decisions.extend(outcome.decisions)
    resizes = [c for c in pending if c.kind == core.ChangeKind.RESIZE]
    if resizes:
        # Resizes of running jobs, each onto GPUs another of them holds (a swap, a ring of
        # eight after a switch to a fixed-size policy): no order applies any of them, and a
        # plan that stays the same failed them every round, the jobs never given the GPUs
        # their policy planned (a live probe: 8 failed a round, round after round). Each
        # ring's allocations end together first, then each takes its new one; all or
        # nothing, ring by ring, so one stuck resize fails only the resizes that need it.
        rest = [c for c in pending if c.kind != core.ChangeKind.RESIZE]
        pending, moved = [], 0
        for group in _resize_groups(resizes):
            if len(group) == 1:  # in no ring: it may go now the groups it needs have moved
                outcome = _apply_passes(group, why, round_row, plan, errors, now=now)
            else:
                outcome = _apply_cycle(group, why, round_row, plan, now=now)
                if outcome is None:
                    pending.extend(group)  # each keeps its error from the passes above
                    continue
                errors.update(outcome.errors)
            applied += outcome.applied
            failed += outcome.failed
            moved += outcome.applied
            decisions.extend(outcome.decisions)
            pending.extend(outcome.pending)
        if rest and moved:
            # Starts (and the like) waiting for GPUs those resizes left.
            outcome = _apply_passes(rest, why, round_row, plan, errors, now=now)
            applied += outcome.applied
            failed += outcome.failed
            decisions.extend(outcome.decisions)
            rest = outcome.pending
        pending.extend(rest)
    for change in pending:
        decisions.append(
            _decision(round_row, change, why, applied=False, error=errors.get(change.job.pk, ""))
        )
        failed += 1
    RoundDecision.objects.bulk_create(decisions)
    return applied, failed, decisions


def _record_exploration(plan: core.Plan, rows: adapters.SnapshotRows, *, now: datetime) -> int:
    """Keep each job's exploration record where it changed (``JobSchedulingState``), and
    close the record of a job that ended while exploring (in the last ``ENDED_LOOKBACK``):
    no round plans it again, and its page said "Exploring" for good (a job cancelled
    during its power-limit sweep)."""
    ended = list(
        JobSchedulingState.objects.filter(
            job__state__in=TERMINAL_JOB_STATES,
            job__finished_at__gte=now - ENDED_LOOKBACK,
            exploration__status=EXPLORING,
        ).select_related("job")
    )
    for state in ended:
        state.exploration = {**state.exploration, "status": DONE, "reason": "the job ended"}
        probe = state.exploration.get("probe") or {}
        if "batch" in probe:
            # It ended during its batch probe: a job that failed there did not run the
            # batch (out of memory, say), which the record keeps (exploration.BATCH_PROBE).
            failed = state.job.state == JobState.FAILED
            state.exploration.update(
                probe=None,
                other_batch={
                    **{k: v for k, v in probe.items() if k != "done_iters"},
                    "runnable": False if failed else None,
                    "reason": f"the job ended ({state.job.state}) during the probe",
                },
            )
    JobSchedulingState.objects.bulk_update(ended, ["exploration"])
    before = rows.snapshot.exploration
    changed = {
        rows.jobs[job_id].pk: record
        for job_id, record in plan.exploration.items()
        if job_id in rows.jobs and before.get(job_id) != record
    }
    if not changed:
        return 0
    JobSchedulingState.objects.bulk_create(
        [JobSchedulingState(job_id=pk) for pk in changed], ignore_conflicts=True
    )
    states = JobSchedulingState.objects.in_bulk(list(changed))
    for pk, record in changed.items():
        states[pk].exploration = _json_safe(record)
    JobSchedulingState.objects.bulk_update(list(states.values()), ["exploration"])
    return len(changed)


def _until(reason: core.WaitReason | None) -> datetime | None:
    """When the policy expects the job to start; None where it does not say, or where its
    forecast lies past any date (behind a job predicted to run for 10^12 iterations of a
    2^24 batch, Tiresias forecast the year 974,114,704, and the ValueError failed every
    round: a live probe)."""
    if reason is None or reason.until_s is None:
        return None
    try:
        return datetime.fromtimestamp(reason.until_s, tz=UTC)
    except (OverflowError, OSError, ValueError):  # past year 9999, or not finite
        return None


def _apply_one(
    change: adapters.RowChange,
    *,
    now: datetime,
    max_jobs_per_gpu: int = 1,
    round_id: int | None = None,
) -> None:
    """One change, conditionally. ``max_jobs_per_gpu`` is the plan's sharing limit (EaCO: 2),
    which ``cluster.services`` enforces under the GPU rows' locks; a stop records ``round_id``
    as the round that paused the job."""
    job = Job.objects.get(pk=change.job.pk)  # the state as it is now, not as snapshotted
    kind = change.kind
    if kind == core.ChangeKind.STOP:
        reason = change.reason
        cluster_services.transition_job(
            job,
            to=JobState.PAUSED,
            at=now,
            pending_reason_code=WaitCode(str(reason.code)) if reason else WaitCode.PREEMPTED,
            pending_reason=reason.message if reason else "Paused by the scheduler.",
            pending_until=_until(reason),
            pending_round_id=round_id,
        )
        return
    config = {
        "gpus": change.gpus,
        "batch_size": change.batch_size,
        "sm_clock_mhz": change.sm_clock_mhz,
        "power_limit_w": change.power_limit_w,
        "at": now,
        "max_jobs_per_gpu": max_jobs_per_gpu,
    }
    if kind == core.ChangeKind.START:
        # Entering running clears the job's wait reason (cluster.services.transition_job).
        cluster_services.start_job(job, **config)
    else:
        if job.state != JobState.RUNNING:
            raise cluster_services.InvalidTransition(
                job.pk, job.state, JobState.RUNNING, f"it is {job.state}, not running"
            )
        cluster_services.set_allocation(job, **config)


def _decision(
    round_row: SchedulingRound,
    change: adapters.RowChange,
    why: dict[int, str],
    *,
    applied: bool,
    error: str = "",
) -> RoundDecision:
    reason = change.reason
    return RoundDecision(
        round=round_row,
        job_id=change.job.pk,
        action=DecisionAction(str(change.kind)),
        gpu_uuids=[g.uuid for g in change.gpus],
        batch_size=change.batch_size,
        sm_clock_mhz=change.sm_clock_mhz,
        power_limit_w=change.power_limit_w,
        reason_code=str(reason.code) if reason else "",
        reason=reason.message if reason else why.get(change.job.pk, ""),
        applied=applied,
        error=error,
    )


def _record_waiting(
    plan: core.Plan, rows: adapters.SnapshotRows, round_row: SchedulingRound, *, now: datetime
) -> int:
    """Each waiting job's reason, expected start and this round, on the job (the one store of
    why a job waits), for jobs still queued or paused; and on each running job a spent
    ``hold_queue`` budget keeps where it runs (``plan.held``), why it would otherwise wait.

    One statement whatever the queue's length; a round with hundreds of waiting jobs must
    not cost hundreds of round trips. The values go as four arrays joined by id, not as a
    CASE per column with a branch per job: Django took 3 s to compile that statement for a
    large cluster's 1,550 waiting jobs (three CASEs of 1,550 branches each), PostgreSQL 0.5 s
    to run it. Returns how many jobs it marked.
    """
    held = {int(job_id): reason for job_id, reason in plan.held.items()}
    # A running job a spent hold_queue budget kept says why it would wait (the pages show it
    # as kept); once no round holds it, that note goes.
    Job.objects.filter(state=JobState.RUNNING).exclude(pending_reason_code="").exclude(
        pk__in=list(held)
    ).update(pending_reason_code="", pending_reason="", pending_until=None, pending_round=None)
    if not plan.waiting and not held:
        return 0
    waiting = {int(job_id): reason for job_id, reason in plan.waiting.items()}

    def mark(reasons: dict[int, core.WaitReason], states) -> int:
        if not reasons:
            return 0
        ids = list(reasons)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Job._meta.db_table} AS job SET pending_reason_code = reason.code, "
                "pending_reason = reason.message, pending_until = reason.until, "
                "pending_round_id = %s "
                "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::timestamptz[]) "
                "AS reason (id, code, message, until) "
                "WHERE job.id = reason.id AND job.state = ANY(%s::text[])",
                [
                    round_row.pk,
                    ids,
                    [WaitCode(str(reasons[pk].code)).value for pk in ids],
                    [reasons[pk].message for pk in ids],
                    [_until(reasons[pk]) for pk in ids],
                    sorted(str(state) for state in states),
                ],
            )
            return cursor.rowcount

    mark(held, (JobState.RUNNING,))
    return mark(waiting, WAITING_JOB_STATES)
