"""The admin's own actions ask for the permission their effect needs.

Django offers an action without ``allowed_permissions`` to anyone who may open the list, so a
staff user allowed only to *view* nodes, GPUs and jobs could issue new agent tokens (each
node's agent locked out, the new tokens shown to them), retire GPUs and cancel any team's
jobs (a probe of 6 Dec 2026)."""

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from cluster.choices import JobState
from cluster.models import AuditEntry, Gpu, Job, Node


@pytest.fixture
def viewer(make_user):
    user = make_user("vic_viewer", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="cluster",
            codename__in=["view_node", "view_gpu", "view_job"],
        )
    )
    return user


def _post_action(client, model: str, action: str, pks) -> object:
    return client.post(
        reverse(f"admin:cluster_{model}_changelist"),
        {"action": action, "_selected_action": list(pks)},
        follow=True,
    )


def test_a_view_only_staff_user_cannot_issue_agent_tokens(client, viewer, make_node):
    node = make_node()
    token_hash = Node.objects.get(pk=node.pk).agent_token_hash
    client.force_login(viewer)

    changelist = client.get(reverse("admin:cluster_node_changelist"))
    assert changelist.status_code == 200
    assert "issue_agent_tokens" not in changelist.content.decode()
    response = _post_action(client, "node", "issue_agent_tokens", [node.pk])

    assert Node.objects.get(pk=node.pk).agent_token_hash == token_hash
    assert not any("node-01:" in str(m) for m in response.context["messages"])


def test_a_view_only_staff_user_cannot_retire_gpus(client, viewer, make_node):
    gpu = make_node(gpus=1).gpus.get()
    client.force_login(viewer)

    _post_action(client, "gpu", "retire", [gpu.pk])

    assert Gpu.objects.get(pk=gpu.pk).retired_at is None
    assert not AuditEntry.objects.exists()


def test_a_view_only_staff_user_cannot_cancel_jobs(client, viewer, make_job, member, team):
    job = make_job(owner=member, team=team)
    client.force_login(viewer)

    _post_action(client, "job", "cancel_jobs", [job.pk])

    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED


def test_issuing_agent_tokens_is_audited_without_the_token(admin_client, admin_user, make_node):
    node = make_node()

    response = _post_action(admin_client, "node", "issue_agent_tokens", [node.pk])

    token = next(str(m) for m in response.context["messages"]).split(": ", 1)[1]
    entry = AuditEntry.objects.get(object_type="node")
    assert (entry.action, entry.object_id, entry.actor_id) == (
        "updated",
        str(node.pk),
        admin_user.pk,
    )
    assert entry.after["agent_token_issued_at"] is not None
    assert token not in str(entry.before) + str(entry.after)


def test_issuing_an_agent_token_over_the_api_is_audited(api_client, admin_user, make_node):
    node = make_node()

    response = api_client(admin_user).post(f"/api/nodes/{node.pk}/issue-token/")

    assert response.status_code == 201
    entry = AuditEntry.objects.get(object_type="node")
    assert (entry.object_id, entry.actor_id) == (str(node.pk), admin_user.pk)
    assert response.json()["token"] not in str(entry.after)
