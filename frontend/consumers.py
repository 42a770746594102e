"""The dashboard's websocket: live round results and telemetry for the signed-in user.

Authenticated by the session (``AuthMiddlewareStack`` in ``config/asgi.py``); an anonymous
socket is closed with code 4401. On connect the consumer joins only the groups its user may
see: ``everyone`` (cluster telemetry), the group of each of the user's teams, and, for admins,
the admin group (see ``frontend/broadcast.py`` for what each group receives).

It also joins its user's own group. When the user's access changes (a membership added or
removed, staff flag, deactivation: ``frontend/signals.py``) that group gets ``access.changed``
and the consumer re-reads the user and leaves the groups it may no longer see (and joins new
ones) before any later message is handled; a deactivated or deleted user's socket is closed with
4403.
"""

from __future__ import annotations

import json

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model

from cluster.queries import sees_every_team, teams_of
from frontend.broadcast import ADMIN_GROUP, EVERYONE_GROUP, team_group, user_group
from frontend.dashboard import telemetry_figures

UNAUTHENTICATED = 4401
ACCESS_REVOKED = 4403
NOT_FOUND = 4404


@database_sync_to_async
def groups_for(user) -> list[str]:
    """The group names ``user`` may listen to."""
    groups = [EVERYONE_GROUP]
    if sees_every_team(user):
        groups.append(ADMIN_GROUP)
    groups.extend(team_group(pk) for pk in teams_of(user).values_list("pk", flat=True))
    return groups


@database_sync_to_async
def current_user(user_id: int):
    """The user as the database has it now, or None if deleted or deactivated."""
    return get_user_model().objects.filter(pk=user_id, is_active=True).first()


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        self.user_id = user.pk
        self.user_group = user_group(user.pk)
        await self.channel_layer.group_add(self.user_group, self.channel_name)
        self.groups_joined = await groups_for(user)
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "hello", "groups": self.groups_joined})

    async def disconnect(self, code):
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        if hasattr(self, "user_group"):
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def access_changed(self, event):
        user = await current_user(self.user_id)
        allowed = [] if user is None else await groups_for(user)
        for group in [g for g in self.groups_joined if g not in allowed]:
            await self.channel_layer.group_discard(group, self.channel_name)
        for group in [g for g in allowed if g not in self.groups_joined]:
            await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined = allowed
        if user is None:
            await self.close(code=ACCESS_REVOKED)
            return
        await self.send_json({"type": "groups", "groups": allowed})

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        # What the page never sends (a binary frame, text that is not JSON or not an object)
        # is ignored as an unknown type is: it raised, and the socket was closed with 1011
        # and a traceback logged.
        if text_data is None:
            return
        try:
            content = json.loads(text_data)
        except (ValueError, RecursionError):
            return
        if isinstance(content, dict):
            await self.receive_json(content, **kwargs)

    async def receive_json(self, content, **kwargs):
        # The page only listens; a ping keeps proxies from closing an idle socket.
        if content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def round_update(self, event):
        await self.send_json({"type": "round", "payload": event["payload"]})

    async def budget_update(self, event):
        # Budgets whose ledgers accounting just changed: the page redraws its budget numbers.
        await self.send_json({"type": "budget", "payload": event["payload"]})

    async def telemetry_update(self, event):
        # Figures are built here from the pushed numbers (pure functions, no database), so a
        # telemetry push redraws power and utilisation without the page asking again.
        payload = event["payload"]
        await self.send_json(
            {"type": "telemetry", "payload": payload, "figures": telemetry_figures(payload)}
        )


class NotFoundConsumer(AsyncJsonWebsocketConsumer):
    """Every websocket path that no route names: the handshake is refused with 4404.

    Channels' router raised ``ValueError`` for such a path, before the session is read: any
    client could have daphne log a traceback per handshake (and the handshake failed as a
    server error, not as a path that does not exist)."""

    async def connect(self):
        await self.close(code=NOT_FOUND)
