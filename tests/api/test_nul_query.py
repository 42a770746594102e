"""A NUL in a query string is a 400 on every page, the admin's list filters included (they
filtered PostgreSQL text by it: a 500, found by a live probe)."""

import pytest


@pytest.mark.parametrize(
    "url",
    [
        "/admin/cluster/job/?state=%00",
        "/admin/cluster/job/?workload=%00",
        "/admin/cluster/node/?status=%00",
        "/admin/cluster/budget/?hard_limit_action=%00",
        "/jobs/?q%00=1",
    ],
)
def test_pages_refuse_a_nul_in_the_query_string(client, admin_user, url):
    client.force_login(admin_user)
    response = client.get(url)
    assert response.status_code == 400
    assert "NUL" in response.content.decode()


def test_the_api_names_the_parameter(api_client, admin_user):
    response = api_client(admin_user).get("/api/jobs/?workload=%00")
    assert response.status_code == 400
    assert list(response.json()) == ["workload"]


def test_a_query_string_without_nul_is_untouched(client, admin_user):
    client.force_login(admin_user)
    assert client.get("/admin/cluster/job/?state=queued").status_code == 200
