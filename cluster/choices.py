"""Statuses and kinds of the cluster app, each with the colour the UI shows.

Colours are CSS colour names, which both the templates and Plotly accept.
The job state machine lives here as data (``JOB_TRANSITIONS``): it is the single source of
truth for services, API and tests.
"""

from django.db import models


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"

    @property
    def colour(self) -> str:
        return _JOB_STATE_COLOURS[self]

    @property
    def is_terminal(self) -> bool:
        return not JOB_TRANSITIONS[self]


_JOB_STATE_COLOURS = {
    JobState.QUEUED: "slategray",
    JobState.RUNNING: "royalblue",
    JobState.PAUSED: "orange",
    JobState.COMPLETED: "seagreen",
    JobState.FAILED: "crimson",
    JobState.CANCELLED: "dimgray",
}

# Allowed job state changes: from -> the states it may move to. Terminal states map to nothing.
# running -> queued is the re-queue after a node is lost; paused -> queued gives a paused job
# back to the queue so the scheduler may place it elsewhere.
JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.RUNNING: frozenset(
        {
            JobState.PAUSED,
            JobState.COMPLETED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.QUEUED,
        }
    ),
    JobState.PAUSED: frozenset({JobState.RUNNING, JobState.QUEUED, JobState.CANCELLED}),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}

TERMINAL_JOB_STATES = frozenset(state for state, targets in JOB_TRANSITIONS.items() if not targets)


def can_transition(old: str, new: str) -> bool:
    """True when a job in state ``old`` may move to ``new``."""
    return JobState(new) in JOB_TRANSITIONS[JobState(old)]


class NodeStatus(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    DRAINING = "draining", "Draining"
    UNHEALTHY = "unhealthy", "Unhealthy"

    @property
    def colour(self) -> str:
        return _NODE_STATUS_COLOURS[self]


_NODE_STATUS_COLOURS = {
    NodeStatus.HEALTHY: "seagreen",
    NodeStatus.DRAINING: "orange",
    NodeStatus.UNHEALTHY: "crimson",
}


class Role(models.TextChoices):
    MEMBER = "member", "Member"
    LEAD = "lead", "Lead"

    @property
    def colour(self) -> str:
        return _ROLE_COLOURS[self]


_ROLE_COLOURS = {Role.MEMBER: "slategray", Role.LEAD: "royalblue"}


class HardLimitAction(models.TextChoices):
    """What the scheduler does once a team has spent its whole budget."""

    PAUSE_JOBS = "pause_jobs", "Pause running jobs"
    HOLD_QUEUE = "hold_queue", "Start no new jobs"
    NOTIFY_ONLY = "notify_only", "Notify only"

    @property
    def colour(self) -> str:
        return _HARD_LIMIT_ACTION_COLOURS[self]


_HARD_LIMIT_ACTION_COLOURS = {
    HardLimitAction.PAUSE_JOBS: "crimson",
    HardLimitAction.HOLD_QUEUE: "orange",
    HardLimitAction.NOTIFY_ONLY: "slategray",
}


class AuditAction(models.TextChoices):
    """What a recorded change did to the audited object (see ``cluster.models.AuditEntry``)."""

    CREATED = "created", "Created"
    UPDATED = "updated", "Updated"
    DELETED = "deleted", "Deleted"

    @property
    def colour(self) -> str:
        return _AUDIT_ACTION_COLOURS[self]


_AUDIT_ACTION_COLOURS = {
    AuditAction.CREATED: "seagreen",
    AuditAction.UPDATED: "royalblue",
    AuditAction.DELETED: "crimson",
}
