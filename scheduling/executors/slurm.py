"""The Slurm executor: Wattflow plans, an existing Slurm cluster runs the jobs (issue 14).

One Slurm job per allocation. ``carry_out`` (after a round commits) submits each open
allocation that has no Slurm job yet with ``sbatch --hold`` on exactly the planned nodes
(``--nodelist``, ``--gres=gpu:N`` per node), Wattflow's tag in ``--comment``
(``telemetry.agent.slurm_handoff.SlurmJobTag``) and ``WATTFLOW_JOB_ID`` /
``WATTFLOW_ALLOCATION_ID`` in its environment, output appended to one file per Wattflow job,
then releases them all with one ``scontrol release``. A Slurm job whose allocation closed is
stopped with ``scancel`` (SIGTERM: the job checkpoints; SIGKILL after KillWait); a paused job
resumes, and a resized or moved one restarts, as a new Slurm job. A retune (same nodes and GPU
counts, new batch size, clock or power limit) keeps the Slurm job and updates its comment.

``reconcile`` (inside every round, under the round lock) reads ``squeue``/``sinfo`` (and
``scontrol show job`` or ``sacct`` for the exit codes of jobs that ended) and repairs the
database through ``cluster.services``: a job that completed or failed in Slurm is completed or
failed with its exit code and log tail; one cancelled outside Wattflow is cancelled; one lost
with its node (NODE_FAIL, preemption), or that Slurm kept pending for over
``WATTFLOW_SLURM_START_TIMEOUT_S`` after its release (GPUs taken by jobs Wattflow does not
see), or that Slurm or an admin held again after its release (a failed launch), is re-queued; a
node down or drained in Slurm is drained (and undrained when Slurm has it back, if the drain
was the reconciler's); a Slurm job with a Wattflow comment that no allocation owns (e.g.
submitted just before a crash) is cancelled.

Slurm picks the GPU indices on a node (it can only be told exact indices with one GRES type
per GPU); the node's Prolog hands them to the agent by ``SLURM_JOB_GPUS``. An allocation over
several nodes with unequal GPU counts asks for the largest count on each of its nodes.
"""

from __future__ import annotations

import logging
import shlex
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from cluster import services as cluster_services
from cluster.choices import JobState, NodeStatus
from cluster.models import AuditEntry, Job, JobAllocation, Node
from scheduling.executors.base import ExecutionReport, Executor, ReconcileReport
from scheduling.executors.slurm_cli import (
    SlurmCli,
    SlurmError,
    SlurmJobInfo,
    SlurmNodeInfo,
    Submission,
)
from scheduling.models import SlurmJob
from telemetry.agent.jobs import Progress, parse_progress
from telemetry.agent.slurm_handoff import SlurmJobTag
from telemetry.services import (
    checkpoint_dir,
    completion_at_exit_zero,
    count_at_submitted_batch,
    told_iterations,
)

log = logging.getLogger(__name__)

# Serialises carry_out with reconcile ("wflowSLM" in ASCII): the reconciler must never see a
# Slurm job that carry_out submitted but has not recorded yet, or it would cancel it as unknown.
EXECUTOR_LOCK_KEY = 0x77666C6F77534C4D
RECONCILER_NAME = "slurm-reconciler"
LOG_TAIL_CHARS = 4000
# Run when a job has no command: the Slurm job holds its GPUs while the node agent reports
# (simulated) progress; the job ends when Wattflow completes it and cancels the Slurm job.
PLACEHOLDER_COMMAND = "exec sleep infinity"
# The batch script's last line, however the job's command ends (its end or an ``exit``):
# what the job last wrote into its progress file. The agent reports progress at most once a
# post interval and the Epilog removes the file, so the last count the agent sent can be
# short of the job's last; this line is the job's own word at its end.
PROGRESS_MARK = "wattflow progress of Slurm job"
# What the trailer prints of the progress file (its last bytes); the reconciler looks for the
# trailer in a window of the output this much longer than the log tail it keeps, so that a
# long trailer line (a file of appended counts past 4,000 bytes) is found whole.
PROGRESS_TRAILER_BYTES = 4096
TRAILER_WINDOW_CHARS = LOG_TAIL_CHARS + PROGRESS_TRAILER_BYTES + 256
PROGRESS_TRAILER = (
    "_wattflow_last_progress() {\n"
    '    [ -n "${WATTFLOW_PROGRESS_FILE:-}" ] && [ -s "$WATTFLOW_PROGRESS_FILE" ] || return 0\n'
    f"    printf '\\n{PROGRESS_MARK} %s: %s\\n' \"${{SLURM_JOB_ID:-}}\" "
    f"\"$(tail -c {PROGRESS_TRAILER_BYTES} -- \"$WATTFLOW_PROGRESS_FILE\" | tr '\\r\\n' '  ')\"\n"
    "}\n"
    "trap _wattflow_last_progress EXIT\n"
)
# How an ended Slurm job leaves the Wattflow job whose current allocation it served.
_FAILED_STATES = frozenset(
    {"FAILED", "OUT_OF_MEMORY", "TIMEOUT", "DEADLINE", "BOOT_FAIL", "SPECIAL_EXIT"}
)
_LOST_STATES = frozenset({"NODE_FAIL", "PREEMPTED"})
# What ``SlurmJob.slurm_state`` says of a job that neither slurmctld nor accounting knows.
LOST_STATE = "UNKNOWN_TO_SLURM"


class _Reconciler:
    """The actor named in the audit log when the reconciler drains or undrains a node."""

    username = RECONCILER_NAME
    is_authenticated = False


@dataclass(frozen=True)
class Placement:
    nodes: tuple[str, ...]
    gpus_per_node: int

    @classmethod
    def of(cls, allocation: JobAllocation) -> Placement:
        counts = Counter(gpu.node.name for gpu in allocation.gpus.all())
        return cls(tuple(sorted(counts)), max(counts.values(), default=0))


def _lock() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [EXECUTOR_LOCK_KEY])


def exit_status(info: SlurmJobInfo) -> int | None:
    """Shell convention: the exit code, or 128 + the signal that killed the job."""
    if info.signal:
        return 128 + info.signal
    return info.exit_code


class SlurmExecutor(Executor):
    name = "slurm"

    def __init__(
        self,
        cli: SlurmCli,
        *,
        partition: str = "",
        account: str = "",
        reservation: str = "",
        output_dir: str | Path = "",
        start_timeout_s: float = 300.0,
    ) -> None:
        self.cli = cli
        self.partition = partition
        self.account = account
        self.reservation = reservation
        self.output_dir = Path(output_dir or settings.WATTFLOW_VAR_DIR / "slurm-output")
        self.start_timeout_s = start_timeout_s

    @classmethod
    def from_settings(cls) -> SlurmExecutor:
        return cls(
            SlurmCli(
                conf=settings.WATTFLOW_SLURM_CONF,
                bin_dir=settings.WATTFLOW_SLURM_BIN_DIR,
                timeout_s=settings.WATTFLOW_SLURM_COMMAND_TIMEOUT_S,
            ),
            partition=settings.WATTFLOW_SLURM_PARTITION,
            account=settings.WATTFLOW_SLURM_ACCOUNT,
            reservation=settings.WATTFLOW_SLURM_RESERVATION,
            output_dir=settings.WATTFLOW_SLURM_OUTPUT_DIR,
            start_timeout_s=settings.WATTFLOW_SLURM_START_TIMEOUT_S,
        )

    # --- capabilities -------------------------------------------------------------------------

    def capabilities(self) -> list[str]:
        """What this Slurm offers Wattflow and what it lacks, one line each (``slurm_check``)."""
        major, minor = self.cli.version()
        lines = [f"Slurm {major}.{minor:02d} through its CLI ({self.cli.conf or 'default conf'})"]
        if (major, minor) < (21, 8):
            lines.append("MISSING: sinfo --json (need Slurm 21.08 or later)")
        lines.append(
            "not used: squeue --json (22.05: ten times slower than text with 1,000 jobs) and "
            "sacct --json (22.05: exit code 0 for every job); both read as text"
        )
        lines.append(
            "not used: slurmrestd (JWT): every call goes through the CLI, which needs munge "
            "and the Slurm client on the Wattflow host"
        )
        lines.append(
            "MISSING in Slurm: GPU power limits and clocks (--gpu-freq needs gpu_nvml); the "
            "node agent applies them from the Prolog's handoff file"
        )
        return lines

    # --- carry out ----------------------------------------------------------------------------

    def output_path(self, job_id: int) -> Path:
        return self.output_dir / f"wattflow-job-{job_id}.out"

    def submission(self, allocation: JobAllocation) -> Submission:
        job = allocation.job
        place = Placement.of(allocation)
        gpu_count = allocation.gpus.count()
        tag = SlurmJobTag(
            job_id=job.pk,
            allocation_id=allocation.pk,
            power_limit_w=allocation.power_limit_w,
            sm_clock_mhz=allocation.sm_clock_mhz,
        )
        # In the units the job's reports are counted back in (told_iterations: goodput at
        # the noise scale fixed when the allocation started).
        total, done = told_iterations(job, allocation)
        env = {
            "WATTFLOW_WORKLOAD": job.workload,
            "WATTFLOW_BATCH_SIZE": str(allocation.batch_size),
            "WATTFLOW_GPU_COUNT": str(gpu_count),
            "WATTFLOW_CHECKPOINT_DIR": checkpoint_dir(job),
            "WATTFLOW_TOTAL_ITERATIONS": repr(total),
            "WATTFLOW_COMPLETED_ITERATIONS": repr(done),
        }
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        script = (
            "#!/bin/bash\n"
            f"# Wattflow job {job.pk}, allocation {allocation.pk} (submitted by Wattflow)\n"
            f"{exports}{PROGRESS_TRAILER}{job.command.strip() or PLACEHOLDER_COMMAND}\n"
        )
        return Submission(
            script=script,
            name=f"wattflow-{job.pk}",
            comment=tag.comment(),
            nodelist=place.nodes,
            gpus_per_node=place.gpus_per_node,
            output=str(self.output_path(job.pk)),
            export={
                "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "WATTFLOW_JOB_ID": str(job.pk),
                "WATTFLOW_ALLOCATION_ID": str(allocation.pk),
            },
            partition=self.partition,
            account=self.account,
            reservation=self.reservation,
        )

    def carry_out(self, *, now: datetime) -> ExecutionReport:
        report = ExecutionReport()
        with transaction.atomic():
            _lock()
            try:
                active = {j.job_id: j for j in self.cli.jobs() if j.active}
            except SlurmError as exc:
                report.errors.append(str(exc))
                return report
            open_allocs = list(
                JobAllocation.objects.filter(ended_at__isnull=True, job__state=JobState.RUNNING)
                .select_related("job")
                .prefetch_related("gpus__node")
                .order_by("pk")
            )
            by_job = {a.job_id: a for a in open_allocs}
            served = set(
                SlurmJob.objects.filter(allocation__in=open_allocs).values_list(
                    "allocation_id", flat=True
                )
            )
            self._stop_or_retune(active, by_job, served, now=now, report=report)
            self._submit([a for a in open_allocs if a.pk not in served], now=now, report=report)
        return report

    def _stop_or_retune(
        self,
        active: dict[int, SlurmJobInfo],
        by_job: dict[int, JobAllocation],
        served: set[int],
        *,
        now: datetime,
        report: ExecutionReport,
    ) -> None:
        live = SlurmJob.objects.filter(
            ended_at__isnull=True,
            cancel_requested_at__isnull=True,
            allocation__ended_at__isnull=False,
        ).select_related("allocation")
        to_stop: list[SlurmJob] = []
        for row in live:
            new = by_job.get(row.job_id)
            if (
                new is not None
                and new.pk not in served
                and row.slurm_job_id in active
                and Placement.of(new) == Placement(tuple(row.nodes.split(",")), row.gpus_per_node)
                # its batch is in its script: another batch is a restart, not a retune
                and new.batch_size == row.allocation.batch_size
            ):
                tag = SlurmJobTag(row.job_id, new.pk, new.power_limit_w, new.sm_clock_mhz)
                try:
                    self.cli.set_comment(row.slurm_job_id, tag.comment())
                except SlurmError as exc:
                    report.errors.append(str(exc))
                else:
                    SlurmJob.objects.filter(pk=row.pk).update(allocation=new)
                    # The job goes on counting in the units its script was told: its reports,
                    # now under the new allocation, count back with the same factor.
                    kept = row.allocation.iterations_per_submitted
                    if kept is not None and kept != new.iterations_per_submitted:
                        JobAllocation.objects.filter(pk=new.pk).update(
                            iterations_per_submitted=kept
                        )
                        new.iterations_per_submitted = kept
                    served.add(new.pk)
                    report.retuned.append(row.slurm_job_id)
                    continue
            to_stop.append(row)
        running = [r.slurm_job_id for r in to_stop if r.slurm_job_id in active]
        failed: set[int] = set()
        if running:
            try:
                self.cli.cancel(running)
            except SlurmError:
                # One job ended between squeue and scancel: cancel the others one by one.
                for slurm_id in running:
                    try:
                        self.cli.cancel([slurm_id])
                    except SlurmError as exc:
                        report.errors.append(str(exc))
                        failed.add(slurm_id)
        # Marked whether or not it was still running: its end is Wattflow's doing either way.
        # Not one whose scancel failed (timed out, slurmctld busy): marked, it was never
        # cancelled again, and ran on in Slurm on GPUs Wattflow counted free. Unmarked, the
        # next carry-out tries again (or marks it, once it has ended).
        SlurmJob.objects.filter(
            pk__in=[r.pk for r in to_stop if r.slurm_job_id not in failed]
        ).update(cancel_requested_at=now)
        report.stopped.extend(i for i in running if i not in failed)

    def _submit(
        self, allocations: list[JobAllocation], *, now: datetime, report: ExecutionReport
    ) -> None:
        if not allocations:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        held: list[int] = []
        for allocation in allocations:
            sub = self.submission(allocation)
            try:
                slurm_id = self.cli.submit_held(sub)
            except SlurmError as exc:
                report.errors.append(f"job {allocation.job_id}: {exc}")
                self._refused(allocation, exc, now=now)
                continue
            SlurmJob.objects.create(
                slurm_job_id=slurm_id,
                job_id=allocation.job_id,
                allocation=allocation,
                nodes=",".join(sub.nodelist),
                gpus_per_node=sub.gpus_per_node,
                submitted_at=now,
            )
            held.append(slurm_id)
        if not held:
            return
        try:
            self.cli.release(held)
        except SlurmError as exc:
            # Still held: the reconciler's next pass sees them pending; release them again.
            report.errors.append(str(exc))
            return
        SlurmJob.objects.filter(slurm_job_id__in=held).update(released_at=now)
        report.submitted.extend(held)

    @staticmethod
    def _refused(allocation: JobAllocation, exc: SlurmError, *, now: datetime) -> None:
        """Slurm refused the submission (a node it does not know, an account it refuses, or
        slurmctld down): the job goes back to the queue with Slurm's words as its reason,
        rather than counting as running on GPUs where nothing runs."""
        try:
            cluster_services.transition_job(
                Job.objects.get(pk=allocation.job_id),
                to=JobState.QUEUED,
                at=now,
                pending_reason_code="slurm_refused",
                pending_reason=f"Slurm refused the job: {exc}"[:2000],
            )
        except cluster_services.InvalidTransition as refused:
            log.info("job %s not re-queued after sbatch failed: %s", allocation.job_id, refused)

    # --- reconcile ----------------------------------------------------------------------------

    def reconcile(self, *, now: datetime) -> ReconcileReport:
        report = ReconcileReport()
        with transaction.atomic():
            _lock()
            try:
                jobs = self.cli.jobs()
                nodes = self.cli.nodes()
            except SlurmError as exc:
                report.errors.append(str(exc))
                log.warning("Slurm reconciler skipped this round: %s", exc)
                return report
            self._reconcile_nodes(nodes, report)
            self._reconcile_jobs(jobs, now=now, report=report)
            self._release_stuck_holds(jobs, report)
            self._cancel_unknown(jobs, report)
        if report.changes:
            log.info("Slurm reconciler: %s", report)
        return report

    def _reconcile_nodes(self, nodes: list[SlurmNodeInfo], report: ReconcileReport) -> None:
        by_name = {n.name: n for n in nodes}
        for node in Node.objects.filter(name__in=by_name):
            info = by_name[node.name]
            try:
                if not info.available and node.status == NodeStatus.HEALTHY:
                    cluster_services.drain_node(node, actor=_Reconciler())
                    report.nodes_drained.append(node.name)
                elif (
                    info.available
                    and node.status == NodeStatus.DRAINING
                    and self._drained_by_reconciler(node)
                ):
                    cluster_services.undrain_node(node, actor=_Reconciler())
                    report.nodes_restored.append(node.name)
            except cluster_services.NodeStateError as exc:
                report.errors.append(str(exc))

    @staticmethod
    def _drained_by_reconciler(node: Node) -> bool:
        last = (
            AuditEntry.objects.filter(object_type="node", object_id=str(node.pk))
            .order_by("-at", "-id")
            .first()
        )
        return (
            last is not None
            and last.actor_username == RECONCILER_NAME
            and (last.after or {}).get("status") == NodeStatus.DRAINING
        )

    def _reconcile_jobs(
        self, jobs: list[SlurmJobInfo], *, now: datetime, report: ReconcileReport
    ) -> None:
        by_id = {j.job_id: j for j in jobs}
        live = list(SlurmJob.objects.filter(ended_at__isnull=True).order_by("pk"))
        forgotten = [r.slurm_job_id for r in live if r.slurm_job_id not in by_id]
        ended = [
            by_id[r.slurm_job_id]
            for r in live
            if r.slurm_job_id in by_id and not by_id[r.slurm_job_id].active
        ]
        asked_accounting = False
        try:
            # Exit codes only for the few that ended since the last round.
            for info in self.cli.ended(ended) + self.cli.accounting(forgotten):
                by_id[info.job_id] = info
            asked_accounting = True
        except SlurmError as exc:
            report.errors.append(str(exc))
            for info in ended:
                by_id.pop(info.job_id)  # without its exit code: look again next round
        # State changes of running and pending jobs, one UPDATE per new state (a first pass
        # over 1,000 jobs took 4 s as single-row updates).
        moved: dict[str, list[int]] = defaultdict(list)
        for row in live:
            info = by_id.get(row.slurm_job_id)
            if info is None:
                # Neither slurmctld nor accounting has it: accounting may lag for a moment, but
                # a job gone from both for longer than the start timeout is lost (slurmctld
                # forgot it after MinJobAge and accounting never recorded it).
                if asked_accounting and self._missing_too_long(row, now=now):
                    self._lost(row, now=now, report=report)
                continue
            if info.active:
                if info.state != row.slurm_state:
                    moved[info.state].append(row.pk)
                if self._held_after_release(row, info) or self._pending_too_long(
                    row, info, now=now
                ):
                    self._give_back(row, info, now=now, report=report)
                continue
            self._job_ended(row, info, now=now, report=report)
        for state, pks in moved.items():
            SlurmJob.objects.filter(pk__in=pks).update(slurm_state=state)
            if state == "RUNNING":
                SlurmJob.objects.filter(pk__in=pks, running_at__isnull=True).update(running_at=now)

    def _pending_too_long(self, row: SlurmJob, info: SlurmJobInfo, *, now: datetime) -> bool:
        return (
            info.state == "PENDING"
            and row.released_at is not None
            and row.cancel_requested_at is None
            and (now - row.released_at).total_seconds() > self.start_timeout_s
        )

    @staticmethod
    def _held_after_release(row: SlurmJob, info: SlurmJobInfo) -> bool:
        """A job Wattflow released that is pending and held again: Slurm holds a job whose
        launch failed ("launch failed requeued held") and an admin may hold one
        (``JobHeldAdmin``). Nothing will release it, so waiting out the start timeout would
        only keep its GPUs counted as busy."""
        return (
            info.state == "PENDING"
            and row.released_at is not None
            and row.cancel_requested_at is None
            and "held" in info.reason.lower()
        )

    def _missing_too_long(self, row: SlurmJob, *, now: datetime) -> bool:
        return (now - row.submitted_at).total_seconds() > self.start_timeout_s

    def _lost(self, row: SlurmJob, *, now: datetime, report: ReconcileReport) -> None:
        """A Slurm job neither ``squeue`` nor ``sacct`` knows: its Wattflow job would otherwise
        stay running for ever on GPUs nothing uses. Close the row and re-queue the job (it
        resumes from its last checkpoint), saying why."""
        closed = SlurmJob.objects.filter(pk=row.pk, ended_at__isnull=True).update(
            ended_at=now, slurm_state=LOST_STATE
        )
        if closed != 1:
            return
        job = self._current_job(row)
        if job is not None:
            self._requeue(
                job, now=now, report=report, code="slurm_lost",
                reason=(
                    f"Re-queued: Slurm has no record of job {row.slurm_job_id} (not in squeue, "
                    "not in its accounting)."
                ),
            )  # fmt: skip

    @staticmethod
    def _current_job(row: SlurmJob) -> Job | None:
        """The Wattflow job ``row`` serves, if that is still its running allocation."""
        job = Job.objects.get(pk=row.job_id)
        if job.state != JobState.RUNNING or job.current_allocation_id != row.allocation_id:
            return None
        return job

    @staticmethod
    def _requeue(
        job: Job, *, now: datetime, report: ReconcileReport, code: str, reason: str
    ) -> None:
        """Put a running job back in the queue, saying why (it resumes from its checkpoint)."""
        try:
            cluster_services.transition_job(
                job, to=JobState.QUEUED, at=now, pending_reason_code=code, pending_reason=reason
            )
        except cluster_services.InvalidTransition as exc:
            report.errors.append(str(exc))
            return
        report.jobs_requeued.append(job.pk)

    def _give_back(
        self, row: SlurmJob, info: SlurmJobInfo, *, now: datetime, report: ReconcileReport
    ) -> None:
        """A released job Slurm would not start (its GPUs taken by jobs Wattflow does not see,
        a limit of the account): cancel it and put the Wattflow job back in the queue, so the
        plan does not count GPUs that Slurm will not give."""
        job = self._current_job(row)
        if job is None:
            return
        try:
            self.cli.cancel([row.slurm_job_id])
        except SlurmError as exc:
            report.errors.append(str(exc))
            return
        SlurmJob.objects.filter(pk=row.pk).update(cancel_requested_at=now)
        if self._held_after_release(row, info):
            reason = f"Slurm held job {info.job_id} ({info.reason}); back in the queue."
        else:
            reason = (
                f"Slurm kept job {info.job_id} pending ({info.reason or 'no reason given'}) "
                f"for over {self.start_timeout_s:g} s; back in the queue."
            )
        self._requeue(job, now=now, report=report, code="slurm_pending", reason=reason)

    def _job_ended(
        self, row: SlurmJob, info: SlurmJobInfo, *, now: datetime, report: ReconcileReport
    ) -> None:
        ended = SlurmJob.objects.filter(pk=row.pk, ended_at__isnull=True).update(
            ended_at=now, slurm_state=info.state, exit_code=exit_status(info)
        )
        if ended != 1:
            return
        tail = self._log_tail(row.job_id, info)
        job = Job.objects.get(pk=row.job_id)
        if (
            row.cancel_requested_at is not None
            or job.state != JobState.RUNNING
            or job.current_allocation_id != row.allocation_id
        ):
            # Stopped by Wattflow, or no longer the job's current run: only keep its log.
            if tail:
                Job.objects.filter(pk=job.pk).update(log_tail=tail)
            return
        status = exit_status(info)
        try:
            if info.state == "COMPLETED" and status == 0:
                window = self._log_tail(row.job_id, info, chars=TRAILER_WINDOW_CHARS)
                done, tail = self._completion(job, row, tail, window)
                cluster_services.transition_job(
                    job, to=JobState.COMPLETED, at=now, exit_status=0, log_tail=tail, **done
                )
                report.jobs_finished.append(job.pk)
            elif info.state == "CANCELLED":
                # A cancelled job has no wait reason (transition_job clears it): why it ended
                # is the last line of its log tail, after Slurm's own "CANCELLED" line.
                note = f"Slurm job {info.job_id} was cancelled outside Wattflow."
                cluster_services.transition_job(
                    job,
                    to=JobState.CANCELLED,
                    at=now,
                    exit_status=status,
                    log_tail=(f"{tail.rstrip()}\n{note}" if tail else note)[-LOG_TAIL_CHARS:],
                )
                report.jobs_cancelled.append(job.pk)
            elif info.state in _LOST_STATES:
                cluster_services.transition_job(
                    job,
                    to=JobState.QUEUED,
                    at=now,
                    log_tail=tail,
                    pending_reason_code="node_lost",
                    pending_reason=f"Re-queued: Slurm job {info.job_id} ended {info.state}.",
                )
                report.jobs_requeued.append(job.pk)
            else:
                cluster_services.transition_job(
                    job, to=JobState.FAILED, at=now, exit_status=status, log_tail=tail
                )
                report.jobs_finished.append(job.pk)
        except cluster_services.InvalidTransition as exc:
            report.errors.append(str(exc))

    @staticmethod
    def _completion(
        job: Job, row: SlurmJob, tail: str, window: str
    ) -> tuple[dict[str, float], str]:
        """What a job that Slurm says COMPLETED with status 0 completes with: the count its
        batch script printed at its end (``PROGRESS_TRAILER``), read as the agent reads an
        exit's count, with the agent's note when it is short of the total. A job that printed
        none (no progress file, or a command that ``exec``s) cannot say how far it got:
        status 0 is its word that it did all its work. The trailer is looked for in
        ``window``, the output's last ``TRAILER_WINDOW_CHARS``: its line can be longer than
        the kept ``tail`` (a file of appended counts prints up to 4,096 bytes), whose cut
        dropped the line's mark and completed such a job at its whole total."""
        progress = last_reported_progress(window, row.slurm_job_id)
        count = None
        if progress is not None:
            alloc = JobAllocation.objects.filter(pk=row.allocation_id).first()
            count = count_at_submitted_batch(job, alloc, progress.iterations)
        if count is None:
            return {"completed_iterations": float(job.total_iterations)}, tail
        # Progress never goes back (a report stored earlier may count more).
        job.completed_iterations = max(job.completed_iterations, count)
        done, tail = completion_at_exit_zero(job, counted=True, log_tail=tail)
        done.setdefault("completed_iterations", job.completed_iterations)
        return done, tail[-LOG_TAIL_CHARS:]

    def _log_tail(self, job_id: int, info: SlurmJobInfo, *, chars: int = LOG_TAIL_CHARS) -> str:
        path = Path(info.output) if info.output else self.output_path(job_id)
        try:
            with path.open("rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - chars))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _release_stuck_holds(self, jobs: list[SlurmJobInfo], report: ReconcileReport) -> None:
        """Jobs carry_out submitted but could not release (a failed ``scontrol release``)."""
        pending = {j.job_id for j in jobs if j.state == "PENDING"}
        stuck = list(
            SlurmJob.objects.filter(
                released_at__isnull=True,
                ended_at__isnull=True,
                cancel_requested_at__isnull=True,
                slurm_job_id__in=pending,
            ).values_list("slurm_job_id", flat=True)
        )
        if stuck:
            try:
                self.cli.release(stuck)
            except SlurmError as exc:
                report.errors.append(str(exc))
                return
            SlurmJob.objects.filter(slurm_job_id__in=stuck).update(released_at=Now())

    def _cancel_unknown(self, jobs: list[SlurmJobInfo], report: ReconcileReport) -> None:
        ours = [j.job_id for j in jobs if j.active and SlurmJobTag.is_wattflow(j.comment)]
        known = set(
            SlurmJob.objects.filter(slurm_job_id__in=ours).values_list("slurm_job_id", flat=True)
        )
        unknown = [i for i in ours if i not in known]
        for slurm_id in unknown:
            try:
                self.cli.cancel([slurm_id])
            except SlurmError as exc:
                report.errors.append(str(exc))
                continue
            report.unknown_cancelled.append(slurm_id)


def last_reported_progress(log_tail: str, slurm_job_id: int) -> Progress | None:
    """What Slurm job ``slurm_job_id``'s batch script printed of its progress file at its end
    (``PROGRESS_TRAILER``; its last such line in the job's output, which other Slurm jobs of
    the same Wattflow job append to), read as the agent reads the file; None without one."""
    prefix = f"{PROGRESS_MARK} {slurm_job_id}: "
    # (split at newlines alone: ``splitlines`` also splits at form feeds, U+2028 and the
    # like, which a JSON progress file may hold in a string and the agent reads whole)
    for line in reversed(log_tail.split("\n")):
        if line.startswith(prefix):
            text = line[len(prefix) :].strip()
            if not text.startswith("{"):
                # a file of counts, one a line (its newlines printed as spaces): the last
                text = text.rsplit(maxsplit=1)[-1] if text else ""
            return parse_progress(text)
    return None
