"""Rows stored at an older migration, then every migration run over them: how the tests of a
data migration set up what a deployment holds before it upgrades."""

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


@contextmanager
def stored_before(targets: list[tuple[str, str]]) -> Iterator[tuple]:
    """Migrate back to ``targets`` and yield (the historical app registry, a user, a team)
    to store rows with; on leaving, migrate forward to the newest migrations again (also
    when the block fails, so the test database is left as the other tests expect it)."""
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate(targets)
    try:
        apps = executor.loader.project_state(targets).apps
        user = apps.get_model("auth", "User").objects.create(username="x")
        team = apps.get_model("cluster", "Team").objects.create(name="T", slug="t")
        yield apps, user, team
    finally:
        MigrationExecutor(connection).migrate(latest)
