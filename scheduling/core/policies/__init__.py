"""Built-in policies: importing this package registers each of them by name."""

from scheduling.core.policies import (  # noqa: F401
    eaco,
    ones,
    elastic,
    fifo,
    fifo_lowclock,
    greenflow,
    powerflow,
    tiresias,
    zeus,
)
