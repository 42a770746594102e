"""Kinds of the telemetry app, each with the colour the UI shows."""

from django.db import models


class CarbonSource(models.TextChoices):
    IMPORTED = "imported", "Imported file"
    HTTP = "http", "HTTP provider"
    STATIC = "static", "Static yearly mean"

    @property
    def colour(self) -> str:
        return _CARBON_SOURCE_COLOURS[self]


_CARBON_SOURCE_COLOURS = {
    CarbonSource.IMPORTED: "seagreen",
    CarbonSource.HTTP: "royalblue",
    CarbonSource.STATIC: "orange",
}


class JobEventKind(models.TextChoices):
    STARTED = "started", "Started"
    PROGRESS = "progress", "Progress"
    EXITED = "exited", "Exited"

    @property
    def colour(self) -> str:
        return _JOB_EVENT_COLOURS[self]


_JOB_EVENT_COLOURS = {
    JobEventKind.STARTED: "royalblue",
    JobEventKind.PROGRESS: "slategray",
    JobEventKind.EXITED: "dimgray",
}


class ExitReason(models.TextChoices):
    """Why a job's process ended, as the agent saw it."""

    COMPLETED = "completed", "Completed"  # exited 0 on its own
    FAILED = "failed", "Failed"  # exited non-zero on its own
    STOPPED = "stopped", "Stopped by the scheduler"
    RESIZED = "resized", "Stopped to resize"
    AGENT_EXIT = "agent_exit", "Stopped because the agent exited"

    @property
    def colour(self) -> str:
        return _EXIT_REASON_COLOURS[self]


_EXIT_REASON_COLOURS = {
    ExitReason.COMPLETED: "seagreen",
    ExitReason.FAILED: "crimson",
    ExitReason.STOPPED: "orange",
    ExitReason.RESIZED: "orange",
    ExitReason.AGENT_EXIT: "dimgray",
}
