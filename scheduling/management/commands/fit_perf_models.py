"""``python manage.py fit_perf_models``: refit the performance catalog from ``data/perf/``.

Thin: the fitting and validation are ``scheduling.fitting.perf_report.fit_and_validate``.
Writes the catalog JSON (by default the one shipped in the repository) and upserts one
``PerfProfile`` row per model. If anything fails, neither the JSON nor the database is
touched: the file is written only after every fit succeeded, then the rows in one
transaction.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError
from django.utils import timezone
from tqdm import tqdm

from config.commands import OneLineCommand
from scheduling.core.perf_models import CATALOG_PATH, save_catalog
from scheduling.fitting import perf_data
from scheduling.fitting.perf_report import (
    count_fit_steps,
    fit_and_validate,
    format_table,
    summarise,
)
from scheduling.models import PerfProfile


def data_dir_arg(value: str) -> Path:
    """The ``--data-dir`` check both perf commands share."""
    path = Path(value)
    if not (path / "perf").is_dir():
        raise CommandError(f"--data-dir {value}: no perf/ folder there (expected the repo's data/)")
    return path


class Command(OneLineCommand):
    help = "Refit the performance models from data/perf, write the catalog JSON, store profiles."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--data-dir", default=str(perf_data.DATA_DIR), help="folder holding perf/"
        )
        parser.add_argument(
            "--output", default=str(CATALOG_PATH), help="catalog JSON to write (default: shipped)"
        )
        parser.add_argument(
            "--catalog-version", default=None, help="catalog version (default: current)"
        )
        parser.add_argument(
            "--skip-validation",
            action="store_true",
            help="fit only; the models carry no held-out errors (fast)",
        )
        parser.add_argument("--no-db", action="store_true", help="write the JSON only")

    def handle(self, *args, **options) -> None:
        data_dir = data_dir_arg(options["data_dir"])
        output = Path(options["output"])
        if not output.parent.is_dir():
            raise CommandError(f"--output {output}: folder {output.parent} does not exist")
        validate = not options["skip_validation"]
        bar = tqdm(total=count_fit_steps(data_dir, validate=validate), desc="fitting", unit="fit")

        def step(label: str) -> None:
            bar.set_postfix_str(label)
            bar.update()

        try:
            catalog, results = fit_and_validate(
                data_dir, progress=step, validate=validate, version=options["catalog_version"]
            )
        except (OSError, ValueError, KeyError) as exc:
            raise CommandError(f"fitting from {data_dir} failed: {exc}") from None
        finally:
            bar.close()
        save_catalog(catalog, output)
        self.stdout.write(
            f"wrote {output} (version {catalog.version}, {len(catalog.models())} models)"
        )
        if results:
            self.stdout.write(format_table(summarise(results)))
        if not options["no_db"]:
            created, updated = PerfProfile.objects.upsert_catalog(catalog, fitted_at=timezone.now())
            self.stdout.write(f"perf profiles: {created} created, {updated} updated")
