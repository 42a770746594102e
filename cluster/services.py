"""Multi-row writes of the cluster app: job submission, the job state machine, allocations.

Every state change is a conditional update (``filter(pk=..., state=old).update(...)``) whose row
count is checked, so two writers racing on one job cannot both win; the loser gets
``InvalidTransition``. Views, tasks and commands call these functions and stay thin.
"""

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from cluster.choices import (
    JOB_TRANSITIONS,
    TERMINAL_JOB_STATES,
    WAITING_JOB_STATES,
    AuditAction,
    JobState,
    NodeStatus,
)
from cluster.models import (
    OVERLAP_MESSAGE,
    AuditEntry,
    Budget,
    BudgetAlert,
    Gpu,
    Job,
    JobAllocation,
    Node,
    Team,
)
from scheduling.core.goodput import iterations_per_submitted
from scheduling.core.types import G_PER_KG, J_PER_KWH

# How often cancel_job re-reads the state when a concurrent writer keeps moving the job.
_CANCEL_ATTEMPTS = 3


class InvalidTransition(Exception):
    """A job state change that the state machine or the job's current state refuses."""

    def __init__(self, job_id: int, old: str, new: str, detail: str) -> None:
        self.job_id = job_id
        self.old = old
        self.new = new
        super().__init__(f"job {job_id}: cannot go from {old} to {new}: {detail}")


class AllocationError(Exception):
    """An allocation that does not fit the job's limits or takes GPUs another job holds."""


def submit_job(
    *,
    owner,
    team: Team,
    name: str,
    workload: str,
    total_iterations: int,
    global_batch_size: int,
    min_gpus: int = 1,
    max_gpus: int | None = None,
    min_batch_size: int | None = None,
    max_batch_size: int | None = None,
    gpu_model: str = "",
    command: str = "",
    resembles: str = "",
    param_count: int | None = None,
    per_gpu_batch_size: int | None = None,
    base_lr: float | None = None,
    max_lr: float | None = None,
    slowdown_tolerance: float = 0.10,
    priority: int = 0,
    at: datetime | None = None,
    idempotency_key: str = "",
    request_digest: str = "",
) -> Job:
    """Validate and queue a new job. Omitted ranges default to the fixed value (not elastic).

    With an ``idempotency_key``, use ``submit_job_once``: it answers a repeated key."""
    job = Job(
        owner=owner,
        team=team,
        name=name,
        workload=workload,
        total_iterations=total_iterations,
        global_batch_size=global_batch_size,
        min_gpus=min_gpus,
        max_gpus=min_gpus if max_gpus is None else max_gpus,
        min_batch_size=global_batch_size if min_batch_size is None else min_batch_size,
        max_batch_size=global_batch_size if max_batch_size is None else max_batch_size,
        gpu_model=gpu_model,
        command=command,
        resembles=resembles,
        param_count=param_count,
        per_gpu_batch_size=per_gpu_batch_size,
        base_lr=base_lr,
        max_lr=max_lr,
        slowdown_tolerance=slowdown_tolerance,
        priority=priority,
        state=JobState.QUEUED,
        submitted_at=at or timezone.now(),
        idempotency_key=idempotency_key,
        request_digest=request_digest,
    )
    # The key's uniqueness is the database's to enforce (``submit_job_once`` answers a
    # collision); checked here, a racing duplicate would read as the client's bad input.
    job.full_clean(exclude=["idempotency_key", "request_digest"])
    with transaction.atomic():
        # The team's row locked and read again: a submit beside the team's delete waited on
        # the insert's foreign key check and then failed it, a 500 (a live probe). Now the
        # job is queued before the delete looks for jobs (which then refuses), or refused
        # here. FOR KEY SHARE, what the foreign key itself takes: it waits on a delete (and
        # a budget edit's FOR UPDATE), not on the round's budget alerts (FOR NO KEY UPDATE)
        # nor on another submit to the team.
        if not _team_kept(team.pk):
            raise ValidationError({"team": [f"Team {team.slug} no longer exists."]})
        job.save()
    return job


def _team_kept(team_pk: int) -> bool:
    """Whether the team is there, its row held FOR KEY SHARE to the transaction's end (it
    cannot be deleted meanwhile)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {Team._meta.db_table} WHERE id = %s FOR KEY SHARE", [team_pk]
        )
        return cursor.fetchone() is not None


class IdempotencyKeyReused(Exception):
    """A submission key already used by this owner for a different request."""

    def __init__(self, job: Job) -> None:
        super().__init__(
            f"This key was already used for job #{job.pk} with a different request; "
            "use a new key for a new job."
        )
        self.job = job


def submit_job_once(
    *, owner, idempotency_key: str, request_digest: str, **fields
) -> tuple[Job, bool]:
    """Queue a job under the owner's submission key, once: ``(job, True)`` for a new key,
    ``(the job queued under it, False)`` when the key was used before for the same request
    (``request_digest`` equal), ``IdempotencyKeyReused`` when for another. Two requests
    racing with one key queue one job: the database's unique key decides, and the loser
    answers with the winner's job."""
    if not idempotency_key:
        raise ValueError("submit_job_once needs a key")
    # Callers answer a known key first (``earlier_submission``, before validating the
    # request); a key stored since is the unique index's to catch.
    try:
        with transaction.atomic():
            job = submit_job(
                owner=owner,
                idempotency_key=idempotency_key,
                request_digest=request_digest,
                **fields,
            )
    except IntegrityError:
        if (job := earlier_submission(owner, idempotency_key, request_digest)) is None:
            raise
        return job, False
    return job, True


def submission_digest(fields: Mapping[str, Any]) -> str:
    """A digest of a submission's fields (a model instance by its key), the same for the
    same fields in any order: what tells a retried submit from another one."""
    plain = {k: getattr(v, "pk", v) for k, v in fields.items()}
    text = json.dumps(plain, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def earlier_submission(owner, idempotency_key: str, request_digest: str) -> Job | None:
    """The job the owner queued under this key (None if none), or
    ``IdempotencyKeyReused`` when it was queued for another request."""
    job = Job.objects.filter(owner=owner, idempotency_key=idempotency_key).first()
    if job is not None and job.request_digest != request_digest:
        raise IdempotencyKeyReused(job)
    return job


_NOT_WAITING = {
    "pending_reason_code": "",
    "pending_reason": "",
    "pending_until": None,
    "pending_round": None,
}


def transition_job(job: Job, *, to: str, at: datetime | None = None, **fields) -> Job:
    """Move ``job`` from the state it has in memory to ``to``, or raise ``InvalidTransition``.

    ``fields`` are stored in the same UPDATE (e.g. ``exit_status``, ``pending_reason_code``).
    Leaving the waiting states (queued, paused) clears the job's wait reason.
    Entering running stamps ``started_at`` once; entering a terminal state stamps
    ``finished_at``. Leaving running closes the open allocation: a paused, re-queued or finished
    job holds no GPUs. On success the in-memory ``job`` is refreshed.
    """
    old = JobState(job.state)
    new = JobState(to)
    if new not in JOB_TRANSITIONS[old]:
        allowed = ", ".join(sorted(JOB_TRANSITIONS[old]))
        detail = f"{old} may only go to {allowed}" if allowed else f"{old} is a final state"
        raise InvalidTransition(job.pk, old, new, detail)
    at = at or timezone.now()
    updates = dict(fields)
    updates["state"] = new
    updates["updated_at"] = at
    if new == JobState.RUNNING:
        updates.setdefault("started_at", Coalesce("started_at", Value(at)))
    if new in TERMINAL_JOB_STATES:
        updates.setdefault("finished_at", at)
    if new != JobState.RUNNING:
        updates["current_allocation"] = None
    if new not in WAITING_JOB_STATES:
        # A job that no longer waits has no reason to wait (the one store: Job.pending_*).
        for name, empty in _NOT_WAITING.items():
            updates[name] = empty
    with transaction.atomic():
        changed = Job.objects.filter(pk=job.pk, state=old).update(**updates)
        if changed != 1:
            current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
            raise InvalidTransition(
                job.pk, old, new, f"it is {current or 'deleted'} now, not {old}"
            )
        if old == JobState.RUNNING:
            JobAllocation.objects.filter(job_id=job.pk, ended_at__isnull=True).update(ended_at=at)
    job.refresh_from_db()
    return job


def cancel_job(job: Job, *, at: datetime | None = None) -> Job:
    """Cancel a job in whatever non-final state it is in now.

    Re-reads the state first because the caller's copy may be stale (the scheduler moves jobs
    concurrently); retries a few times if the job keeps moving under us.
    """
    for attempt in range(_CANCEL_ATTEMPTS):
        job.refresh_from_db(fields=["state"])
        try:
            return transition_job(job, to=JobState.CANCELLED, at=at)
        except InvalidTransition:
            # A final state is a real refusal; anything else means the job moved between our
            # read and our update, so read again.
            if JobState(job.state) in TERMINAL_JOB_STATES or attempt == _CANCEL_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def set_allocation(
    job: Job,
    *,
    gpus: Iterable[Gpu],
    batch_size: int,
    sm_clock_mhz: int | None = None,
    power_limit_w: int | None = None,
    at: datetime,
    max_jobs_per_gpu: int = 1,
) -> JobAllocation:
    """Give a running job a new allocation, closing its previous one, in one transaction.

    Refuses (``AllocationError``) a GPU count outside min_gpus..max_gpus, a batch size outside
    the job's range, and a GPU that ``max_jobs_per_gpu`` other jobs' open allocations already
    hold (1: exclusive; a plan that time-slices GPUs, EaCO's, passes its own limit). The job
    row and the GPU rows are locked so two rounds cannot interleave their writes.
    """
    if max_jobs_per_gpu < 1:
        raise AllocationError(f"max_jobs_per_gpu must be at least 1, not {max_jobs_per_gpu}")
    gpu_list = list(gpus)
    gpu_ids = sorted({gpu.pk for gpu in gpu_list})
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state != JobState.RUNNING:
            raise AllocationError(f"job {job.pk} is {locked.state}; only running jobs hold GPUs")
        if len(gpu_ids) != len(gpu_list):
            raise AllocationError("the same GPU is listed twice")
        if not locked.min_gpus <= len(gpu_ids) <= locked.max_gpus:
            raise AllocationError(
                f"job {job.pk} takes {locked.min_gpus}..{locked.max_gpus} GPUs, not {len(gpu_ids)}"
            )
        if not locked.min_batch_size <= batch_size <= locked.max_batch_size:
            raise AllocationError(
                f"job {job.pk} takes batch sizes {locked.min_batch_size}.."
                f"{locked.max_batch_size}, not {batch_size}"
            )
        # Lock the GPU rows: a concurrent set_allocation for another job on the same GPUs
        # waits here and then sees this job's open allocation. FOR NO KEY UPDATE (which still
        # excludes a second set_allocation) rather than FOR UPDATE, so telemetry rows whose
        # foreign keys name these GPUs (dirty-hour marks, ledger rows) do not wait for the
        # whole round to commit; the rows are locked in id order.
        gpu_rows = list(
            Gpu.objects.select_for_update(no_key=True)
            .filter(pk__in=gpu_ids)
            .order_by("pk")
            .values_list("pk", "retired_at", "node_id", "uuid")
        )
        retired = sorted(pk for pk, retired_at, _, _ in gpu_rows if retired_at is not None)
        if retired:
            # (retired after the round read the cluster, before it placed the job)
            raise AllocationError(f"GPU(s) {retired} are retired")
        # Moved or renamed (an admin's edit, ``Gpu.clean``) after the round read the cluster:
        # the edit saw no job on the GPU, since none was placed yet, and the plan was made
        # for the node and UUID the round read (one node for the job; that node's agent).
        read = {gpu.pk: (gpu.node_id, gpu.uuid) for gpu in gpu_list}
        moved = sorted(pk for pk, _, node_id, uuid in gpu_rows if read[pk] != (node_id, uuid))
        if moved:
            raise AllocationError(
                f"GPU(s) {moved} were moved or renamed after the round read the cluster"
            )
        through = JobAllocation.gpus.through
        holders: dict[int, set[int]] = {}
        for gpu_id, holder in (
            through.objects.filter(gpu_id__in=gpu_ids, joballocation__ended_at__isnull=True)
            .exclude(joballocation__job_id=job.pk)
            .values_list("gpu_id", "joballocation__job_id")
        ):
            holders.setdefault(gpu_id, set()).add(holder)
        full = {g: jobs for g, jobs in holders.items() if len(jobs) >= max_jobs_per_gpu}
        if full:
            taken = sorted({j for jobs in full.values() for j in jobs})
            raise AllocationError(
                f"GPUs are held by job(s) {taken} (at most {max_jobs_per_gpu} job(s) per GPU)"
            )
        previous = JobAllocation.objects.filter(job_id=job.pk, ended_at__isnull=True).first()
        kept = None
        if previous is not None and previous.batch_size == batch_size:
            if sorted(previous.gpus.values_list("pk", flat=True)) == gpu_ids:
                kept = previous.iterations_per_submitted
        JobAllocation.objects.filter(job_id=job.pk, ended_at__isnull=True).update(ended_at=at)
        allocation = JobAllocation.objects.create(
            job_id=job.pk,
            batch_size=batch_size,
            sm_clock_mhz=sm_clock_mhz,
            power_limit_w=power_limit_w,
            started_at=at,
            # The job counts its iterations at this batch in units fixed now (goodput at the
            # noise scale known now); a job retuned in place (same GPUs and batch: the agent
            # does not restart it) keeps counting as it did, so it keeps its units.
            iterations_per_submitted=kept
            if kept is not None
            else iterations_per_submitted(locked.noise_scale, batch_size, locked.global_batch_size),
        )
        allocation.gpus.set(gpu_ids)
        Job.objects.filter(pk=job.pk).update(current_allocation=allocation, updated_at=at)
    job.refresh_from_db()
    return allocation


def start_job(
    job: Job,
    *,
    gpus: Iterable[Gpu],
    batch_size: int,
    sm_clock_mhz: int | None = None,
    power_limit_w: int | None = None,
    at: datetime,
    max_jobs_per_gpu: int = 1,
) -> JobAllocation:
    """Move a queued or paused job to running on the given GPUs, all or nothing (GPU sharing
    as in ``set_allocation``)."""
    try:
        with transaction.atomic():
            transition_job(job, to=JobState.RUNNING, at=at)
            return set_allocation(
                job,
                gpus=gpus,
                batch_size=batch_size,
                sm_clock_mhz=sm_clock_mhz,
                power_limit_w=power_limit_w,
                at=at,
                max_jobs_per_gpu=max_jobs_per_gpu,
            )
    except (InvalidTransition, AllocationError):
        # The transaction rolled back; make the caller's copy match the row again.
        job.refresh_from_db()
        raise


def record_audit(
    *,
    actor,
    action: str,
    object_type: str,
    object_id: object = "",
    team: Team | None = None,
    before: dict | None = None,
    after: dict | None = None,
    at: datetime | None = None,
):
    """Append one audit entry for a change to a budget, a policy or another audited setting.

    Call it inside the transaction that makes the change, so the entry commits (or rolls back)
    with it. ``before``/``after`` must be JSON-serialisable (use ``audit_snapshot``).
    """
    return AuditEntry.objects.create(
        at=at or timezone.now(),
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_username=getattr(actor, "username", "") or "",
        action=AuditAction(action),
        object_type=object_type,
        object_id=str(object_id),
        team=team,
        before=before,
        after=after,
    )


def audit_snapshot(instance, fields: Iterable[str]) -> dict:
    """The named fields of a model instance as JSON-friendly values (datetimes as ISO text)."""
    snapshot = {}
    for name in fields:
        value = getattr(instance, name)
        if isinstance(value, datetime):
            value = value.isoformat()
        snapshot[name] = value
    return snapshot


class NodeStateError(Exception):
    """A drain or undrain that the node's current status refuses."""


def _set_node_status(node: Node, *, old: str, new: str, actor=None) -> Node:
    # Conditional update: an agent marking the node unhealthy, or a second admin, may change
    # the status between the page load and the click; only one writer wins.
    with transaction.atomic():
        changed = Node.objects.filter(pk=node.pk, status=old).update(status=new)
        if changed != 1:
            current = Node.objects.filter(pk=node.pk).values_list("status", flat=True).first()
            raise NodeStateError(
                f"node {node.name} is {current or 'deleted'}, not {old}; nothing changed"
            )
        record_audit(
            actor=actor,
            action=AuditAction.UPDATED,
            object_type="node",
            object_id=node.pk,
            before={"name": node.name, "status": old},
            after={"name": node.name, "status": new},
        )
    node.refresh_from_db()
    return node


def issue_agent_token(node: Node, *, actor, at: datetime | None = None) -> str:
    """Issue the node a new agent token (the old one stops working) and record who did it
    and when in the audit log, in one transaction; returns the raw token. The entry holds
    neither the token nor its hash. (Unaudited, a locked-out agent had no trace of why.)"""
    at = at or timezone.now()
    with transaction.atomic():
        before = audit_snapshot(node, ["name", "agent_token_issued_at"])
        token = node.issue_agent_token(at=at)
        record_audit(
            actor=actor,
            action=AuditAction.UPDATED,
            object_type="node",
            object_id=node.pk,
            before=before,
            after=audit_snapshot(node, ["name", "agent_token_issued_at"]),
            at=at,
        )
    return token


def drain_node(node: Node, *, actor=None) -> Node:
    """Stop placing new work on a healthy node (running jobs finish or are moved by rounds)."""
    return _set_node_status(node, old=NodeStatus.HEALTHY, new=NodeStatus.DRAINING, actor=actor)


def undrain_node(node: Node, *, actor=None) -> Node:
    """Make a draining node schedulable again."""
    return _set_node_status(node, old=NodeStatus.DRAINING, new=NodeStatus.HEALTHY, actor=actor)


class GpuInUse(Exception):
    """A GPU or node whose removal would lose history, or a GPU that runs a job now."""


def gpu_history(gpu: Gpu) -> str | None:
    """What history names the GPU (None: none): job allocations, NVML samples or their
    rollups, ledger rows, refused counter readings. Deleting it deletes that history too
    (the rows point at the GPU), and budgets and reports would count less than was spent."""
    if gpu.allocations.exists():
        return "job allocations"
    for related, what in (
        ("ledger", "energy ledger rows"),
        ("samples", "telemetry samples"),
        ("hours", "telemetry rollups"),
        ("minutes", "telemetry rollups"),
        ("refused_steps", "telemetry records"),
    ):
        if getattr(gpu, related).exists():
            return what
    return None


def node_history(node: Node, gpus: Iterable[Gpu] | None = None) -> str | None:
    """What history names the node (None: none): its GPUs' (``gpu_history``) or the job
    events it reported."""
    for gpu in node.gpus.all() if gpus is None else gpus:
        history = gpu_history(gpu)
        if history:
            return f"{history} of its GPU {gpu.index}"
    return "job events" if node.job_events.exists() else None


def lock_team(team: Team) -> Team:
    """``team`` read again under its row lock (FOR UPDATE: a delete, a budget edit and an
    edit of the team take it). Raises ``Team.DoesNotExist`` if it is gone."""
    return Team.objects.select_for_update().get(pk=team.pk)


def lock_gpu(gpu: Gpu) -> Gpu:
    """``gpu`` read under lock, its node's row locked first: the order of registration
    (``telemetry.services.register_gpus``) and of the rounds (nodes, then GPUs). Locked in
    one statement with its node, the GPU's row could be taken first, and a retire beside
    an agent's registration of the same node could wait on each other in a cycle (the
    database then aborts one of them). Raises ``Gpu.DoesNotExist`` if it is gone."""
    while True:
        sid = transaction.savepoint()  # rolled back, it lets go of the rows it locked
        node_id = Gpu.objects.filter(pk=gpu.pk).values_list("node_id", flat=True).get()
        list(Node.objects.select_for_update().filter(pk=node_id).values_list("pk", flat=True))
        locked = Gpu.objects.select_for_update(of=("self",)).select_related("node").get(pk=gpu.pk)
        if locked.node_id == node_id:
            transaction.savepoint_commit(sid)
            return locked
        # a registration moved the (retired) board to another node between the two reads:
        # let go of both and lock its node and it again
        transaction.savepoint_rollback(sid)


def retire_gpu(gpu: Gpu, *, actor, at: datetime | None = None) -> Gpu:
    """Take a GPU that left its node out of service, keeping its history: it is no longer
    capacity, and its index is free for the GPU that replaces it. Raises ``GpuInUse`` while
    a job runs on it. Retiring a retired GPU changes nothing."""
    with transaction.atomic():
        locked = lock_gpu(gpu)
        if locked.retired_at is not None:
            return locked
        if locked.allocations.filter(ended_at__isnull=True).exists():
            raise GpuInUse(
                f"GPU {locked} runs a job now: drain node {locked.node.name} and retire the "
                "GPU once the job has moved or ended."
            )
        locked.retired_at = at or timezone.now()
        locked.save(update_fields=["retired_at"])
        record_retirement(locked, before=retirement(locked, None), actor=actor, at=at)
    return locked


def retirement(gpu: Gpu, retired_at: datetime | None) -> dict:
    """What the audit log records of a GPU's retirement: the GPU, its UUID and when it was
    retired (None: in service)."""
    return {
        "gpu": str(gpu),
        "uuid": gpu.uuid,
        "retired_at": retired_at.isoformat() if retired_at else None,
    }


def record_retirement(gpu: Gpu, *, before: dict, actor, at: datetime | None = None) -> None:
    """Audit a GPU retired or brought back into service (``before``: ``retirement`` of it
    as it was; the record after is the GPU as it is now)."""
    record_audit(
        actor=actor,
        action=AuditAction.UPDATED,
        object_type="gpu",
        object_id=gpu.pk,
        before=before,
        after=retirement(gpu, gpu.retired_at),
        at=at,
    )


class NamedActor:
    """The actor the audit log names for a change no user made (an agent, a command)."""

    is_authenticated = False

    def __init__(self, username: str) -> None:
        self.username = username


def delete_gpu(gpu: Gpu, *, actor, at: datetime | None = None) -> None:
    """Delete a GPU that has no history (one registered by mistake), recorded in the audit
    log. Raises ``GpuInUse`` otherwise: a GPU with history is retired (``retire_gpu``)."""
    with transaction.atomic():
        locked = lock_gpu(gpu)
        history = gpu_history(locked)
        if history:
            raise GpuInUse(
                f"GPU {locked} has {history}, which deleting it would delete too: retire it "
                "instead (it keeps its history and frees its index)."
            )
        record_audit(
            actor=actor,
            action=AuditAction.DELETED,
            object_type="gpu",
            object_id=locked.pk,
            before={"gpu": str(locked), "uuid": locked.uuid, "model": locked.model},
            at=at,
        )
        locked.delete()


def delete_node(node: Node, *, actor, at: datetime | None = None) -> None:
    """Delete a node none of whose GPUs has history and that reported no job events,
    recorded in the audit log. Raises ``GpuInUse`` otherwise: such a node is drained and
    its GPUs retired."""
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        gpus = list(Gpu.objects.select_for_update().filter(node=locked).order_by("index"))
        history = node_history(locked, gpus)
        if history:
            raise GpuInUse(
                f"Node {locked.name} has {history}, which deleting it would delete too: "
                "drain the node and retire its GPUs instead."
            )
        record_audit(
            actor=actor,
            action=AuditAction.DELETED,
            object_type="node",
            object_id=locked.pk,
            before={"name": locked.name, "gpus": [g.uuid for g in gpus]},
            at=at,
        )
        locked.delete()


BUDGET_AUDIT_FIELDS = (
    "team_id",
    "period_start",
    "period_end",
    "energy_limit_kwh",
    "carbon_limit_kg",
    "warn_fraction",
    "hard_limit_action",
)
# An alert says a limit was reached in a period: one of these changed, and what it said no
# longer holds (the next round announces the budget again if it is still spent).
_ALERT_SCOPE_FIELDS = ("team_id", "period_start", "period_end", "energy_limit_kwh",
                       "carbon_limit_kg")  # fmt: skip


def save_budget(
    budget: Budget,
    *,
    actor,
    at: datetime | None = None,
    changes: Mapping[str, Any] | None = None,
) -> Budget:
    """Validate and save a new or edited budget, recording before/after in the audit log in
    the same transaction; returns the budget as stored. Raises ``ValidationError`` (nothing
    stored) on bad values.

    ``changes`` (an edit: field -> new value) are applied to the row as stored, read under a
    lock, and only they are written: two concurrent edits of different fields both hold (a
    whole copy read before the lock undid the other's change, and the audit blamed its
    writer for it). Without ``changes`` a new budget, or ``budget`` whole, is saved. An edit
    that changes nothing writes no audit entry."""
    try:
        with transaction.atomic():
            # One writer of a team's budgets at a time: two racing inserts would each wait on
            # the other's row in the exclusion constraint's check (a deadlock PostgreSQL breaks
            # by aborting one, not a refusal); queued here, the second sees the first's row.
            # Validated under the lock too: checked before it, a racing writer's row could
            # appear between the model's overlap check (which names the period) and the
            # constraint's own (which names no field).
            teams = {budget.team_id}
            if changes and "team" in changes:
                teams.add(changes["team"].pk)
            list(Team.objects.select_for_update().filter(pk__in=teams).order_by("pk").values("pk"))
            if changes is None:
                budget.full_clean()
            budget = _save_budget_audited(budget, actor=actor, at=at, changes=changes)
    except IntegrityError as exc:
        # A racing writer stored an overlapping budget after full_clean() looked.
        if "budget_periods_do_not_overlap" not in str(exc):
            raise
        raise ValidationError({"period_start": [OVERLAP_MESSAGE]}) from None
    return budget


def _save_budget_audited(
    budget: Budget, *, actor, at: datetime | None, changes: Mapping[str, Any] | None
) -> Budget:
    before = None
    if budget.pk is not None:
        stored = Budget.objects.select_for_update().filter(pk=budget.pk).first()
        if stored is None:  # deleted by a racing writer
            raise BudgetGone(budget.pk)
        before = audit_snapshot(stored, BUDGET_AUDIT_FIELDS)
        if changes is not None:
            for field, value in changes.items():
                setattr(stored, field, value)
            stored.full_clean()
            budget = stored
    after = audit_snapshot(budget, BUDGET_AUDIT_FIELDS)
    if before == after:
        return budget
    if changes is not None and before is not None:
        budget.save(update_fields=sorted({*changes, "updated_at"} & _budget_columns()))
    else:
        budget.save()
    if before is not None:
        alert_before = _alert_snapshot(budget)
        _follow_alert(budget, before, after, at)
        alert_after = _alert_snapshot(budget)
        if alert_before != alert_after:
            # What the leads had been told, and to whom, withdrawn or changed by this edit
            # (a withdrawn alert left no trace: the entry showed only a raised limit).
            before["alert"], after["alert"] = alert_before, alert_after
    record_audit(
        actor=actor,
        action=AuditAction.CREATED if before is None else AuditAction.UPDATED,
        object_type="budget",
        object_id=budget.pk,
        team=budget.team,
        before=before,
        after=after,
        at=at,
    )
    return budget


def _budget_columns() -> set[str]:
    return {f.name for f in Budget._meta.concrete_fields}


def _follow_alert(budget: Budget, before: dict, after: dict, at: datetime | None) -> None:
    """Keep a budget's alert true to the edited budget. Where its team changed: gone (the
    new team's round announces it to the new team's leads). Where its limits or period
    changed: kept (with the ledger's use now, the new limits and action, raised within the
    period) if the edited budget is still spent, else gone (the next round announces it
    again if it becomes spent). Deleted whatever it said, a spent budget whose period was
    cut short was found again after its end, and its leads were told, falsely, that no
    round could act on it (a live probe). Its action the budget's new one where only that
    changed, e-mailed again while the period runs."""
    alerts = BudgetAlert.objects.filter(budget_id=budget.pk)
    if any(before[f] != after[f] for f in _ALERT_SCOPE_FIELDS):
        alert = alerts.first()
        if alert is None:
            return
        if before["team_id"] != after["team_id"]:
            alert.delete()  # the new team's round announces it to the new team's leads
            return
        from telemetry.usage import budget_usage  # telemetry's ledgers name this app's models

        used = budget_usage(budget)
        if not any(limit.over_hard for limit in used.limits):
            alert.delete()
            return
        alert.energy_used_kwh = used.energy_j / J_PER_KWH
        alert.energy_limit_kwh = budget.energy_limit_kwh
        alert.carbon_used_kg = used.co2_g / G_PER_KG
        alert.carbon_limit_kg = budget.carbon_limit_kg
        # Raised in the period as it stood: a period cut to end before then does not make
        # it an alert found after the period ("no round could act on it").
        alert.at = min(alert.at, budget.period_end - timedelta(microseconds=1))
        if alert.action != budget.hard_limit_action and _mailed_again(alert, budget, at):
            # (an action changed in the same edit as a limit: the alert took it unmailed)
            alert.emailed_at = None
        alert.action = budget.hard_limit_action
        alert.save()
    elif before["hard_limit_action"] != after["hard_limit_action"]:
        # What the leads were told the scheduler does no longer holds (jobs that went on
        # are now paused, or the other way): while the period runs they are told again.
        # (The alert kept being shown with the new action, but the e-mail that said "this
        # budget only notifies" was the last word the other leads had.)
        for alert in alerts.exclude(action=budget.hard_limit_action):
            if _mailed_again(alert, budget, at):
                alert.emailed_at = None
            alert.action = budget.hard_limit_action
            alert.save(update_fields=["action", "emailed_at"])


def _mailed_again(alert: BudgetAlert, budget: Budget, at: datetime | None) -> bool:
    """Whether an alert whose action changes is e-mailed again: while the period runs, if it
    was raised in it (one found after its period is shown, not acted on)."""
    return budget.period_end > (at or timezone.now()) and alert.at < budget.period_end


def _alert_snapshot(budget: Budget) -> dict | None:
    alert = BudgetAlert.objects.filter(budget_id=budget.pk).first()
    if alert is None:
        return None
    return {
        "at": alert.at.isoformat(),
        "action": alert.action,
        "energy_used_kwh": alert.energy_used_kwh,
        "carbon_used_kg": alert.carbon_used_kg,
        "emailed_to": list(alert.emailed_to),
    }


class TeamInUse(Exception):
    """A team whose jobs or energy records name it cannot be deleted."""


def team_history(team: Team) -> str | None:
    """What names the team (None: nothing): its jobs, else its energy records."""
    jobs = Job.objects.filter(team=team).count()
    if jobs:
        return f"{jobs} job(s)"
    return "energy records" if team.energy_ledger.exists() else None


def delete_team(team: Team, *, actor, at: datetime | None = None) -> None:
    """Delete a team with no jobs and no energy records, and its budgets, each recorded in
    the audit log, in one transaction. Raises ``TeamInUse`` otherwise: those records stay
    attributed to it."""
    with transaction.atomic():
        locked = lock_team(team)
        what = team_history(locked)
        if what:
            raise TeamInUse(
                f"Team {locked.name} has {what} that stay attributed to it: a team with "
                "jobs or energy use cannot be deleted."
            )
        for budget in Budget.objects.filter(team=locked).order_by("pk"):
            delete_budget(budget, actor=actor, at=at)
        record_audit(
            actor=actor,
            action=AuditAction.DELETED,
            object_type="team",
            object_id=locked.pk,
            before={"name": locked.name, "slug": locked.slug},
            at=at,
        )
        locked.delete()


def _locked_with_its_team(pk) -> Budget | None:
    """The budget's row locked after its team's (as an edit locks them), read as stored:
    the team is the one the row has now, not the caller's copy's (a budget moved to
    another team since). None if it is gone."""
    for _ in range(3):
        team_id = Budget.objects.filter(pk=pk).values_list("team_id", flat=True).first()
        if team_id is None:
            return None
        list(Team.objects.select_for_update().filter(pk=team_id).values("pk"))
        stored = Budget.objects.select_for_update().filter(pk=pk).first()
        if stored is None or stored.team_id == team_id:
            return stored
        # moved to another team between the two reads: lock that one instead
    raise BudgetGone(pk)  # moved three times in a row: treat as gone, the caller retries


def lock_budget(budget: Budget) -> Budget:
    """``budget`` read again under its row lock, its team's row locked first (as an edit
    and a delete lock them). Raises ``Budget.DoesNotExist`` if it is gone."""
    stored = _locked_with_its_team(budget.pk)
    if stored is None:
        raise Budget.DoesNotExist(f"Budget #{budget.pk} no longer exists.")
    return stored


class BudgetGone(Exception):
    """The budget was deleted by another writer first (the views answer 404)."""

    def __init__(self, pk) -> None:
        super().__init__(f"Budget #{pk} no longer exists.")
        self.pk = pk


def delete_budget(budget: Budget, *, actor, at: datetime | None = None) -> None:
    """Delete a budget, recording what it was in the audit log in the same transaction (with
    its alert, if a limit was reached: the alert goes with the budget). Takes the locks an
    edit takes, in the same order (its team, then the row): a delete racing an edit of the
    same budget deadlocked, and two racing deletes both answered 204 with two audit
    entries; the later writer now finds it gone (``BudgetGone``)."""
    with transaction.atomic():
        stored = _locked_with_its_team(budget.pk)
        if stored is None:
            raise BudgetGone(budget.pk)
        budget = stored
        before = audit_snapshot(budget, BUDGET_AUDIT_FIELDS)
        alert = _alert_snapshot(budget)
        if alert is not None:
            before["alert"] = alert
        record_audit(
            actor=actor,
            action=AuditAction.DELETED,
            object_type="budget",
            object_id=budget.pk,
            team=budget.team,
            before=before,
            at=at,
        )
        budget.delete()
