"""The simulator CLI with ``knowledge.PARAM_PRIOR`` set: each learned job names its
workload's published parameter count and starts from the other workload nearest in it.

    nice .venv/bin/python benchmarks/sim_param_prior.py {on,off} SIMULATOR-ARGS...
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduling.simulator import knowledge  # noqa: E402
from scheduling.simulator.cli import main  # noqa: E402

knowledge.PARAM_PRIOR = sys.argv[1] == "on"
sys.exit(main(sys.argv[2:]))
