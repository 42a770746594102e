"""The one bounded wait of the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_for(check: Callable[[], T], *, timeout_s: float, what: str, every_s: float = 0.05) -> T:
    """Call ``check`` until it returns something truthy and return that; fail the test after
    ``timeout_s`` seconds, naming ``what`` was awaited. ``check`` may raise to give up early
    (e.g. when the process it waits on has died)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(every_s)
