"""A swap of resizes applied together (``services._apply_cycle``) takes its jobs' row locks
before it ends their allocations, as ``cluster.services`` takes them (the job, then its
allocation: ``transition_job``, ``set_allocation``).

It ended the allocations first and locked each job later, in ``set_allocation``: a user
cancelling one of the jobs in between (or its agent reporting it finished) locked the job
row and waited on the allocation the cycle had ended, while the cycle waited on that job
row. PostgreSQL broke the deadlock by aborting one of them: the cancel (a 500) or the
round. Against the real PostgreSQL, two connections."""

import threading
from datetime import UTC, datetime

import pytest
from django.db import connection, connections, transaction
from support.apply_plans import live_gpus, moves, running_jobs
from support.polling import wait_for

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Job
from scheduling import adapters, services

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)


def _waiting_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def test_a_cancel_during_a_swap_neither_deadlocks_nor_fails(
    scheduler_settings, make_node, make_job, member, team, monkeypatch
):
    # given two running jobs on GPUs 0 and 1 and a plan that swaps them (no order applies it)
    scheduler_settings("fifo")
    gpus = live_gpus(make_node, 2, now=T0)
    jobs = running_jobs(gpus, make_job, member, team, on=[0, 1], now=T0)
    rows = adapters.build_snapshot(now=T0, round_length_s=60.0)
    plan = moves(jobs, gpus, targets=[1, 0])
    round_row = services._record_round(rows, plan, now=T0, requeued=0)

    # and job 0's owner cancelling it once the cycle has begun (its second pass)
    cancel_errors: list[BaseException] = []
    cancel_pid: list[int] = []

    def cancel():
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                cancel_pid.append(cursor.fetchone()[0])
            cluster_services.cancel_job(Job.objects.get(pk=jobs[0].pk))
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            cancel_errors.append(exc)
        finally:
            connections["default"].close()

    passes = services._apply_passes
    calls = []
    thread = threading.Thread(target=cancel)

    def passes_with_a_cancel(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # inside _apply_cycle
            thread.start()
            wait_for(lambda: bool(cancel_pid), timeout_s=10, what="the cancel's connection")
            wait_for(
                lambda: _waiting_on_a_lock(cancel_pid[0]),
                timeout_s=10,
                what="the cancel to wait on the round's lock",
            )
        return passes(*args, **kwargs)

    monkeypatch.setattr(services, "_apply_passes", passes_with_a_cancel)

    # when the plan is applied (the round's transaction)
    with transaction.atomic():
        applied, failed, _ = services._apply(plan, rows, round_row, now=T0)
    thread.join(timeout=30)

    # then the swap was made, and the cancel, which waited for the round, took effect after it
    assert not thread.is_alive()
    assert cancel_errors == []
    assert (applied, failed) == (2, 0)
    first, second = (Job.objects.get(pk=j.pk) for j in jobs)
    assert first.state == JobState.CANCELLED
    assert not first.allocations.filter(ended_at__isnull=True).exists()
    assert second.state == JobState.RUNNING
    assert [g.uuid for g in second.current_allocation.gpus.all()] == [gpus[0].uuid]
