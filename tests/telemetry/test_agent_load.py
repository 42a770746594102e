"""The demo's mix of writers at once, on the real PostgreSQL: two agents posting heartbeats,
samples and job events (progress and exits of what their assignments say) while scheduling
rounds and the liveness check run, and one agent's heartbeats stop and resume so the liveness
check keeps re-queueing its jobs under its events. Nothing may answer 5xx or deadlock; refusals
(400: an event about an allocation that ended) are allowed."""

import sys
import threading
import time
import uuid
from collections import Counter

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from cluster.models import Job
from scheduling.models import SchedulerSettings
from scheduling.services import check_liveness, run_scheduling_round

pytestmark = [pytest.mark.slow]
DURATION_S = 8.0  # the mix runs at least this long
MAX_DURATION_S = 120.0  # and on a loaded machine until a job has completed and one requeued


def _agent_loop(token, gpu_uuids, stop, statuses, errors, *, silent_phases=False):
    client = Client(HTTP_AUTHORIZATION=f"Token {token}", raise_request_exception=False)
    iterations: Counter = Counter()
    started = time.monotonic()
    try:
        while not stop.is_set():
            now = timezone.now()
            # node-02 is silent two seconds in three: the liveness check re-queues its jobs
            silent = silent_phases and int(time.monotonic() - started) % 3 != 0
            if not silent:
                r = client.post("/api/agent/heartbeat/", {}, content_type="application/json")
                statuses[("heartbeat", r.status_code)] += 1
            samples = [
                {"gpu_uuid": u, "ts": now.isoformat(), "power_w": 250.0, "energy_j": None}
                for u in gpu_uuids
            ]
            r = client.post(
                "/api/agent/samples/", {"samples": samples}, content_type="application/json"
            )
            statuses[("samples", r.status_code)] += 1
            answer = client.get("/api/agent/assignments/")
            statuses[("assignments", answer.status_code)] += 1
            if answer.status_code != 200:
                continue
            events = []
            for a in answer.json()["assignments"]:
                iterations[a["job_id"]] += 50.0
                done = iterations[a["job_id"]] >= 3000.0
                events.append(
                    {
                        "event_id": str(uuid.uuid4()),
                        "job_id": a["job_id"],
                        "allocation_id": a["allocation_id"],
                        "kind": "exited" if done else "progress",
                        "ts": now.isoformat(),
                        "iterations": iterations[a["job_id"]],
                        **({"reason": "completed", "exit_status": 0} if done else {}),
                    }
                )
            for event in events:  # one per request, as a split batch would go
                r = client.post(
                    "/api/agent/job-events/", {"events": [event]}, content_type="application/json"
                )
                statuses[("job-events", r.status_code)] += 1
    except Exception as exc:  # the outcome under test
        errors.append(exc)
    finally:
        connection.close()


def _scheduler_loop(stop, results, errors):
    try:
        while not stop.is_set():
            now = timezone.now()
            round_result = run_scheduling_round(now=now, force=True)
            results["rounds"] += round_result.ran
            results["requeued"] += round_result.requeued or 0
            requeued = check_liveness(now=now)
            results["liveness"] += requeued is not None
            results["requeued"] += len(requeued or [])
    except Exception as exc:  # the outcome under test
        errors.append(exc)
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_agents_rounds_and_liveness_at_once_never_deadlock_nor_answer_5xx(
    make_node, make_job, member, team, settings
):
    settings.WATTFLOW_NODE_TIMEOUT_S = 1
    config = SchedulerSettings.load()
    config.policy, config.round_interval_s = "fifo", 1
    config.save()
    nodes = [make_node(f"node-0{i}", gpus=2) for i in (1, 2)]
    tokens = [node.issue_agent_token() for node in nodes]
    for i in range(8):
        make_job(owner=member, team=team, name=f"job-{i}", total_iterations=3000, max_gpus=2)

    stop, errors = threading.Event(), []
    statuses: Counter = Counter()
    results: Counter = Counter()
    threads = [
        threading.Thread(
            target=_agent_loop,
            args=(token, [g.uuid for g in node.gpus.all()], stop, statuses, errors),
            kwargs={"silent_phases": node.name == "node-02"},
        )
        for node, token in zip(nodes, tokens, strict=True)
    ]
    threads.append(threading.Thread(target=_scheduler_loop, args=(stop, results, errors)))
    for thread in threads:
        thread.start()
    started = time.monotonic()
    while time.monotonic() - started < MAX_DURATION_S:
        time.sleep(0.5)
        if time.monotonic() - started >= DURATION_S and (
            results["requeued"] > 0 and Job.objects.filter(state="completed").exists()
        ):
            break
    stop.set()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    server_errors = {k: n for k, n in statuses.items() if k[1] >= 500}
    assert server_errors == {}, statuses
    # the mix really happened: rounds ran, jobs started and finished through events, and the
    # silent node's jobs were re-queued under its events at least once
    assert results["rounds"] > 0 and results["liveness"] > 0, results
    assert statuses[("job-events", 200)] > 0, statuses
    assert Job.objects.filter(state="completed").exists()
    assert results["requeued"] > 0, results
    # the figures quoted in docs/reliability.md (pytest -s shows them)
    sys.stderr.write(f"load: {dict(statuses)} {dict(results)}\n")
