"""``python -m scheduling.simulator ...``: see :mod:`scheduling.simulator.cli`.

The command runs on pinned floating-point kernels (:mod:`scheduling.simulator.numerics`),
so that its figures are the same on every x86-64-v3 machine.
"""

import os
import sys

from scheduling.simulator.numerics import reexec_pinned

reexec_pinned()

from scheduling.simulator.cli import main  # noqa: E402

try:
    code = main()
    sys.stdout.flush()
except BrokenPipeError:
    # The reader went away (``| head``): no traceback, and none at exit when Python
    # flushes what is left to the closed pipe.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 1
sys.exit(code)
