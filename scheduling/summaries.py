"""A recorded round as dashboards see it: built here, once, from what the round stored.

``round_summary(round_row)`` is what ``ROUND_FINISHED`` publishes after the round commits (the
frontend splits it per team) and, with ``visible_jobs``, what a page shows on load; the two
cannot drift because they are the same function over the same rows. It reads:

- the round's applied decisions (``RoundDecision``), with the nodes of the GPUs each got;
- the jobs the round left waiting: queued or paused jobs whose wait reason this round wrote
  (``Job.pending_round``);
- the running jobs a spent ``hold_queue`` budget keeps where they run (``keep``, with their
  GPUs): the round wrote why they would wait on them too, and they count as running;
- cluster-wide counts (``scope: "cluster"``): jobs queued and running after the round.

Example::

    {"round_id": 12, "at": "2026-11-22T04:00:00+00:00", "policy": "powerflow",
     "scope": "cluster", "queue_length": 3, "running": 5, "avg_jct_s": 5123.0,
     "predicted_energy_j": 1.2e6, "predicted_co2_g": 55.0,
     "decisions": [{"job_id": 7, "team_id": 2, "job_name": "bert", "action": "start",
                    "gpus": 4, "nodes": ["node-01"], "batch_size": 256, "sm_clock_mhz": 1200,
                    "power_limit_w": None, "reason_code": "", "reason": "", "until": None},
                   {"job_id": 9, ..., "action": "wait", "gpus": 0, "nodes": [],
                    "reason_code": "behind_in_queue", "reason": "Waiting: ...",
                    "until": "2026-11-22T05:10:00+00:00"}]}
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Avg, DurationField, ExpressionWrapper, F, QuerySet

from cluster.choices import WAITING_JOB_STATES, JobState
from cluster.models import Gpu, Job
from scheduling.models import RoundDecision, SchedulingRound

WAIT_ACTION = "wait"
# A job the round would stop for an exhausted budget but that keeps running because the
# budget's hard-limit action is ``hold_queue`` (start nothing new, let running jobs finish).
KEEP_ACTION = "keep"
JCT_WINDOW = timedelta(days=1)


def average_jct_s(*, now: datetime, window: timedelta = JCT_WINDOW) -> float | None:
    """Average completion time (finish - submit) of jobs completed in ``(now - window, now]``;
    bounded at ``now`` so a round's figure does not change when read later."""
    value = (
        Job.objects.filter(
            state=JobState.COMPLETED, finished_at__gte=now - window, finished_at__lte=now
        )
        .annotate(
            jct=ExpressionWrapper(
                F("finished_at") - F("submitted_at"), output_field=DurationField()
            )
        )
        .aggregate(avg=Avg("jct"))["avg"]
    )
    return None if value is None else value.total_seconds()


def placement_label(gpus: list[tuple[str, int]]) -> str:
    """``[("node-01", 0), ("node-01", 1), ("node-02", 3)]`` -> ``"node-01: 0,1 · node-02: 3"``."""
    by_node: dict[str, list[int]] = {}
    for node, index in sorted(gpus):
        by_node.setdefault(node, []).append(index)
    return " · ".join(f"{node}: {','.join(map(str, idx))}" for node, idx in by_node.items())


def _item(job: Job, **fields: Any) -> dict[str, Any]:
    return {
        "job_id": job.pk,
        "team_id": job.team_id,
        "job_name": job.name,
        "job_state": job.state,
        **fields,
    }


def round_summary(
    round_row: SchedulingRound, *, visible_jobs: QuerySet[Job] | None = None
) -> dict[str, Any]:
    """The round's summary; with ``visible_jobs``, only those jobs' decisions and waits (the
    counts stay cluster-wide, and say so)."""
    decisions = RoundDecision.objects.filter(round=round_row, applied=True)
    waits = Job.objects.filter(pending_round=round_row, state__in=WAITING_JOB_STATES)
    kept = Job.objects.filter(pending_round=round_row, state=JobState.RUNNING)
    if visible_jobs is not None:
        decisions = decisions.filter(job__in=visible_jobs.values("pk"))
        waits = waits.filter(pk__in=visible_jobs.values("pk"))
        kept = kept.filter(pk__in=visible_jobs.values("pk"))
    decisions = list(decisions.select_related("job").order_by("id"))
    uuids = {u for d in decisions for u in d.gpu_uuids}
    where = {
        uuid: (node, index)
        for uuid, node, index in Gpu.objects.filter(uuid__in=uuids).values_list(
            "uuid", "node__name", "index"
        )
    }
    items = [
        _item(
            d.job,
            action=d.action,
            gpus=len(d.gpu_uuids),
            nodes=sorted({where[u][0] for u in d.gpu_uuids if u in where}),
            placement=placement_label([where[u] for u in d.gpu_uuids if u in where]),
            batch_size=d.batch_size,
            sm_clock_mhz=d.sm_clock_mhz,
            power_limit_w=d.power_limit_w,
            reason_code=d.reason_code,
            reason=d.reason,
            until=None,
        )
        for d in decisions
    ]
    items.extend(
        _item(
            job,
            action=WAIT_ACTION,
            gpus=0,
            nodes=[],
            placement="",
            batch_size=None,
            sm_clock_mhz=None,
            power_limit_w=None,
            reason_code=job.pending_reason_code,
            reason=job.pending_reason,
            until=None if job.pending_until is None else job.pending_until.isoformat(),
        )
        for job in waits.order_by("pk")
    )
    for job in (
        kept.select_related("current_allocation")
        .prefetch_related("current_allocation__gpus__node")
        .order_by("pk")
    ):
        allocation = job.current_allocation
        gpus = [(g.node.name, g.index) for g in allocation.gpus.all()] if allocation else []
        items.append(
            _item(
                job,
                action=KEEP_ACTION,
                gpus=len(gpus),
                nodes=sorted({node for node, _ in gpus}),
                placement=placement_label(gpus),
                batch_size=allocation.batch_size if allocation else None,
                sm_clock_mhz=allocation.sm_clock_mhz if allocation else None,
                power_limit_w=allocation.power_limit_w if allocation else None,
                reason_code=job.pending_reason_code,
                reason=job.pending_reason,
                until=None if job.pending_until is None else job.pending_until.isoformat(),
            )
        )
    return {
        "round_id": round_row.pk,
        "at": round_row.started_at.isoformat(),
        "policy": round_row.policy,
        "scope": "cluster",
        "queue_length": round_row.queued_jobs,
        "running": round_row.running_jobs,
        "avg_jct_s": average_jct_s(now=round_row.started_at),
        "predicted_energy_j": round_row.predicted_energy_j,
        "predicted_co2_g": round_row.predicted_co2_g,
        "decisions": items,
    }


def latest_round_summary(visible_jobs: QuerySet[Job]) -> dict[str, Any] | None:
    """The newest recorded round as ``visible_jobs``' owner sees it; None before the first."""
    round_row = SchedulingRound.objects.order_by("-started_at", "-id").first()
    return None if round_row is None else round_summary(round_row, visible_jobs=visible_jobs)
