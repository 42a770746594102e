"""A daphne subprocess of this checkout, serving ``config.asgi:application`` on loopback,
started as the service starts it (``config.serve``: daphne with its websocket bound).

The server reads the test database (its name handed over in ``DATABASE_URL``), so tests that
use it commit what they create (``transactional_db`` or ``django_db(transaction=True)``).
It runs in its own session; stopping it terminates its whole process group (then kills it
after a grace period), so no test leaves a server behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection

from support.net import free_port, listening
from support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
PYTHON_DAPHNE = (sys.executable, "-m", "config.serve")


def database_url() -> str:
    """``DATABASE_URL`` of the database the tests run on, for processes they start."""
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def daphne_command(port: int, *, daphne: Sequence[str] = PYTHON_DAPHNE) -> list[str]:
    """The command line of daphne on 127.0.0.1:``port``; ``daphne`` is how to run it."""
    return [*daphne, "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"]


def wait_until_listening(
    port: int, *, process: subprocess.Popen, timeout_s: float = 30.0, log: Path | None = None
) -> None:
    """Wait until ``process`` accepts connections on ``port``; fail at once if it exits
    first, with the tail of its ``log``."""

    def up() -> bool:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log is not None else ""
            raise RuntimeError(f"daphne exited with {process.returncode} before listening\n{tail}")
        return listening(port)

    wait_for(up, timeout_s=timeout_s, what=f"daphne to listen on port {port}", every_s=0.1)


class Daphne:
    """One daphne on a free port (kept across ``stop``/``start``, for outages), logging to
    ``log``. ``env`` is added to this process's environment after ``DATABASE_URL``."""

    def __init__(
        self,
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
        daphne: Sequence[str] = PYTHON_DAPHNE,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.env = {**os.environ, "DATABASE_URL": database_url(), **(env or {})}
        self.daphne = tuple(daphne)
        self.process: subprocess.Popen | None = None

    def start(self, *, timeout_s: float = 30.0) -> Daphne:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                daphne_command(self.port, daphne=self.daphne),
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        try:
            wait_until_listening(self.port, process=self.process, timeout_s=timeout_s, log=self.log)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, *, grace_s: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=grace_s)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_s)


@contextmanager
def serving(log: Path, **env: str) -> Iterator[Daphne]:
    """A started daphne for one test of the web process's own settings (``env``: the
    ``WATTFLOW_...`` variables under test), in DEBUG, on this run's Redis, keeping no
    database connection between requests; stopped when the block ends."""
    base = {"REDIS_URL": settings.REDIS_URL, "DATABASE_CONN_MAX_AGE_S": "0", "DJANGO_DEBUG": "1"}
    daphne = Daphne(log, env={**base, **env}).start()
    try:
        yield daphne
    finally:
        daphne.stop()
