"""Job runners of the node agent: who runs a job the scheduler assigned to this node.

One interface, three implementations, chosen once when the agent starts (``--runner``):

- ``process`` (:class:`ProcessRunner`): a subprocess per job (``jobs.py``: the checkpoint
  convention, SIGTERM then SIGKILL);
- ``simulated`` (:class:`SimulatedRunner`): the job "runs" inside the simulated backend, its
  progress following the performance models (``simulated.py``);
- ``none`` (:class:`NoneRunner`): another system (Slurm) runs the jobs; the agent launches
  nothing, fetches no assignments and reports no starts or exits. In that mode the agent
  follows Slurm's jobs through the Prolog's handoff files (``monitor.py``).

The loop (``loop.py``) decides what to start, stop and retune and turns what a runner reports
into job events; a runner only carries jobs out. GPU settings (clock, power limit) are applied
by the loop through the backend, never by a runner.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from telemetry.agent.backends import GpuBackend
from telemetry.agent.jobs import ProcessJob, Progress, job_gpu_count, stop_orphans
from telemetry.agent.simulated import PerfModelUnavailable, SimJob, SimulatedBackend

log = logging.getLogger(__name__)

RUNNER_NAMES = ("process", "simulated", "none")


class CannotStart(RuntimeError):
    """A job the runner cannot run at all (the loop reports it failed, and does not retry)."""


@dataclass(frozen=True)
class JobExit:
    """How a job ended: its exit status (None: unknown), the iterations it reached, the tail
    of its output and the GPUs it held (to restore)."""

    status: int | None
    iterations: float | None
    log_tail: str
    gpu_indices: tuple[int, ...]


class JobRunner(Protocol):
    #: False: the agent fetches no assignments (another system runs the jobs).
    launches_jobs: bool

    def running(self) -> dict[int, tuple[int, ...]]:
        """The jobs it runs now: job id -> the GPU indices they hold, in start order."""
        ...

    def start(self, assignment: dict[str, Any], gpu_indices: list[int]) -> None:
        """Start a job on these GPUs; :class:`CannotStart` if it never can."""
        ...

    def same_shape(self, job_id: int, assignment: dict[str, Any], gpu_indices: list[int]) -> bool:
        """Whether a running job already runs on these GPUs, of as many on all its nodes,
        at this batch (so a new allocation of it changes only its clock or power limit)."""
        ...

    def retune(self, job_id: int, assignment: dict[str, Any]) -> None:
        """Take a new clock or power limit of a running job into account."""
        ...

    def stop(self, job_id: int) -> JobExit:
        """Stop a running job (it checkpoints) and say how it ended."""
        ...

    def stop_many(self, job_ids: list[int]) -> dict[int, JobExit]:
        """Stop these running jobs together, each as ``stop`` does, and say how each ended:
        a node's jobs stopped at once share one grace period, not one each after another.
        A job whose stop failed is left out, and still running: it is stopped again later."""
        ...

    def progress(self, job_id: int) -> Progress | None:
        """What the job reports done: iterations and, when it measured them, its gradient
        statistics (None: nothing yet)."""
        ...

    def ended(self, job_id: int) -> JobExit | None:
        """The exit of a job that ended on its own since the last call (it is then no longer
        running), or None while it runs."""
        ...


class ProcessRunner:
    """A subprocess per job, in ``<work dir>/jobs/<job id>/`` (see ``jobs.py``)."""

    launches_jobs = True

    def __init__(self, work_dir: Path, *, stop_grace_s: float) -> None:
        self.work_dir = work_dir
        self.stop_grace_s = stop_grace_s
        self.jobs: dict[int, ProcessJob] = {}
        # Jobs an earlier agent left running (it was killed): stopped before any starts
        # again, so no job runs twice on its GPUs and none runs on unknown to the agent.
        for job_id in stop_orphans(work_dir, stop_grace_s):
            log.warning("stopped job %s, left running by an earlier agent", job_id)

    def running(self) -> dict[int, tuple[int, ...]]:
        return {job_id: tuple(job.gpu_indices) for job_id, job in self.jobs.items()}

    def start(self, assignment: dict[str, Any], gpu_indices: list[int]) -> None:
        try:
            job = ProcessJob(assignment, gpu_indices, self.work_dir)
            job.start()
        except OSError as exc:
            # Its folders hold what the job itself put there (a named pipe for its log, a
            # folder for its progress file, a file for its checkpoint folder): raised out of
            # the tick, the start was tried again every tick and the job never reported; it
            # fails, with the reason.
            raise CannotStart(f"cannot prepare the job's files: {exc}") from exc
        self.jobs[job.job_id] = job

    def same_shape(self, job_id: int, assignment: dict[str, Any], gpu_indices: list[int]) -> bool:
        job = self.jobs[job_id]
        return (
            job.gpu_indices == gpu_indices
            and job.gpu_count == job_gpu_count(assignment, gpu_indices)
            and job.assignment["batch_size"] == assignment["batch_size"]
        )

    def retune(self, job_id: int, assignment: dict[str, Any]) -> None:
        return None  # the GPU settings are the whole change; the process runs on

    def stop(self, job_id: int) -> JobExit:
        exits = self.stop_many([job_id])
        if job_id not in exits:
            raise RuntimeError(f"job {job_id} could not be stopped (logged); it still runs")
        return exits[job_id]

    def stop_many(self, job_ids: list[int]) -> dict[int, JobExit]:
        # Every job is asked first, then all are waited for until one deadline: stopped one
        # after another, a node's eight jobs that each take the whole grace period to save
        # (or ignore SIGTERM) kept the agent from its heartbeat for eight grace periods.
        # A job is forgotten only once it has ended: one stop that raised lost every job of
        # the call (none reported, none known, a still-assigned one started again on its
        # GPUs, those after it never SIGKILLed).
        jobs = [self.jobs[job_id] for job_id in job_ids]
        for job in jobs:
            try:
                job.ask_to_stop()
            except Exception:  # noqa: BLE001 - the others are stopped all the same
                log.exception("job %s: asking it to stop failed", job.job_id)
        deadline = time.monotonic() + self.stop_grace_s
        while time.monotonic() < deadline and not all(job.stopped() for job in jobs):
            time.sleep(0.05)
        exits = {}
        for job in jobs:
            try:
                status = job.end_stop(deadline)
            except Exception:  # noqa: BLE001 - kept, and stopped again at the next round
                log.exception("job %s: cannot stop it; kept, to be stopped again", job.job_id)
                continue
            del self.jobs[job.job_id]
            exits[job.job_id] = JobExit(
                status, job.iterations(), job.log_tail(), tuple(job.gpu_indices)
            )
            try:
                job.forget()
            except OSError as exc:  # a pid file left: a later agent finds the id reused
                log.warning("job %s: cannot remove its pid file: %s", job.job_id, exc)
        return exits

    def progress(self, job_id: int) -> Progress | None:
        return self.jobs[job_id].progress()

    def ended(self, job_id: int) -> JobExit | None:
        job = self.jobs[job_id]
        status = job.poll()
        if status is None:
            return None
        del self.jobs[job_id]
        # What the job left in its group (a daemon, a worker that outlived its launcher)
        # would run on, on GPUs the scheduler gives to the next job, known to no agent.
        job.end_group()
        job.forget()
        return JobExit(status, job.iterations(), job.log_tail(), tuple(job.gpu_indices))


class SimulatedRunner:
    """Jobs run inside a :class:`SimulatedBackend` as :class:`SimJob` s: they advance by the
    perf model as the backend is read; stopping one reports status 0 (it checkpointed)."""

    launches_jobs = True

    def __init__(self, backend: SimulatedBackend) -> None:
        self.backend = backend

    def running(self) -> dict[int, tuple[int, ...]]:
        return {job_id: job.gpu_indices for job_id, job in self.backend.jobs.items()}

    def start(self, assignment: dict[str, Any], gpu_indices: list[int]) -> None:
        job = SimJob(
            job_id=int(assignment["job_id"]),
            workload=assignment["workload"],
            resembles=assignment.get("resembles") or "",
            param_count=assignment.get("param_count"),
            gpu_indices=tuple(gpu_indices),
            global_batch=int(assignment["batch_size"]),
            sm_clock_mhz=assignment.get("sm_clock_mhz"),
            power_limit_w=assignment.get("power_limit_w"),
            done_iters=float(assignment.get("completed_iterations") or 0.0),
            total_iters=assignment.get("total_iterations"),
            n_gpus=job_gpu_count(assignment, gpu_indices),
            gpus_per_node=tuple(assignment.get("gpus_per_node") or ()),
        )
        try:
            self.backend.start_job(job)
        except PerfModelUnavailable as exc:
            # The simulation cannot run what it has no model for: the same as a real job that
            # cannot start, not a reason to stop the agent.
            raise CannotStart(f"simulated agent: {exc}") from exc

    def same_shape(self, job_id: int, assignment: dict[str, Any], gpu_indices: list[int]) -> bool:
        job = self.backend.jobs[job_id]
        same_gpus = job.gpu_indices == tuple(gpu_indices)
        same_total = job.n_gpus == job_gpu_count(assignment, gpu_indices)
        return same_gpus and same_total and job.global_batch == assignment["batch_size"]

    def retune(self, job_id: int, assignment: dict[str, Any]) -> None:
        # Settings travel with the SimJob: they change its perf-model configuration, so its
        # speed and its GPUs' power.
        self.backend.retune_job(
            job_id,
            sm_clock_mhz=assignment.get("sm_clock_mhz"),
            power_limit_w=assignment.get("power_limit_w"),
        )

    def stop(self, job_id: int) -> JobExit:
        job = self.backend.stop_job(job_id)
        if job is None:
            return JobExit(None, None, "", ())
        return JobExit(0, job.done_iters, "", job.gpu_indices)

    def stop_many(self, job_ids: list[int]) -> dict[int, JobExit]:
        return {job_id: self.stop(job_id) for job_id in job_ids}

    def progress(self, job_id: int) -> Progress | None:
        # A simulated job measures no gradients.
        job = self.backend.jobs[job_id]
        return Progress(job.done_iters, at=job.at)

    def ended(self, job_id: int) -> JobExit | None:
        if not self.backend.jobs[job_id].finished:
            return None
        return self.stop(job_id)


class NoneRunner:
    """Runs nothing: Slurm (or another system) runs the jobs, the agent keeps telemetry."""

    launches_jobs = False

    def running(self) -> dict[int, tuple[int, ...]]:
        return {}

    def start(self, assignment: dict[str, Any], gpu_indices: list[int]) -> None:
        raise CannotStart("this agent launches no jobs (--runner none): Slurm runs them")

    def same_shape(self, job_id: int, assignment: dict[str, Any], gpu_indices: list[int]) -> bool:
        raise KeyError(job_id)

    def retune(self, job_id: int, assignment: dict[str, Any]) -> None:
        raise KeyError(job_id)

    def stop(self, job_id: int) -> JobExit:
        raise KeyError(job_id)

    def stop_many(self, job_ids: list[int]) -> dict[int, JobExit]:
        if job_ids:
            raise KeyError(job_ids[0])
        return {}

    def progress(self, job_id: int) -> Progress | None:
        raise KeyError(job_id)

    def ended(self, job_id: int) -> JobExit | None:
        raise KeyError(job_id)


def make_runner(
    name: str, backend: GpuBackend, *, work_dir: Path, stop_grace_s: float
) -> JobRunner:
    """The runner called ``name``; ``simulated`` needs the simulated backend."""
    if name == "process":
        return ProcessRunner(work_dir, stop_grace_s=stop_grace_s)
    if name == "simulated":
        if not isinstance(backend, SimulatedBackend):
            raise ValueError("the simulated runner needs the simulated backend (--simulate)")
        return SimulatedRunner(backend)
    if name == "none":
        return NoneRunner()
    raise ValueError(f"unknown runner {name!r}; one of {', '.join(RUNNER_NAMES)}")


def default_runner_name(backend: GpuBackend) -> str:
    """Simulated GPUs run simulated jobs; real GPUs run processes."""
    return "simulated" if isinstance(backend, SimulatedBackend) else "process"
