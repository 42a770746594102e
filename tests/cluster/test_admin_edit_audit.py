"""Every change an admin makes to a team, a membership, a node or a GPU lands in the audit
log: making someone a team's lead (a permission), a node's status, a GPU's limit were
saved without a trace."""

import re

from cluster.choices import AuditAction, Role
from cluster.models import AuditEntry, Membership


def _entries(object_type):
    return list(
        AuditEntry.objects.filter(object_type=object_type)
        .order_by("pk")
        .values("action", "object_id", "before", "after", "actor__username", "team__slug")
    )


def _team_page(team, membership, **row):
    """The team's admin change form as posted, with its one membership row changed."""
    fields = {"id": membership.pk, "team": team.pk, "user": membership.user_id,
              "role": membership.role, **row}  # fmt: skip
    day, time = team.created_at.strftime("%Y-%m-%d"), team.created_at.strftime("%H:%M:%S")
    return {
        "name": team.name, "slug": team.slug,
        "created_at_0": day, "created_at_1": time,
        "initial-created_at_0": day, "initial-created_at_1": time,
        "memberships-TOTAL_FORMS": "1", "memberships-INITIAL_FORMS": "1",
        "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000",
        **{f"memberships-0-{name}": value for name, value in fields.items()},
    }  # fmt: skip


def test_making_a_member_the_teams_lead_on_its_page_is_audited(client, admin_user, member, team):
    client.force_login(admin_user)
    membership = Membership.objects.get(user=member, team=team)

    response = client.post(
        f"/admin/cluster/team/{team.pk}/change/", _team_page(team, membership, role=Role.LEAD)
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    assert Membership.objects.get(pk=membership.pk).role == Role.LEAD
    assert _entries("membership") == [
        {
            "action": AuditAction.UPDATED, "object_id": str(membership.pk),
            "before": {"role": Role.MEMBER}, "after": {"role": Role.LEAD},
            "actor__username": admin_user.username, "team__slug": team.slug,
        }
    ]  # fmt: skip
    # nothing of the team itself changed: no entry for it
    assert _entries("team") == []


def test_removing_a_membership_on_the_teams_page_is_audited(client, admin_user, member, team):
    client.force_login(admin_user)
    membership = Membership.objects.get(user=member, team=team)

    response = client.post(
        f"/admin/cluster/team/{team.pk}/change/", _team_page(team, membership, DELETE="on")
    )

    assert response.status_code == 302
    assert not Membership.objects.filter(pk=membership.pk).exists()
    [entry] = _entries("membership")
    assert entry["action"] == AuditAction.DELETED
    assert entry["before"]["user"] == member.pk and entry["before"]["role"] == Role.MEMBER
    assert entry["after"] is None


def test_a_membership_added_on_its_own_page_is_audited(client, admin_user, make_user, team):
    client.force_login(admin_user)
    user = make_user("nina_new")

    response = client.post(
        "/admin/cluster/membership/add/", {"user": user.pk, "team": team.pk, "role": Role.LEAD}
    )

    assert response.status_code == 302
    [entry] = _entries("membership")
    assert entry["action"] == AuditAction.CREATED
    assert entry["after"] == {"user": user.pk, "team": team.pk, "role": Role.LEAD}
    assert entry["before"] is None and entry["team__slug"] == team.slug


def test_a_nodes_labels_changed_on_its_page_are_audited(client, admin_user, make_node):
    node = make_node("node-01", gpus=0)
    client.force_login(admin_user)
    page = {
        "name": node.name, "switch_label": node.switch_label, "rack_label": "rack-9",
        "gpu_model": node.gpu_model, "status": node.status,
        "gpus-TOTAL_FORMS": "0", "gpus-INITIAL_FORMS": "0",
        "gpus-MIN_NUM_FORMS": "0", "gpus-MAX_NUM_FORMS": "1000",
    }  # fmt: skip

    response = client.post(f"/admin/cluster/node/{node.pk}/change/", page)

    assert response.status_code == 302, response.content.decode()[:2000]
    assert _entries("node") == [
        {
            "action": AuditAction.UPDATED, "object_id": str(node.pk),
            "before": {"rack_label": "rack-1"}, "after": {"rack_label": "rack-9"},
            "actor__username": admin_user.username, "team__slug": None,
        }
    ]  # fmt: skip
    # a save that changes nothing writes nothing
    page["rack_label"] = "rack-9"
    client.post(f"/admin/cluster/node/{node.pk}/change/", page)
    assert len(_entries("node")) == 1


def test_gpus_renamed_together_on_their_nodes_page_are_locked_in_id_order(
    client, admin_user, make_node
):
    # (each rename locked its GPU's row in the page's order, by index, while a round locks a
    # job's GPUs in id order: a page renaming two GPUs whose ids run against their indexes
    # could wait on a round that waited on it)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from cluster.models import Gpu

    node = make_node("node-01", gpus=2)
    low, high = Gpu.objects.filter(node=node).order_by("pk")
    Gpu.objects.filter(pk=low.pk).update(index=7)  # the replaced board: index 0, a later id
    Gpu.objects.filter(pk=high.pk).update(index=0)
    Gpu.objects.filter(pk=low.pk).update(index=1)
    client.force_login(admin_user)
    page = {
        "name": node.name, "switch_label": node.switch_label, "rack_label": node.rack_label,
        "gpu_model": node.gpu_model, "status": node.status,
        "gpus-TOTAL_FORMS": "2", "gpus-INITIAL_FORMS": "2",
        "gpus-MIN_NUM_FORMS": "0", "gpus-MAX_NUM_FORMS": "1000",
    }  # fmt: skip
    for row, gpu in enumerate(Gpu.objects.filter(node=node).order_by("index")):
        page.update({
            f"gpus-{row}-id": gpu.pk, f"gpus-{row}-node": node.pk, f"gpus-{row}-index": gpu.index,
            f"gpus-{row}-uuid": f"GPU-renamed-{gpu.index}", f"gpus-{row}-model": gpu.model,
            f"gpus-{row}-memory_mb": gpu.memory_mb, f"gpus-{row}-power_limit_w": "",
            f"gpus-{row}-sm_clock_mhz": "",
        })  # fmt: skip

    with CaptureQueriesContext(connection) as queries:
        response = client.post(f"/admin/cluster/node/{node.pk}/change/", page)

    assert response.status_code == 302, response.content.decode()[:3000]
    assert set(Gpu.objects.filter(node=node).values_list("uuid", flat=True)) == {
        "GPU-renamed-0", "GPU-renamed-1"
    }  # fmt: skip
    locks = [
        q["sql"] for q in queries.captured_queries
        if "FOR NO KEY UPDATE" in q["sql"] and '"cluster_gpu"' in q["sql"]
    ]  # fmt: skip
    # the first GPU lock takes both renamed rows, in id order, before any one row's check
    assert locks, "no GPU row was locked"
    taken = re.search(r'"cluster_gpu"\."id" AS "pk" .* IN \(([^)]*)\) ORDER BY 1 ASC', locks[0])
    assert taken, locks[0]
    assert [int(pk) for pk in taken.group(1).split(",")] == [low.pk, high.pk]


def test_gpus_whose_limits_change_together_on_their_nodes_page_are_locked_in_id_order(
    client, admin_user, make_node
):
    # (only renamed GPUs were locked first: rows whose power limit or clock changed were
    # locked by their UPDATEs, in the page's order by index, against a round's id order)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from cluster.models import Gpu

    node = make_node("node-01", gpus=2)
    low, high = Gpu.objects.filter(node=node).order_by("pk")
    Gpu.objects.filter(pk=low.pk).update(index=7)  # the replaced board: index 0, a later id
    Gpu.objects.filter(pk=high.pk).update(index=0)
    Gpu.objects.filter(pk=low.pk).update(index=1)
    client.force_login(admin_user)
    page = {
        "name": node.name, "switch_label": node.switch_label, "rack_label": node.rack_label,
        "gpu_model": node.gpu_model, "status": node.status,
        "gpus-TOTAL_FORMS": "2", "gpus-INITIAL_FORMS": "2",
        "gpus-MIN_NUM_FORMS": "0", "gpus-MAX_NUM_FORMS": "1000",
    }  # fmt: skip
    for row, gpu in enumerate(Gpu.objects.filter(node=node).order_by("index")):
        page.update({
            f"gpus-{row}-id": gpu.pk, f"gpus-{row}-node": node.pk, f"gpus-{row}-index": gpu.index,
            f"gpus-{row}-uuid": gpu.uuid, f"gpus-{row}-model": gpu.model,
            f"gpus-{row}-memory_mb": gpu.memory_mb, f"gpus-{row}-power_limit_w": "250",
            f"gpus-{row}-sm_clock_mhz": "",
        })  # fmt: skip

    with CaptureQueriesContext(connection) as queries:
        response = client.post(f"/admin/cluster/node/{node.pk}/change/", page)

    assert response.status_code == 302, response.content.decode()[:3000]
    assert set(Gpu.objects.filter(node=node).values_list("power_limit_w", flat=True)) == {250}
    gpu_writes = [
        q["sql"] for q in queries.captured_queries
        if '"cluster_gpu"' in q["sql"]
        and ("FOR NO KEY UPDATE" in q["sql"] or q["sql"].startswith("UPDATE"))
    ]  # fmt: skip
    # the first GPU row lock or write takes both changed rows, in id order
    assert gpu_writes, "no GPU row was locked"
    assert "FOR NO KEY UPDATE" in gpu_writes[0], gpu_writes[0]
    # (ordered by the id: the selected column 1 is the id)
    taken = re.search(
        r'"cluster_gpu"\."id" AS "pk" .* IN \(([^)]*)\) ORDER BY 1 ASC', gpu_writes[0]
    )
    assert taken, gpu_writes[0]
    assert sorted(int(pk) for pk in taken.group(1).split(",")) == [low.pk, high.pk]
