# ruff: noqa: E402, T201, B007, E501
"""Time observations.newest_progress_of on the scale DB (after fill and reports): the open
allocations and 300 ended ones at a fixed now; ``explain`` prints the plan, ``dump OUT``
writes the results."""

import os
import sys
import time

sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django

django.setup()
from django.db import connection

from cluster.models import JobAllocation
from scheduling import observations

keys = list(JobAllocation.objects.filter(ended_at__isnull=True).values_list("job_id", "pk"))
ended = list(
    JobAllocation.objects.filter(ended_at__isnull=False)
    .order_by("-ended_at")
    .values_list("job_id", "pk")[:300]
)
from datetime import UTC, datetime

now = datetime(2026, 12, 7, 9, 40, tzinfo=UTC)
from django.test.utils import CaptureQueriesContext

for label, ks in (("open", keys), ("ended", ended)):
    for r in range(3):
        with CaptureQueriesContext(connection) as ctx:
            t = time.perf_counter()
            out = observations.newest_progress_of(ks, now=now)
            dt = time.perf_counter() - t
        print(label, len(ks), "found", len(out), f"{dt * 1000:.0f} ms")
    if "explain" in sys.argv:
        sql = ctx.captured_queries[0]["sql"]
        with connection.cursor() as c:
            c.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
            print("\n".join(r[0] for r in c.fetchall()))
if "dump" in sys.argv:
    import json

    json.dump(
        sorted(
            [
                [j, a, ts.isoformat()]
                for (j, a), ts in observations.newest_progress_of(keys + ended, now=now).items()
            ]
        ),
        open(sys.argv[-1], "w"),
    )
