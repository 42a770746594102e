#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["simulate"]:
        # The simulator's figures reproduce only on pinned floating-point kernels, chosen
        # before numpy is loaded: like ``python -m scheduling.simulator``, this starts
        # itself again with them (scheduling.simulator.numerics).
        from scheduling.simulator.numerics import reexec_pinned

        reexec_pinned()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
