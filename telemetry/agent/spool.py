"""A disk spool for messages the server could not take: nothing lost, order kept.

Each message is one JSON file named by a sequence number, written to a temporary name and
renamed so a crash never leaves half a message. Replay sends the files in sequence order and
deletes each only after the server acknowledged it; if the acknowledgement is lost the message
is sent again, which is safe because ingestion is idempotent on (GPU, timestamp) and job
events are idempotent on their ``event_id``. A message the server rejects as invalid (HTTP 4xx)
would block the queue forever, so it is moved to ``rejected/`` for a person to inspect.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class ServerUnreachable(Exception):
    """Connection refused, timed out, or a 5xx: try again later."""


class Rejected(Exception):
    """The server answered 4xx: the message itself is wrong and resending will not help."""


class Spool:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "rejected").mkdir(exist_ok=True)
        existing = self._files()
        self._next_seq = int(existing[-1].name.split("-", 1)[0]) + 1 if existing else 0

    def _files(self) -> list[Path]:
        # Zero-padded sequence numbers sort lexically in order.
        return sorted(p for p in self.directory.glob("*.json") if p.is_file())

    def __len__(self) -> int:
        return len(self._files())

    def put(self, endpoint: str, body: dict[str, Any], *, rejected: bool = False) -> Path:
        folder = self.directory / "rejected" if rejected else self.directory
        path = folder / f"{self._next_seq:012d}-{endpoint}.json"
        self._next_seq += 1
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"endpoint": endpoint, "body": body}))
        os.replace(tmp, path)
        return path

    def replay(
        self, send: Callable[[str, dict[str, Any]], Any], *, limit: int | None = None
    ) -> int:
        """Send spooled messages oldest first; stop at the first one the server cannot take,
        or after ``limit`` messages (so a long backlog does not stall sampling: the rest goes
        on the next call).

        Returns how many were delivered. Raises nothing for an unreachable server (the
        messages stay for the next try).
        """
        delivered = 0
        for path in self._files()[:limit]:
            message = json.loads(path.read_text())
            try:
                send(message["endpoint"], message["body"])
            except ServerUnreachable:
                return delivered
            except Rejected as exc:
                log.error("server rejected spooled %s, moved aside: %s", path.name, exc)
                os.replace(path, self.directory / "rejected" / path.name)
                continue
            path.unlink()
            delivered += 1
        return delivered
