"""``python manage.py simulate``: the simulator's command line inside Django.

A thin wrapper: the arguments and the work are those of ``python -m scheduling.simulator``
(:mod:`scheduling.simulator.cli`), which needs no Django; errors become one-line
``CommandError``s (exit status 1).
"""

from __future__ import annotations

import argparse

from django.core.management.base import CommandError

from config.commands import OneLineCommand
from scheduling.simulator import cli


class Command(OneLineCommand):
    help = "Replay a job trace through the scheduling core (matched-budget comparisons too)."

    def add_arguments(self, parser) -> None:
        cli.add_arguments(parser)

    def handle(self, *args, **options) -> None:
        try:
            cli.execute(argparse.Namespace(**options), stdout=self.stdout)
        except cli.UsageError as exc:
            raise CommandError(str(exc)) from None
        except cli.StoppedEarly as exc:
            raise CommandError(str(exc), returncode=1) from None
