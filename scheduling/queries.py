"""Read-only queries over recorded rounds for pages (added by the frontend; additive)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from cluster.choices import JobState
from cluster.models import Job
from scheduling.models import JobSchedulingState, RoundDecision, SchedulingRound


def latest_round_summary(visible_jobs: QuerySet[Job]) -> dict[str, Any] | None:
    """The newest recorded round in the shape ``frontend.broadcast.broadcast_round`` sends,
    keeping only decisions and waits of ``visible_jobs``; None before the first round.

    Waits are the jobs whose latest wait reason was written by this round."""
    round_row = SchedulingRound.objects.order_by("-started_at", "-id").first()
    if round_row is None:
        return None
    visible = visible_jobs.values("pk")
    items = []
    decisions = (
        RoundDecision.objects.filter(round=round_row, applied=True, job__in=visible)
        .select_related("job")
        .order_by("id")
    )
    for d in decisions:
        items.append(
            {
                "job_id": d.job_id,
                "team_id": d.job.team_id,
                "job_name": d.job.name,
                "action": d.action,
                "gpus": len(d.gpu_uuids),
                "batch_size": d.batch_size,
                "sm_clock_mhz": d.sm_clock_mhz,
                "reason_code": d.reason_code,
                "reason": d.reason,
            }
        )
    waits = (
        JobSchedulingState.objects.filter(wait_round=round_row, job__in=visible)
        .exclude(wait_code="")
        .select_related("job")
        .order_by("job_id")
    )
    for w in waits:
        items.append(
            {
                "job_id": w.job_id,
                "team_id": w.job.team_id,
                "job_name": w.job.name,
                "action": "wait",
                "gpus": 0,
                "batch_size": None,
                "sm_clock_mhz": None,
                "reason_code": w.wait_code,
                "reason": w.wait_reason,
            }
        )
    return {
        "round_id": round_row.pk,
        "at": round_row.started_at.isoformat(),
        "policy": round_row.policy,
        "queue_length": visible_jobs.filter(state=JobState.QUEUED).count(),
        "running": round_row.running_jobs,
        "decisions": items,
    }
