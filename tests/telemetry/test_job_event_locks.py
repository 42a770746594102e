"""Lock order of job events against the liveness check: the deadlock on ``cluster_node`` that
the demo hit once in 12 minutes, reproduced deterministically.

The job-event transaction locked the job row first (its update) and the node row last (the
deferred foreign-key check of ``JobEvent.node`` at commit), while the liveness check locked the
node row ``FOR UPDATE`` first and the job row next (re-queueing it). The test holds the event
transaction open after its job update, lets the liveness check run into the job lock, and then
lets the event transaction commit: before the fix PostgreSQL found a cycle and aborted one.
"""

import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from cluster import services as cluster_services
from cluster.choices import JobState, NodeStatus
from cluster.models import Gpu, Node
from scheduling.liveness import mark_silent_nodes
from telemetry import services
from telemetry.models import JobEvent


def _wait_until_blocked(application_name: str, timeout_s: float = 10.0) -> bool:
    """True once the connection named ``application_name`` waits on a row lock."""
    deadline = time.monotonic() + timeout_s
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND wait_event_type = 'Lock'",
                [application_name],
            )
            if cursor.fetchone()[0]:
                return True
            time.sleep(0.05)
    return False


def _name_connection(name: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('application_name', %s, false)", [name])


@pytest.mark.django_db(transaction=True)
def test_a_job_exit_racing_the_liveness_check_does_not_deadlock(
    make_node, make_job, member, team, monkeypatch
):
    # given a job running on a node whose last heartbeat is older than the node timeout
    node = make_node("node-01", gpus=2)
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now - timedelta(minutes=10))
    job = make_job(owner=member, team=team, max_gpus=2)
    gpus = list(Gpu.objects.filter(node=node))
    cluster_services.start_job(job, gpus=gpus, batch_size=256, at=now - timedelta(minutes=5))
    job.refresh_from_db()
    exit_event = {
        "event_id": str(uuid.uuid4()),
        "job_id": job.pk,
        "allocation_id": job.current_allocation_id,
        "kind": "exited",
        "ts": now - timedelta(seconds=1),
        "reason": "completed",
        "exit_status": 0,
        "iterations": 1000.0,
        "log_tail": "",
    }

    # the event transaction pauses after it applied the exit (job row locked), before commit
    applied, release = threading.Event(), threading.Event()
    original_apply = services._apply_exit

    def apply_then_wait(event, **kwargs):
        original_apply(event, **kwargs)
        applied.set()
        release.wait(timeout=20)

    monkeypatch.setattr(services, "_apply_exit", apply_then_wait)
    outcome: dict[str, object] = {}

    def events_writer():
        try:
            outcome["events"] = services.record_job_events(node, [exit_event], now=now)
        except Exception as exc:  # the outcome under test
            outcome["events"] = exc
        finally:
            applied.set()
            connection.close()

    def liveness():
        try:
            _name_connection("wattflow-liveness-race")
            outcome["liveness"] = mark_silent_nodes(now=now, timeout_s=60)
        except Exception as exc:  # the outcome under test
            outcome["liveness"] = exc
        finally:
            connection.close()

    writer = threading.Thread(target=events_writer)
    writer.start()
    assert applied.wait(timeout=20)
    checker = threading.Thread(target=liveness)
    checker.start()
    # when the liveness check waits for the job row the event transaction holds
    blocked = _wait_until_blocked("wattflow-liveness-race")
    release.set()
    writer.join(timeout=30)
    checker.join(timeout=30)

    # then both finished without an error: the exit completed the job, the liveness check
    # marked the node unhealthy and found nothing left to re-queue
    assert blocked, "the liveness check never waited on the event transaction"
    assert outcome == {"events": 1, "liveness": []}, outcome
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    assert Node.objects.get(pk=node.pk).status == NodeStatus.UNHEALTHY
    assert JobEvent.objects.filter(job=job).count() == 1
