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


class WaitCode(models.TextChoices):
    """Why a job waits: every code ``Job.pending_reason_code`` may hold.

    The scheduling core's ``WaitCode`` (what policies say) plus what services say of their own
    (``node_lost``: re-queued by liveness; ``slurm_refused``, ``slurm_pending`` and
    ``slurm_lost``: put back in the queue by the Slurm executor, ``scheduling/executors/slurm.py``).
    ``tests/cluster/test_wait_codes.py`` keeps the two lists in step: a code the core gains
    must be added here, with a label a person can read.
    """

    BUDGET_EXHAUSTED = "budget_exhausted", "Team budget used up"
    WAITING_FOR_CLEAN_HOUR = "waiting_for_clean_hour", "Waiting for cleaner electricity"
    NO_FREE_BLOCK = "no_free_block", "No free block of GPUs"
    BEHIND_IN_QUEUE = "behind_in_queue", "Behind other jobs in the queue"
    DELAYED_FOR_LOCALITY = "delayed_for_locality", "Waiting for GPUs close together"
    PREEMPTED = "preempted", "Preempted by the scheduler"
    NO_PERF_MODEL = "no_perf_model", "No performance model for this workload"
    NO_MATCHING_GPU = "no_matching_gpu", "No GPU of the requested model"
    OVER_ROUND_ALLOWANCE = "over_round_allowance", "Budget paced: not this round"
    NODE_LOST = "node_lost", "Its node stopped reporting"
    SLURM_REFUSED = "slurm_refused", "Slurm refused the job"
    SLURM_PENDING = "slurm_pending", "Slurm kept the job pending"
    SLURM_LOST = "slurm_lost", "Slurm has no record of the job"

    @property
    def colour(self) -> str:
        return _WAIT_CODE_COLOURS[self]


_WAIT_CODE_COLOURS = {
    WaitCode.BUDGET_EXHAUSTED: "crimson",
    WaitCode.WAITING_FOR_CLEAN_HOUR: "seagreen",
    WaitCode.NO_FREE_BLOCK: "slategray",
    WaitCode.BEHIND_IN_QUEUE: "slategray",
    WaitCode.DELAYED_FOR_LOCALITY: "royalblue",
    WaitCode.PREEMPTED: "orange",
    WaitCode.NO_PERF_MODEL: "crimson",
    WaitCode.NO_MATCHING_GPU: "crimson",
    WaitCode.OVER_ROUND_ALLOWANCE: "orange",
    WaitCode.NODE_LOST: "orange",
    WaitCode.SLURM_REFUSED: "crimson",
    WaitCode.SLURM_PENDING: "orange",
    WaitCode.SLURM_LOST: "orange",
}

# States in which a job waits (and may carry a wait reason).
WAITING_JOB_STATES = frozenset({JobState.QUEUED, JobState.PAUSED})

# States of a job the scheduler still plans for (waiting or running): the jobs a round and a
# prediction take in.
ACTIVE_JOB_STATES = WAITING_JOB_STATES | {JobState.RUNNING}
