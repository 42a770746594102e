"""Built-in policies: importing this package registers each of them by name."""

from scheduling.core.policies import fifo  # noqa: F401
