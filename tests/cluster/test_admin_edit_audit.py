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


def _replaced_board_page(node, **row):
    """A node of two GPUs whose ids run against their indexes (a replaced board: index 0
    has the later id), and its admin page as posted with ``row``'s fields changed on both
    GPU rows (a callable of the GPU gives a field per GPU); the GPUs by id."""
    from cluster.models import Gpu

    low, high = Gpu.objects.filter(node=node).order_by("pk")
    Gpu.objects.filter(pk=low.pk).update(index=7)
    Gpu.objects.filter(pk=high.pk).update(index=0)
    Gpu.objects.filter(pk=low.pk).update(index=1)
    page = {
        "name": node.name, "switch_label": node.switch_label, "rack_label": node.rack_label,
        "gpu_model": node.gpu_model, "status": node.status,
        "gpus-TOTAL_FORMS": "2", "gpus-INITIAL_FORMS": "2",
        "gpus-MIN_NUM_FORMS": "0", "gpus-MAX_NUM_FORMS": "1000",
    }  # fmt: skip
    for i, gpu in enumerate(Gpu.objects.filter(node=node).order_by("index")):
        fields = {
            "id": gpu.pk, "node": node.pk, "index": gpu.index, "uuid": gpu.uuid,
            "model": gpu.model, "memory_mb": gpu.memory_mb, "power_limit_w": "",
            "sm_clock_mhz": "",
        }  # fmt: skip
        fields.update({k: v(gpu) if callable(v) else v for k, v in row.items()})
        page.update({f"gpus-{i}-{k}": v for k, v in fields.items()})
    return page, (low, high)


def _gpu_statements(client, node, page, *, writes: bool):
    """POST the node's page; its statements that lock (or, with ``writes``, update) GPU
    rows, in order."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        response = client.post(f"/admin/cluster/node/{node.pk}/change/", page)
    assert response.status_code == 302, response.content.decode()[:3000]
    return [
        q["sql"] for q in queries.captured_queries
        if '"cluster_gpu"' in q["sql"]
        and ("FOR NO KEY UPDATE" in q["sql"] or writes and q["sql"].startswith("UPDATE"))
    ]  # fmt: skip


def _locked_together_in_id_order(statements, gpus) -> None:
    """The first statement locks both GPUs' rows in one, ordered by the id it selects: the
    node's rows (all of them, read under their locks for the page's check of stale edits,
    ``GpuInlineFormSet``)."""
    assert statements, "no GPU row was locked"
    taken = re.search(
        r'"cluster_gpu"\."id" AS "pk" .* "cluster_gpu"\."node_id" = (\d+) ORDER BY 1 ASC',
        statements[0],
    )
    assert taken, statements[0]
    assert {g.node_id for g in gpus} == {int(taken.group(1))}


def test_gpus_renamed_together_on_their_nodes_page_are_locked_in_id_order(
    client, admin_user, make_node
):
    # (each rename locked its GPU's row in the page's order, by index, while a round locks a
    # job's GPUs in id order: a page renaming two GPUs whose ids run against their indexes
    # could wait on a round that waited on it)
    from cluster.models import Gpu

    node = make_node("node-01", gpus=2)
    page, gpus = _replaced_board_page(node, uuid=lambda gpu: f"GPU-renamed-{gpu.index}")
    client.force_login(admin_user)

    locks = _gpu_statements(client, node, page, writes=False)

    assert set(Gpu.objects.filter(node=node).values_list("uuid", flat=True)) == {
        "GPU-renamed-0", "GPU-renamed-1"
    }  # fmt: skip
    _locked_together_in_id_order(locks, gpus)


def test_gpus_whose_limits_change_together_on_their_nodes_page_are_locked_in_id_order(
    client, admin_user, make_node
):
    # (only renamed GPUs were locked first: rows whose power limit or clock changed were
    # locked by their UPDATEs, in the page's order by index, against a round's id order)
    from cluster.models import Gpu

    node = make_node("node-01", gpus=2)
    page, gpus = _replaced_board_page(node, power_limit_w="250")
    client.force_login(admin_user)

    writes = _gpu_statements(client, node, page, writes=True)

    assert set(Gpu.objects.filter(node=node).values_list("power_limit_w", flat=True)) == {250}
    assert "FOR NO KEY UPDATE" in writes[0], writes[0]  # a lock before any write
    _locked_together_in_id_order(writes, gpus)
