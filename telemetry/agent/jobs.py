"""Running training jobs as processes, and the checkpoint convention they follow.

The agent starts a job's ``command`` through bash, in its own process group, with:

- ``CUDA_VISIBLE_DEVICES``: the NVML indices of the GPUs the scheduler gave it (with
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so that CUDA counts them as NVML does);
- ``WATTFLOW_JOB_ID``, ``WATTFLOW_BATCH_SIZE`` (global batch), ``WATTFLOW_GPU_COUNT`` (the
  job's GPUs on all its nodes);
- ``WATTFLOW_CHECKPOINT_DIR``: where the job keeps its checkpoint (it persists across restarts);
- ``WATTFLOW_PROGRESS_FILE``: a file the job overwrites with its progress: the number of
  iterations done, or one JSON object ``{"iterations": ..., "samples": ..., "grad_sqr": ...,
  "grad_var": ...}`` (only ``iterations`` required; ``jobclient/wattflow_client.py`` writes it);
- ``WATTFLOW_STOP_FILE``: created by the agent just before it sends SIGTERM, for jobs that
  would rather poll a file than handle a signal;
- ``WATTFLOW_TOTAL_ITERATIONS``, ``WATTFLOW_COMPLETED_ITERATIONS`` (from the server).

**Iteration units.** Every count the job sees or writes is in iterations at
``WATTFLOW_BATCH_SIZE``, the batch of its current allocation, which a scheduler may set apart
from the batch the job was submitted with. The job has done its work when the progress file
reaches ``WATTFLOW_TOTAL_ITERATIONS``; after a resize it counts on from
``WATTFLOW_COMPLETED_ITERATIONS`` (the same samples as before, recounted at the new batch), not
from the iteration number in its checkpoint. The server converts back (samples = iterations x
batch) when it stores progress.

**Checkpoint convention.** To stop or resize a job the agent sends SIGTERM to its process
group. The job then saves a checkpoint into ``WATTFLOW_CHECKPOINT_DIR`` and exits with status
0 within the grace period (``--stop-grace-s``, 30 s by default); after that it gets SIGKILL. On
start a job resumes from the checkpoint if one is there, so a resize is stop + start with the
new GPUs and batch size. A job that exits 0 on its own has completed (if its progress file
says it stopped short of its total, the server notes how far it got); any other status is a
failure. Output goes to ``log.txt`` beside the progress file; its tail is sent
with the exit.
A compound command (``cd x && python train.py``) keeps bash in between, which dies of the
SIGTERM itself: end it with ``exec python train.py`` so the job gets the signal and its own
exit status is reported.
"""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from scheduling.core.goodput import ratio_beyond_measurement

LOG_TAIL_BYTES = 4000
# The most of a progress file read each tick: a progress object is well under 1 KiB, and a
# file of appended counts is read by its last line. Read whole, a file a job let grow (169 MB
# after 20 million appended counts) took the agent 4.8 s and 1.7 GB every tick.
PROGRESS_READ_BYTES = 64 * 1024
# The largest count the server takes (``telemetry.api.serializers.MAX_ITERATIONS``, 2^63 - 1).
MAX_ITERATIONS = float(2**63 - 1)


def job_gpu_count(assignment: dict[str, Any], gpu_indices: Sequence[int]) -> int:
    """The job's GPUs on all its nodes (``gpu_count``; a server that sends none: this
    node's)."""
    return int(assignment.get("gpu_count") or len(gpu_indices))


class Progress(NamedTuple):
    """What a job's progress file says: iterations (at the allocation's batch), when the
    job measured them its gradient statistics (both or neither), and when it says it
    reached that count (``at``, Unix seconds; None: it did not say)."""

    iterations: float
    grad_sqr: float | None = None
    grad_var: float | None = None
    at: float | None = None


def parse_progress(text: str) -> Progress | None:
    """The progress in a progress file's text (a number, or a JSON object); None for a
    half-written or unreadable file (read it again next tick). Gradient statistics that are
    not finite non-negative numbers, come without their partner, or give a noise scale
    beyond a measurement (``goodput.ratio_beyond_measurement``) are dropped: the server
    would refuse the whole event."""
    text = text.strip()
    if not text:
        return None
    if not text.startswith("{"):
        try:
            count = float(text.splitlines()[-1])
        except ValueError:
            return None
        # nan, inf, a negative count or one past the server's bound: the server refuses
        # it, and its whole batch with it
        return Progress(count) if _count(count) else None
    try:
        data = json.loads(text)
        count = data["iterations"]
        if isinstance(count, bool | str):
            return None  # not a count (true was read as 1; the server refuses booleans)
        iterations = float(count)
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        # (RecursionError: brackets nested past the parser's depth, which raised out of
        # the agent's tick and kept every other job's progress and exit unreported)
        return None
    if not _count(iterations):
        return None
    sqr, var = _statistic(data.get("grad_sqr")), _statistic(data.get("grad_var"))
    at = _statistic(data.get("ts"))
    if sqr is None or var is None or ratio_beyond_measurement(sqr, var):
        # (a gradient norm near 0, as near convergence, gives a noise scale the server
        # refuses as no measurement: the count goes on without it)
        return Progress(iterations, at=at)
    return Progress(iterations, sqr, var, at)


def _count(iterations: float) -> bool:
    """Whether the server takes ``iterations`` as a count. One it refuses is refused with the
    exit event that carries it too: a job that wrote 1e19 and ended had its exit quarantined
    by the agent, and stayed running on the server, holding its GPUs."""
    return math.isfinite(iterations) and 0 <= iterations <= MAX_ITERATIONS


def _statistic(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def _live_stat(stat_file: Path) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None
    when the process is gone, a zombie, or cannot be read."""
    try:
        stat = stat_file.read_text()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields


def _process_start(pid: int) -> str | None:
    """The start time of a live process (``/proc/<pid>/stat``, in clock ticks since boot),
    which tells it from a later process given the same id; None when there is none (or
    only a zombie), or no ``/proc`` to ask."""
    fields = _live_stat(Path(f"/proc/{pid}/stat"))
    return fields[19] if fields is not None and len(fields) >= 20 else None


def stop_orphans(work_dir: Path, grace_s: float) -> list[int]:
    """Stop the job processes an earlier agent on this work dir started and left running
    (it was killed, or crashed: a job runs in its own session, so it outlives the agent).
    The new agent knows nothing of them, so it started each assigned job a second time on
    the same GPUs and checkpoint, and a job no longer assigned ran on for good on GPUs the
    scheduler gave to others. Each gets SIGTERM (it checkpoints), then SIGKILL after
    ``grace_s``; the server's assignment starts it again from its checkpoint. Returns the
    ids of the jobs stopped."""
    found: dict[int, int] = {}
    for pid_file in sorted((work_dir / "jobs").glob(f"*/{PID_FILE}")):
        try:
            record = json.loads(pid_file.read_text())
            job_id, pid, start = int(pid_file.parent.name), int(record["pid"]), record["start"]
        except (OSError, ValueError, KeyError, TypeError):
            pid_file.unlink(missing_ok=True)
            continue
        # the same process that job started (not a later one given its id)
        if start is not None and _process_start(pid) == start:
            # The stop file first, as ``ProcessJob.stop`` does: a job whose launcher
            # swallows SIGTERM checkpoints on it (docs/job_client.md), and was SIGKILLed
            # after the grace period without a checkpoint.
            try:
                (pid_file.parent / "stop").touch()
            except OSError:
                pass
            try:
                os.killpg(pid, signal.SIGTERM)
                found[job_id] = pid
            except (ProcessLookupError, PermissionError):
                pass
        pid_file.unlink(missing_ok=True)
    # Each group while any of its processes lives (a leader that exits on SIGTERM may leave
    # children that ignore it); a group's id is not given to another while it has members.
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_group_alive(p) for p in found.values()):
        time.sleep(0.05)
    for pid in found.values():
        if _group_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    return sorted(found)


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a process that is not a zombie (a zombie
    leader the agent has not reaped yet counts as gone)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Members exist; any but zombies? (/proc: every process whose group is pgid)
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    group = str(pgid)
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = _live_stat(entry / "stat")
            if fields is not None and len(fields) > 2 and fields[2] == group:
                return True
    return False


PID_FILE = "pid"
# The agent's own secrets in its environment (``telemetry.agent.__main__``), kept from jobs.
AGENT_SECRETS = ("WATTFLOW_AGENT_TOKEN",)


class ProcessJob:
    def __init__(self, assignment: dict[str, Any], gpu_indices: list[int], work_dir: Path) -> None:
        self.assignment = assignment
        self.job_id = int(assignment["job_id"])
        self.dir = work_dir / "jobs" / str(self.job_id)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.progress_file = self.dir / "progress"
        self.log_file = self.dir / "log.txt"
        self.stop_file = self.dir / "stop"
        self.pid_file = self.dir / PID_FILE
        self.checkpoint_dir = Path(assignment.get("checkpoint_dir") or self.dir / "checkpoint")
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.gpu_indices = gpu_indices
        self.gpu_count = job_gpu_count(assignment, gpu_indices)
        self.process: subprocess.Popen | None = None

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # The agent's token speaks for the node (its samples, every allocation on it: other
        # teams' jobs too); it is the agent's, not the job's. Inherited, every job had it,
        # and a script that printed its environment sent it to its team in its log tail.
        for name in AGENT_SECRETS:
            env.pop(name, None)
        env.update({str(k): str(v) for k, v in (self.assignment.get("env") or {}).items()})
        env.update(
            {
                # NVML's indices are in PCI bus order, CUDA's by default fastest first:
                # without the order, a node of mixed GPUs ran a job on a GPU other than
                # the one whose settings were set and whose energy was charged.
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in self.gpu_indices),
                "WATTFLOW_JOB_ID": str(self.job_id),
                "WATTFLOW_BATCH_SIZE": str(self.assignment["batch_size"]),
                # the job's GPUs on all its nodes (docs/job_client.md); this node's are
                # CUDA_VISIBLE_DEVICES
                "WATTFLOW_GPU_COUNT": str(self.gpu_count),
                "WATTFLOW_CHECKPOINT_DIR": str(self.checkpoint_dir),
                "WATTFLOW_PROGRESS_FILE": str(self.progress_file),
                "WATTFLOW_STOP_FILE": str(self.stop_file),
            }
        )
        return env

    def start(self) -> None:
        # A progress file left by an earlier allocation counts at that allocation's batch;
        # reporting it under this one would convert it with the wrong batch.
        self.progress_file.unlink(missing_ok=True)
        self.stop_file.unlink(missing_ok=True)  # an order for the previous allocation
        with _open_regular(self.log_file, append=True) as log:
            # A new session makes the job its own process group, so SIGTERM reaches the
            # shell and every worker it forked, and never the agent itself.
            # bash runs a single simple command by exec'ing it, so the job *is* the process we
            # signal and wait for (dash would stay in between and die of the SIGTERM itself).
            self.process = subprocess.Popen(
                self.assignment["command"],
                shell=True,
                executable="/bin/bash",
                cwd=self.dir,
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        # Which process runs the job, for an agent started after this one died
        # (``stop_orphans``).
        record = {"pid": self.process.pid, "start": _process_start(self.process.pid)}
        try:
            self.pid_file.write_text(json.dumps(record))
        except OSError:
            pass  # (a full disk) the job runs; only a later agent could not find it

    def end_group(self) -> None:
        """SIGKILL what is left of the job's process group once its leader has exited (a
        group with members keeps its id, so this reaches no other process)."""
        if self.process is not None and _group_alive(self.process.pid):
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def forget(self) -> None:
        """The job's process has ended: no later agent need stop it."""
        self.pid_file.unlink(missing_ok=True)

    def poll(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def progress(self) -> Progress | None:
        """The progress file's report; None until the job has written a readable one."""
        return read_progress(self.progress_file)

    def iterations(self) -> float | None:
        """Iterations done, from the progress file; None until the job has written one."""
        progress = self.progress()
        return None if progress is None else progress.iterations

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM the group, wait up to ``grace_s`` for the checkpoint, then SIGKILL."""
        self.ask_to_stop()
        return self.end_stop(time.monotonic() + grace_s)

    def ask_to_stop(self) -> None:
        """The stop file, then SIGTERM to the job's whole group (it checkpoints and exits);
        ``end_stop`` waits for it. Split so that a node's jobs stopped together share one
        grace period (``ProcessRunner.stop_many``). A job whose leader has exited is asked
        too while its group lives: a worker left behind that saves on SIGTERM was told
        nothing, waited out the whole grace period and was SIGKILLed unsaved."""
        if self.stopped():
            return
        try:
            self.stop_file.touch()
        except OSError:
            pass  # the signal is the order; the file only helps jobs that poll
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass  # gone, or none of it ours to signal: ``end_stop``'s SIGKILL is tried too

    def stopped(self) -> bool:
        """Whether the job's leader has exited and no process of its group is left."""
        return (
            self.process is None
            or self.process.poll() is not None
            and not _group_alive(self.process.pid)
        )

    def end_stop(self, deadline: float) -> int | None:
        """Wait until ``deadline`` (``time.monotonic()``) for the group asked to stop to
        end, then SIGKILL what is left of it; the exit status."""
        if self.process is None:
            return None
        # The whole group, not only its leader: a child that ignores SIGTERM (a data loader,
        # a launcher's worker) ran on, holding the GPUs, after the leader exited.
        while time.monotonic() < deadline:
            if self.stopped():
                return self.process.wait()
            time.sleep(0.05)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return self.process.wait()

    def log_tail(self) -> str:
        try:
            with _open_regular(self.log_file) as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - LOG_TAIL_BYTES))
                return log.read().decode(errors="replace")
        except OSError:
            # Not there, or not a readable file (the job's own directory: it may have made
            # it one): the exit is reported without a tail, never lost for it.
            return ""


def _open_regular(path: Path, *, append: bool = False):
    """``path`` opened in binary, for reading (or, ``append``, for appending, created if
    missing), if it is a regular file; OSError otherwise.

    The job may put anything where its progress and log files go (its own folder, which
    outlives an allocation): opened as files, a named pipe waited for a writer or a reader,
    and the agent's tick with it (every GPU's samples, the heartbeat, every other job's
    reports), and a device such as /dev/zero never ended. Opened without waiting, then
    checked before a byte is read or written."""
    if append:
        flags, mode = os.O_WRONLY | os.O_APPEND | os.O_CREAT, "ab"
    else:
        flags, mode = os.O_RDONLY, "rb"
    try:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o644)
    except OSError as exc:  # (a pipe with no reader refuses a writer: ENXIO)
        raise OSError(f"{path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def read_progress(path: Path) -> Progress | None:
    """What a job wrote into its progress file (see ``parse_progress``); None while there is
    none, or it is half-written (read it again next tick). Only its last
    ``PROGRESS_READ_BYTES`` are read: of a longer file, the whole lines among them (a file of
    appended counts is read by its last line; a longer "object" is no progress object)."""
    try:
        with _open_regular(path) as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - PROGRESS_READ_BYTES))
            data = f.read(PROGRESS_READ_BYTES)
    except OSError:  # not there (yet), or not a readable regular file
        return None
    if size > PROGRESS_READ_BYTES:
        # the first line is cut (and may begin inside a character): only whole lines count
        data = data.partition(b"\n")[2]
    try:
        text = data.decode()
    except UnicodeDecodeError:  # bytes that are not text: the job's fault, not the tick's
        return None
    return parse_progress(text)
