"""Unique indexes on team names, team slugs and node names as they read (folded), each added
only where the stored rows hold no look-alikes: a deployment that already holds two
migrates, is told which, and ``manage.py check --database default`` names them
(cluster.W005, ``cluster.folded_names``) until they are renamed and this migration is run
again.

What it runs is frozen here (8 Dec 2026, as ``cluster.folded_names`` had it): a migration
holds what it runs, so that a later change of that module (the check's, the API's) never
changes what this one does on a new database, nor breaks it."""

import sys

from django.db import migrations

_NAME = "lower(normalize(name, NFKC))"
# (index, table, what it folds, the rows' label, the column)
FOLDED_INDEXES = (
    ("cluster_team_name_folded_uniq", "cluster_team", _NAME, "team", "name"),
    ("cluster_team_slug_folded_uniq", "cluster_team", "lower(slug)", "team", "slug"),
    ("cluster_node_name_folded_uniq", "cluster_node", _NAME, "node", "name"),
)


def _folded_duplicates(cursor, table: str, expression: str, column: str) -> list[list[str]]:
    cursor.execute(
        f"SELECT array_agg({column} ORDER BY id) FROM {table} "
        f"GROUP BY {expression} HAVING count(*) > 1 ORDER BY 1"
    )
    return [row[0] for row in cursor.fetchall()]


def forwards(apps, schema_editor):
    """Each index whose rows hold no look-alikes; the others left out, saying why."""
    with schema_editor.connection.cursor() as cursor:
        for index, table, expression, label, column in FOLDED_INDEXES:
            groups = _folded_duplicates(cursor, table, expression, column)
            if groups:
                shown = "; ".join(" / ".join(repr(n) for n in group) for group in groups[:5])
                sys.stdout.write(
                    f"  {index} not added: {label} {column}s that read alike are stored ({shown}"
                    f"{'; ...' if len(groups) > 5 else ''}). Rename them, then run "
                    "`manage.py migrate cluster 0028 && manage.py migrate cluster`.\n"
                )
                continue
            cursor.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {index} ON {table} (({expression}))")


def backwards(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for index, *_ in FOLDED_INDEXES:
            cursor.execute(f"DROP INDEX IF EXISTS {index}")


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0028_gpu_sm_clock_bound"),
    ]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
