"""The agent's main loop: sample, post, heartbeat, carry out assignments.

Time is a parameter of :meth:`Agent.tick` (the loop in :meth:`Agent.run` passes the wall
clock), so tests drive the agent tick by tick. Jobs are carried out by a job runner
(``runners.py``: processes, simulated jobs, or none); with the ``none`` runner and a
:class:`~telemetry.agent.monitor.HandoffWatcher` (monitor mode, Slurm runs the jobs) the agent
fetches no assignments and reports no starts or exits: it applies and restores the GPU settings
of the Slurm jobs the Prolog hands over and reports their progress.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from telemetry.agent.backends import GpuBackend, Reading
from telemetry.agent.client import AgentClient
from telemetry.agent.jobs import ProcessJob, read_progress
from telemetry.agent.monitor import HandoffWatcher
from telemetry.agent.runners import (
    CannotStart,
    JobExit,
    JobRunner,
    default_runner_name,
    make_runner,
)
from telemetry.agent.slurm_handoff import Handoff
from telemetry.agent.spool import Rejected, ServerUnreachable

log = logging.getLogger(__name__)


TICK_ERROR_EVERY = 60  # a failing tick's traceback is logged once in this many
# Samples a post carries at most: a quarter of what the server takes in one batch by default
# (``TELEMETRY_MAX_BATCH_SAMPLES``), so a server configured lower still takes them.
MAX_SAMPLES_PER_POST = 5000


@dataclass(frozen=True)
class AgentConfig:
    node_name: str
    work_dir: Path
    sample_interval_s: float = 1.0
    post_interval_s: float = 5.0
    heartbeat_interval_s: float = 15.0
    assignment_interval_s: float = 5.0
    stop_grace_s: float = 30.0


class Agent:
    def __init__(
        self,
        backend: GpuBackend,
        client: AgentClient,
        config: AgentConfig,
        runner: JobRunner | None = None,
        handoffs: HandoffWatcher | None = None,
    ) -> None:
        """``runner`` None: simulated jobs on the simulated backend, processes otherwise.
        ``handoffs``: follow the Slurm jobs the Prolog hands over (monitor mode)."""
        self.backend = backend
        self.client = client
        self.config = config
        self.runner = runner or make_runner(
            default_runner_name(backend),
            backend,
            work_dir=config.work_dir,
            stop_grace_s=config.stop_grace_s,
        )
        self.handoffs = handoffs
        self.slurm_jobs: dict[int, Handoff] = {}  # Slurm job id -> its handoff (monitor mode)
        self.index_by_uuid = {g.uuid: g.index for g in backend.gpus()}
        self.buffer: list[Reading] = []
        # Job events the spool could not keep (a full disk): sent first at the next try. An
        # exit lost here left its job running on the server for good (the agent had already
        # forgotten it).
        self.unsent_events: list[dict[str, Any]] = []
        self.allocation_of: dict[int, int] = {}  # job id -> allocation id it runs under
        self.last_iterations: dict[int, float] = {}
        self._last_progress_at: dict[int, datetime] = {}
        self._last_progress_ts: dict[int, datetime] = {}  # the ts the last event carried
        self.finished_allocations: set[int] = set()
        self._last_post: datetime | None = None
        self._last_heartbeat: datetime | None = None
        self._last_assignments: datetime | None = None
        self.stopping = threading.Event()
        # The GPUs as last registered (their wire form); None until registered.
        self._registered: list[dict[str, Any]] | None = None

    @property
    def jobs(self) -> dict[int, ProcessJob]:
        """The job processes (process runner; empty with any other)."""
        return getattr(self.runner, "jobs", {})

    # --- server conversation --------------------------------------------------------------
    def register(self) -> dict[str, Any]:
        body = {"name": self.config.node_name, "gpus": [g.to_wire() for g in self.backend.gpus()]}
        answer = self.client.post("register", body)
        self._registered = body["gpus"]
        return answer

    def register_changes(self) -> None:
        """Register again where what the backend reports of its GPUs changed since the last
        registration (a site's power cap it found changed, ``NvmlBackend._site_cap_now``):
        the server planned with the cap read at the start until the agent restarted. One
        the server refuses is not sent again (logged); an outage is retried next time."""
        if self._registered is None:
            return
        wire = [g.to_wire() for g in self.backend.gpus()]
        if wire == self._registered:
            return
        try:
            self.register()
        except ServerUnreachable as exc:
            log.warning("cannot register the GPUs' changes yet: %s", exc)
        except Rejected as exc:
            log.error("the server refused the GPUs' changes, not sent again: %s", exc)
            self._registered = wire

    def post_samples(self) -> None:
        """Send the buffered samples, in batches the server takes: it refuses a batch of more
        than its ``TELEMETRY_MAX_BATCH_SAMPLES`` (20,000 by default) whole, and the spool
        then quarantined every sample of a node sampled fast (8 GPUs at 1 ms)."""
        rows, self.buffer = self.buffer, []
        sent = True
        for start in range(0, len(rows), MAX_SAMPLES_PER_POST):
            body = {"samples": [r.to_wire() for r in rows[start : start + MAX_SAMPLES_PER_POST]]}
            if sent:
                sent = self.client.deliver("samples", body)
            else:
                # The server did not take the last one: the rest wait in the spool, not each
                # retrying its head (five server errors in one tick quarantined it).
                self.client.spool.put("samples", body)

    def heartbeat_body(self, now: datetime) -> dict[str, Any]:
        """The heartbeat, with the spool's state: how much waits for the server and how much
        the server refused (so the node's page shows a node whose messages go nowhere)."""
        quarantine = self.client.spool.quarantine_status()
        return {
            "ts": now.isoformat(),
            "spooled": len(self.client.spool),
            "quarantined": quarantine.count,
            "last_quarantine_reason": quarantine.last_reason,
        }

    def send_events(self, events: list[dict[str, Any]]) -> None:
        events = self.unsent_events + events
        if not events:
            return
        try:
            self.client.deliver("events", {"events": events})
        except OSError as exc:
            self.unsent_events = events
            log.error("cannot spool %d job event(s), kept to send again: %s", len(events), exc)
            return
        self.unsent_events = []

    def _event(self, now: datetime, job_id: int, kind: str, **fields: Any) -> dict[str, Any]:
        return {
            "event_id": str(uuid.uuid4()),
            "job_id": job_id,
            "allocation_id": self.allocation_of.get(job_id),
            "kind": kind,
            "ts": now.isoformat(),
            **fields,
        }

    # --- one tick ---------------------------------------------------------------------------
    def tick(self, now: datetime) -> None:
        self.buffer.extend(self.backend.read(now))
        if _due(self._last_post, now, self.config.post_interval_s):
            self._last_post = now
            try:
                self.post_samples()
            except OSError as exc:
                # The spool cannot keep them (a full disk): those samples are lost, but the
                # heartbeat below still goes, or the node would fall silent and its running
                # jobs be re-queued while they run.
                log.error("cannot spool samples, dropped: %s", exc)
        if _due(self._last_heartbeat, now, self.config.heartbeat_interval_s):
            self._last_heartbeat = now
            try:
                self.client.post("heartbeat", self.heartbeat_body(now))
            except (ServerUnreachable, Rejected) as exc:
                log.warning("heartbeat failed: %s", exc)
            self.register_changes()
        if self.runner.launches_jobs and _due(
            self._last_assignments, now, self.config.assignment_interval_s
        ):
            self._last_assignments = now
            try:
                answer = self.client.request("GET", "assignments")
            except (ServerUnreachable, Rejected) as exc:
                log.warning("cannot fetch assignments, keeping what runs: %s", exc)
            else:
                self.reconcile(answer, now)
        events = self.follow_handoffs(now) if self.handoffs is not None else []
        self.send_events(events + self.watch_jobs(now))

    # --- assignments ------------------------------------------------------------------------
    def running_job_ids(self) -> set[int]:
        return set(self.runner.running())

    def reconcile(self, answer: dict[str, Any], now: datetime) -> None:
        """Start what is assigned and not running, restart what moved, stop what is no longer
        assigned (or explicitly listed under ``stop``). What it did is reported even where a
        later step raises: a job stopped here and never reported would stay assigned."""
        events: list[dict[str, Any]] = []
        try:
            self._reconcile(answer, now, events)
        finally:
            self.send_events(events)

    def _reconcile(self, answer: dict[str, Any], now: datetime, events: list) -> None:
        wanted = {int(a["job_id"]): a for a in answer.get("assignments", [])}
        stop = {int(j) for j in answer.get("stop", [])}
        ending: dict[int, str] = {}  # jobs to stop, and why: stopped together, below
        for job_id in sorted(self.running_job_ids()):
            assignment = wanted.get(job_id)
            if job_id in stop or assignment is None:
                ending[job_id] = "stopped"
            elif assignment["allocation_id"] != self.allocation_of[job_id]:
                if self._same_shape(job_id, assignment):
                    # Only clock or power limit changed: retune in place, no restart. The
                    # process runs on, so a count it reached after this moment is timed by
                    # its own clock from the first report on (the server learns a retune
                    # from its first interval: ``observations.training_since_of``).
                    self._apply_settings(assignment)
                    self._set_allocation(job_id, assignment["allocation_id"])
                    self._last_progress_ts[job_id] = now
                else:
                    ending[job_id] = "resized"
        self.stop_jobs(ending, now, into=events)
        if "resized" in ending.values():
            wanted, stop = self._refetch_after_resize(events, wanted, stop)
            events.clear()
        for job_id, assignment in sorted(wanted.items()):
            if (
                job_id not in stop
                and job_id not in self.running_job_ids()
                # A job that ended here stays assigned until the server has read its exit
                # (it may still be in the spool); do not run it again meanwhile.
                and assignment["allocation_id"] not in self.finished_allocations
            ):
                events.extend(self.start_job(assignment, now))

    def _refetch_after_resize(
        self, events: list[dict[str, Any]], wanted: dict[int, Any], stop: set[int]
    ) -> tuple[dict[int, Any], set[int]]:
        """Send the resize exits, then ask for the assignments again: the restart counts on
        from the work the stopped run reached, which the server recounts at the new batch
        only once it has the exit (the answer in hand predates it). Unreachable: restart from
        the answer in hand (the work since the last progress report is done again)."""
        self.send_events(events)
        try:
            answer = self.client.request("GET", "assignments")
        except (ServerUnreachable, Rejected) as exc:
            log.warning("cannot fetch assignments again after a resize: %s", exc)
            return wanted, stop
        return (
            {int(a["job_id"]): a for a in answer.get("assignments", [])},
            stop | {int(j) for j in answer.get("stop", [])},
        )

    def _same_shape(self, job_id: int, assignment: dict[str, Any]) -> bool:
        same = self.runner.same_shape(job_id, assignment, self._indices(assignment))
        if same:
            self.runner.retune(job_id, assignment)
        return same

    def _indices(self, assignment: dict[str, Any]) -> list[int]:
        return sorted(self.index_by_uuid[u] for u in assignment["gpu_uuids"])

    def _apply_settings(self, assignment: dict[str, Any]) -> None:
        """Set each assigned GPU's clock and power limit. A GPU that refuses (a board that
        cannot manage its limit, a driver that will not lock clocks) runs the job at what
        it has: the job is not held for it, and the samples report what the GPU runs at."""
        for index in self._indices(assignment):
            try:
                self.backend.apply_settings(
                    index,
                    sm_clock_mhz=assignment.get("sm_clock_mhz"),
                    power_limit_w=assignment.get("power_limit_w"),
                )
            except Exception as exc:  # noqa: BLE001 - whatever the driver says, the job runs
                log.warning(
                    "job %s: GPU %s refused its settings, runs at its current ones: %s",
                    assignment.get("job_id"), index, exc,
                )  # fmt: skip

    def start_job(self, assignment: dict[str, Any], now: datetime) -> list[dict[str, Any]]:
        job_id = int(assignment["job_id"])
        unknown = [u for u in assignment["gpu_uuids"] if u not in self.index_by_uuid]
        if unknown:
            log.error("job %s assigned to GPUs not on this node: %s", job_id, unknown)
            return []
        indices = self._indices(assignment)
        self._apply_settings(assignment)
        self._set_allocation(job_id, assignment["allocation_id"])
        try:
            self.runner.start(assignment, indices)
        except CannotStart as exc:
            # Report the job failed (it cannot start here) instead of stopping the agent.
            log.error("job %s: %s", job_id, exc)
            self._restore_unless_busy(indices)
            event = self._event(
                now, job_id, "exited", reason="failed", exit_status=None,
                iterations=None, log_tail=str(exc),
            )  # fmt: skip
            self.finished_allocations.add(assignment["allocation_id"])
            self.allocation_of.pop(job_id, None)
            return [event]
        return [self._event(now, job_id, "started", gpu_uuids=assignment["gpu_uuids"])]

    def stop_job(self, job_id: int, now: datetime, *, reason: str) -> dict[str, Any]:
        events = self.stop_jobs({job_id: reason}, now)
        if not events:
            raise RuntimeError(f"job {job_id} could not be stopped (logged); it still runs")
        return events[0]

    def stop_jobs(
        self, reasons: dict[int, str], now: datetime, *, into: list | None = None
    ) -> list[dict[str, Any]]:
        """Stop these jobs together (one grace period for all: ``JobRunner.stop_many``) and
        give each its exit event, with its reason, appended to ``into`` (returned) before
        any GPU is put back, so that what was stopped is reported even if a later step
        raises (the runner has forgotten them all). A job whose stop failed gets none: it
        still runs, and the next round stops it again."""
        events = [] if into is None else into
        if not reasons:
            return events
        exits = self.runner.stop_many(sorted(reasons))
        events.extend(
            self._exit_event(now, job_id, reasons[job_id], exits[job_id])
            for job_id in sorted(exits)
        )
        for job_id in sorted(exits):
            self._release(job_id, exits[job_id].gpu_indices)
        return events

    def _exit_event(
        self, now: datetime, job_id: int, reason: str, ended: JobExit
    ) -> dict[str, Any]:
        """The exit event of a job that ended (``ended``); its GPUs are the caller's to
        release (``_release``), once the event is kept."""
        return self._event(
            now, job_id, "exited", reason=reason, exit_status=ended.status,
            iterations=ended.iterations, log_tail=ended.log_tail,
        )  # fmt: skip

    def _set_allocation(self, job_id: int, allocation_id: int) -> None:
        """The job now runs under ``allocation_id``; a new allocation's first progress
        event takes the agent's time again (``_reached_at``): the job's time of a count
        reached under the old one may lie before the new allocation's start."""
        if self.allocation_of.get(job_id) != allocation_id:
            self._last_progress_ts.pop(job_id, None)
        self.allocation_of[job_id] = allocation_id

    def _release(self, job_id: int, indices: Any) -> None:
        self.allocation_of.pop(job_id, None)
        self.last_iterations.pop(job_id, None)
        self._last_progress_at.pop(job_id, None)
        self._last_progress_ts.pop(job_id, None)
        self._restore_unless_busy(indices)

    def _restore_unless_busy(self, indices: Any) -> None:
        busy = {i for j in self._all_running() for i in j}
        for index in indices:
            if index not in busy:  # a co-located job may still hold its settings
                self.backend.restore_defaults(index)

    def _all_running(self) -> list[Any]:
        held_by_slurm = [h.gpu_indices for h in self.slurm_jobs.values()]
        return list(self.runner.running().values()) + held_by_slurm

    # --- monitor mode (Slurm runs the jobs) -----------------------------------------------
    def follow_handoffs(self, now: datetime) -> list[dict[str, Any]]:
        """Apply the settings of Slurm jobs the Prolog handed over, restore the GPUs of those
        whose file the Epilog removed, and report their progress (no start or exit events:
        the server learns those from Slurm's accounting)."""
        assert self.handoffs is not None
        change = self.handoffs.scan()
        for handoff in change.gone:
            self._end_slurm_job(handoff)
        for handoff in change.appeared:
            self._begin_slurm_job(handoff)
        events = []
        for handoff in self.slurm_jobs.values():
            progress = read_progress(self.handoffs.progress_file(handoff))
            if progress is not None:
                events.extend(self._progress(now, handoff.tag.job_id, *progress))
        return events

    def _begin_slurm_job(self, handoff: Handoff) -> None:
        known = {g.index for g in self.backend.gpus()}
        unknown = [i for i in handoff.gpu_indices if i not in known]
        if unknown:
            log.error(
                "Slurm job %s: GPUs %s are not on this node; skipped",
                handoff.slurm_job_id, unknown,
            )  # fmt: skip
            return
        tag = handoff.tag
        log.info(
            "Slurm job %s (Wattflow job %s, allocation %s) on GPUs %s: power limit %s W, "
            "SM clock %s MHz",
            handoff.slurm_job_id, tag.job_id, tag.allocation_id, list(handoff.gpu_indices),
            tag.power_limit_w, tag.sm_clock_mhz,
        )  # fmt: skip
        self.slurm_jobs[handoff.slurm_job_id] = handoff
        self._set_allocation(tag.job_id, tag.allocation_id)
        for index in handoff.gpu_indices:
            try:
                self.backend.apply_settings(
                    index, sm_clock_mhz=tag.sm_clock_mhz, power_limit_w=tag.power_limit_w
                )
            except Exception as exc:  # noqa: BLE001 - a driver refusal must not stop the loop
                log.error("Slurm job %s: cannot set GPU %s: %s", handoff.slurm_job_id, index, exc)

    def _end_slurm_job(self, handoff: Handoff) -> None:
        if self.slurm_jobs.pop(handoff.slurm_job_id, None) is None:
            return  # it was skipped when it appeared
        log.info("Slurm job %s ended: restoring GPUs %s", handoff.slurm_job_id,
                 list(handoff.gpu_indices))  # fmt: skip
        self._release(handoff.tag.job_id, handoff.gpu_indices)
        for other in self.slurm_jobs.values():
            # The job's next Slurm job may already run here (its Prolog came first).
            if other.tag.job_id == handoff.tag.job_id:
                self._set_allocation(other.tag.job_id, other.tag.allocation_id)

    def watch_jobs(self, now: datetime) -> list[dict[str, Any]]:
        """Progress of running jobs (when it moved) and exits of finished ones."""
        events = []
        for job_id in list(self.runner.running()):
            progress = self.runner.progress(job_id)
            if progress is not None:  # (iterations, grad_sqr, grad_var)
                events.extend(self._progress(now, job_id, *progress))
            ended = self.runner.ended(job_id)
            if ended is not None:
                self.finished_allocations.add(self.allocation_of.get(job_id))
                reason = "completed" if ended.status == 0 else "failed"
                events.append(self._exit_event(now, job_id, reason, ended))
                self._release(job_id, ended.gpu_indices)
        return events

    def _progress(
        self,
        now: datetime,
        job_id: int,
        iterations: float | None,
        grad_sqr: float | None = None,
        grad_var: float | None = None,
        at: float | None = None,
    ) -> list[dict]:
        if iterations is None or self.last_iterations.get(job_id) == iterations:
            return []
        # At most one progress event per job and post interval: progress is for pages and
        # the scheduler's remaining-work estimate, not a time series.
        if not _due(self._last_progress_at.get(job_id), now, self.config.post_interval_s):
            return []
        self.last_iterations[job_id] = iterations
        self._last_progress_at[job_id] = now
        # ``now`` is the tick's start and the file is read later in the tick: a count the
        # job reached since then is believed up to a tick ahead.
        latest = now + timedelta(seconds=self.config.sample_interval_s)
        ts = _reached_at(at, after=self._last_progress_ts.get(job_id), now=now, latest=latest)
        self._last_progress_ts[job_id] = ts
        stats = {}
        if grad_sqr is not None and grad_var is not None:
            stats = {"grad_sqr": grad_sqr, "grad_var": grad_var}
        return [self._event(ts, job_id, "progress", iterations=iterations, **stats)]

    # --- lifetime ---------------------------------------------------------------------------
    def register_until_accepted(self, retry_s: float = 5.0) -> bool:
        """Register, retrying while the server is unreachable (it may still be starting);
        False if asked to stop first. A refusal (bad token) raises Rejected."""
        while not self.stopping.is_set():
            try:
                self.register()
                return True
            except ServerUnreachable as exc:
                log.warning("cannot register yet, retrying in %.0f s: %s", retry_s, exc)
                self.stopping.wait(retry_s)
        return False

    def run(self) -> None:
        try:
            registered = self.register_until_accepted()
        except BaseException:  # refused: the backend still puts back what it changed
            self.backend.close()
            raise
        if not registered:
            self.backend.close()
            return
        failing = 0  # ticks in a row that raised
        try:
            while not self.stopping.is_set():
                started = datetime.now(UTC)
                try:
                    self.tick(started)
                except Exception:  # noqa: BLE001 - one tick's fault must not stop every job
                    # Leaving the loop would shut down, which stops every job on the node:
                    # a driver hiccup or a bad file must cost a tick, not the jobs. The
                    # traceback is logged on the first failure and every TICK_ERROR_EVERY.
                    if failing % TICK_ERROR_EVERY == 0:
                        log.exception("tick failed (%d in a row); the agent goes on", failing + 1)
                    failing += 1
                else:
                    if failing:
                        log.warning("ticks succeed again after %d that failed", failing)
                    failing = 0
                elapsed = (datetime.now(UTC) - started).total_seconds()
                self.stopping.wait(max(0.0, self.config.sample_interval_s - elapsed))
        finally:
            self.shutdown(datetime.now(UTC))

    def shutdown(self, now: datetime) -> None:
        """Stop jobs (they checkpoint), put back what was set on the GPUs, flush what is
        buffered."""
        events = self.stop_jobs(dict.fromkeys(self.running_job_ids(), "agent_exit"), now)
        for gpu in self.backend.gpus():
            self.backend.restore_defaults(gpu.index)
        self.post_samples()
        self.send_events(events)
        self.backend.close()


def _reached_at(
    at: float | None, *, after: datetime | None, now: datetime, latest: datetime
) -> datetime:
    """When a progress event says the job reached its count: the time the job wrote
    (``Progress.at``) where it is plausible, else ``now``, the tick in which the agent read it.

    The agent reads the progress file on its own tick, so its time lags the job's by up to
    a tick, and a job's last report comes after it saved its checkpoint: on a real H100 the
    last 2 s interval held 160 iterations against 280-300 in the others
    (``data/device/h100_2026-11-26``). The job's own time is used only after this
    allocation's first progress event (``after``), strictly after that event's time and
    not after ``latest`` (the tick's end, as the file is read during the tick): a stale
    file or a clock that disagrees falls back to ``now``, and the first event, whose
    interval holds the job's warm-up anyway, keeps the agent's."""
    if at is None or after is None:
        return now
    try:
        reached = datetime.fromtimestamp(at, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return now
    return reached if after < reached <= latest else now


def _due(last: datetime | None, now: datetime, interval_s: float) -> bool:
    return last is None or (now - last).total_seconds() >= interval_s
