"""Unique indexes on team names, team slugs and node names as they read (folded), each added
only where the stored rows hold no look-alikes (``cluster.folded_names``): a deployment that
already holds two migrates, is told which, and ``manage.py check --database default`` names
them (cluster.W005) until they are renamed and this migration is run again."""

import sys

from django.db import migrations

from cluster.folded_names import add_folded_indexes, drop_folded_indexes


def forwards(apps, schema_editor):
    add_folded_indexes(schema_editor.connection, report=lambda line: sys.stdout.write(line + "\n"))


def backwards(apps, schema_editor):
    drop_folded_indexes(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0028_gpu_sm_clock_bound"),
    ]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
