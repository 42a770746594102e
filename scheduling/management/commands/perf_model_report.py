"""``python manage.py perf_model_report``: held-out accuracy of the performance models.

Thin: the cross-validation is ``scheduling.fitting.perf_report``. Prints one line per
(data set, quantity) with the median and 90th-percentile absolute error and whether the
10 % target is met, and writes the parity plots (PNG) to ``docs/img/``.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError
from tqdm import tqdm

from config.commands import OneLineCommand
from scheduling.fitting import perf_data
from scheduling.fitting.perf_report import (
    CROSS_VALIDATIONS,
    cross_validate,
    format_table,
    summarise,
    write_parity_plots,
)
from scheduling.management.commands.fit_perf_models import data_dir_arg


def out_dir_check(out_dir: Path) -> None:
    """Refuse, before the validation runs, a folder the plots could not be written in: one
    under a file was a ``NotADirectoryError`` traceback after it."""
    if out_dir.exists() and not out_dir.is_dir():
        raise CommandError(f"--out-dir {out_dir} is a file, not a folder")
    existing = next(p for p in (out_dir, *out_dir.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise CommandError(f"--out-dir {out_dir}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CommandError(f"--out-dir {out_dir}: {existing} is not writable")


class Command(OneLineCommand):
    help = "Print held-out errors of the performance models per data set; write parity PNGs."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--data-dir", default=str(perf_data.DATA_DIR), help="folder holding perf/"
        )
        parser.add_argument(
            "--out-dir",
            default=str(Path(settings.BASE_DIR) / "docs" / "img"),
            help="where the parity PNGs go",
        )
        parser.add_argument(
            "--dataset",
            action="append",
            choices=list(CROSS_VALIDATIONS),
            help="validate only this data set (repeatable; default: all)",
        )
        parser.add_argument("--by-workload", action="store_true", help="one line per workload too")
        parser.add_argument("--no-plots", action="store_true", help="print the table only")

    def handle(self, *args, **options) -> None:
        data_dir = data_dir_arg(options["data_dir"])
        out_dir = Path(options["out_dir"])
        if not options["no_plots"]:
            out_dir_check(out_dir)
        datasets = options["dataset"] or list(CROSS_VALIDATIONS)
        with tqdm(total=len(datasets), desc="validating", unit="data set") as bar:

            def step(label: str) -> None:
                bar.set_postfix_str(label)
                bar.update()

            try:
                results = cross_validate(data_dir, progress=step, datasets=datasets)
            except (OSError, ValueError, KeyError) as exc:
                raise CommandError(f"validating from {data_dir} failed: {exc}") from None
        self.stdout.write(format_table(summarise(results)))
        if options["by_workload"]:
            self.stdout.write("")
            self.stdout.write(
                format_table(summarise(results, key=lambda h: f"{h.dataset}:{h.workload}"))
            )
        if not options["no_plots"]:
            try:
                written = write_parity_plots(results, out_dir)
            except OSError as exc:
                raise CommandError(f"--out-dir {out_dir}: {exc.strerror or exc}") from None
            for path in written:
                self.stdout.write(f"wrote {path}")
