"""HTTP client of the agent API (``/api/agent/...``), with the spool in front of it.

Every request carries ``Authorization: Token <raw agent token>``. Telemetry and job events go
through :meth:`AgentClient.deliver`, which keeps them in order across outages: while anything
is spooled, new messages queue behind it. A message the server refuses is quarantined (see
``telemetry/agent/spool.py``) and never holds up the rest.
"""

from __future__ import annotations

import html
import logging
import re
from typing import Any

import requests

from telemetry.agent.spool import MAX_REASON_CHARS, Rejected, ServerUnreachable, Spool

log = logging.getLogger(__name__)

# Rounds of "drop the samples the server named, post the rest" before the rest is kept aside.
_SAMPLE_SPLITS = 10


def _refused_positions(exc: Rejected, samples: Any) -> set[int]:
    """Positions of the samples a 400 names (``{"samples": {"3": {...}}}``); empty when the
    refusal is about the batch as a whole."""
    if exc.status != 400 or not isinstance(exc.data, dict) or not isinstance(samples, list):
        return set()
    named = exc.data.get("samples")
    if not isinstance(named, dict):
        return set()
    return {int(k) for k in named if isinstance(k, str) and k.isdigit() and int(k) < len(samples)}


# A non-JSON error body (an HTML page from a wrong --server path, a proxy's error page) is
# summed up in one line of at most this many characters: the whole page used to be printed.
MAX_PAGE_LINE_CHARS = 120
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


def _page_line(text: str) -> str:
    """One line for a non-JSON body: an HTML page's title, else its first non-blank line,
    cut to ``MAX_PAGE_LINE_CHARS``."""
    title = _TITLE.search(text)
    if title:
        line = html.unescape(title.group(1))
    else:
        line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    if len(line) > MAX_PAGE_LINE_CHARS:
        line = line[: MAX_PAGE_LINE_CHARS - 3] + "..."
    return line


ENDPOINTS = {
    "register": "register/",
    "heartbeat": "heartbeat/",
    "samples": "samples/",
    "assignments": "assignments/",
    "events": "job-events/",
}


def _warn_of_conflicts(answer: Any) -> None:
    """Log the samples the server already held for the same GPU and time with other values
    (it kept its own): a resend after an outage matches what is stored, so a conflict means
    two samplers report one GPU, or the node's clock went back and reused timestamps."""
    conflicts = answer.get("conflicts") if isinstance(answer, dict) else None
    if isinstance(conflicts, int) and conflicts > 0:
        log.warning(
            "the server already held %d of these samples (same GPU and time) with other "
            "values and kept its own: is another agent reporting these GPUs, or did the "
            "clock go back?",
            conflicts,
        )


# The web process's answer to a request it did not receive whole in time (``config.serve``).
REQUEST_TIMEOUT = 408


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
        if endpoint not in ENDPOINTS:
            # A spooled message of another agent version (a downgrade after an upgrade):
            # refused, so the spool keeps it aside (a KeyError here blocked its head for good).
            raise Rejected(
                f"{method} {endpoint}: no such endpoint in this agent",
                reason=f"unknown endpoint {endpoint!r} (spooled by another agent version?)",
            )
        url = self.base + ENDPOINTS[endpoint]
        try:
            response = self.session.request(method, url, json=body, timeout=self.timeout_s)
        except requests.exceptions.InvalidJSONError as exc:
            # A body that is no JSON (a NaN in it) is this message's fault, not an outage:
            # retried, it would sit at the head of the spool for good.
            raise Rejected(f"{method} {url}: {exc}", reason=str(exc)[:200]) from exc
        except requests.RequestException as exc:
            # Not only ConnectionError and Timeout: a connection cut while the answer came
            # (ChunkedEncodingError, a server restarting mid-reply) raised out of the tick,
            # and the batch it carried, samples or a job's exit, was in no spool.
            raise ServerUnreachable(f"{method} {url}: {exc.__class__.__name__}") from exc
        if response.status_code >= 500 or response.status_code == REQUEST_TIMEOUT:
            # (408: the server did not receive the message whole in time, a slow or stalled
            # link, ``config.serve``; refused as a 4xx it was quarantined, a valid batch set
            # aside for good: it is sent again, as after an outage)
            raise ServerUnreachable(
                f"{method} {url}: HTTP {response.status_code}", status=response.status_code
            )
        if response.status_code >= 400:
            try:
                data = response.json()
                reason = response.text[:MAX_REASON_CHARS]
            except ValueError:
                data = None
                reason = _page_line(response.text) or response.reason or ""
            raise Rejected(
                f"{method} {url}: HTTP {response.status_code} {reason}",
                status=response.status_code,
                reason=reason,
                data=data,
            )
        try:
            return response.json() if response.content else None
        except ValueError as exc:  # (a 2xx that is no JSON: a proxy's page, a cut answer)
            raise ServerUnreachable(
                f"{method} {url}: HTTP {response.status_code} with an answer that is no JSON: "
                f"{_page_line(response.text)}",
                status=response.status_code,
            ) from exc

    def post(self, endpoint: str, body: dict[str, Any]) -> Any:
        return self.request("POST", endpoint, body)

    def send(self, endpoint: str, body: dict[str, Any]) -> None:
        """Post one message. A batch of several job events that the server refuses (400: it
        stores none of a batch with one bad event) is sent again event by event, so the good
        ones are stored and only the refused ones are quarantined, each with its reason. A
        refused sample batch loses only the samples the server named (see ``_send_samples``).
        An outage midway raises ServerUnreachable and the whole batch is sent again later,
        which is safe: samples are idempotent on (GPU, ts), events on their ``event_id``."""
        if endpoint == "samples":
            self._send_samples(body)
            return
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

    def _send_samples(self, body: dict[str, Any]) -> None:
        """Post a sample batch; when the server refuses it naming the bad samples by position
        (``{"samples": {"3": {...}}}``, at most 20 per answer), quarantine those and post the
        rest again, up to ``_SAMPLE_SPLITS`` times; after that, or when the refusal names no
        positions (the batch as a whole: too large, another node's GPU), quarantine what is
        left. Raises only ServerUnreachable (then the whole batch is tried again later)."""
        samples = body.get("samples")
        for _ in range(_SAMPLE_SPLITS):
            try:
                answer = self.post("samples", {"samples": samples})
                _warn_of_conflicts(answer)
                return
            except Rejected as exc:
                bad = _refused_positions(exc, samples)
                if not bad:
                    self._quarantine_samples(samples, exc)
                    return
                self._quarantine_samples([samples[i] for i in sorted(bad)], exc)
                samples = [s for i, s in enumerate(samples) if i not in bad]
                if not samples:
                    return
        self._quarantine_samples(
            samples, Rejected("too many refusals", reason="still refused after splitting")
        )

    def _quarantine_samples(self, samples: Any, exc: Rejected) -> None:
        log.error("server refused samples, quarantined: %s", exc)
        self.spool.quarantine("samples", {"samples": samples}, status=exc.status, reason=exc.reason)

    def deliver(self, endpoint: str, body: dict[str, Any]) -> bool:
        """Send now if nothing is waiting and the server answers; otherwise spool. True when
        the server answered (what it refused is quarantined, not retried), False when the
        message waits in the spool or was quarantined after repeated server errors."""
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
        return True
