"""The built-in executor: Wattflow's own node agents run the jobs.

Nothing is pushed: each agent polls ``/api/agent/assignments/`` (``telemetry.services.
assignments_for``), starts what it is assigned and stops what lost its allocation, and
reports exits as job events. Its drift repair is node liveness (``scheduling.liveness``),
which the round runs already. So both steps here do nothing, which keeps the behaviour
exactly what it was before executors existed.
"""

from __future__ import annotations

from datetime import datetime

from scheduling.executors.base import ExecutionReport, Executor, ReconcileReport


class AgentExecutor(Executor):
    name = "agent"
    carries_out = False

    def reconcile(self, *, now: datetime) -> ReconcileReport:
        return ReconcileReport()

    def carry_out(self, *, now: datetime) -> ExecutionReport:
        return ExecutionReport()
