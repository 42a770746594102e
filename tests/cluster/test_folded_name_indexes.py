"""Team names, team slugs and node names unique as they read, in the database too (eighth
live probe: two admins creating ``Vision`` and ``vision`` at the same instant both passed the
validation, which looks before it writes). ``cluster.folded_names``: unique indexes on the
folded values, added by migration 0029 only where no look-alikes are stored; those that are
stored are named by ``manage.py check --database default`` (cluster.W005)."""

import pytest
from django.core.checks import run_checks
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from support.migrations import stored_before

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


@pytest.mark.django_db(transaction=True)
def test_a_deployment_holding_lookalikes_migrates_and_is_told(capsys):
    # given a database from before the rule (cluster 0028: no indexes), two teams that
    # read alike
    with stored_before([("cluster", "0028_gpu_sm_clock_bound")]) as (apps, _, _):
        assert len(folded_names.missing_indexes(connection)) == 3
        apps.get_model("cluster", "Team").objects.create(name="Vision", slug="vision")
        apps.get_model("cluster", "Team").objects.create(name="VISION", slug="vision-b")
        capsys.readouterr()
    # when migration 0029 has run (on leaving the block): the other two indexes are added,
    # this one is not, and the migration said why
    said = capsys.readouterr().out
    assert folded_names.missing_indexes(connection) == ["cluster_team_name_folded_uniq"]
    assert "'Vision' / 'VISION'" in said and "migrate cluster 0028" in said
    # and the check names the rows
    assert _w005() == ["team names 'Vision' / 'VISION' read alike (in case or compatibility form)"]

    # when they are renamed and the migration runs again: every index is there, no warning
    Team.objects.filter(slug="vision-b").update(name="Vision B")
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate([("cluster", "0028_gpu_sm_clock_bound")])
    MigrationExecutor(connection).migrate(latest)
    assert folded_names.missing_indexes(connection) == []
    assert _w005() == []
