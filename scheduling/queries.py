"""Read-only queries over recorded rounds for pages (added by the frontend; additive)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from cluster.choices import JobState
from cluster.models import Gpu, Job, JobAllocation
from scheduling.models import JobSchedulingState, RoundDecision, SchedulingRound

# A job the round would stop for an exhausted budget but that keeps running because the
# budget's hard-limit action is ``hold_queue`` (start nothing new, let running jobs finish).
KEEP_ACTION = "keep"


def placement_label(gpus: list[tuple[str, int]]) -> str:
    """``[("node-01", 0), ("node-01", 1), ("node-02", 3)]`` -> ``"node-01: 0,1 · node-02: 3"``."""
    by_node: dict[str, list[int]] = {}
    for node, index in sorted(gpus):
        by_node.setdefault(node, []).append(index)
    return " · ".join(f"{node}: {','.join(map(str, idx))}" for node, idx in by_node.items())


def placements_by_uuid(uuids) -> dict[str, tuple[str, int]]:
    return {
        uuid: (node, index)
        for uuid, node, index in Gpu.objects.filter(uuid__in=list(uuids)).values_list(
            "uuid", "node__name", "index"
        )
    }


def running_jobs_series(start: datetime, end: datetime) -> list[tuple[datetime, int]]:
    """(round start, jobs running after it) of the cluster's rounds in [start, end]."""
    return list(
        SchedulingRound.objects.filter(started_at__gte=start, started_at__lte=end)
        .order_by("started_at", "id")
        .values_list("started_at", "running_jobs")
    )


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
    decisions = list(decisions)
    where = placements_by_uuid(u for d in decisions for u in d.gpu_uuids)
    for d in decisions:
        items.append(
            {
                "job_id": d.job_id,
                "team_id": d.job.team_id,
                "job_name": d.job.name,
                "job_state": d.job.state,
                "action": d.action,
                "gpus": len(d.gpu_uuids),
                "placement": placement_label([where[u] for u in d.gpu_uuids if u in where]),
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
    waits = list(waits)
    held = {
        a.job_id: a
        for a in JobAllocation.objects.filter(
            job_id__in=[w.job_id for w in waits if w.job.state == JobState.RUNNING],
            ended_at__isnull=True,
        ).prefetch_related("gpus__node")
    }
    for w in waits:
        # Recorded as waiting, yet running: the stop was not carried out (hold_queue).
        alloc = held.get(w.job_id) if w.job.state == JobState.RUNNING else None
        gpus = [(g.node.name, g.index) for g in alloc.gpus.all()] if alloc else []
        items.append(
            {
                "job_id": w.job_id,
                "team_id": w.job.team_id,
                "job_name": w.job.name,
                "job_state": w.job.state,
                "action": KEEP_ACTION if w.job.state == JobState.RUNNING else "wait",
                "gpus": len(gpus),
                "placement": placement_label(gpus),
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
        # Cluster-wide, as the round saw it (the page says so); jobs a spent hold_queue
        # budget keeps running count as running (the plan holds them where they run).
        "waiting": round_row.waiting_jobs,
        "running": round_row.running_jobs,
        "decisions": items,
    }
