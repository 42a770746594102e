"""Two job-event batches whose events reuse each other's ids for other jobs, in opposite
orders, stored at once: each job's events are inserted by one statement, and the unique
index on ``event_id`` makes an insert wait for the other transaction's uncommitted row of
the same id. Inserted in the batch's order, each waited on the other and PostgreSQL
aborted one (a deadlock, a 500 to its agent); inserted in ``event_id`` order they wait in
one order and both finish (the second stores nothing of the reused ids, as before).

Deterministic: a third transaction holds an uncommitted event whose id sits between the
two reused ones in the first batch, so the first batch stops there holding the first id;
the second batch runs into it; then the third lets go."""

import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from support.races import holding, in_thread

from cluster import services as cluster_services
from cluster.models import Gpu
from telemetry import services
from telemetry.models import JobEvent

FIRST = uuid.UUID(int=1)
BETWEEN = uuid.UUID(int=2)
SECOND = uuid.UUID(int=3)


def _waiting_on_a_lock(application_name: str, timeout_s: float = 10.0) -> bool:
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


def _named(name: str, call):
    def run():
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('application_name', %s, false)", [name])
        return call()

    return run


def _progress(job, event_id: uuid.UUID, iterations: float, ts) -> dict:
    return {
        "event_id": str(event_id), "job_id": job.pk,
        "allocation_id": job.current_allocation_id, "kind": "progress", "ts": ts,
        "iterations": iterations,
    }  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_two_batches_reusing_each_others_ids_in_opposite_orders_both_finish(
    make_node, make_job, member, team
):
    node = make_node("node-01", gpus=2)
    now = timezone.now()
    first_gpu, second_gpu = Gpu.objects.filter(node=node).order_by("index")
    jobs = []
    for gpu in (first_gpu, second_gpu):
        job = make_job(owner=member, team=team, max_gpus=1)
        cluster_services.start_job(job, gpus=[gpu], batch_size=256, at=now - timedelta(minutes=5))
        job.refresh_from_db()
        jobs.append(job)
    one, two = jobs
    t = now - timedelta(seconds=30)
    batch_one = [
        _progress(one, FIRST, 10, t),
        _progress(one, BETWEEN, 20, t + timedelta(seconds=1)),
        _progress(one, SECOND, 30, t + timedelta(seconds=2)),
    ]
    batch_two = [_progress(two, SECOND, 10, t), _progress(two, FIRST, 20, t + timedelta(seconds=1))]

    # a third transaction holds an uncommitted event under the id between the two
    def hold_between():
        JobEvent.objects.create(
            event_id=BETWEEN, node=node, job=two, allocation_id=two.current_allocation_id,
            kind="progress", ts=t, iterations=1, received_at=now,
        )  # fmt: skip

    held = holding(hold_between, then=lambda: transaction.set_rollback(True))
    # the first batch stores FIRST and waits on BETWEEN; the second stores SECOND (in the
    # batch's order) or waits on FIRST (in id order)
    first = in_thread(
        _named("wf-batch-one", lambda: services.record_job_events(node, batch_one, now=now))
    )
    assert _waiting_on_a_lock("wf-batch-one")
    second = in_thread(
        _named("wf-batch-two", lambda: services.record_job_events(node, batch_two, now=now))
    )
    assert _waiting_on_a_lock("wf-batch-two")
    held.release()  # (rolled back: BETWEEN is free)

    outcomes = (first.outcome(timeout=30), second.outcome(timeout=30))

    # (before: one of the two ended in "deadlock detected")
    assert outcomes == (3, 0), outcomes
    stored = dict(JobEvent.objects.values_list("event_id", "job_id"))
    assert stored == {FIRST: one.pk, BETWEEN: one.pk, SECOND: one.pk}
    # the first batch's events kept its order: ids ascending with the batch
    ids = list(JobEvent.objects.order_by("id").values_list("event_id", flat=True))
    assert ids == [FIRST, BETWEEN, SECOND]
    one.refresh_from_db()
    assert one.completed_iterations == 30
