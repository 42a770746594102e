"""Figures of the schemathesis run (tests/api/test_fuzz_schemathesis.py), per persona, shown
by tests/api/conftest.py at the end of the pytest run."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Tally:
    operations: set = field(default_factory=set)
    requests: int = 0
    statuses: Counter = field(default_factory=Counter)
    # (persona, operation, failure title) -> (count, an example request, the message)
    failures: dict = field(default_factory=dict)
    unsatisfiable: set = field(default_factory=set)
    seconds: float = 0.0

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def line(self) -> str:
        statuses = dict(sorted(self.statuses.items()))
        return (
            f"{len(self.operations)} operations, {self.requests} requests, "
            f"{self.server_errors} 5xx, {len(self.failures)} distinct failures, "
            f"{self.seconds:.0f} s; statuses {statuses}"
        )


# persona -> Tally, filled by test_fuzz_schemathesis.py
FUZZ_TALLIES: dict[str, Tally] = {}
