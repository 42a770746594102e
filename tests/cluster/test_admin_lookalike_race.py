"""A look-alike stored by another admin while this admin's add form saves is refused as the
form refuses any look-alike (a form error), not a 500 from the folded-name index
(``cluster/0029``). The race is real: the other row is inserted in another connection and
committed while this page's insert waits on the index."""

import pytest
from django.test import Client
from django.urls import reverse
from support.races import while_held

from cluster.models import AuditEntry, Node, Team


def _post_beside(writer, user, url, data):
    client = Client(raise_request_exception=True)
    client.force_login(user)
    return while_held(writer, lambda: client.post(url, data))


TEAM_FORM = {
    "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
    "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000",
    "created_at_0": "2026-12-08", "created_at_1": "00:00:00",
}  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("theirs", "ours", "field"),
    [
        ({"name": "Vision", "slug": "vision"}, {"name": "vision", "slug": "vision-2"}, "name"),
        ({"name": "Vision", "slug": "vision"}, {"name": "Vision two", "slug": "VISION"}, "slug"),
    ],
)
def test_a_team_added_beside_a_lookalike_is_a_form_error(admin_user, theirs, ours, field):
    response = _post_beside(
        lambda: Team.objects.create(**theirs),
        admin_user,
        reverse("admin:cluster_team_add"),
        {**ours, **TEAM_FORM},
    )

    # then the page again, with the field's error, not a 500; one row, no audit of ours
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field], errors
    assert list(Team.objects.values_list("name", flat=True)) == [theirs["name"]]
    assert not AuditEntry.objects.filter(object_type="team").exists()


@pytest.mark.django_db(transaction=True)
def test_a_node_added_beside_a_lookalike_is_a_form_error(admin_user):
    data = {
        "name": "NODE-01", "switch_label": "s", "rack_label": "r", "gpu_model": "A100",
        "status": "healthy",
        "gpus-TOTAL_FORMS": "0", "gpus-INITIAL_FORMS": "0",
        "gpus-MIN_NUM_FORMS": "0", "gpus-MAX_NUM_FORMS": "1000",
    }  # fmt: skip

    response = _post_beside(
        lambda: Node.objects.create(name="node-01"),
        admin_user,
        reverse("admin:cluster_node_add"),
        data,
    )

    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == ["name"]
    assert list(Node.objects.values_list("name", flat=True)) == ["node-01"]
