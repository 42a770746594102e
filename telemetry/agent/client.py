"""HTTP client of the agent API (``/api/agent/...``), with the spool in front of it.

Every request carries ``Authorization: Token <raw agent token>``. Telemetry and job events go
through :meth:`AgentClient.deliver`, which keeps them in order across outages: while anything
is spooled, new messages queue behind it.
"""

from __future__ import annotations

import logging
from typing import Any

import requests

from telemetry.agent.spool import Rejected, ServerUnreachable, Spool

log = logging.getLogger(__name__)

ENDPOINTS = {
    "register": "register/",
    "heartbeat": "heartbeat/",
    "samples": "samples/",
    "assignments": "assignments/",
    "events": "job-events/",
}


class AgentClient:
    def __init__(self, server: str, token: str, spool: Spool, *, timeout_s: float = 10.0) -> None:
        self.base = server.rstrip("/") + "/api/agent/"
        self.spool = spool
        self.timeout_s = timeout_s
        # A backlog is replayed this many messages per delivery (one delivery per post
        # interval for samples): catching up never stops the 1 s sampling for long.
        self.replay_per_call = 50
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def request(self, method: str, endpoint: str, body: dict[str, Any] | None = None) -> Any:
        url = self.base + ENDPOINTS[endpoint]
        try:
            response = self.session.request(method, url, json=body, timeout=self.timeout_s)
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise ServerUnreachable(f"{method} {url}: {exc.__class__.__name__}") from exc
        if response.status_code >= 500:
            raise ServerUnreachable(f"{method} {url}: HTTP {response.status_code}")
        if response.status_code >= 400:
            raise Rejected(f"{method} {url}: HTTP {response.status_code} {response.text[:500]}")
        return response.json() if response.content else None

    def post(self, endpoint: str, body: dict[str, Any]) -> Any:
        return self.request("POST", endpoint, body)

    def deliver(self, endpoint: str, body: dict[str, Any]) -> bool:
        """Send now if nothing is waiting and the server answers; otherwise spool. True when
        this message reached the server."""
        if len(self.spool):
            self.spool.replay(self.post, limit=self.replay_per_call)
        if len(self.spool):
            self.spool.put(endpoint, body)
            return False
        try:
            self.post(endpoint, body)
        except ServerUnreachable as exc:
            log.warning("server unreachable, spooling %s: %s", endpoint, exc)
            self.spool.put(endpoint, body)
            return False
        except Rejected as exc:
            # A bad batch is our bug, not an outage; keep it for inspection, do not retry.
            log.error("server rejected %s: %s", endpoint, exc)
            self.spool.put(endpoint, body, rejected=True)
            return False
        return True
