# ruff: noqa: E402, T201, B007, E501
"""Time adapters._sample_instants_of on the scale DB: the running allocations' GPUs, each
read from 60 s before the newest sample, and one job read from 9 minutes back (stalled)."""

import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django

django.setup()
from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext

from cluster.models import JobAllocation
from scheduling import adapters
from telemetry.models import GpuSample

until = GpuSample.objects.order_by("-ts").values_list("ts", flat=True).first()
allocs = list(
    JobAllocation.objects.filter(ended_at__isnull=True).prefetch_related("gpus").order_by("pk")
)
stalled = "--stalled" in sys.argv
items = []
for k, a in enumerate(allocs):
    back = 540 if (stalled and k == 0) else 60
    items.append((list(a.gpus.all()), until - timedelta(seconds=back)))
n_gpus = sum(len(g) for g, _ in items)
for r in range(3):
    with CaptureQueriesContext(connection) as ctx:
        t = time.perf_counter()
        out = adapters._sample_instants_of(items, until=until)
        dt = time.perf_counter() - t
    print(
        f"{'stalled' if stalled else 'steady'}: {len(items)} jobs, {n_gpus} GPUs: {dt * 1000:.0f} ms, {sum(map(len, out))} instants, {len(ctx.captured_queries)} q"
    )
table = GpuSample._meta.db_table
read = 0
with connection.cursor() as c:
    for q in ctx.captured_queries:
        c.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + q["sql"])
        plan = c.fetchone()[0]
        plan = plan if isinstance(plan, list) else json.loads(plan)

        def walk(n):
            own = 0
            if n.get("Relation Name") == table:
                own = (
                    n.get("Actual Rows", 0)
                    + n.get("Rows Removed by Filter", 0)
                    + n.get("Rows Removed by Index Recheck", 0)
                ) * n.get("Actual Loops", 1)
            return own + sum(walk(ch) for ch in n.get("Plans", ()))

        read += walk(plan[0]["Plan"])
print("sample rows read:", int(read))
if len(sys.argv) > 1 and sys.argv[-1].endswith(".json"):
    json.dump([[(ts.isoformat(), p) for ts, p in o] for o in out], open(sys.argv[-1], "w"))
