"""Kinds of the scheduling app, each with the colour the UI shows."""

from django.db import models


class DecisionAction(models.TextChoices):
    """What a round decided for one job (``scheduling.core.types.ChangeKind`` plus waiting)."""

    START = "start", "Start"
    STOP = "stop", "Stop (pause)"
    RESIZE = "resize", "Resize"
    RETUNE = "retune", "Retune"

    @property
    def colour(self) -> str:
        return _DECISION_COLOURS[self]


_DECISION_COLOURS = {
    DecisionAction.START: "seagreen",
    DecisionAction.STOP: "orange",
    DecisionAction.RESIZE: "royalblue",
    DecisionAction.RETUNE: "slategray",
}


class RoundOutcome(models.TextChoices):
    """How a recorded round ended. A round that found the lock taken is not recorded."""

    APPLIED = "applied", "Applied"
    PARTIAL = "partial", "Applied in part"  # some decisions lost a race and were skipped

    @property
    def colour(self) -> str:
        return _OUTCOME_COLOURS[self]


_OUTCOME_COLOURS = {RoundOutcome.APPLIED: "seagreen", RoundOutcome.PARTIAL: "orange"}


class PerfModelKind(models.TextChoices):
    """Where the performance model a job is sized by comes from (``scheduling.perf_lookup``)."""

    CATALOG = "catalog", "Measured (catalog)"  # fitted offline to published measurements
    LEARNED = "learned", "Learned (workload profile)"  # what earlier jobs of it taught
    ESTIMATED = "estimated", "Estimated (prior)"  # carried over from another workload or GPU

    @property
    def colour(self) -> str:
        return _PERF_MODEL_COLOURS[self]


_PERF_MODEL_COLOURS = {
    PerfModelKind.CATALOG: "seagreen",
    PerfModelKind.LEARNED: "royalblue",
    PerfModelKind.ESTIMATED: "orange",
}
