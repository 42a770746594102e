"""The dashboard websocket through the real ASGI stack (session auth, origin check) and the
real Redis channel layer: each user receives only what their groups may see."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from config.asgi import application
from frontend.broadcast import (
    ADMIN_GROUP,
    EVERYONE_GROUP,
    broadcast_round,
    broadcast_telemetry,
    round_messages,
    team_group,
)
from frontend.consumers import NOT_FOUND, UNAUTHENTICATED

# The consumer reads memberships and the session in worker threads, so the rows must be
# committed: transaction=True.
pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1")


def session_cookie(user) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def headers_for(user=None) -> list[tuple[bytes, bytes]]:
    """Request headers of a signed-in browser (made before the event loop: logging in is
    synchronous database work)."""
    return [ORIGIN] if user is None else [ORIGIN, session_cookie(user)]


def communicator(headers) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/dashboard/", headers=headers)


TELEMETRY = {
    "at": "2026-11-22T04:00:00+00:00",
    "cluster_power_w": 1406.0,
    "nodes": [{"node": "node-01", "power_w": 887.0}, {"node": "node-02", "power_w": 519.0}],
    "gpus": [
        {"node": "node-01", "index": 0, "util_pct": 97.0, "power_w": 887.0},
        {"node": "node-02", "index": 0, "util_pct": 0.0, "power_w": 519.0},
    ],
}


def decisions(team, other_team):
    return [
        {"job_id": 1, "team_id": team.pk, "job_name": "mine", "action": "start"},
        {"job_id": 2, "team_id": other_team.pk, "job_name": "theirs", "action": "stop"},
    ]


def test_round_messages_give_each_team_only_its_decisions(team, other_team):
    summary = {"round_id": 5, "queue_length": 3, "decisions": decisions(team, other_team)}
    messages = round_messages(summary)
    assert sorted(messages) == sorted(
        [ADMIN_GROUP, EVERYONE_GROUP, team_group(team.pk), team_group(other_team.pk)]
    )
    assert [d["job_id"] for d in messages[ADMIN_GROUP]["decisions"]] == [1, 2]
    assert [d["job_id"] for d in messages[team_group(team.pk)]["decisions"]] == [1]
    assert [d["job_id"] for d in messages[team_group(other_team.pk)]["decisions"]] == [2]
    assert messages[EVERYONE_GROUP] == {"round_id": 5, "queue_length": 3, "decisions": []}


def test_an_anonymous_socket_is_closed():
    headers = headers_for()

    async def scenario():
        ws = communicator(headers)
        connected, code = await ws.connect(timeout=10)
        await ws.disconnect()
        return connected, code

    assert async_to_sync(scenario)() == (False, UNAUTHENTICATED)


@pytest.mark.parametrize("path", ["/ws/other/", "/ws/dashboard/2/", "/ws/", "/ws/dashboard"])
def test_a_socket_to_no_route_is_closed_as_not_found(member, path):
    # Channels' router raised ValueError ("No route found"): daphne logged a traceback for
    # every such handshake (anyone may open one: before the session is read) and failed it.
    headers = headers_for(member)

    async def scenario():
        ws = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await ws.connect(timeout=10)
        await ws.disconnect()
        return connected, code

    assert async_to_sync(scenario)() == (False, NOT_FOUND)


def test_a_member_gets_their_teams_round_and_telemetry_but_not_another_teams(
    member, team, other_team
):
    headers = headers_for(member)

    async def scenario():
        ws = communicator(headers)
        connected, _ = await ws.connect(timeout=10)
        hello = await ws.receive_json_from(timeout=5)
        # the broadcast is called from sync code after commit; here, from a worker thread
        loop = asyncio.get_running_loop()
        summary = {"round_id": 9, "queue_length": 1, "decisions": decisions(team, other_team)}
        sent = await loop.run_in_executor(None, broadcast_round, summary)
        received = [await ws.receive_json_from(timeout=5) for _ in range(2)]
        await loop.run_in_executor(None, broadcast_telemetry, TELEMETRY)
        pushed = await ws.receive_json_from(timeout=5)
        nothing_more = await ws.receive_nothing(timeout=0.5)
        await ws.disconnect()
        return connected, hello, sent, received, pushed, nothing_more

    connected, hello, sent, received, pushed, nothing_more = async_to_sync(scenario)()
    assert connected
    assert hello == {"type": "hello", "groups": [EVERYONE_GROUP, team_group(team.pk)]}
    assert sent == 4
    # two copies reach the member: their team's (its decision only) and everyone's (none)
    by_decisions = sorted(
        ([d["job_id"] for d in m["payload"]["decisions"]] for m in received), key=len
    )
    assert by_decisions == [[], [1]]
    assert {m["type"] for m in received} == {"round"}
    assert (pushed["type"], pushed["payload"]) == ("telemetry", TELEMETRY)
    # the consumer built the figures from the pushed numbers
    assert pushed["figures"]["power"]["data"][0]["y"] == [887.0, 519.0]
    assert pushed["figures"]["heatmap"]["data"][0]["z"] == [[97.0], [0.0]]
    assert nothing_more


def test_an_admin_joins_the_admin_group_and_sees_every_decision(admin_user, team, other_team):
    headers = headers_for(admin_user)

    async def scenario():
        ws = communicator(headers)
        await ws.connect(timeout=10)
        hello = await ws.receive_json_from(timeout=5)
        loop = asyncio.get_running_loop()
        summary = {"round_id": 3, "decisions": decisions(team, other_team)}
        await loop.run_in_executor(None, broadcast_round, summary)
        received = [await ws.receive_json_from(timeout=5) for _ in range(2)]
        await ws.disconnect()
        return hello, received

    hello, received = async_to_sync(scenario)()
    assert hello["groups"] == [EVERYONE_GROUP, ADMIN_GROUP]
    assert sorted(len(m["payload"]["decisions"]) for m in received) == [0, 2]


def test_a_frame_the_page_never_sends_is_ignored_and_the_socket_stays_open(member):
    # (text that is not JSON, JSON that is not an object, a binary frame: each raised in the
    # consumer, which closed the socket with 1011 and logged a traceback)
    headers = headers_for(member)

    async def scenario():
        ws = communicator(headers)
        await ws.connect(timeout=10)
        await ws.receive_json_from(timeout=5)
        for frame in ("not json", "[1]", '"ping"', "[" * 100_000):
            await ws.send_to(text_data=frame)
        await ws.send_to(bytes_data=b"\x00")
        await ws.send_json_to({"type": "ping"})
        pong = await ws.receive_json_from(timeout=5)
        await ws.disconnect()
        return pong

    assert async_to_sync(scenario)() == {"type": "pong"}


def test_a_disconnected_socket_leaves_its_groups(member, team):
    headers = headers_for(member)

    async def scenario():
        ws = communicator(headers)
        await ws.connect(timeout=10)
        await ws.receive_json_from(timeout=5)
        await ws.disconnect()
        layer = get_channel_layer()
        # channels_redis keeps group membership in a sorted set per group
        async with layer.connection(layer.consistent_hash(team_group(team.pk))) as conn:
            return await conn.zcard(layer._group_key(team_group(team.pk)))

    assert async_to_sync(scenario)() == 0


def test_a_broadcast_with_redis_unreachable_reaches_nobody_and_does_not_raise(settings, team):
    # given a channel layer pointing at a port where no Redis listens
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]},
        }
    }
    channel_layers.backends.clear()
    try:
        # when a round and telemetry are broadcast, then nothing is sent and nothing raises:
        # a scheduling round must never fail for a dashboard
        summary = {"round_id": 1, "decisions": [{"job_id": 1, "team_id": team.pk}]}
        assert broadcast_round(summary) == 0
        assert broadcast_telemetry(TELEMETRY) == 0
    finally:
        channel_layers.backends.clear()
