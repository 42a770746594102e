"""Executors: who runs the jobs a round placed (``base.Executor``), chosen by the setting
``WATTFLOW_EXECUTOR``: ``agent`` (default, the node agents) or ``slurm``."""

from __future__ import annotations

from django.conf import settings

from scheduling.executors.base import ExecutionReport, Executor, ReconcileReport

EXECUTOR_NAMES = ("agent", "slurm")

__all__ = ["EXECUTOR_NAMES", "ExecutionReport", "Executor", "ReconcileReport", "get_executor"]


def get_executor(name: str | None = None) -> Executor:
    """The configured executor (``WATTFLOW_EXECUTOR``), or the one named."""
    name = name or settings.WATTFLOW_EXECUTOR
    if name == "agent":
        from scheduling.executors.agent import AgentExecutor

        return AgentExecutor()
    if name == "slurm":
        from scheduling.executors.slurm import SlurmExecutor

        return SlurmExecutor.from_settings()
    raise ValueError(f"WATTFLOW_EXECUTOR={name!r} is not an executor ({', '.join(EXECUTOR_NAMES)})")
