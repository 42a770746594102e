"""A node's status over the API is a drain or an undrain, audited like the pages' (a PATCH
was saved as sent: no audit entry, and unhealthy -> draining on a silent node)."""

import pytest

from cluster.choices import NodeStatus
from cluster.models import AuditEntry, Node


def _patch(client, node, **body):
    return client.patch(f"/api/nodes/{node.pk}/", body, format="json")


def test_draining_and_undraining_over_the_api_are_audited(api_client, admin_user, make_node):
    node = make_node()
    client = api_client(admin_user)
    assert _patch(client, node, status="draining").status_code == 200
    assert Node.objects.get(pk=node.pk).status == NodeStatus.DRAINING
    assert _patch(client, node, status="healthy").status_code == 200
    entries = AuditEntry.objects.filter(object_type="node", object_id=node.pk).order_by("pk")
    assert [(e.before["status"], e.after["status"]) for e in entries] == [
        ("healthy", "draining"),
        ("draining", "healthy"),
    ]
    assert all(e.actor == admin_user for e in entries)


@pytest.mark.parametrize(("start", "to"), [("unhealthy", "draining"), ("healthy", "unhealthy")])
def test_other_status_changes_are_refused_and_change_nothing(
    api_client, admin_user, make_node, start, to
):
    node = make_node()
    Node.objects.filter(pk=node.pk).update(status=start)
    response = _patch(api_client(admin_user), node, status=to, rack_label="r9")
    assert response.status_code == 400
    assert list(response.json()) == ["status"]
    stored = Node.objects.get(pk=node.pk)
    assert (stored.status, stored.rack_label) == (start, node.rack_label)
    assert not AuditEntry.objects.filter(object_type="node").exists()


def test_a_patch_of_other_fields_keeps_a_status_changed_meanwhile(
    api_client, admin_user, make_node, monkeypatch
):
    from cluster.api.views import NodeViewSet

    node = make_node()
    client = api_client(admin_user)
    real = NodeViewSet.get_object

    def read_then_liveness_marks_it(self):
        read = real(self)  # the view's copy says healthy
        Node.objects.filter(pk=read.pk).update(status=NodeStatus.UNHEALTHY)
        return read

    monkeypatch.setattr(NodeViewSet, "get_object", read_then_liveness_marks_it)
    assert _patch(client, node, rack_label="r2").status_code == 200
    stored = Node.objects.get(pk=node.pk)
    assert (stored.status, stored.rack_label) == (NodeStatus.UNHEALTHY, "r2")


def test_a_new_node_cannot_start_unhealthy(api_client, admin_user):
    response = api_client(admin_user).post(
        "/api/nodes/",
        {"name": "n-new", "switch_label": "s1", "gpu_model": "A100", "status": "unhealthy"},
        format="json",
    )
    assert response.status_code == 400 and list(response.json()) == ["status"]


def test_a_node_created_draining_is_audited_as_drained(api_client, admin_user):
    response = api_client(admin_user).post(
        "/api/nodes/",
        {"name": "n-new", "switch_label": "s1", "gpu_model": "A100", "status": "draining"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["status"] == "draining"
    node = Node.objects.get(name="n-new")
    assert node.status == NodeStatus.DRAINING
    entries = AuditEntry.objects.filter(object_type="node", object_id=node.pk)
    assert [(e.before["status"], e.after["status"], e.actor) for e in entries] == [
        ("healthy", "draining", admin_user)
    ]


def test_a_node_created_healthy_writes_no_status_entry(api_client, admin_user):
    response = api_client(admin_user).post(
        "/api/nodes/", {"name": "n-new", "switch_label": "s1", "gpu_model": "A100"}, format="json"
    )
    assert response.status_code == 201 and response.json()["status"] == "healthy"
    assert not AuditEntry.objects.filter(object_type="node").exists()
