"""Unique indexes on team and node names as they read (eighth live probe).

``Team.clean`` and ``Node.clean`` refuse a name that reads as another's once both are
folded (NFKC, case folded: ``models.team_name_fold``), but a validation looks before it
writes: two admins creating ``Vision`` and ``vision`` at the same instant both passed it.
These indexes make the database refuse the second row. PostgreSQL's fold is
``lower(normalize(name, NFKC))``: it agrees with Python's ``casefold`` on everything but
the few letters whose case folding is not their lower case (``ß`` -> ``ss``), which the
validation still catches.

A deployment that already holds two such names cannot take an index: the migration
(``0029_folded_name_indexes``, which holds its own copy of ``FOLDED_INDEXES`` and of the
look-up below) then adds the other indexes and leaves that one out,
saying so, and ``manage.py check --database default`` names the rows (``cluster.W005``)
until they are renamed and the migration is run again. Stored names are never rewritten.
"""

from __future__ import annotations

_NAME = "lower(normalize(name, NFKC))"
# (index, table, what it folds, the rows' label, the column)
FOLDED_INDEXES = (
    ("cluster_team_name_folded_uniq", "cluster_team", _NAME, "team", "name"),
    ("cluster_team_slug_folded_uniq", "cluster_team", "lower(slug)", "team", "slug"),
    ("cluster_node_name_folded_uniq", "cluster_node", _NAME, "node", "name"),
)


def folded_duplicates(connection, table: str, expression: str, column: str) -> list[list[str]]:
    """The groups of ``column`` values of ``table`` that fold (``expression``) alike."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT array_agg({column} ORDER BY id) FROM {table} "
            f"GROUP BY {expression} HAVING count(*) > 1 ORDER BY 1"
        )
        return [row[0] for row in cursor.fetchall()]


def missing_indexes(connection) -> list[str]:
    """The names of the folded indexes the database lacks."""
    names = [index for index, *_ in FOLDED_INDEXES]
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE indexname = ANY(%s)", [names])
        there = {row[0] for row in cursor.fetchall()}
    return [name for name in names if name not in there]


def drop_folded_indexes(connection) -> None:
    with connection.cursor() as cursor:
        for index, *_ in FOLDED_INDEXES:
            cursor.execute(f"DROP INDEX IF EXISTS {index}")


def field_of_error(exc: Exception, table: str) -> str | None:
    """The column (``name``, ``slug``) of ``table`` whose uniqueness, folded or exact, an
    ``IntegrityError`` says was broken; None for any other error."""
    constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None) or ""
    for index, index_table, _, _, column in FOLDED_INDEXES:
        if constraint == index and index_table == table:
            return column
    for column in ("name", "slug"):
        # the field's own unique constraint (``unique=True``): cluster_team_name_key, or
        # Django's cluster_team_name_<hash>_uniq
        if constraint.startswith(f"{table}_{column}_") and (
            constraint.endswith("_key") or constraint.endswith("_uniq")
        ):
            return column
    return None
