"""Slurm's command-line tools as a small typed client (no Django: tests and benchmarks use it
alone).

Reads: ``sinfo --json`` (Slurm 21.08 and later); ``squeue`` in text columns, because its 22.05
JSON costs ten times as much with 1,000 jobs and ignores filters; exit codes from
``scontrol show job`` (squeue's text has none) or ``sacct --parsable2``, because 22.05's
``sacct --json`` reports ``exit_code`` 0 for every job (a job that exited 3 shows ``FAILED``
with return code 0 there, and ``3:0`` in the text). Writes are
``sbatch``, ``scontrol`` and ``scancel``. Every call has a timeout and fails with
``SlurmError`` carrying one line: the command and what it printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

# Slurm job states in which the job still exists (holds or waits for resources).
SLURM_ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
# Node states and flags under which a node takes no new work.
UNAVAILABLE_NODE_WORDS = frozenset(
    {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "MAINT",
     "POWERED_DOWN", "POWER_DOWN", "REBOOT_REQUESTED", "INVALID", "INVALID_REG", "FUTURE",
     "UNKNOWN"}
)  # fmt: skip


class SlurmError(RuntimeError):
    """A Slurm command that failed, timed out or printed something unreadable."""


@dataclass(frozen=True)
class SlurmJobInfo:
    """One Slurm job as ``squeue`` or ``sacct`` reports it."""

    job_id: int
    state: str
    comment: str
    nodes: str
    exit_code: int | None = None  # the process's exit status; None while it runs
    signal: int | None = None  # the signal that ended it, if one did
    output: str = ""  # path of its standard output, when Slurm says
    reason: str = ""
    gpus_per_node: int | None = None

    @property
    def active(self) -> bool:
        return self.state in SLURM_ACTIVE_STATES


@dataclass(frozen=True)
class SlurmNodeInfo:
    name: str
    state: str
    flags: tuple[str, ...] = ()
    reason: str = ""

    @property
    def available(self) -> bool:
        words = {self.state.upper(), *(f.upper() for f in self.flags)}
        return not (words & UNAVAILABLE_NODE_WORDS)


@dataclass(frozen=True)
class Submission:
    """What ``sbatch`` is told for one allocation."""

    script: str
    name: str
    comment: str
    nodelist: Sequence[str]
    gpus_per_node: int
    output: str
    export: Mapping[str, str] = field(default_factory=dict)
    partition: str = ""
    account: str = ""
    reservation: str = ""


def _gpus_per_node(value: str) -> int | None:
    # squeue's tres_per_node, e.g. "gres:gpu:3" or "gres/gpu:3"
    for part in (value or "").split(","):
        words = part.replace("/", ":").split(":")
        if "gpu" in words and words[-1].isdigit():
            return int(words[-1])
    return None


# squeue's text columns: job id, state, nodes, GRES per node, reason, output path, comment
# (last, so a "|" inside a comment stays in it).
SQUEUE_FORMAT = "JobID:|,State:|,NodeList:|,tres-per-node:|,Reason:|,STDOUT:|,Comment:"


def parse_squeue(text: str) -> list[SlurmJobInfo]:
    """``squeue -h -O SQUEUE_FORMAT`` lines as job infos (no exit codes: squeue has none in
    text; ``SlurmCli.ended`` reads them for the few jobs that need one)."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 6)
        if len(parts) != 7 or not parts[0].strip().isdigit():
            raise SlurmError(f"unreadable squeue line: {line!r}")
        job_id, state, nodes, gres, reason, output, comment = (p.strip() for p in parts)
        jobs.append(
            SlurmJobInfo(
                job_id=int(job_id),
                state=state,
                comment="" if comment == "(null)" else comment,
                nodes=nodes,
                output="" if output in ("(null)", "N/A") else output,
                reason=reason,
                gpus_per_node=_gpus_per_node(gres),
            )
        )
    return jobs


_JOB_STATE = re.compile(r"(?:^|\s)JobState=(\S+)")
_EXIT_CODE = re.compile(r"(?:^|\s)ExitCode=(\d+):(\d+)")


def parse_scontrol_job(line: str, info: SlurmJobInfo) -> SlurmJobInfo:
    """``info`` with the state and exit code of ``scontrol -o show job`` output."""
    state, code = _JOB_STATE.search(line), _EXIT_CODE.search(line)
    if state is None or code is None:
        raise SlurmError(f"unreadable scontrol show job output: {line[:200]!r}")
    return replace(
        info,
        state=state.group(1),
        exit_code=int(code.group(1)),
        signal=int(code.group(2)) or None,
    )


def parse_sinfo(payload: str | bytes) -> list[SlurmNodeInfo]:
    try:
        data = json.loads(payload)
        return [
            SlurmNodeInfo(
                name=str(raw["name"]),
                state=str(raw.get("state") or ""),
                flags=tuple(str(f) for f in raw.get("state_flags") or ()),
                reason=raw.get("reason") or "",
            )
            for raw in data["nodes"]
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise SlurmError(f"unreadable sinfo --json output: {exc}") from exc


SACCT_FIELDS = "JobIDRaw,State,ExitCode,NodeList,Comment"


def parse_sacct(text: str) -> list[SlurmJobInfo]:
    """``sacct -X -n -P --format=SACCT_FIELDS`` lines as job infos."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 4)
        if len(parts) != 5 or not parts[0].isdigit():
            raise SlurmError(f"unreadable sacct line: {line!r}")
        job_id, state, exit_code, nodes, comment = parts
        code, _, sig = exit_code.partition(":")
        jobs.append(
            SlurmJobInfo(
                job_id=int(job_id),
                # "CANCELLED by 0": the word is the state
                state=state.split()[0] if state else "",
                comment=comment,
                nodes=nodes,
                exit_code=int(code) if code.isdigit() else None,
                signal=int(sig) if sig.isdigit() and int(sig) else None,
            )
        )
    return jobs


@dataclass(frozen=True)
class SlurmCli:
    """Runs Slurm's commands with ``SLURM_CONF`` set to ``conf`` (when given) and the binaries
    from ``bin_dir`` (when given, else PATH)."""

    conf: str = ""
    bin_dir: str = ""
    timeout_s: float = 30.0

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def run(self, *args: str, stdin: str | None = None) -> str:
        exe = str(Path(self.bin_dir) / args[0]) if self.bin_dir else args[0]
        command = [exe, *args[1:]]
        try:
            done = subprocess.run(
                command,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=self._env(),
                check=False,
            )
        except FileNotFoundError as exc:
            raise SlurmError(f"{args[0]} not found (is Slurm's CLI installed?): {exc}") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(f"{' '.join(args[:2])} took over {self.timeout_s:g} s") from exc
        if done.returncode != 0:
            said = " ".join((done.stderr or done.stdout).split())[:500]
            raise SlurmError(f"{' '.join(args[:3])} failed ({done.returncode}): {said}")
        return done.stdout

    # --- reads ------------------------------------------------------------------------------

    def version(self) -> tuple[int, int]:
        """(major, minor) of the Slurm the CLI talks to, e.g. (22, 5)."""
        words = self.run("sinfo", "--version").split()
        try:
            major, minor = words[-1].split(".")[:2]
            return int(major), int(minor)
        except (IndexError, ValueError) as exc:
            raise SlurmError(f"unreadable sinfo --version: {' '.join(words)!r}") from exc

    def jobs(self) -> list[SlurmJobInfo]:
        """Every job slurmctld still knows: active ones and those ended within MinJobAge.

        Text columns, not ``--json``: with 1,000 jobs 22.05's JSON is 3.2 MB and takes ten
        times as long (docs/benchmarks.md), and it ignores squeue's filters."""
        return parse_squeue(
            self.run("squeue", "--noheader", "--states=all", f"--Format={SQUEUE_FORMAT}")
        )

    def ended(self, infos: Iterable[SlurmJobInfo]) -> list[SlurmJobInfo]:
        """The given ended jobs with their exit codes, from slurmctld (``scontrol show job``),
        else from accounting (``sacct``) for those slurmctld has already forgotten."""
        result, forgotten = [], []
        for info in infos:
            try:
                line = self.run("scontrol", "--oneliner", "show", "job", str(info.job_id))
            except SlurmError:
                forgotten.append(info.job_id)
                continue
            result.append(parse_scontrol_job(line, info))
        return result + self.accounting(forgotten)

    def accounting(self, job_ids: Iterable[int]) -> list[SlurmJobInfo]:
        ids = ",".join(str(i) for i in sorted(set(job_ids)))
        if not ids:
            return []
        return parse_sacct(
            self.run("sacct", "-X", "-n", "-P", f"--format={SACCT_FIELDS}", "-j", ids)
        )

    def nodes(self) -> list[SlurmNodeInfo]:
        return parse_sinfo(self.run("sinfo", "--json"))

    # --- writes -----------------------------------------------------------------------------

    def submit_held(self, sub: Submission) -> int:
        """``sbatch -H``: the job waits, held, until ``release``; returns its id."""
        for key, value in sub.export.items():
            if "," in value or "," in key:
                raise SlurmError(f"--export cannot carry a comma ({key}={value!r})")
        args = [
            "sbatch",
            "--parsable",
            "--hold",
            f"--job-name={sub.name}",
            f"--comment={sub.comment}",
            f"--nodelist={','.join(sub.nodelist)}",
            f"--nodes={len(sub.nodelist)}",
            f"--gres=gpu:{sub.gpus_per_node}",
            f"--output={sub.output}",
            "--open-mode=append",
            # Only what is named here: the server's own environment (database URL, keys)
            # must not leak into users' jobs.
            "--export=" + ",".join(f"{k}={v}" for k, v in sub.export.items()),
        ]
        if sub.partition:
            args.append(f"--partition={sub.partition}")
        if sub.account:
            args.append(f"--account={sub.account}")
        if sub.reservation:
            args.append(f"--reservation={sub.reservation}")
        out = self.run(*args, stdin=sub.script).strip()
        try:
            return int(out.split(";")[0])
        except ValueError as exc:
            raise SlurmError(f"sbatch printed {out!r}, not a job id") from exc

    def release(self, job_ids: Iterable[int]) -> None:
        ids = ",".join(str(i) for i in job_ids)
        if ids:
            self.run("scontrol", "release", ids)

    def set_comment(self, job_id: int, comment: str) -> None:
        self.run("scontrol", "update", f"JobId={job_id}", f"Comment={comment}")

    def cancel(self, job_ids: Iterable[int]) -> None:
        """``scancel``: SIGTERM to the job (its trap checkpoints), SIGKILL after KillWait."""
        ids = [str(i) for i in job_ids]
        if ids:
            self.run("scancel", *ids)
