"""What Wattflow tells a Slurm job about itself, and what the node's Prolog hands the agent.

Two small formats shared by the server's Slurm executor (which writes them) and the node agent
(which reads them). Pure Python: the agent runs on GPU servers without Django.

**The job comment.** Every Slurm job Wattflow submits carries one line in ``--comment``::

    wattflow job=12 allocation=34 power_limit_w=250 sm_clock_mhz=-

``-`` means "not set" (keep the GPU's default). The prefix ``wattflow`` marks the job as
Wattflow's, so that the reconciler and a ``job_submit.lua`` can tell it apart from other jobs.

**The handoff file.** Slurm runs the Prolog as root on each node of a job before the job
starts; the Prolog the project ships (``deploy/slurm/prolog.sh``) writes
``<handoff dir>/<node name>/<slurm job id>.json`` with the job's id, its comment and
``SLURM_JOB_GPUS`` (GPU indices on that node). The agent applies the comment's power limit or
clock to those GPUs. The Epilog removes the file, and the agent puts back what it set.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

PREFIX = "wattflow"
UNSET = "-"
_FIELDS = ("job", "allocation", "power_limit_w", "sm_clock_mhz")
_PAIR = re.compile(r"^([a-z_]+)=(-|[0-9]{1,12})$")


class HandoffError(ValueError):
    """A comment or handoff file that is not Wattflow's, or is malformed."""


@dataclass(frozen=True)
class SlurmJobTag:
    """Wattflow's identifiers and the GPU settings of one allocation, as carried by Slurm."""

    job_id: int
    allocation_id: int
    power_limit_w: int | None = None
    sm_clock_mhz: int | None = None

    def comment(self) -> str:
        def value(v: int | None) -> str:
            return UNSET if v is None else str(int(v))

        return (
            f"{PREFIX} job={self.job_id} allocation={self.allocation_id} "
            f"power_limit_w={value(self.power_limit_w)} sm_clock_mhz={value(self.sm_clock_mhz)}"
        )

    @classmethod
    def parse(cls, comment: str | None) -> SlurmJobTag:
        """The tag in a Slurm job comment; HandoffError when it is not a Wattflow comment."""
        words = (comment or "").split()
        if not words or words[0] != PREFIX:
            raise HandoffError(f"not a Wattflow job comment: {comment!r}")
        values: dict[str, str] = {}
        for word in words[1:]:
            match = _PAIR.match(word)
            if match is None or match.group(1) not in _FIELDS or match.group(1) in values:
                raise HandoffError(f"bad field {word!r} in Wattflow job comment")
            values[match.group(1)] = match.group(2)
        missing = [name for name in _FIELDS if name not in values]
        if missing:
            raise HandoffError(f"Wattflow job comment lacks {', '.join(missing)}")
        if UNSET in (values["job"], values["allocation"]):
            raise HandoffError("a Wattflow job comment needs a job and an allocation id")

        def optional(name: str) -> int | None:
            return None if values[name] == UNSET else int(values[name])

        return cls(
            job_id=int(values["job"]),
            allocation_id=int(values["allocation"]),
            power_limit_w=optional("power_limit_w"),
            sm_clock_mhz=optional("sm_clock_mhz"),
        )

    @staticmethod
    def is_wattflow(comment: str | None) -> bool:
        return (comment or "").split(" ", 1)[0] == PREFIX


@dataclass(frozen=True)
class Handoff:
    """One Slurm job started on this node, as the Prolog saw it."""

    slurm_job_id: int
    tag: SlurmJobTag
    gpu_indices: tuple[int, ...]

    @classmethod
    def read(cls, path: Path) -> Handoff:
        try:
            raw = json.loads(path.read_text())
            slurm_job_id = int(raw["slurm_job_id"])
            gpus = str(raw.get("slurm_job_gpus") or "")
            indices = tuple(sorted(int(part) for part in gpus.split(",") if part.strip()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise HandoffError(f"unreadable handoff file {path}: {exc}") from exc
        return cls(slurm_job_id, SlurmJobTag.parse(raw.get("comment")), indices)
