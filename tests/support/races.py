"""Threads for the race tests on the real PostgreSQL, one copy of each piece.

- ``in_thread``: a call (a request, a service) run in a thread on a connection of its own,
  keeping what it returned or raised (``Running``);
- ``Gate``: a pause point inside a call under test (a serializer's ``validate``, an admin's
  ``save_model``), reached by the thread and opened by the test;
- ``holding``: a transaction in another connection holding the row locks its work took
  until released (then, optionally, more work in it: a delete), ``Held``;
- ``while_held``: a call run while a holder holds its locks; the holder lets go a moment
  later, while the call waits on them: the answer;
- ``beside_paused``: a call run while another waits at a ``Gate``, opened a moment later:
  both answers;
- ``in_another_connection``: work in another connection, returned to once it has finished
  or waits on a lock held by this one.

Every thread closes its connection when it ends (Django opens one per thread).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection, transaction

WAIT_S = 10.0  # the longest any step here waits on another thread
SETTLE_S = 1.0  # time for a call to reach the lock a holder holds


class Running:
    """``call()`` running in a thread of its own, on a connection of its own."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,))
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self._value = call()
        except Exception as exc:  # handed to the test by ``result`` / ``outcome``
            self._error = exc
        finally:
            connection.close()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def outcome(self, timeout: float = WAIT_S) -> Any:
        """What the call returned, or the exception it raised, once it has finished."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the thread did not finish in {timeout} s"
        return self._error if self._error is not None else self._value

    def result(self, timeout: float = WAIT_S) -> Any:
        """What the call returned once it has finished; what it raised is raised here."""
        outcome = self.outcome(timeout)
        if self._error is not None:
            raise self._error
        return outcome


def in_thread(call: Callable[[], Any]) -> Running:
    """``call()`` started in a thread with its own connection."""
    return Running(call)


class Gate:
    """A pause point: the thread under test calls ``pause()`` and waits there until the
    test, told by ``wait_reached()``, calls ``open()``."""

    def __init__(self) -> None:
        self._reached, self._opened = threading.Event(), threading.Event()

    def pause(self) -> None:
        self._reached.set()
        self._opened.wait(timeout=WAIT_S)

    def wait_reached(self, timeout: float = WAIT_S, *, unless: Running | None = None) -> None:
        """Until the thread has paused here; ``unless``: the thread's ``Running``, whose
        error (raised before it got here) is raised at once."""
        deadline = time.monotonic() + timeout
        while not self._reached.wait(timeout=0.01):
            if unless is not None and not unless.is_alive():
                unless.result()
            assert time.monotonic() < deadline, "the thread never reached the gate"

    def open(self) -> None:
        self._opened.set()


class Held:
    """``work()`` run in a transaction in another connection, which holds the locks it
    took until ``release()``; ``then()`` runs in it after the release, before the commit.
    Returned by ``holding`` once ``work`` has run."""

    def __init__(self, work: Callable[[], Any], then: Callable[[], Any] | None = None) -> None:
        self._gate = Gate()

        def run() -> Any:
            with transaction.atomic():
                value = work()
                self._gate.pause()
                if then is not None:
                    then()
            return value

        self._running = Running(run)
        self._gate.wait_reached(unless=self._running)

    def release(self, timeout: float = WAIT_S) -> Any:
        """Let go: ``then`` runs and the transaction commits; what ``work`` returned."""
        self._gate.open()
        return self._running.result(timeout)


def holding(work: Callable[[], Any], then: Callable[[], Any] | None = None) -> Held:
    """``work()`` run in a transaction in another connection, its locks held until the
    returned ``Held`` is released (``then()`` then runs in the same transaction)."""
    return Held(work, then)


def while_held(
    work: Callable[[], Any],
    call: Callable[[], Any],
    *,
    then: Callable[[], Any] | None = None,
    settle_s: float = SETTLE_S,
) -> Any:
    """``call()`` run in a thread while ``work()`` holds its locks in another connection
    (``holding``); the holder lets go ``settle_s`` later, while the call waits on them.
    What ``call`` returned (what it raised is raised here)."""
    held = holding(work, then)
    running = in_thread(call)
    time.sleep(settle_s)
    held.release()
    return running.result()


def beside_paused(
    gate: Gate, paused: Running, call: Callable[[], Any], *, settle_s: float = SETTLE_S
) -> tuple[Any, Any]:
    """``call()`` run in a thread while ``paused`` waits at ``gate`` (reached); the gate
    opens ``settle_s`` later (the call has finished, or waits on the paused one's locks).
    What each returned: (``paused``'s, ``call``'s)."""
    gate.wait_reached(unless=paused)
    running = in_thread(call)
    time.sleep(settle_s)
    gate.open()
    return paused.result(), running.result()


def in_another_connection(work: Callable[[], Any]) -> tuple[threading.Thread, list[object]]:
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
    assert started.wait(timeout=WAIT_S)
    deadline = time.monotonic() + 20
    while thread.is_alive() and time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [backend[0]])
            if cursor.fetchone()[0]:
                break  # waits for the other transaction: it goes on when that commits
        time.sleep(0.02)
    return thread, outcome
