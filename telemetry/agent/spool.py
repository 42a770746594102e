"""A disk spool for messages the server could not take: nothing lost, order kept, never stuck.

Each message is one JSON file named by a sequence number, written to a temporary name and
renamed so a crash never leaves half a message. Replay sends the files in sequence order and
deletes each only after the server acknowledged it; if the acknowledgement is lost the message
is sent again, which is safe because ingestion is idempotent on (GPU, timestamp) and job
events are idempotent on their ``event_id``.

A message the server *refuses* must not block the ones behind it, or the node's telemetry
freezes while its heartbeats keep it "healthy". So a message is moved to ``quarantine/``, with
the server's status and reason, when the server answers

- 4xx: the message itself is wrong, resending cannot help; or
- a server error (500, or any 5xx but 502/503/504) ``max_server_errors`` times in a row: the
  server fails on this message (a bug it has), and the rest must flow meanwhile.

Connection errors, timeouts and 502/503/504 (a proxy with no server behind it, a server
restarting) are the server being away: the message stays at the head and is tried again, as
long as it takes, because nothing is wrong with it. Quarantined messages are kept (never
deleted here); :meth:`Spool.requeue` puts them back at the end of the queue once the server is
fixed (``python -m telemetry.agent --requeue-quarantine``), and :meth:`Spool.quarantine_status`
is what the heartbeat reports to the server.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Statuses that mean "no server behind this address right now", never counted against a message.
AWAY_STATUSES = frozenset({502, 503, 504})
DEFAULT_MAX_SERVER_ERRORS = 5
# The reason kept with a quarantined message (the server's answer, cut to this length).
MAX_REASON_CHARS = 500


class ServerUnreachable(Exception):
    """Connection refused, timed out, or a 5xx: try again later. ``status`` is the HTTP
    status of a server error (None: no answer at all)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)

    @property
    def counts_against_message(self) -> bool:
        """True for a server that answered with an error of its own (500 and the like), not
        for one that is away. A 2xx that is no JSON (a captive portal's or a proxy's page, not
        the server's answer) says nothing against the message: counted, every message met
        during such a page was quarantined after ``max_server_errors`` tries."""
        return self.status is not None and self.status >= 500 and self.status not in AWAY_STATUSES


class Rejected(Exception):
    """The server answered 4xx: the message itself is wrong and resending will not help."""

    def __init__(
        self, message: str, *, status: int | None = None, reason: str = "", data: Any = None
    ) -> None:
        self.status = status
        self.reason = reason or message
        self.data = data  # the server's answer parsed as JSON, when it was JSON
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class QuarantineStatus:
    count: int
    last_reason: str  # "HTTP 400: {...}" of the newest quarantined message, "" if none
    last_at: str | None  # ISO time it was quarantined


class Spool:
    def __init__(
        self, directory: str | Path, *, max_server_errors: int = DEFAULT_MAX_SERVER_ERRORS
    ) -> None:
        if max_server_errors < 1:
            raise ValueError(f"max_server_errors must be at least 1, not {max_server_errors}")
        self.directory = Path(directory)
        self.max_server_errors = max_server_errors
        self.quarantine_dir = self.directory / "quarantine"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.quarantine_dir.mkdir(exist_ok=True)
        self._adopt_legacy_rejected()
        existing = self._files() + self._quarantined()
        self._next_seq = max((_seq(p) for p in existing), default=-1) + 1

    def _adopt_legacy_rejected(self) -> None:
        """Earlier agents moved refused messages to ``rejected/`` without a reason."""
        legacy = self.directory / "rejected"
        if legacy.is_dir():
            for path in sorted(legacy.glob("*.json")):
                os.replace(path, self.quarantine_dir / path.name)

    def _files(self) -> list[Path]:
        # Zero-padded sequence numbers sort lexically in order.
        return sorted(p for p in self.directory.glob("*.json") if p.is_file())

    def _quarantined(self) -> list[Path]:
        return sorted(p for p in self.quarantine_dir.glob("*.json") if p.is_file())

    def __len__(self) -> int:
        return len(self._files())

    def _write(self, path: Path, record: dict[str, Any]) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)

    def put(self, endpoint: str, body: dict[str, Any], *, server_errors: int = 0) -> Path:
        """Queue a message; ``server_errors``: server errors it already met (see above)."""
        path = self.directory / f"{self._next_seq:012d}-{endpoint}.json"
        self._next_seq += 1
        record: dict[str, Any] = {"endpoint": endpoint, "body": body}
        if server_errors:
            record["server_errors"] = server_errors
        self._write(path, record)
        return path

    def quarantine(
        self, endpoint: str, body: dict[str, Any], *, status: int | None, reason: str
    ) -> Path:
        """Keep a refused message aside, with the server's answer; it is not sent again."""
        path = self.quarantine_dir / f"{self._next_seq:012d}-{endpoint}.json"
        self._next_seq += 1
        self._write(path, _quarantine_record(endpoint, body, status, reason))
        return path

    def _move_to_quarantine(
        self, path: Path, message: dict[str, Any], status: int | None, reason: str
    ) -> None:
        record = _quarantine_record(message["endpoint"], message["body"], status, reason)
        record["server_errors"] = message.get("server_errors", 0)
        self._write(self.quarantine_dir / path.name, record)
        path.unlink()
        log.error("server refused spooled %s, quarantined: %s", path.name, record["reason"])

    def replay(
        self, send: Callable[[str, dict[str, Any]], Any], *, limit: int | None = None
    ) -> int:
        """Send spooled messages oldest first; stop at the first one the server cannot take
        now (away, or a server error below the bound), or after ``limit`` messages (so a long
        backlog does not stall sampling: the rest goes on the next call). Refused messages
        are quarantined and the replay goes on with the next.

        Returns how many were delivered. Raises nothing for an unreachable server (the
        messages stay for the next try).
        """
        delivered = 0
        for path in self._files()[:limit]:
            try:
                message = json.loads(path.read_text())
                endpoint, body = message["endpoint"], message["body"]
                # (a list body, from a hand edit or another agent version, raised out of
                # every later replay: the node sent no heartbeat again and the samples of
                # each post were dropped)
                if not isinstance(endpoint, str) or not isinstance(body, dict):
                    raise TypeError("not an endpoint name and a JSON object body")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                # A file this spool cannot read (disk trouble, hand-edited) must not block
                # the queue either; keep it aside as it is.
                os.replace(path, self.quarantine_dir / path.name)
                log.error("unreadable spooled %s, quarantined: %s", path.name, exc)
                continue
            try:
                send(endpoint, body)
            except ServerUnreachable as exc:
                if not exc.counts_against_message:
                    return delivered
                errors = _count(message.get("server_errors")) + 1
                if errors < self.max_server_errors:
                    self._write(path, {**message, "server_errors": errors})
                    return delivered
                message["server_errors"] = errors
                self._move_to_quarantine(
                    path, message, exc.status, f"{errors} server errors in a row, last: {exc}"
                )
                continue
            except Rejected as exc:
                self._move_to_quarantine(path, message, exc.status, exc.reason)
                continue
            path.unlink()
            delivered += 1
        return delivered

    def quarantine_status(self) -> QuarantineStatus:
        files = self._quarantined()
        if not files:
            return QuarantineStatus(0, "", None)
        try:
            newest = json.loads(files[-1].read_text())
            reason = str(newest.get("reason") or "")
            status = newest.get("status")
            at = newest.get("quarantined_at")
        except (OSError, ValueError, AttributeError):
            reason, status, at = "unreadable message", None, None
        if status is not None:
            reason = f"HTTP {status}: {reason}"
        return QuarantineStatus(len(files), reason[:MAX_REASON_CHARS], at)

    def requeue(self) -> int:
        """Put every quarantined message back at the end of the queue (after the server was
        fixed); returns how many."""
        moved = 0
        for path in self._quarantined():
            try:
                record = json.loads(path.read_text())
                endpoint, body = record["endpoint"], record["body"]
            except (OSError, ValueError, KeyError, TypeError):
                log.error("quarantined %s is unreadable, left where it is", path.name)
                continue
            self.put(endpoint, body)
            path.unlink()
            moved += 1
        return moved


def _count(value: Any) -> int:
    """A stored count of server errors; one that is no count (hand-edited) counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _seq(path: Path) -> int:
    try:
        return int(path.name.split("-", 1)[0])
    except ValueError:
        return -1


def _quarantine_record(
    endpoint: str, body: dict[str, Any], status: int | None, reason: str
) -> dict[str, Any]:
    return {
        "endpoint": endpoint,
        "body": body,
        "status": status,
        "reason": reason[:MAX_REASON_CHARS],
        "quarantined_at": datetime.now(UTC).isoformat(),
    }
