"""An open dashboard follows its user's access: removed from a team, it stops receiving that
team's feed at once; added, it starts; staff on/off joins/leaves the admin group; deactivated,
it is closed. Real ASGI stack and the real Redis channel layer."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client

from cluster.choices import Role
from cluster.models import Membership
from config.asgi import application
from frontend.broadcast import ADMIN_GROUP, EVERYONE_GROUP, broadcast_round, team_group
from frontend.consumers import ACCESS_REVOKED

pytestmark = pytest.mark.django_db(transaction=True)


def headers_for(user):
    client = Client()
    client.force_login(user)
    return [
        (b"origin", b"http://127.0.0.1"),
        (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
    ]


def round_for(*teams, round_id=1):
    decisions = [
        {"job_id": 100 + i, "team_id": t.pk, "job_name": f"job-{i}", "action": "start"}
        for i, t in enumerate(teams)
    ]
    return {"round_id": round_id, "queue_length": 0, "decisions": decisions}


async def in_thread(fn, *args):
    """Run sync (database) work in a worker thread, as a view would, closing its connection."""

    def call():
        try:
            return fn(*args)
        finally:
            connection.close()

    return await asyncio.get_running_loop().run_in_executor(None, call)


async def open_socket(headers):
    ws = WebsocketCommunicator(application, "/ws/dashboard/", headers=headers)
    connected, _ = await ws.connect(timeout=10)
    assert connected
    hello = await ws.receive_json_from(timeout=5)
    return ws, hello


async def decisions_received(ws, copies):
    messages = [await ws.receive_json_from(timeout=5) for _ in range(copies)]
    assert {m["type"] for m in messages} == {"round"}
    return sorted(d["job_id"] for m in messages for d in m["payload"]["decisions"])


def test_a_member_removed_from_a_team_stops_receiving_its_feed(member, team):
    headers = headers_for(member)

    async def scenario():
        ws, hello = await open_socket(headers)
        await in_thread(broadcast_round, round_for(team, round_id=1))
        before = await decisions_received(ws, 2)  # the team's copy and everyone's

        await in_thread(lambda: Membership.objects.filter(user=member, team=team).delete())
        regrouped = await ws.receive_json_from(timeout=5)
        await in_thread(broadcast_round, round_for(team, round_id=2))
        after = await decisions_received(ws, 1)  # everyone's copy only, without decisions
        nothing_more = await ws.receive_nothing(timeout=0.5)
        await ws.disconnect()
        return hello, before, regrouped, after, nothing_more

    hello, before, regrouped, after, nothing_more = async_to_sync(scenario)()
    assert hello["groups"] == [EVERYONE_GROUP, team_group(team.pk)]
    assert before == [100]
    assert regrouped == {"type": "groups", "groups": [EVERYONE_GROUP]}
    assert after == []
    assert nothing_more


def test_a_member_added_to_a_team_starts_receiving_its_feed(member, team, other_team):
    headers = headers_for(member)

    async def scenario():
        ws, _ = await open_socket(headers)
        await in_thread(
            lambda: Membership.objects.create(user=member, team=other_team, role=Role.LEAD)
        )
        regrouped = await ws.receive_json_from(timeout=5)
        await in_thread(broadcast_round, round_for(team, other_team))
        received = await decisions_received(ws, 3)
        await ws.disconnect()
        return regrouped, received

    regrouped, received = async_to_sync(scenario)()
    assert regrouped["type"] == "groups"
    assert sorted(regrouped["groups"]) == sorted(
        [EVERYONE_GROUP, team_group(team.pk), team_group(other_team.pk)]
    )
    assert received == [100, 101]


def test_staff_on_and_off_joins_and_leaves_the_admin_group(outsider, team, other_team):
    # (the admin feed carries every team's jobs and budgets: a staff user reads it who may
    # view both in the admin, ``queries.sees_every_team``; granted here, staff or not)
    outsider.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="cluster", codename__in=["view_job", "view_budget"]
        )
    )
    headers = headers_for(outsider)

    def set_staff(flag):
        outsider.is_staff = flag
        outsider.save()

    async def scenario():
        ws, _ = await open_socket(headers)
        await in_thread(set_staff, True)
        promoted = await ws.receive_json_from(timeout=5)
        await in_thread(broadcast_round, round_for(team, round_id=1))
        as_admin = await decisions_received(ws, 2)  # admin copy with team's decision + everyone
        await in_thread(set_staff, False)
        demoted = await ws.receive_json_from(timeout=5)
        await in_thread(broadcast_round, round_for(team, round_id=2))
        as_member = await decisions_received(ws, 1)
        nothing_more = await ws.receive_nothing(timeout=0.5)
        await ws.disconnect()
        return promoted, as_admin, demoted, as_member, nothing_more

    promoted, as_admin, demoted, as_member, nothing_more = async_to_sync(scenario)()
    assert ADMIN_GROUP in promoted["groups"]
    assert as_admin == [100]
    assert ADMIN_GROUP not in demoted["groups"]
    assert as_member == []
    assert nothing_more


def test_a_deactivated_user_is_disconnected(member, team):
    headers = headers_for(member)

    def deactivate():
        member.is_active = False
        member.save()

    async def scenario():
        ws, _ = await open_socket(headers)
        await in_thread(deactivate)
        closed = await ws.receive_output(timeout=5)
        await in_thread(broadcast_round, round_for(team))
        return closed

    closed = async_to_sync(scenario)()
    assert closed == {"type": "websocket.close", "code": ACCESS_REVOKED}


def test_another_users_change_leaves_a_socket_alone(member, lead, team):
    headers = headers_for(member)

    async def scenario():
        ws, _ = await open_socket(headers)
        await in_thread(lambda: Membership.objects.filter(user=lead).delete())
        untouched = await ws.receive_nothing(timeout=0.5)
        await in_thread(broadcast_round, round_for(team))
        still = await decisions_received(ws, 2)
        await ws.disconnect()
        return untouched, still

    untouched, still = async_to_sync(scenario)()
    assert untouched
    assert still == [100]
