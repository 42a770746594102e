"""A worker killed (SIGKILL) in the middle of accounting books nothing and loses nothing: the
hour's transaction dies with the process, its dirty mark stays, and the next run books the hour
exactly once."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from agent_samples import series
from django.db import connection
from telemetry_clock import T0

from cluster.models import Gpu
from telemetry.accounting import process_dirty_hours
from telemetry.ingest import ingest_batch
from telemetry.models import DirtyHour, EnergyLedgerEntry, GpuHour

ROOT = Path(__file__).resolve().parents[2]

# Runs accounting in a fresh process that kills itself with SIGKILL right after the first
# GPU-hour's rows were written, before its transaction commits.
KILLED_WORKER = """
import os, signal, django
django.setup()
from telemetry import accounting
original = accounting.account_hour
def account_then_die(*args, **kwargs):
    original(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
accounting.account_hour = account_then_die
accounting.process_dirty_hours()
"""


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_accounting_books_nothing_and_the_next_run_books_once(
    agent_node, settings
):
    settings.TELEMETRY_RETENTION_S = 10 * 365 * 24 * 3600
    node, _ = agent_node
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    ingest_batch(node, {"samples": series(gpu.uuid, T0, 61, power_w=200.0)}, now=T0)
    marks = DirtyHour.objects.count()
    assert marks == 2  # T0 is on the hour: its hour and the one before

    db = connection.settings_dict
    env = dict(os.environ)
    env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["TELEMETRY_RETENTION_S"] = str(settings.TELEMETRY_RETENTION_S)
    worker = subprocess.run(
        [sys.executable, "-c", KILLED_WORKER], cwd=ROOT, env=env, capture_output=True, timeout=60
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr.decode()[-2000:]

    # nothing of the killed run is stored, and every mark is still there
    assert not EnergyLedgerEntry.objects.exists()
    assert not GpuHour.objects.exists()
    assert DirtyHour.objects.count() == marks

    # the next worker books the minute once: 60 s at 200 W
    assert process_dirty_hours() == marks
    total = sum(EnergyLedgerEntry.objects.values_list("energy_j", flat=True))
    assert total == pytest.approx(60 * 200.0)
    assert not DirtyHour.objects.exists()
