"""``python manage.py fit_perf_models``: refit the performance catalog from ``data/perf/``.

Thin: the fitting and validation are ``scheduling.fitting.perf_report.fit_and_validate``.
Writes the catalog JSON (by default the one shipped in the repository) and upserts one
``PerfProfile`` row per model. If anything fails, neither the JSON nor the database is
touched: the arguments are checked before any fit, and once every fit succeeded the rows
are written in one transaction that commits only after the file was written.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from django.core.management.base import CommandError
from django.db import transaction
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

# What PerfProfile.version holds (32 characters); printable ASCII without spaces, as pages
# and logs show it ("profile v2").
VERSION = re.compile(r"[!-~]{1,32}")


def data_dir_arg(value: str) -> Path:
    """The ``--data-dir`` check both perf commands share."""
    path = Path(value)
    if not (path / "perf").is_dir():
        raise CommandError(f"--data-dir {value}: no perf/ folder there (expected the repo's data/)")
    return path


def output_arg(value: str) -> Path:
    """A file ``save_catalog`` can write (through ``<name>.partial`` beside it): checked
    before the fits, which take minutes (a folder, or one the user may not write in, was a
    traceback after them, and a folder left ``<folder>.partial`` beside it)."""
    output = Path(value)
    if output.is_dir():
        raise CommandError(f"--output {output}: is a folder, not a file")
    if not output.parent.is_dir():
        raise CommandError(f"--output {output}: folder {output.parent} does not exist")
    if not os.access(output.parent, os.W_OK | os.X_OK):
        raise CommandError(f"--output {output}: folder {output.parent} is not writable")
    if output.exists() and not output.is_file():
        # A device or a pipe: the write replaces it with a file (/dev/null, as root).
        raise CommandError(f"--output {output}: is not a regular file")
    # ``os.access`` answers for the mode bits, which root passes everywhere: /proc was
    # "writable", and ``--output /proc/version`` fitted for 32 s before the write failed.
    # So write what the save writes first, the ``.partial`` beside the output, and remove
    # it (one left by an earlier run is the save's to overwrite, and stays).
    partial = output.with_name(output.name + ".partial")
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        if not (partial.is_file() and os.access(partial, os.W_OK)):
            raise CommandError(f"--output {output}: {partial} is in the way") from None
    except OSError as exc:
        raise CommandError(f"--output {output}: cannot write {partial}: {exc.strerror}") from None
    else:
        os.close(fd)
        partial.unlink()
    return output


def version_arg(value: str | None) -> str | None:
    """The catalog version as ``PerfProfile`` stores it: a longer one (or one with a
    control character) was written into the JSON, then refused by the database."""
    if value is not None and not VERSION.fullmatch(value):
        raise CommandError(
            f"--catalog-version {value!r}: 1 to 32 printable ASCII characters, no spaces"
        )
    return value


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
        output = output_arg(options["output"])
        version = version_arg(options["catalog_version"] or None)
        validate = not options["skip_validation"]
        bar = tqdm(total=count_fit_steps(data_dir, validate=validate), desc="fitting", unit="fit")

        def step(label: str) -> None:
            bar.set_postfix_str(label)
            bar.update()

        try:
            catalog, results = fit_and_validate(
                data_dir, progress=step, validate=validate, version=version
            )
        except (OSError, ValueError, KeyError) as exc:
            raise CommandError(f"fitting from {data_dir} failed: {exc}") from None
        finally:
            bar.close()
        # The rows first, in a transaction the file's write ends: a refused row leaves the
        # file as it was, a file that cannot be written leaves no rows.
        # (--no-db needs no database at all: an atomic block there connected to one, and a
        # machine without it failed after the fits, with the file unwritten)
        with contextlib.nullcontext() if options["no_db"] else transaction.atomic():
            if not options["no_db"]:
                counts = PerfProfile.objects.upsert_catalog(catalog, fitted_at=timezone.now())
            try:
                save_catalog(catalog, output)
            except OSError as exc:
                output.with_name(output.name + ".partial").unlink(missing_ok=True)
                raise CommandError(f"--output {output}: {exc.strerror or exc}") from None
        self.stdout.write(
            f"wrote {output} (version {catalog.version}, {len(catalog.models())} models)"
        )
        if results:
            self.stdout.write(format_table(summarise(results)))
        if not options["no_db"]:
            self.stdout.write("perf profiles: {} created, {} updated".format(*counts))
