"""Time one job-events batch at its 1,000-event maximum (not collected by the suite; run by
its path, with ``-s`` to see the line it prints)::

    DATABASE_URL=... REDIS_URL=... PYTHONPATH=. nice .venv/bin/python -m pytest -q -s \\
        -p no:randomly -p no:cacheprovider tests/telemetry/bench_job_events.py [-k tails]

1,000 progress events of one running job, as the eighth live probe sent them (35-41 s
there), through the agent API and its real authentication, each transaction committed
(``transactional_db``); with ``tails`` each event also carries an 8,000-character log tail.
Prints the wall time and the queries it took (Django keeps the last 9,000)."""

import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cluster import services as cluster_services
from cluster.models import Gpu


@pytest.mark.parametrize("tails", [False, True], ids=["plain", "tails"])
def test_bench(transactional_db, agent_node, agent_client, make_job, member, team, tails):
    node, token = agent_node
    job = make_job(
        owner=member, team=team, command="python train.py", max_gpus=2, total_iterations=10**6
    )
    start = timezone.now() - timedelta(hours=1)
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    cluster_services.start_job(job, gpus=gpus, batch_size=256, at=start)
    job.refresh_from_db()
    events = [
        {
            "event_id": str(uuid.uuid4()),
            "job_id": job.pk,
            "allocation_id": job.current_allocation_id,
            "kind": "progress",
            "ts": (start + timedelta(seconds=i + 1)).isoformat(),
            "iterations": float(i + 1),
            **({"log_tail": "x" * 8000} if tails else {}),
        }
        for i in range(1000)
    ]
    client = agent_client(token)
    t0 = time.perf_counter()
    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/agent/job-events/", {"events": events}, format="json")
    wall = time.perf_counter() - t0
    assert response.json() == {"received": 1000, "new": 1000}
    what = "with tails" if tails else "plain"
    line = f"job events, 1,000 {what}: {wall:.2f} s, {len(queries.captured_queries)} queries"
    print(f"\n{line}")  # noqa: T201 - what this script is for
