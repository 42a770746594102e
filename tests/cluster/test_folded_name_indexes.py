"""Team names, team slugs and node names unique as they read, in the database too (eighth
live probe: two admins creating ``Vision`` and ``vision`` at the same instant both passed the
validation, which looks before it writes). ``cluster.folded_names``: unique indexes on the
folded values, added by migration 0029 only where no look-alikes are stored; those that are
stored are named by ``manage.py check --database default`` (cluster.W005)."""

import pytest
from django.core.checks import run_checks
from django.db import IntegrityError, connection, transaction

from cluster import folded_names
from cluster import models as cluster_models
from cluster.models import Node, Team

pytestmark = pytest.mark.django_db


def _w005() -> list[str]:
    return [m.msg for m in run_checks(databases=["default"]) if m.id == "cluster.W005"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"name": "Vision", "slug": "vision"}, {"name": "vision", "slug": "vision-2"}),
        ({"name": "Vision", "slug": "vision"}, {"name": "Ｖｉｓｉｏｎ", "slug": "vision-2"}),
        ({"name": "Vision", "slug": "vision"}, {"name": "Vision two", "slug": "VISION"}),
    ],
)
def test_the_database_refuses_a_team_that_reads_as_another(first, second):
    Team.objects.create(**first)
    with pytest.raises(IntegrityError), transaction.atomic():
        Team.objects.create(**second)
    assert Team.objects.count() == 1


def test_the_database_refuses_a_node_that_reads_as_another():
    Node.objects.create(name="node-01")
    with pytest.raises(IntegrityError), transaction.atomic():
        Node.objects.create(name="ＮＯＤＥ-01")
    assert list(Node.objects.values_list("name", flat=True)) == ["node-01"]


def test_a_team_may_still_change_the_case_of_its_own_name():
    team = Team.objects.create(name="Vision", slug="vision")
    Team.objects.filter(pk=team.pk).update(name="VISION")
    assert Team.objects.get(pk=team.pk).name == "VISION"


NODE = {"name": "NODE-01", "switch_label": "s", "rack_label": "r", "gpu_model": "A100"}


@pytest.mark.parametrize(
    ("path", "body"),
    [("/api/teams/", {"name": "vision", "slug": "vision-2"}), ("/api/nodes/", NODE)],
)
def test_a_lookalike_stored_after_the_validation_looked_is_a_400(
    api_client, admin_user, monkeypatch, path, body
):
    # given the other admin's row, stored after this request's validation looked (the race:
    # the validation finds nothing)
    Team.objects.create(name="Vision", slug="vision")
    Node.objects.create(name="node-01")
    monkeypatch.setattr(cluster_models, "lookalike", lambda *args, **kwargs: None)

    response = api_client(admin_user).post(path, body, format="json")

    # then a 400 naming the field, as the validation's, not a second row (nor a 500)
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["name"]
    assert "reads as this one" in response.json()["name"][0]
    assert Team.objects.count() == 1 and Node.objects.count() == 1


def test_a_deployment_holding_lookalikes_migrates_and_is_told(capsys):
    # given a database from before the rule, two teams that read alike and no indexes
    folded_names.drop_folded_indexes(connection)
    Team.objects.create(name="Vision", slug="vision")
    Team.objects.create(name="VISION", slug="vision-b")
    Node.objects.create(name="node-01")

    # when the migration's step runs: the other two indexes are added, this one is not
    lines = []
    left_out = folded_names.add_folded_indexes(connection, report=lines.append)
    assert left_out == ["cluster_team_name_folded_uniq"]
    assert folded_names.missing_indexes(connection) == ["cluster_team_name_folded_uniq"]
    assert "'Vision' / 'VISION'" in lines[0] and "migrate cluster 0028" in lines[0]
    # and the check names the rows
    assert _w005() == ["team names 'Vision' / 'VISION' read alike (in case or compatibility form)"]

    # when they are renamed and the step runs again: every index is there, no warning
    Team.objects.filter(slug="vision-b").update(name="Vision B")
    assert folded_names.add_folded_indexes(connection, report=lines.append) == []
    assert folded_names.missing_indexes(connection) == []
    assert _w005() == []
