"""The executor interface: who carries out what a committed round decided.

A round (``scheduling.services.run_scheduling_round``) writes its plan as allocations in the
database. An executor turns the database's word into running work, and reports back what
happened outside it:

- ``reconcile(now=...)`` runs inside every round, under the round lock, before planning: it
  compares what the executor sees running with the allocations and repairs drift through
  ``cluster.services`` (conditional transitions), so the round plans on the truth;
- ``carry_out(now=...)`` runs after the round has committed: it makes the running work match
  the open allocations (start what has no job yet, stop what lost its allocation).

Both are idempotent and converge on the database's state, so a crash or a failed command is
repaired by the next round instead of needing the exact list of changes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar


@dataclass
class ReconcileReport:
    """What ``reconcile`` changed in the database (ids), and what it could not do."""

    jobs_finished: list[int] = field(default_factory=list)  # completed or failed in the executor
    jobs_cancelled: list[int] = field(default_factory=list)  # cancelled outside Wattflow
    jobs_requeued: list[int] = field(default_factory=list)  # lost with their node
    nodes_drained: list[str] = field(default_factory=list)
    nodes_restored: list[str] = field(default_factory=list)
    unknown_cancelled: list[int] = field(default_factory=list)  # executor-side ids
    errors: list[str] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return (
            len(self.jobs_finished)
            + len(self.jobs_cancelled)
            + len(self.jobs_requeued)
            + len(self.nodes_drained)
            + len(self.nodes_restored)
            + len(self.unknown_cancelled)
        )


@dataclass
class ExecutionReport:
    """What ``carry_out`` did, in executor-side ids (e.g. Slurm job ids)."""

    submitted: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    retuned: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Executor(ABC):
    """One way of running jobs; ``scheduling.executors.get_executor`` picks it by name."""

    name: ClassVar[str]
    # False for executors whose workers pull their work (the agents): the round then registers
    # no after-commit step at all.
    carries_out: ClassVar[bool] = True

    @abstractmethod
    def reconcile(self, *, now: datetime) -> ReconcileReport:
        """Repair the database from the executor's view (inside the round, under its lock)."""

    @abstractmethod
    def carry_out(self, *, now: datetime) -> ExecutionReport:
        """Make the executor's work match the open allocations (after the round commits)."""
