"""What every ``manage.py`` command of this project shares: a bad argument is one line.

Django's ``CommandParser`` prints the whole usage (a dozen lines of options nobody asked
about) before the error. :class:`OneLineCommand` keeps ``--help`` as it is and makes an
argument error one line on stderr with exit status 2, as argparse's own exit status;
``call_command`` still gets a ``CommandError``. Errors raised from ``handle`` are
``CommandError``s, which Django already prints as one line with exit status 1.
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand


class OneLineCommand(BaseCommand):
    """A ``BaseCommand`` whose argument errors are one line (see the module docstring)."""

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        django_error = parser.error

        def one_line(message: str) -> None:
            if not parser.called_from_command_line:
                django_error(message)  # raises CommandError for call_command
            # Parsing runs outside Django's CommandError handling, hence the exit here.
            sys.stderr.write(f"{subcommand}: error: {message}\n")
            sys.exit(2)

        parser.error = one_line
        return parser
