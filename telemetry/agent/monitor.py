"""Monitor mode: Slurm runs the jobs, the agent follows them through the Prolog's handoff files.

``python -m telemetry.agent --runner none --handoff-dir DIR ...`` launches nothing. Slurm's
Prolog (``deploy/slurm/prolog.sh``) writes ``DIR/<node name>/<slurm job id>.json`` (temporary
file + rename, so the agent never reads half a file) for each Wattflow job starting on the node,
and the Epilog removes it when the job ends. :class:`HandoffWatcher` lists that directory each
tick and says which handoffs appeared and which went away; the agent (``loop.py``) applies the
job's power limit or SM clock to the GPUs in ``SLURM_JOB_GPUS`` on appearance and restores
their defaults on removal.

A file is known by its name and identity (inode, modification time, size): a requeued Slurm job
gets a new Prolog file under the same name, which counts as the old one gone and a new one
come, even if both happened between two ticks. A file that cannot be read or is not a Wattflow
handoff is logged once (again only if it changes) and skipped: one bad file never stops the
agent or hides the others.

**Progress.** The job's progress protocol is the one of ``jobs.py``: the job overwrites
``WATTFLOW_PROGRESS_FILE`` with the iterations done and the agent reports them. Under Slurm
that file is ``DIR/<node name>/<slurm job id>.progress`` (:func:`progress_path`): the Prolog
creates it owned by the job's user, the Task Prolog (``deploy/slurm/task_prolog.sh``) puts its
path into the job's environment, and the Epilog removes it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from telemetry.agent.slurm_handoff import Handoff, HandoffError

log = logging.getLogger(__name__)

HANDOFF_SUFFIX = ".json"
PROGRESS_SUFFIX = ".progress"


def progress_path(node_dir: Path, slurm_job_id: int) -> Path:
    """Where a Slurm job on this node writes its progress (see the module docstring)."""
    return node_dir / f"{slurm_job_id}{PROGRESS_SUFFIX}"


@dataclass(frozen=True)
class _Identity:
    inode: int
    mtime_ns: int
    size: int

    @classmethod
    def of(cls, stat: os.stat_result) -> _Identity:
        return cls(stat.st_ino, stat.st_mtime_ns, stat.st_size)


@dataclass(frozen=True)
class Change:
    """What one scan found: handoffs that appeared and handoffs whose file went away."""

    appeared: list[Handoff]
    gone: list[Handoff]


class HandoffWatcher:
    """Lists ``<handoff dir>/<node name>/*.json`` and reports what changed since the last scan."""

    def __init__(self, handoff_dir: Path, node_name: str) -> None:
        self.node_dir = handoff_dir / node_name
        self.current: dict[Path, tuple[_Identity, Handoff]] = {}
        self._refused: dict[Path, _Identity] = {}  # bad files, logged once per version

    def _listing(self) -> dict[Path, _Identity]:
        found: dict[Path, _Identity] = {}
        try:
            entries = list(os.scandir(self.node_dir))
        except FileNotFoundError:
            return found  # no job has run here yet (the Prolog creates the directory)
        except OSError as exc:
            log.error("cannot list handoff directory %s: %s", self.node_dir, exc)
            return {path: identity for path, (identity, _) in self.current.items()}
        for entry in entries:
            # The Prolog's temporary files start with a dot and do not end in .json.
            if entry.name.startswith(".") or not entry.name.endswith(HANDOFF_SUFFIX):
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    found[Path(entry.path)] = _Identity.of(entry.stat(follow_symlinks=False))
            except OSError:
                continue  # removed between listing and stat: gone
        return found

    def scan(self) -> Change:
        listing = self._listing()
        gone = []
        for path, (identity, handoff) in list(self.current.items()):
            if listing.get(path) != identity:
                del self.current[path]
                gone.append(handoff)
        appeared = []
        for path, identity in sorted(listing.items()):
            if path in self.current or self._refused.get(path) == identity:
                continue
            try:
                handoff = Handoff.read(path)
                if path.name != f"{handoff.slurm_job_id}{HANDOFF_SUFFIX}":
                    raise HandoffError(
                        f"handoff file {path} names Slurm job {handoff.slurm_job_id}"
                    )
            except HandoffError as exc:
                log.error("skipping handoff file %s: %s", path.name, exc)
                self._refused[path] = identity
                continue
            self._refused.pop(path, None)
            self.current[path] = (identity, handoff)
            appeared.append(handoff)
        for path in list(self._refused):
            if path not in listing:
                del self._refused[path]
        return Change(appeared, gone)

    def progress_file(self, handoff: Handoff) -> Path:
        return progress_path(self.node_dir, handoff.slurm_job_id)
