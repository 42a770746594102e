"""The schema-driven API tests: fuzzing figures are summed here and shown at the end of the
pytest run (``pytest_terminal_summary``), under ``make test`` as on the command line."""

from __future__ import annotations

import pytest
from django.core.cache import caches
from fuzz_figures import FUZZ_TALLIES, Tally


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Throttle and lockout counters live in the cache: the fuzzer's failed logins must not
    throttle the next test's logins (all come from 127.0.0.1)."""
    for cache in caches.all():
        cache.clear()


def pytest_terminal_summary(terminalreporter):
    if not FUZZ_TALLIES:
        return
    total = Tally()
    terminalreporter.section("schemathesis fuzzing (tests/api/test_fuzz_schemathesis.py)")
    for persona, tally in FUZZ_TALLIES.items():
        terminalreporter.write_line(f"{persona}: {tally.line()}")
        total.operations |= tally.operations
        total.requests += tally.requests
        total.statuses.update(tally.statuses)
        total.failures.update(tally.failures)
        total.seconds += tally.seconds
    terminalreporter.write_line(f"all: {total.line()}")
