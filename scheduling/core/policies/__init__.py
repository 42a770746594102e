"""Built-in policies: importing this package registers each of them by name."""

from scheduling.core.policies import (  # noqa: F401
    eaco,
    elastic,
    fifo,
    fifo_lowclock,
    greenflow,
    netdelay,
    ones,
    powerflow,
    tiresias,
    zeus,
)
