"""``python manage.py merge_workload_spellings``: fold workload profiles learned under two
forms of one name into the first spelling's (``workload_profiles.merge_respelled_profiles``).

Run once after ``migrate`` has applied scheduling 0015, which renames what only the other
spelling learned but, holding no live code, leaves the folds to this command. Running it
again merges nothing twice. Prints one line per version created.
"""

from __future__ import annotations

from config.commands import OneLineCommand
from scheduling.workload_profiles import merge_respelled_profiles


class Command(OneLineCommand):
    help = "Merge workload profiles learned under two spellings of one name (once, after migrate)."

    def handle(self, *args, **options):
        created = merge_respelled_profiles()
        for p in created:
            self.stdout.write(
                f"{p.workload}@{p.gpu_model} v{p.version}: {p.n_observations:g} measurements "
                f"from {p.jobs} jobs"
            )
        self.stdout.write(f"{len(created)} profile versions merged")
