"""Node liveness: a node whose agent stopped heart-beating is marked unhealthy and the jobs
running on it are re-queued; a node heard from again is healthy again.

Called by every round under its lock (``scheduling.services.run_scheduling_round``) and by
beat's liveness task through ``scheduling.services.check_liveness`` (same lock).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from cluster import services as cluster_services
from cluster.choices import JobState, NodeStatus, WaitCode
from cluster.models import Job, Node

log = logging.getLogger(__name__)


def mark_silent_nodes(*, now: datetime, timeout_s: float | None = None) -> list[int]:
    """Mark healthy nodes silent for ``timeout_s`` unhealthy and re-queue the jobs running on
    them (their allocations close, so the agents stop them if they come back); mark unhealthy
    nodes that heart-beat again healthy. Returns the ids of the re-queued jobs.

    A node that never heart-beat since it was added stays as it is (it is not schedulable
    anyway: see ``adapters.node_is_live``). Draining nodes are the admin's and stay draining.
    """
    timeout_s = settings.WATTFLOW_NODE_TIMEOUT_S if timeout_s is None else timeout_s
    cutoff = now - timedelta(seconds=timeout_s)
    requeued: list[int] = []
    with transaction.atomic():
        # FOR NO KEY UPDATE, not FOR UPDATE: it serialises with heartbeats (which update the
        # row) but not with the key-share locks that job events and other rows' foreign keys
        # take on the node, which FOR UPDATE blocked while this transaction went on to lock
        # the node's jobs: a deadlock with a job event holding one of those jobs
        # (tests/telemetry/test_job_event_locks.py).
        silent = list(
            Node.objects.select_for_update(no_key=True)
            .filter(status=NodeStatus.HEALTHY, last_heartbeat_at__lt=cutoff)
            .values_list("pk", flat=True)
        )
        if silent:
            # Conditional: a heartbeat that landed since the read keeps its node healthy.
            Node.objects.filter(
                pk__in=silent, status=NodeStatus.HEALTHY, last_heartbeat_at__lt=cutoff
            ).update(status=NodeStatus.UNHEALTHY)
            stranded = (
                Job.objects.filter(
                    state=JobState.RUNNING,
                    current_allocation__gpus__node_id__in=silent,
                )
                .distinct()
                .order_by("pk")
            )
            for job in stranded:
                try:
                    cluster_services.transition_job(
                        job,
                        to=JobState.QUEUED,
                        at=now,
                        pending_reason_code=WaitCode.NODE_LOST,
                        pending_reason="Re-queued: a node it ran on stopped reporting.",
                    )
                except cluster_services.InvalidTransition as exc:
                    log.info("job %s not re-queued: %s", job.pk, exc)
                    continue
                requeued.append(job.pk)
            log.warning(
                "nodes %s silent since %s: unhealthy; re-queued %s", silent, cutoff, requeued
            )
        Node.objects.filter(status=NodeStatus.UNHEALTHY, last_heartbeat_at__gte=cutoff).update(
            status=NodeStatus.HEALTHY
        )
    return requeued
