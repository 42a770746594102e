"""``python manage.py merge_workload_spellings``: fold workload profiles learned under two
forms of one name into the first spelling's (``workload_profiles.merge_respelled_profiles``).

Run once after ``migrate`` has applied scheduling 0015, which renames what only the other
spelling learned but, holding no live code, leaves the folds to this command. Running it
again merges nothing twice. Prints one line per version created.
"""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from config.commands import OneLineCommand
from scheduling.workload_profiles import merge_respelled_profiles

# (the migration that renames what it can and leaves the folds to this command)
NEEDS = "0015_workload_profile_spellings_merged"


class Command(OneLineCommand):
    help = "Merge workload profiles learned under two spellings of one name (once, after migrate)."

    def handle(self, *args, **options):
        if ("scheduling", NEEDS) not in MigrationRecorder(connection).applied_migrations():
            raise CommandError(f"scheduling {NEEDS} is not applied: run `manage.py migrate` first")
        created = merge_respelled_profiles()
        for p in created:
            self.stdout.write(
                f"{p.workload}@{p.gpu_model} v{p.version}: {p.n_observations:g} measurements "
                f"from {p.jobs} jobs"
            )
        self.stdout.write(f"{len(created)} profile versions merged")
