"""``python -m scheduling.simulator ...``: see :mod:`scheduling.simulator.cli`.

The command runs on pinned floating-point kernels (:mod:`scheduling.simulator.numerics`),
so that its figures are the same on every x86-64-v3 machine.
"""

import sys

from scheduling.simulator.numerics import reexec_pinned

reexec_pinned()

from scheduling.simulator.cli import main  # noqa: E402

sys.exit(main())
