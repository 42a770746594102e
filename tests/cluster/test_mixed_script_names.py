"""A team or node name with a word that mixes Latin with Cyrillic or Greek letters is
refused (an eighth probe: ``Vіsion``, its ``і`` Cyrillic U+0456, stood beside *Vision* as a
team of its own: NFKC keeps scripts apart, so the look-alike fold does not join them). A
name whose words are each of one script (``Лаб ML``) is kept."""

import pytest

from cluster.models import Node, Team

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "name",
    ["Vіsion", "Vision Lаb", "Ѵision", "Viσion"],  # і, а Cyrillic; Ѵ Cyrillic izhitsa; σ Greek
)
def test_a_team_name_mixing_scripts_in_a_word_is_refused(api_client, admin_user, name):
    response = api_client(admin_user).post(
        "/api/teams/", {"name": name, "slug": "mixed"}, format="json"
    )

    assert response.status_code == 400, response.content
    assert list(response.json()) == ["name"]
    assert "mixes Latin with Cyrillic or Greek" in response.json()["name"][0]
    assert not Team.objects.filter(slug="mixed").exists()


@pytest.mark.parametrize("name", ["Лаб ML", "Ομάδα AI", "Vision 視覚", "Группа-2 (GPU)"])
def test_words_each_of_one_script_are_kept(api_client, admin_user, name):
    response = api_client(admin_user).post(
        "/api/teams/", {"name": name, "slug": "ok"}, format="json"
    )

    assert response.status_code == 201, response.content


def test_a_node_name_mixing_scripts_is_refused(api_client, admin_user):
    body = {"name": "nоde-01", "switch_label": "s", "rack_label": "r", "gpu_model": "A100"}

    response = api_client(admin_user).post("/api/nodes/", body, format="json")

    assert response.status_code == 400, response.content
    assert list(response.json()) == ["name"]
    assert not Node.objects.exists()
