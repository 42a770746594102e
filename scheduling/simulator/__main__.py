"""``python -m scheduling.simulator ...``: see :mod:`scheduling.simulator.cli`."""

import sys

from scheduling.simulator.cli import main

sys.exit(main())
