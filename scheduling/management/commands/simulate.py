"""``python manage.py simulate``: the simulator's command line inside Django.

A thin wrapper: the arguments and the work are those of ``python -m scheduling.simulator``
(:mod:`scheduling.simulator.cli`), which needs no Django; errors become one-line
``CommandError``s (non-zero exit).
"""

from __future__ import annotations

import argparse
import sys

from django.core.management.base import BaseCommand, CommandError

from scheduling.simulator import cli


class Command(BaseCommand):
    help = "Replay a job trace through the scheduling core (matched-budget comparisons too)."

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)

        def one_line(message: str) -> None:
            if not parser.called_from_command_line:
                raise CommandError(f"Error: {message}")
            # Django would print the whole usage first; one line says what is wrong.
            # Parsing runs outside Django's CommandError handling, hence the exit here.
            sys.stderr.write(f"{subcommand}: error: {message}\n")
            sys.exit(2)

        parser.error = one_line
        return parser

    def add_arguments(self, parser) -> None:
        cli.add_arguments(parser)

    def handle(self, *args, **options) -> None:
        try:
            cli.execute(argparse.Namespace(**options), stdout=self.stdout)
        except cli.UsageError as exc:
            raise CommandError(str(exc)) from None
