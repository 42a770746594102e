"""Multi-row writes and reads for the agent API: registration, assignments, job events.

Job state changes go through ``cluster.services.transition_job`` (a conditional update), so an
agent's report racing the scheduler cannot both win; a report that lost the race (the job was
stopped or moved meanwhile) is recorded as an event and changes nothing else.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q

from cluster.choices import TERMINAL_JOB_STATES, JobState
from cluster.models import RECENT_STOP, Gpu, Job, JobAllocation, Node, sm_clock_conflict
from cluster.services import (
    InvalidTransition,
    NamedActor,
    record_retirement,
    retirement,
    transition_job,
)
from cluster.validators import whole_watts
from cluster.workloads import same_gpu_model
from scheduling.core.goodput import efficiency, iterations_per_submitted
from scheduling.workload_profiles import follow_respelled_gpu_model
from telemetry.agent.backends import gpu_model_key, is_board_split
from telemetry.choices import ExitReason, JobEventKind
from telemetry.models import GpuSample, JobEvent

log = logging.getLogger(__name__)


class NotYourNode(Exception):
    """The agent named a GPU or job that belongs to another node."""


class NodeGone(Exception):
    """The agent's node was deleted while its request was under way (its token with it)."""


class GpuIndexTaken(Exception):
    """A reported GPU index is held by a registered GPU the agent no longer reports."""


class RegistrationRejected(Exception):
    """A registration stored not at all: ``errors`` per GPU of the request (HTTP 400)."""

    def __init__(self, errors: dict[str, Any]) -> None:
        self.errors = errors
        super().__init__(str(errors))


def _clock_conflicts(
    gpus: list[dict[str, Any]], stored: dict[str, tuple]
) -> dict[int, dict[str, list[str]]]:
    """Per GPU of the request: a maximum SM clock or clock list that, with the registered
    value it leaves in place (a null maximum or an empty list keeps the stored one), would
    store a clock above the maximum. ``stored``: UUID -> (maximum, clock list) registered.
    The serializer checks the two when both are sent; a conflict between two stored values
    is left alone (the agent changed neither)."""
    errors = {}
    for i, g in enumerate(gpus):
        if g["uuid"] not in stored:
            continue
        stored_top, stored_clocks = stored[g["uuid"]]
        top, clocks = g.get("max_sm_clock_mhz"), g.get("supported_sm_clocks_mhz")
        if top is not None and not clocks:
            field = "max_sm_clock_mhz"
            message = sm_clock_conflict(top, stored_clocks, clocks_registered=True)
        elif top is None and clocks:
            field = "supported_sm_clocks_mhz"
            message = sm_clock_conflict(stored_top, clocks, max_registered=True)
        else:
            continue
        if message:
            errors[i] = {field: [message]}
    return errors


def _model_changes(
    gpus: list[dict[str, Any]], stored: dict[str, str]
) -> tuple[dict[int, dict], dict[str, str]]:
    """Per GPU of the request: a model other than the one its UUID is registered as. A
    board's UUID is its own, so its model never changes; a registration that says it did
    would move the GPU's allocations, ledger and every job's learned model to another
    GPU model's predictions. (A stored product name, from agents older than the model key,
    counts as its key. A GPU registered under the key of an SXM model that now reports
    its board of its own, "A100" -> "A100-PCIe", "V100" -> "V100-FHHL", "H100" ->
    "H100-NVL", is no change: a server that dropped the board token stored it so; it
    moves to its own model, once: ``is_board_split``.) Returns the errors by GPU and those
    re-keyings (old key -> the board's own)."""
    errors, rekeyed = {}, {}
    for i, g in enumerate(gpus):
        before = stored.get(g["uuid"])
        if before is None or gpu_model_key(before) == g["model"]:
            continue
        if same_gpu_model(gpu_model_key(before), g["model"]):
            # the same model spelled otherwise (stored "a100" before registrations took the
            # catalog's spelling, "A100"): it takes the spelling, as a board split does
            rekeyed[gpu_model_key(before)] = g["model"]
            continue
        if is_board_split(gpu_model_key(before), g["model"]):
            rekeyed[gpu_model_key(before)] = g["model"]
            log.warning(
                "GPU %s: registered as %s, a %s board: its model from now on",
                g["uuid"], before, g["model"],
            )  # fmt: skip
            continue
        errors[i] = {
            "model": [
                f"GPU {g['uuid']} is registered as {before}, not {g['model']}: a GPU's "
                "model does not change (a new board has a UUID of its own)."
            ]
        }
    return errors, rekeyed


# Key of the advisory lock that makes agent registrations one at a time ("wfreg" in ASCII);
# they are rare (an agent's start), so one key for all is enough.
REGISTRATION_LOCK_KEY = 0x7766726567


def register_gpus(node: Node, gpus: list[dict[str, Any]], *, now: datetime) -> list[Gpu]:
    """Create or update the node's GPUs by UUID (idempotent: re-registering changes only what
    changed). A UUID already registered to another node is refused, nothing stored; so is a
    maximum SM clock below the clocks it would be stored with, or a model other than the
    one the UUID is registered as (``RegistrationRejected``). A retired GPU reported again is
    back in service, recorded in the audit log as its retirement was (``retire_gpu``).

    Registrations take ``REGISTRATION_LOCK_KEY`` first and check under it: checked before,
    two nodes registering one UUID at once both saw it free, both answered 200, and the GPU
    ended on whichever wrote last, moved off the node that had registered it
    (tests/telemetry/test_registration_race.py)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [REGISTRATION_LOCK_KEY])
        return _register_gpus(node, gpus, now=now)


def _register_gpus(node: Node, gpus: list[dict[str, Any]], *, now: datetime) -> list[Gpu]:
    uuids = [g["uuid"] for g in gpus]
    # What is registered under these UUIDs, in one query: whose node, whether retired, the
    # clocks, the limit, the model.
    registered = {
        row[0]: row[1:]
        for row in Gpu.objects.filter(uuid__in=uuids).values_list(
            "uuid",
            "node_id",
            "retired_at",
            "max_sm_clock_mhz",
            "supported_sm_clocks_mhz",
            "power_limit_w",
            "model",
        )
    }
    # A GPU retired from another node may come back on this one (a board moved between
    # servers): only one in service elsewhere is another node's.
    foreign = sorted(
        u
        for u, (node_id, retired_at, *_) in registered.items()
        if node_id != node.pk and retired_at is None
    )
    if foreign:
        raise NotYourNode(f"GPU(s) {', '.join(foreign)} are registered to another node")
    # A GPU that disappeared keeps its record (its allocations and ledger are history); if a
    # new GPU wants its index, an admin retires the old one first (``retire_gpu``: it keeps
    # its history and gives up its index). Never delete silently.
    retired = dict(
        Gpu.objects.in_service()
        .filter(node=node, index__in=[g["index"] for g in gpus])
        .exclude(uuid__in=uuids)
        .values_list("index", "uuid")
    )
    if retired:
        taken = ", ".join(f"{i} ({u})" for i, u in sorted(retired.items()))
        raise GpuIndexTaken(
            f"GPU index(es) {taken} belong to GPUs no longer reported; an admin retires them "
            "first (POST /api/gpus/<id>/retire/)"
        )
    clocks = {u: (top, c) for u, (_, _, top, c, _, _) in registered.items()}
    conflicts = _clock_conflicts(gpus, clocks)
    # (boards that move from the bare model's key to their own: "A100" -> "A100-PCIe")
    changes, rekeyed = _model_changes(gpus, {u: r[-1] for u, r in registered.items()})
    for i, errors in changes.items():
        conflicts.setdefault(i, {}).update(errors)
    if conflicts:
        raise RegistrationRejected({"gpus": [conflicts.get(i, {}) for i in range(len(gpus))]})
    if rekeyed:
        # A re-keying moves what rounds learned under the old key (jobs' fits, workload
        # profiles: ``_repin_jobs``), which a round reads at its start and writes back at
        # its end: it waits for a round under way, and rounds wait for it (they skip while
        # it holds the lock). Beside a round, the round wrote the fits it had read back
        # under the old key (tests/telemetry/test_rekey_round_race.py). Taken before any
        # row lock of this registration (the node's, the GPUs'), as a round takes it before
        # its own; only this registration's lock is held, which no round takes.
        from scheduling.services import wait_for_round_lock  # (it imports this module)

        wait_for_round_lock()
    current_limits = {u: limit for u, (*_, limit, _) in registered.items()}
    # GPUs registered on another node before (retired there): this node's from now on.
    moved = {u for u, (node_id, *_) in registered.items() if node_id != node.pk}
    try:
        stored = _store_gpus(node, gpus, current_limits, moved=moved, now=now)
        _repin_jobs(rekeyed)
        return stored
    except IntegrityError as exc:
        if "gpu_unique_node_index" not in str(exc):
            raise
        # An admin put another GPU at a reported index after the check above (the check and
        # the write are not under one lock with the admin's edit): the same answer as the
        # check's, not a 500; the agent's next registration reads the index as it is now.
        raise GpuIndexTaken(
            "a GPU index this node reports was given to another GPU while it registered; "
            "the next registration reads it again"
        ) from None


def _repin_jobs(rekeyed: dict[str, str]) -> None:
    """Jobs not yet ended that are pinned to a bare model key no GPU in service has any
    longer (``rekeyed``: old key -> the boards' own key) ask for the boards' key from now
    on. They were submitted while those boards were keyed so (a cluster of A100 PCIe boards
    keyed "A100"); left on the bare key they waited for good ("needs 2 A100 GPU(s); the
    cluster has 0 schedulable"), and a running one was stopped at the next round. Where
    GPUs of the bare key are left (SXM boards beside the PCIe ones), the job keeps asking
    for those. Ended jobs keep their record as it was.

    A key only spelled otherwise ("a100" -> the catalog's "A100") is one model: what was
    learned under the old spelling (workload profiles, jobs' per-model fits) moves with the
    jobs, at the same moment (``follow_respelled_gpu_model``); left behind, it was no
    longer found. A board split's GPUs are another model than the bare key's: theirs stays."""
    for old, new in rekeyed.items():
        if Gpu.objects.in_service().filter(model=old).exists():
            continue
        if same_gpu_model(old, new):
            versions, states = follow_respelled_gpu_model(old, new)
            if versions or states:
                log.warning(
                    "GPU model %s is spelled %s now: %d workload profile version(s) and "
                    "%d job(s)' fits learned under %s follow it",
                    old, new, versions, states, old,
                )  # fmt: skip
        repinned = (
            Job.objects.filter(gpu_model=old)
            .exclude(state__in=TERMINAL_JOB_STATES)
            .update(gpu_model=new)
        )
        if repinned:
            log.warning(
                "%d job(s) pinned to %s, which no GPU has any longer, now ask for %s",
                repinned, old, new,
            )  # fmt: skip


def _store_gpus(
    node: Node,
    gpus: list[dict[str, Any]],
    current_limits: dict[str, int | None],
    *,
    moved: set[str] = frozenset(),
    now: datetime,
) -> list[Gpu]:
    uuids = [g["uuid"] for g in gpus]
    result = []
    with transaction.atomic():
        # The node row first, then its GPUs: the order of the scheduling round (liveness locks
        # nodes, set_allocation GPUs later), so the two cannot wait on each other in a cycle.
        if not Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now):
            # deleted since the token was read (the update waited on the delete's lock): the
            # GPUs' foreign key failed at the commit, a 500 (a live probe)
            raise NodeGone(f"Node {node.name} was deleted: its token no longer speaks for it.")
        # The retired GPUs reported again, read under lock (a concurrent retire or
        # registration waits) before parking moves their indices: what the audit says they
        # were. Bringing one back into service undoes an admin's audited retirement, and
        # changes the cluster's capacity as much, so it is audited the same way.
        returning = {
            g.uuid: retirement(g, g.retired_at)
            for g in Gpu.objects.select_for_update(of=("self",))
            .select_related("node")
            .filter(uuid__in=uuids, retired_at__isnull=False)
        }
        # Park the node's reported GPUs on free indices first, so a renumbering among them
        # (indices swapped after a reboot) does not trip the (node, index) unique constraint.
        Gpu.objects.filter(node=node, uuid__in=uuids).update(index=F("index") + 10000)
        for g in gpus:
            values = {
                "node": node,
                "index": g["index"],
                "model": g["model"],
                "default_power_limit_w": whole_watts(g["default_power_limit_w"]),
                "min_power_limit_w": whole_watts(g["min_power_limit_w"]),
                "max_power_limit_w": whole_watts(g["max_power_limit_w"]),
                "retired_at": None,  # reported again: it is back on its node
                "missing_since": None,
            }
            if g["uuid"] in moved:
                # Its samples and events from before are its old node's (``Gpu.node_since``).
                values["node_since"] = now
            # What the agent could not read (None, or no clocks) keeps what is registered.
            if g.get("memory_mb") is not None:
                values["memory_mb"] = g["memory_mb"]
            if g.get("max_sm_clock_mhz") is not None:
                values["max_sm_clock_mhz"] = g["max_sm_clock_mhz"]
            if g.get("supported_sm_clocks_mhz"):
                values["supported_sm_clocks_mhz"] = g["supported_sm_clocks_mhz"]
            if g.get("site_power_limit_w") is not None:
                # (a cap kept from before that the range reported now leaves out is
                # dropped by ``Gpu.save``)
                values["site_power_limit_w"] = whole_watts(g["site_power_limit_w"])
            limit = current_limits.get(g["uuid"])
            if limit is not None and not (
                values["min_power_limit_w"] <= limit <= values["max_power_limit_w"]
            ):
                # The limit recorded as set lies outside the range the GPU reports now (a
                # driver or board change): it is unknown until the next assignment sets one.
                values["power_limit_w"] = None
            gpu, _ = Gpu.objects.update_or_create(
                uuid=g["uuid"], defaults=values, create_defaults={"memory_mb": 0, **values}
            )
            if gpu.uuid in returning:
                # (a node's token speaks for its node, not for a user)
                agent = NamedActor(f"agent of {node.name}")
                record_retirement(gpu, before=returning[gpu.uuid], actor=agent, at=now)
            result.append(gpu)
        # The node's GPUs in service that the agent no longer reports: it cannot run a job on
        # them ("assigned to GPUs not on this node"), so rounds must not plan on them (a
        # live probe: an agent restarted with 4 of its 8 GPUs, and jobs put on the other 4
        # stayed "running" for good, never started). Their records and indices stay until
        # they are reported again or an admin retires them.
        gone = list(
            Gpu.objects.in_service()
            .filter(node=node, missing_since__isnull=True)
            .exclude(uuid__in=uuids)
            .values_list("uuid", flat=True)
        )
        if gone:
            Gpu.objects.filter(uuid__in=gone).update(missing_since=now)
            log.warning(
                "node %s registered without GPU(s) %s: not planned on until reported again",
                node.name, ", ".join(sorted(gone)),
            )  # fmt: skip
        # Node.gpu_model is the admin's description (e.g. A100-SXM4-40GB); left as it is.
    return result


# --- iteration units ------------------------------------------------------------------------
#
# A job's work is counted in iterations at its *submitted* global batch size
# (``Job.total_iterations``, ``completed_iterations``; the core's ``total_iters``/``done_iters``).
# A policy may run it at another batch (``JobAllocation.batch_size``); the agent and the job
# then count iterations at that batch. The work itself is useful samples = iterations x batch
# x the statistical efficiency of that batch (``scheduling.core.goodput``, as the core and
# the simulator count it, with the job's noise scale at the time), so the two counts convert
# here, in one place: assignments go out at the allocation's batch and progress comes back to
# submitted-batch iterations. ``JobEvent.iterations`` keeps what the agent reported
# (allocation batch), which is what ``observed_measurements_of`` hands the job's online model as
# its iteration time at that batch.

# Float noise of a round trip (x * a / b * b / a) is rounded away at this many decimals, so a
# job that finishes at another batch stores exactly its ``total_iterations``.
_ITERATION_DECIMALS = 6
# How far short of its work a count may come back from a round trip of those decimals.
_ROUND_TRIP_SLACK = 1e-5
# The longest log tail a job keeps with a note of the service's after it (the agent's
# serializer takes tails of up to 20,000 characters).
_LOG_TAIL_CHARS = 20000


def iterations_at_batch(
    iterations: float,
    *,
    from_batch: int,
    to_batch: int,
    submitted_batch: int | None = None,
    noise_scale: float | None = math.inf,
) -> float:
    """``iterations`` counted at ``from_batch`` recounted at ``to_batch``: the same useful
    samples. An iteration at batch ``b`` does ``b x E(b)`` samples of the job's work, ``E``
    its statistical efficiency relative to ``submitted_batch`` for ``noise_scale``
    (``scheduling.core.goodput``, the core's and the simulator's rule); the default,
    ``noise_scale=inf``, counts every sample as useful."""
    if from_batch <= 0 or to_batch <= 0:
        raise ValueError(f"batch sizes must be positive, not {from_batch} and {to_batch}")
    if from_batch == to_batch:
        return float(iterations)
    ref = submitted_batch or from_batch
    useful_from = from_batch * efficiency(noise_scale, from_batch, ref)
    useful_to = to_batch * efficiency(noise_scale, to_batch, ref)
    return round(iterations * useful_from / useful_to, _ITERATION_DECIMALS)


def most_iterations(job: Job, batch_size: int) -> float:
    """The most iterations at ``batch_size`` a progress report of ``job`` can count: all its
    work recounted at that batch under any noise scale (the agent was told its count with
    the noise scale of its start, and the job's has moved since: at a batch above the
    submitted one at most the submitted count, below it at most that count times the
    batches' ratio; ``iterations_at_batch``), with 1% and one step to
    spare for rounding and a last partial step. A report counting more is no progress: it
    counts nothing and enters no fit."""
    whole = float(job.total_iterations) * max(1.0, job.global_batch_size / batch_size)
    return whole * 1.01 + 1.0


def allocation_factor(job: Job, alloc: JobAllocation | None) -> float:
    """Iterations at ``alloc``'s batch per iteration at ``job``'s submitted batch: the factor
    fixed when the allocation started (``JobAllocation.iterations_per_submitted``), so that
    what the job is told and what its reports count for use the same units whatever the
    noise scale learned since; for an allocation from before it was kept, the job's noise
    scale now; with no allocation, 1 (the submitted batch)."""
    if alloc is None:
        return 1.0
    if alloc.iterations_per_submitted is not None:
        return alloc.iterations_per_submitted
    return iterations_per_submitted(job.noise_scale, alloc.batch_size, job.global_batch_size)


def told_iterations(job: Job, alloc: JobAllocation) -> tuple[float, float]:
    """(total, completed) iterations of ``job`` at ``alloc``'s batch: what its agent or its
    Slurm batch script tells the job (``WATTFLOW_TOTAL_ITERATIONS``, ``..._COMPLETED_...``)."""
    f = allocation_factor(job, alloc)
    if f == 1.0:
        return float(job.total_iterations), float(job.completed_iterations)
    return (
        round(job.total_iterations * f, _ITERATION_DECIMALS),
        round(job.completed_iterations * f, _ITERATION_DECIMALS),
    )


def checkpoint_dir(job: Job) -> str:
    return str(Path(settings.TELEMETRY_CHECKPOINT_ROOT) / f"job-{job.pk}")


def assignments_for(node: Node, *, now: datetime) -> dict[str, Any]:
    """The open allocations of running jobs on this node's GPUs, and jobs to stop: those whose
    allocation here ended in the last hour and that have no open one here."""
    open_allocs = (
        JobAllocation.objects.filter(
            ended_at__isnull=True, job__state=JobState.RUNNING, gpus__node=node
        )
        .distinct()
        .select_related("job")
        .prefetch_related("gpus")
        .order_by("job_id")
    )
    assignments = []
    for alloc in open_allocs:
        job = alloc.job
        all_gpus = list(alloc.gpus.all())
        here = sorted((g for g in all_gpus if g.node_id == node.pk), key=lambda g: g.index)
        # The agent counts at the allocation's batch (see "iteration units" above).
        total, done = told_iterations(job, alloc)
        assignments.append(
            {
                "allocation_id": alloc.pk,
                "job_id": job.pk,
                "workload": job.workload,
                "resembles": job.resembles,
                "param_count": job.param_count,
                "command": job.command,
                "gpu_uuids": [g.uuid for g in here],
                "gpu_count": len(all_gpus),
                "gpus_per_node": sorted(Counter(g.node_id for g in all_gpus).values())[::-1],
                "batch_size": alloc.batch_size,
                "sm_clock_mhz": alloc.sm_clock_mhz,
                "power_limit_w": alloc.power_limit_w,
                "checkpoint_dir": checkpoint_dir(job),
                "total_iterations": total,
                "completed_iterations": done,
                "env": {
                    "WATTFLOW_WORKLOAD": job.workload,
                    # A real job counts from where the job stands, at WATTFLOW_BATCH_SIZE.
                    "WATTFLOW_TOTAL_ITERATIONS": repr(total),
                    "WATTFLOW_COMPLETED_ITERATIONS": repr(done),
                },
            }
        )
    running = {a["job_id"] for a in assignments}
    recently_ended = (
        JobAllocation.objects.filter(ended_at__gte=now - RECENT_STOP, gpus__node=node)
        .exclude(job_id__in=running)
        .values_list("job_id", flat=True)
        .distinct()
    )
    return {"assignments": assignments, "stop": sorted(set(recently_ended))}


class EventsRejected(Exception):
    """A batch of job events stored not at all: ``errors`` per event index (HTTP 400)."""

    def __init__(self, errors: dict[str, Any]) -> None:
        self.errors = errors
        super().__init__(str(errors))


def _check_events(
    node: Node, events: list[dict[str, Any]], *, now: datetime, positions: list[int], size: int
) -> list[dict[str, Any]]:
    """The events to store, with their times clamped; raises NotYourNode (an allocation of
    another node: the token speaks only for its own) or EventsRejected (nothing stored).

    Each event must name an allocation that exists, is the job's, and holds GPUs of this node.
    An event may be about an allocation that has ended only if it says so (an exit) or was
    stamped before the end (a report that waited in the agent's spool). Times: up to
    ``TELEMETRY_MAX_CLOCK_SKEW_S`` before the allocation's start (an agent clock behind the
    server's) is clamped to the start, and a time ahead of the server's clock (up to
    ``TELEMETRY_MAX_FUTURE_S``) to now; anything further out is refused."""
    skew = timedelta(seconds=settings.TELEMETRY_MAX_CLOCK_SKEW_S)
    future = timedelta(seconds=settings.TELEMETRY_MAX_FUTURE_S)
    allocation_ids = {e["allocation_id"] for e in events if e.get("allocation_id") is not None}
    allocations = {
        row["pk"]: row
        for row in JobAllocation.objects.filter(pk__in=allocation_ids).values(
            "pk", "job_id", "started_at", "ended_at"
        )
    }
    # An allocation is this node's if it holds a GPU that was on this node when it started:
    # a GPU that moved here later (``Gpu.node_since``) ran it for its old node, whose
    # reports they are (a node's token reported on another node's past job).
    here = set(
        JobAllocation.objects.filter(
            Q(gpus__node=node)
            & (Q(gpus__node_since__isnull=True) | Q(gpus__node_since__lte=F("started_at"))),
            pk__in=allocations,
        )
        .values_list("pk", flat=True)
        .distinct()
    )
    foreign = sorted(pk for pk in allocations if pk not in here)
    if foreign:
        raise NotYourNode(f"allocation(s) {foreign} hold no GPU of this node")
    errors: dict[int, dict[str, list[str]]] = {}
    checked = []
    for i, e in zip(positions, events, strict=True):
        field_errors: dict[str, list[str]] = {}
        alloc = allocations.get(e.get("allocation_id"))
        ts = e["ts"]
        if e.get("allocation_id") is None:
            field_errors["allocation_id"] = ["Name the allocation the event is about."]
        elif alloc is None:
            field_errors["allocation_id"] = [f"Unknown allocation {e['allocation_id']}."]
        elif alloc["job_id"] != e["job_id"]:
            field_errors["allocation_id"] = [
                f"Allocation {alloc['pk']} is not job {e['job_id']}'s (it is job "
                f"{alloc['job_id']}'s)."
            ]
        elif ts > now + future:
            field_errors["ts"] = [
                f"{ts.isoformat()} is more than {future.total_seconds():g} s ahead of the "
                f"server's clock ({now.isoformat()})."
            ]
        elif ts < alloc["started_at"] - skew:
            field_errors["ts"] = [
                f"{ts.isoformat()} is before allocation {alloc['pk']} started "
                f"({alloc['started_at'].isoformat()}) by more than the allowed clock skew of "
                f"{skew.total_seconds():g} s."
            ]
        elif (
            alloc["ended_at"] is not None
            and e["kind"] != JobEventKind.EXITED
            and ts > alloc["ended_at"] + skew
        ):
            field_errors["ts"] = [
                f"Allocation {alloc['pk']} ended at {alloc['ended_at'].isoformat()}; a "
                f"{e['kind']} event stamped after its end is refused."
            ]
        if field_errors:
            errors[i] = field_errors
            continue
        clamped = min(max(ts, alloc["started_at"]), now)
        if alloc["ended_at"] is not None:
            # A report of an allocation that has ended happened inside it (one stamped
            # within the skew after its end was stored after it, and entered its intervals).
            clamped = min(clamped, alloc["ended_at"])
        if clamped != ts:
            log.info(
                "job %s: %s event stamped %s, clamped to %s (allocation %s, %s to %s)",
                e["job_id"], e["kind"], ts, clamped, alloc["pk"], alloc["started_at"],
                alloc["ended_at"],
            )  # fmt: skip
        # Put on one of the allocation's bounds, several reports share one instant that is
        # not when any of them was reached: such a time bounds no interval of the job's fit
        # (``JobEvent.clamped``). One ahead of the server's clock is taken at its arrival,
        # each at its own time: marked, an agent clock a second fast taught nothing.
        on_bound = clamped != ts and clamped != now
        checked.append({**e, "ts": clamped, "clamped": on_bound})
    if errors:
        # One entry per event of the request, as the serializer reports field errors: {} for
        # an event without fault.
        raise EventsRejected({"events": [errors.get(i, {}) for i in range(size)]})
    return checked


def record_job_events(node: Node, events: list[dict[str, Any]], *, now: datetime) -> int:
    """Store the agent's job events (each once, by ``event_id``) and apply the new ones:
    progress raises ``completed_iterations`` (never lowers it); an exit of the job's current
    allocation completes or fails the job. Returns how many events were new.

    The whole batch is checked first (``_check_events``): a refused batch stores nothing. A
    replayed event (its ``event_id`` already stored for this node) is not checked again, so
    a replay of an accepted event is always accepted, and applied nothing more; an
    ``event_id`` stored (or earlier in the batch) with other contents refuses the batch.

    Lock order: every event's transaction takes the node row (``FOR KEY SHARE``, which the
    foreign key of ``JobEvent.node`` takes at commit anyway) before the job row, the order the
    liveness check and the scheduling round use (node, then jobs). Taking the job first and
    the node at commit deadlocked with a liveness check re-queueing the job
    (tests/telemetry/test_job_event_locks.py).
    """
    ids: dict[uuid.UUID, tuple[int, dict[str, Any]]] = {}
    changed: dict[int, dict[str, list[str]]] = {}
    for position, e in enumerate(events):
        # one event twice in a batch is taken once, if it is the same event
        event_id = uuid.UUID(str(e["event_id"]))
        first = ids.setdefault(event_id, (position, e))
        differ = _differing_fields(first[1], e)
        if differ:
            changed[position] = _changed_error(event_id, differ, f"event {first[0]} of this batch")
    stored = dict(JobEvent.objects.filter(event_id__in=ids).values_list("event_id", "node_id"))
    others = sorted(str(i) for i, node_id in stored.items() if node_id != node.pk)
    if others:
        raise NotYourNode(f"event(s) {', '.join(others)} were reported by another node")
    # A replay (a lost acknowledgement) is the same event again; one with other contents is
    # not: answered 200 "new: 0", it was dropped without a word (a "completed" sent under a
    # progress report's id never completed the job, and the agent deleted it from its spool).
    if stored:
        for row in JobEvent.objects.filter(event_id__in=stored).values("event_id", *_EVENT_CONTENT):
            for position, e in enumerate(events):
                if uuid.UUID(str(e["event_id"])) != row["event_id"] or position in changed:
                    continue
                differ = _differing_fields(row, e)
                if differ:
                    changed[position] = _changed_error(row["event_id"], differ, "it was accepted")
    if changed:
        raise EventsRejected({"events": [changed.get(i, {}) for i in range(len(events))]})
    todo = [pair for event_id, pair in ids.items() if event_id not in stored]
    fresh = _check_events(
        node,
        [e for _, e in todo],
        now=now,
        positions=[position for position, _ in todo],
        size=len(events),
    )
    # One transaction per job, its events in the batch's order: the node row, then the job
    # row, then the job's new events stored at once and applied (``_JobEvents``). One
    # transaction and up to a dozen queries per event (each event its own commit), a batch
    # of 1,000 took 35-47 s (the eighth live probe); the locks are the ones each event's
    # transaction took, held for the job's events together.
    by_job: dict[int, list[dict[str, Any]]] = {}
    for e in fresh:
        by_job.setdefault(e["job_id"], []).append(e)
    new = 0
    for job_id, group in by_job.items():
        with transaction.atomic():
            if not _lock_node_then_job(node.pk, job_id):
                log.info("job %s was deleted meanwhile; its events are dropped", job_id)
                continue
            created = _store_events(node, group, now=now)
            new += len(created)
            applier = _JobEvents(job_id)
            for event in created:
                applier.apply(event)
            applier.flush()
    return new


def _event_row(node: Node, e: dict[str, Any], *, now: datetime) -> dict[str, Any]:
    return {
        "node": node,
        "job_id": e["job_id"],
        "allocation_id": e.get("allocation_id"),
        "kind": e["kind"],
        "ts": e["ts"],
        "iterations": e.get("iterations"),
        "grad_sqr": e.get("grad_sqr"),
        "grad_var": e.get("grad_var"),
        "exit_status": e.get("exit_status"),
        "reason": e.get("reason") or "",
        "log_tail": e.get("log_tail") or "",
        "received_at": now,
        "clamped": e.get("clamped", False),
    }


def _stored_event_ids(ids: list[uuid.UUID]) -> set[uuid.UUID]:
    return set(JobEvent.objects.filter(event_id__in=ids).values_list("event_id", flat=True))


def _store_events(node: Node, group: list[dict[str, Any]], *, now: datetime) -> list[JobEvent]:
    """Store the events of ``group`` (one job's, its row locked) that are not stored yet, in
    their order; the ones stored. An event stored since the batch's checks (the same batch
    sent twice at once) is skipped, as ``get_or_create`` skipped it; should one be stored
    between this look and the insert (an event id another job's report reused), the insert
    is undone and the events are stored one by one, as before.

    Inserted in ``event_id`` order, their keys taken in the batch's order first: the unique
    index on ``event_id`` makes an insert wait for another transaction's uncommitted row of
    the same id, and two batches reusing each other's ids for other jobs in opposite orders,
    inserted each in its own order, waited on each other until PostgreSQL aborted one (a
    deadlock). In one order, the later waits and then finds the ids taken. The keys keep
    the batch's order for whatever reads events by key (ties in time)."""
    ids = [uuid.UUID(str(e["event_id"])) for e in group]
    there = _stored_event_ids(ids)
    todo = [(event_id, e) for event_id, e in zip(ids, group, strict=True) if event_id not in there]
    if not todo:
        return []
    keys = _event_keys(len(todo))
    rows = sorted(
        (
            JobEvent(pk=key, event_id=event_id, **_event_row(node, e, now=now))
            for key, (event_id, e) in zip(keys, todo, strict=True)
        ),
        key=lambda row: row.event_id,
    )
    try:
        with transaction.atomic():
            created = JobEvent.objects.bulk_create(rows)
    except IntegrityError:
        created = []
        for row in rows:
            fields = {f.attname: getattr(row, f.attname) for f in JobEvent._meta.concrete_fields}
            del fields["event_id"]
            event, made = JobEvent.objects.get_or_create(event_id=row.event_id, defaults=fields)
            if made:
                created.append(event)
    return sorted(created, key=lambda event: event.pk)


def _event_keys(count: int) -> list[int]:
    """``count`` new primary keys of ``JobEvent``, ascending."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [JobEvent._meta.db_table, count],
        )
        return sorted(row[0] for row in cursor.fetchall())


# What an event says. Its time is not compared: a stored time may have been clamped.
_EVENT_CONTENT = (
    "job_id", "allocation_id", "kind", "iterations", "grad_sqr", "grad_var", "exit_status",
    "reason", "log_tail",
)  # fmt: skip


def _differing_fields(stored: dict[str, Any], sent: dict[str, Any]) -> list[str]:
    """The fields of ``_EVENT_CONTENT`` whose values differ between two reports of an event
    (an absent reason or log tail is stored blank)."""
    blank_is_none = {"reason", "log_tail"}
    return [
        f
        for f in _EVENT_CONTENT
        if (stored.get(f) or "" if f in blank_is_none else stored.get(f))
        != (sent.get(f) or "" if f in blank_is_none else sent.get(f))
    ]


def _changed_error(event_id: uuid.UUID, fields: list[str], before: str) -> dict[str, list[str]]:
    return {
        "event_id": [
            f"Event {event_id} differs from the one with this id ({before}) in "
            f"{', '.join(fields)}: an event is reported once; another report needs an "
            "event_id of its own."
        ]
    }


def _lock_node_then_job(node_id: int, job_id: int) -> bool:
    """Take, in this order, the node row (key share: what the JobEvent's foreign key needs;
    it does not conflict with heartbeats or status updates) and the job row (for update: the
    strongest lock an exit's state change takes, so it is never upgraded midway). False if
    either row is gone (deleted since the checks)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {Node._meta.db_table} WHERE id = %s FOR KEY SHARE", [node_id]
        )
        node_found = cursor.fetchone() is not None
        cursor.execute(f"SELECT 1 FROM {Job._meta.db_table} WHERE id = %s FOR UPDATE", [job_id])
        return node_found and cursor.fetchone() is not None


def _event_allocation(event: JobEvent, job: Job) -> JobAllocation | None:
    """The allocation whose units the event's counts are in: its own, else the job's current
    one, else none (the submitted batch)."""
    if event.allocation_id is not None:
        alloc = JobAllocation.objects.filter(pk=event.allocation_id).first()
        if alloc is not None:
            return alloc
    return job.current_allocation


def _batch_of(event: JobEvent, job: Job) -> int:
    """The global batch the event's counts are at."""
    alloc = _event_allocation(event, job)
    return alloc.batch_size if alloc is not None else job.global_batch_size


def _store_gradient_statistics(event: JobEvent, job: Job, alloc: JobAllocation | None) -> None:
    """Keep the job's latest gradient statistics with the batch they were measured at; a
    report older than the stored one (replayed from a spool) does not overwrite it.
    ``alloc``: ``_event_allocation``."""
    batch = alloc.batch_size if alloc is not None else job.global_batch_size
    Job.objects.filter(pk=event.job_id).filter(
        Q(grad_stats_at__isnull=True) | Q(grad_stats_at__lt=event.ts)
    ).update(
        grad_sqr=event.grad_sqr,
        grad_var=event.grad_var,
        grad_batch_size=batch,
        grad_stats_at=event.ts,
    )


def _plausible_count(event: JobEvent, job: Job, alloc: JobAllocation | None) -> bool:
    """Whether the event's count can be the job's progress (``most_iterations``). Capped at
    the job's total instead, one report of 1e18 (a script writing its samples as its
    iterations once) made a job that had done 150 of 2,000 iterations "2000 of 2000", and
    its next start told it that it had finished: it exited 0, completed with its work
    undone (a live probe). The event is stored and applied otherwise (an exit still ends
    the job); refused, the agent would quarantine an exit with it, and the job would hold
    its GPUs. ``job`` and ``alloc`` (``_event_allocation``): read once for this and
    ``_submitted_iterations``, for every report of every running job."""
    most = most_iterations(job, alloc.batch_size if alloc is not None else job.global_batch_size)
    if event.iterations <= most:
        return True
    log.warning(
        "job %s: %s event counts %g iterations, more than all its work (%.0f at its batch): "
        "the count is not applied",
        event.job_id, event.kind, event.iterations, most,
    )  # fmt: skip
    return False


def _submitted_iterations(event: JobEvent, job: Job, alloc: JobAllocation | None) -> float:
    """The event's iteration count (at its allocation's batch) at the job's submitted batch,
    with the factor its allocation was told its work in (``allocation_factor``).

    An event without an allocation (an agent that lost track of it) is taken at the job's
    current allocation, else at the submitted batch (``alloc``: ``_event_allocation``)."""
    f = allocation_factor(job, alloc)
    done = event.iterations if f == 1.0 else round(event.iterations / f, _ITERATION_DECIMALS)
    # A job never did more than all its work (an agent counting a last partial step).
    return min(done, float(job.total_iterations))


def _exit_time(event: JobEvent) -> datetime:
    """When the job's allocation ends: the exit's time, but never before the allocation's
    own later evidence that it ran (its GPUs computing, a progress report) up to when the
    exit arrived. The exit closes the allocation, and the energy its GPUs draw after that
    is nobody's: an exit stamped early (by a job, or an agent's clock behind the server's)
    let a team stop paying for what its job still drew (a live probe: 4,505 J charged ->
    605 J). A GPU that another allocation holds too (a co-located job) says nothing of
    this job's end, and is not read. Each GPU's samples are read newest first on their key
    (gpu, time) from the exit's arrival back to its stamp: as many rows as the GPU sat
    idle since the job's real end, a few for an exit reported at once."""
    alloc = (
        JobAllocation.objects.filter(pk=event.allocation_id)
        .values("started_at", "ended_at")
        .first()
    )
    if alloc is None:
        return event.ts
    after = max(event.ts, alloc["started_at"])
    until = event.received_at
    if until <= after:
        return event.ts
    latest = [event.ts]
    gpu_ids = list(Gpu.objects.filter(allocations=event.allocation_id).values_list("pk", flat=True))
    shared = set(
        JobAllocation.gpus.through.objects.filter(
            gpu_id__in=gpu_ids,
            joballocation__started_at__lt=until,
        )
        .exclude(joballocation_id=event.allocation_id)
        .filter(Q(joballocation__ended_at__isnull=True) | Q(joballocation__ended_at__gt=after))
        .values_list("gpu_id", flat=True)
    )
    for gpu_id in gpu_ids:
        if gpu_id in shared:
            continue
        busy = (
            GpuSample.objects.filter(gpu_id=gpu_id, ts__gt=after, ts__lte=until, util_pct__gt=0)
            .order_by("-ts")
            .values_list("ts", flat=True)
            .first()
        )
        if busy is not None:
            latest.append(busy)
    reported = (
        JobEvent.objects.filter(allocation_id=event.allocation_id, ts__gt=after, ts__lte=until)
        .exclude(pk=event.pk)
        .order_by("-ts")
        .values_list("ts", flat=True)
        .first()
    )
    if reported is not None:
        latest.append(reported)
    return max(latest)


class _JobEvents:
    """Applies one job's new events in their order, its row locked (``record_job_events``):
    progress raises ``completed_iterations`` (never lowers it), gradient statistics are
    kept, an exit of the job's current allocation completes or fails the job.

    The job and the allocations its events name are read once, not for every event; the
    job is read again after anything that changes what it converts counts with (gradient
    statistics: its noise scale) or its state (an exit). The highest count is written once,
    before an exit reads it and at the end: the row is locked, so nothing else moved it."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        self.job: Job | None = None
        self.allocations: dict[int, JobAllocation | None] = {}
        self.done: float | None = None  # the highest count not written yet

    def _job(self) -> Job:
        if self.job is None:
            self.job = Job.objects.select_related("current_allocation").get(pk=self.job_id)
        return self.job

    def _allocation(self, event: JobEvent, job: Job) -> JobAllocation | None:
        """``_event_allocation``, each allocation read once."""
        if event.allocation_id is not None:
            if event.allocation_id not in self.allocations:
                self.allocations[event.allocation_id] = JobAllocation.objects.filter(
                    pk=event.allocation_id
                ).first()
            alloc = self.allocations[event.allocation_id]
            if alloc is not None:
                return alloc
        return job.current_allocation

    def flush(self) -> None:
        if self.done is not None:
            Job.objects.filter(pk=self.job_id, completed_iterations__lt=self.done).update(
                completed_iterations=self.done
            )
            self.done = None
            self.job = None

    def apply(self, event: JobEvent) -> None:
        if event.grad_sqr is not None and event.grad_var is not None:
            job = self._job()
            _store_gradient_statistics(event, job, self._allocation(event, job))
            self.job = None
        counted = False  # whether the event's count was taken as the job's progress
        if event.iterations is not None:
            job = self._job()
            alloc = self._allocation(event, job)
            counted = _plausible_count(event, job, alloc)
            if counted:
                done = _submitted_iterations(event, job, alloc)
                self.done = done if self.done is None else max(self.done, done)
        if event.kind == JobEventKind.EXITED:
            self.flush()
            _apply_exit(event, counted=counted)
            self.job = None
            self.allocations.clear()


def completion_at_exit_zero(
    job: Job, *, counted: bool, log_tail: str
) -> tuple[dict[str, float], str]:
    """What a job that exited with status 0 completes with: the fields to store beside the
    state (``completed_iterations``) and its log tail. ``job`` holds the count it reported
    (``counted``: its own last report, applied); the agent's exit and the Slurm executor's
    ``COMPLETED`` both end here, so a job reads the same whichever ran it."""
    # A job that completed at its last iteration did all its work: its count, recounted
    # from another batch's units, can come back a millionth short (8,313,020.999999 of
    # 8,313,021).
    short = job.total_iterations - job.completed_iterations
    if 0.0 < short <= _ROUND_TRIP_SLACK:
        return {"completed_iterations": float(job.total_iterations)}, log_tail
    if counted and short > _ROUND_TRIP_SLACK:
        # Status 0 is the job's word that it is done: a script may end early on its own
        # (early stopping at a target accuracy), so it completes. But a count short of its
        # total is said where the user reads the job (a live probe: an exit at 11% of the
        # work read as a plain success); a job that writes no progress file exits with no
        # count and cannot say how far it got.
        note = (
            f"Exited with status 0 having reported {job.completed_iterations:.15g} of its "
            f"{job.total_iterations} iterations: ended early on its own."
        )
        log_tail = (f"{log_tail.rstrip()}\n{note}" if log_tail.strip() else note)[-_LOG_TAIL_CHARS:]
        log.info("job %s: %s", job.pk, note)
    return {}, log_tail


def count_at_submitted_batch(
    job: Job, alloc: JobAllocation | None, iterations: float
) -> float | None:
    """A count ``job`` reported while running under ``alloc`` (at its batch, in the units it
    was told), in the job's own units; None for one no report can count (``most_iterations``)."""
    batch = alloc.batch_size if alloc is not None else job.global_batch_size
    if not 0.0 <= iterations <= most_iterations(job, batch):
        return None
    f = allocation_factor(job, alloc)
    done = iterations if f == 1.0 else round(iterations / f, _ITERATION_DECIMALS)
    return min(done, float(job.total_iterations))


def _apply_exit(event: JobEvent, *, counted: bool) -> None:
    """An exit's part of ``_JobEvents.apply``, its count already applied (``counted``:
    taken as the job's progress)."""
    job = Job.objects.get(pk=event.job_id)
    if event.reason not in (ExitReason.COMPLETED, ExitReason.FAILED):
        # Stopped on the scheduler's order (or the agent's exit): the scheduler owns the state.
        # Its output is kept, but never over a finished job's own (a stop of an old
        # allocation delivered late, from another node's spool, erased a failure's
        # message), and a stop that printed nothing keeps what was there.
        if event.log_tail:
            Job.objects.filter(pk=job.pk).exclude(
                state__in=(JobState.COMPLETED, JobState.FAILED)
            ).update(log_tail=event.log_tail)
        return
    if job.current_allocation_id != event.allocation_id:
        log.info("job %s: exit of allocation %s is stale, ignored", job.pk, event.allocation_id)
        return
    target = JobState.COMPLETED if event.reason == ExitReason.COMPLETED else JobState.FAILED
    done: dict[str, float] = {}
    log_tail = event.log_tail
    if target == JobState.COMPLETED:
        done, log_tail = completion_at_exit_zero(job, counted=counted, log_tail=log_tail)
    try:
        transition_job(
            job,
            to=target,
            at=_exit_time(event),
            exit_status=event.exit_status,
            log_tail=log_tail,
            **done,
        )
    except InvalidTransition as exc:
        log.info("job %s: exit report not applied: %s", job.pk, exc)
