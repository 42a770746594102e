"""HTTP client of the agent API (``/api/agent/...``), with the spool in front of it.

Every request carries ``Authorization: Token <raw agent token>``. Telemetry and job events go
through :meth:`AgentClient.deliver`, which keeps them in order across outages: while anything
is spooled, new messages queue behind it. A message the server refuses is quarantined (see
``telemetry/agent/spool.py``) and never holds up the rest.
"""

from __future__ import annotations

import logging
from typing import Any

import requests

from telemetry.agent.spool import MAX_REASON_CHARS, Rejected, ServerUnreachable, Spool

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
            raise ServerUnreachable(
                f"{method} {url}: HTTP {response.status_code}", status=response.status_code
            )
        if response.status_code >= 400:
            reason = response.text[:MAX_REASON_CHARS]
            raise Rejected(
                f"{method} {url}: HTTP {response.status_code} {reason}",
                status=response.status_code,
                reason=reason,
            )
        return response.json() if response.content else None

    def post(self, endpoint: str, body: dict[str, Any]) -> Any:
        return self.request("POST", endpoint, body)

    def send(self, endpoint: str, body: dict[str, Any]) -> None:
        """Post one message. A batch of several job events that the server refuses (400: it
        stores none of a batch with one bad event) is sent again event by event, so the good
        ones are stored and only the refused ones are quarantined, each with its reason. An
        outage midway raises ServerUnreachable and the whole batch is sent again later, which
        is safe: events are idempotent on their ``event_id``."""
        try:
            self.post(endpoint, body)
            return
        except Rejected as exc:
            events = body.get("events") if endpoint == "events" else None
            if exc.status != 400 or not isinstance(events, list) or len(events) < 2:
                raise
            log.warning("server refused a batch of %d events, sending them one by one", len(events))
        for event in events:
            try:
                self.post(endpoint, {"events": [event]})
            except Rejected as exc:
                log.error("server refused event %s, quarantined: %s", event.get("event_id"), exc)
                self.spool.quarantine(
                    endpoint, {"events": [event]}, status=exc.status, reason=exc.reason
                )

    def deliver(self, endpoint: str, body: dict[str, Any]) -> bool:
        """Send now if nothing is waiting and the server answers; otherwise spool. True when
        this message reached the server."""
        if len(self.spool):
            self.spool.replay(self.send, limit=self.replay_per_call)
        if len(self.spool):
            self.spool.put(endpoint, body)
            return False
        try:
            self.send(endpoint, body)
        except ServerUnreachable as exc:
            errors = 1 if exc.counts_against_message else 0
            if errors >= self.spool.max_server_errors:
                log.error("server failed on %s, quarantined: %s", endpoint, exc)
                self.spool.quarantine(endpoint, body, status=exc.status, reason=str(exc))
                return False
            log.warning("server unreachable, spooling %s: %s", endpoint, exc)
            self.spool.put(endpoint, body, server_errors=errors)
            return False
        except Rejected as exc:
            # A message the server refuses is not an outage: keep it aside with the server's
            # reason (the heartbeat reports it), do not retry, and let the rest flow.
            log.error("server refused %s, quarantined: %s", endpoint, exc)
            self.spool.quarantine(endpoint, body, status=exc.status, reason=exc.reason)
            return False
        return True
