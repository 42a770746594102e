"""The heartbeat carries the agent's spool health; the server keeps it on the Node and shows it
to admins in the node API."""

import pytest
from django.urls import reverse

from cluster.models import Node


def _beat(client, **body):
    return client.post("/api/agent/heartbeat/", body, format="json")


def test_the_heartbeat_stores_the_spool_health_on_the_node(
    agent_node, other_node, agent_client, api_client, admin_user, member
):
    node, token = agent_node
    client = agent_client(token)
    response = _beat(
        client, spooled=12, quarantined=2, last_quarantine_reason="HTTP 400: unknown allocation"
    )
    assert response.status_code == 200
    stored = Node.objects.get(pk=node.pk)
    assert (stored.agent_spooled, stored.agent_quarantined, stored.agent_quarantine_reason) == (
        12, 2, "HTTP 400: unknown allocation",
    )  # fmt: skip
    # an older agent's heartbeat (no spool fields) keeps what was reported
    assert _beat(client, ts="2026-11-22T03:00:00+00:00").status_code == 200
    assert Node.objects.get(pk=node.pk).agent_quarantined == 2
    # only the token's node changed
    assert Node.objects.get(pk=other_node[0].pk).agent_quarantined == 0
    # admins see it in the node API; members do not see nodes at all
    listed = api_client(admin_user).get(f"/api/nodes/{node.pk}/").json()
    assert (listed["agent_spooled"], listed["agent_quarantined"]) == (12, 2)
    assert listed["agent_quarantine_reason"] == "HTTP 400: unknown allocation"
    assert api_client(member).get(f"/api/nodes/{node.pk}/").status_code in (403, 404)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("spooled", -1),
        ("quarantined", 2**31),
        ("quarantined", "NaN"),
        ("last_quarantine_reason", "x" * 501),
        ("last_quarantine_reason", "a\x00b"),
    ],
)
def test_bad_spool_health_is_a_400_and_changes_nothing(agent_node, agent_client, field, value):
    node, token = agent_node
    response = _beat(agent_client(token), **{field: value})
    assert response.status_code == 400
    assert field in response.json()
    stored = Node.objects.get(pk=node.pk)
    assert (stored.last_heartbeat_at, stored.agent_quarantined) == (None, 0)


def test_admins_cannot_write_the_spool_health(agent_node, api_client, admin_user):
    node, _ = agent_node
    response = api_client(admin_user).patch(
        f"/api/nodes/{node.pk}/", {"agent_quarantined": 7}, format="json"
    )
    assert response.status_code in (200, 405)
    assert Node.objects.get(pk=node.pk).agent_quarantined == 0


def test_the_nodes_page_shows_a_quarantine(agent_node, agent_client, client, admin_user):
    node, token = agent_node
    _beat(agent_client(token), spooled=3, quarantined=2, last_quarantine_reason="HTTP 400: <b>")
    client.force_login(admin_user)
    page = client.get(reverse("frontend:nodes")).content.decode()
    assert 'data-quarantine="2"' in page
    assert "2 messages the server refused (newest: HTTP 400: &lt;b&gt;)" in page
    assert "3 messages waiting in the agent's spool" in page


def test_the_heartbeats_ts_gives_the_nodes_clock_skew(
    agent_node, agent_client, api_client, admin_user, client, caplog, settings
):
    # The heartbeat's ts, "for skew checks", was never read (fourth probe): stamps of 1970,
    # 2999 and year 1 were all a 200 and left nothing. Now its offset from the server's
    # clock is the node's agent_clock_skew_s, shown to admins, and a large one is logged.
    from datetime import timedelta

    from django.utils import timezone

    node, token = agent_node
    beat = agent_client(token)
    settings.TELEMETRY_MAX_FUTURE_S = 300
    # given an agent whose clock is an hour ahead
    assert _beat(beat, ts=(timezone.now() + timedelta(hours=1)).isoformat()).status_code == 200
    skew = Node.objects.get(pk=node.pk).agent_clock_skew_s
    assert 3590 < skew <= 3600
    assert "node node-01: agent clock is 3600 s ahead of the server's" in caplog.text
    # then the admin sees it in the node API and on the nodes page
    listed = api_client(admin_user).get(f"/api/nodes/{node.pk}/").json()
    assert listed["agent_clock_skew_s"] == pytest.approx(skew)
    client.force_login(admin_user)
    page = client.get(reverse("frontend:nodes")).content.decode()
    assert 'data-clock-skew="3600"' in page
    # and an agent a second behind is within bounds: stored, not logged, not flagged
    caplog.clear()
    assert _beat(beat, ts=(timezone.now() - timedelta(seconds=1)).isoformat()).status_code == 200
    assert -2 < Node.objects.get(pk=node.pk).agent_clock_skew_s < 0
    assert "agent clock" not in caplog.text
    assert "data-clock-skew" not in client.get(reverse("frontend:nodes")).content.decode()
    # a year-1 stamp is a skew too (about -6.4e10 s), not an error
    assert _beat(beat, ts="0001-01-01T00:00:00+00:00").status_code == 200
    assert Node.objects.get(pk=node.pk).agent_clock_skew_s < -6e10
    # a heartbeat without ts leaves the skew unknown
    assert _beat(beat, spooled=0).status_code == 200
    assert Node.objects.get(pk=node.pk).agent_clock_skew_s is None
