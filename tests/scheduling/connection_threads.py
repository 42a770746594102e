"""Work on a connection of its own, for tests that interleave two transactions on the real
PostgreSQL (a round holding its locks while a budget edit runs, or waits)."""

import threading
import time

from django.db import connection


def in_another_connection(work):
    """Run ``work`` in a thread with its own connection; return once it has finished or is
    waiting on a lock held by another connection, with the thread and the list its outcome
    lands in ("saved", or the exception it raised)."""
    outcome: list[object] = []
    backend: list[int] = []
    started = threading.Event()

    def run():
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backend.append(cursor.fetchone()[0])
            started.set()
            work()
            outcome.append("saved")
        except Exception as exc:  # the outcome under test, asserted by the caller
            outcome.append(exc)
        finally:
            started.set()
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(timeout=10)
    deadline = time.monotonic() + 20
    while thread.is_alive() and time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [backend[0]])
            if cursor.fetchone()[0]:
                break  # waits for the other transaction: it goes on when that commits
        time.sleep(0.02)
    return thread, outcome
