"""The trace-driven simulator: the core's rounds on simulated time (``engine.py``).

Importing the package installs the simulator's replay as netdelay's auto-tuner default
(``netdelay_replay.py``): the core cannot import the simulator, so the simulator hands
itself in.
"""

from scheduling.simulator import netdelay_replay  # noqa: F401
