"""Push live updates to open dashboards over the Channels layer (Redis).

No domain module calls these functions or imports ``frontend``: the domain publishes events
(``config/events.py``) and ``FrontendConfig.ready`` subscribes the three ``broadcast_*``
functions to them (``subscribe_to_domain_events``). Rounds and budget usage are published once
their transaction commits (``publish_on_commit``), so a dashboard never shows a round that was
rolled back; telemetry is published by the beat task ``telemetry.tasks.broadcast_telemetry_task``,
which only reads. A consumer joins only the groups its user may see (``frontend/consumers.py``),
so a team never receives another team's jobs or budgets.

``broadcast_round(round_summary)``: ``scheduling.summaries.round_summary`` (its docstring has
the shape). The admin group gets every decision; each team with decisions in the round gets
only its own; the ``everyone`` group gets the cluster-wide counts with no decisions.

``broadcast_telemetry(summary)``: e.g.::

    {"at": "...", "cluster_power_w": 5230.0,
     "nodes": [{"node": "node-01", "power_w": 1300.0}],
     "gpus": [{"node": "node-01", "index": 0, "util_pct": 97.0, "power_w": 310.0}]}

Telemetry of the hardware is not team-private (every user sees cluster power), so it goes to
the ``everyone`` group only.

``broadcast_budget_usage(event)``: ``{"at": ..., "budgets": [usage, ...]}`` as
``telemetry.usage.BudgetUsage.as_dict`` builds each usage (base units: joules and grams, with
the limits, percentages and soft/hard flags). Each team's group gets its own budgets, admins all.

``notify_access_changed(user_id)`` is not an event handler: ``frontend/signals.py`` calls it
after commit when a user's memberships or flags change, and the user's open dashboards re-check
their groups.

None of these raises when the channel layer is missing or unreachable: a dashboard update is
never worth failing a scheduling round or an ingestion for. The failure is logged.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from config import events

log = logging.getLogger(__name__)

ADMIN_GROUP = "dash.admin"
EVERYONE_GROUP = "dash.everyone"
# The consumer's handler for each message type is the type with dots turned into underscores.
ROUND_MESSAGE = "round.update"
TELEMETRY_MESSAGE = "telemetry.update"
BUDGET_MESSAGE = "budget.update"


def team_group(team_id: int) -> str:
    """The group name of one team's dashboards (Channels allows [a-zA-Z0-9._-] only)."""
    return f"dash.team.{int(team_id)}"


def round_messages(round_summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Group name -> the round summary that group may see.

    Admins get everything; each team whose jobs appear in the decisions gets the summary with
    only its own decisions. Teams without a decision in the round still get the cluster-wide
    numbers (queue length, average JCT) through the ``everyone`` group, without decisions.
    """
    decisions = list(round_summary.get("decisions") or [])
    base = {k: v for k, v in round_summary.items() if k != "decisions"}
    messages: dict[str, dict[str, Any]] = {ADMIN_GROUP: {**base, "decisions": decisions}}
    by_team: dict[int, list[dict[str, Any]]] = {}
    for decision in decisions:
        team_id = decision.get("team_id")
        if team_id is not None:
            by_team.setdefault(int(team_id), []).append(decision)
    for team_id, team_decisions in sorted(by_team.items()):
        messages[team_group(team_id)] = {**base, "decisions": team_decisions}
    messages[EVERYONE_GROUP] = {**base, "decisions": []}
    return messages


def _send(group: str, message_type: str, payload: dict[str, Any]) -> bool:
    layer = get_channel_layer()
    if layer is None:
        log.warning("no channel layer configured; %s to %s dropped", message_type, group)
        return False
    try:
        async_to_sync(layer.group_send)(group, {"type": message_type, "payload": payload})
    except Exception as exc:  # noqa: BLE001 - Redis down must not fail the caller's work
        log.warning("broadcast %s to %s failed: %s", message_type, group, exc)
        return False
    return True


def broadcast_round(round_summary: dict[str, Any]) -> int:
    """Send a finished round to the dashboards allowed to see it; returns groups reached.

    Call it after commit. Each consumer receives the message once: a user in several groups
    de-duplicates by ``round_id`` in the browser, and the ``everyone`` copy carries no
    decisions.
    """
    sent = 0
    for group, payload in round_messages(round_summary).items():
        sent += _send(group, ROUND_MESSAGE, payload)
    return sent


def broadcast_telemetry(summary: dict[str, Any]) -> int:
    """Send fresh cluster telemetry (power per node, GPU utilisation) to every dashboard."""
    return int(_send(EVERYONE_GROUP, TELEMETRY_MESSAGE, summary))


def budget_messages(event: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Group name -> the budget usages that group may see (admins all, a team its own)."""
    budgets = list(event.get("budgets") or [])
    at = event.get("at")
    messages: dict[str, dict[str, Any]] = {ADMIN_GROUP: {"at": at, "budgets": budgets}}
    by_team: dict[int, list[dict[str, Any]]] = {}
    for usage in budgets:
        by_team.setdefault(int(usage["team_id"]), []).append(usage)
    for team_id, team_budgets in sorted(by_team.items()):
        messages[team_group(team_id)] = {"at": at, "budgets": team_budgets}
    return messages


def broadcast_budget_usage(event: dict[str, Any]) -> int:
    """Send budgets whose usage changed to the dashboards allowed to see them; returns groups
    reached."""
    if not event.get("budgets"):
        return 0
    return sum(
        _send(group, BUDGET_MESSAGE, payload) for group, payload in budget_messages(event).items()
    )


def subscribe_to_domain_events() -> None:
    """Push what the domain publishes to open dashboards (called by ``FrontendConfig.ready``)."""
    events.subscribe(events.ROUND_FINISHED, broadcast_round)
    events.subscribe(events.TELEMETRY_UPDATED, broadcast_telemetry)
    events.subscribe(events.BUDGET_USAGE_CHANGED, broadcast_budget_usage)


# A user's own dashboards: told to re-check their groups when the user's access changes.
ACCESS_MESSAGE = "access.changed"


def user_group(user_id: int) -> str:
    """The group of all open dashboards of one user."""
    return f"dash.user.{int(user_id)}"


def notify_access_changed(user_id: int) -> bool:
    """Tell ``user_id``'s open dashboards to re-check which groups they may listen to (a
    membership was added or removed, the user became or stopped being staff, was deactivated or
    deleted). Call it after commit; never raises."""
    return _send(user_group(user_id), ACCESS_MESSAGE, {"user_id": int(user_id)})
