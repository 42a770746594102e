"""A small, explicit publish/subscribe registry: how domain code says "this happened" without
knowing who listens.

The domain apps (``cluster``, ``scheduling``, ``telemetry``) publish; the frontend subscribes
in ``FrontendConfig.ready`` and pushes to open dashboards. The domain never imports
``frontend`` (an import-linter contract in ``pyproject.toml`` holds it to that). This is not a
place for business logic: a subscriber only reacts (broadcasts, logs), and nothing a publisher
does depends on who listened.

Events and their payloads (JSON-serialisable dicts):

- ``ROUND_FINISHED``: the committed round's summary (``scheduling.summaries.round_summary``);
- ``TELEMETRY_UPDATED``: the live telemetry summary (``telemetry.live.live_summary``);
- ``BUDGET_USAGE_CHANGED``: ``{"at": ..., "budgets": [BudgetUsage.as_dict(), ...]}`` for the
  running budgets whose ledgers accounting just changed (``telemetry.usage``).

A subscriber that raises is logged and skipped: a dashboard update is never worth failing a
scheduling round or an accounting run. Publish after commit (``publish_on_commit``) so that no
listener sees what a rollback undid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

log = logging.getLogger(__name__)

ROUND_FINISHED = "round.finished"
TELEMETRY_UPDATED = "telemetry.updated"
BUDGET_USAGE_CHANGED = "budget.usage_changed"
EVENTS = frozenset({ROUND_FINISHED, TELEMETRY_UPDATED, BUDGET_USAGE_CHANGED})

Handler = Callable[[dict[str, Any]], Any]

_subscribers: dict[str, list[Handler]] = {name: [] for name in EVENTS}


def _known(event: str) -> str:
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}; known: {', '.join(sorted(EVENTS))}")
    return event


def subscribe(event: str, handler: Handler) -> None:
    """Call ``handler(payload)`` on every ``event``; subscribing the same handler twice keeps
    one (``ready()`` may run more than once in tests)."""
    handlers = _subscribers[_known(event)]
    if handler not in handlers:
        handlers.append(handler)


def unsubscribe(event: str, handler: Handler) -> None:
    handlers = _subscribers[_known(event)]
    if handler in handlers:
        handlers.remove(handler)


def subscribers(event: str) -> tuple[Handler, ...]:
    return tuple(_subscribers[_known(event)])


def publish(event: str, payload: dict[str, Any]) -> list[Any]:
    """Call every subscriber of ``event`` now, in subscription order; returns their results
    (None for one that raised, which is logged)."""
    results = []
    for handler in subscribers(event):
        try:
            results.append(handler(payload))
        except Exception:  # noqa: BLE001 - a listener must never fail the publisher's work
            log.exception("subscriber %r of %s failed", handler, event)
            results.append(None)
    return results


def publish_on_commit(event: str, payload: dict[str, Any]) -> None:
    """Publish once the current transaction commits (at once outside a transaction); nothing
    is published if it rolls back."""
    _known(event)
    transaction.on_commit(lambda: publish(event, payload))
