"""Loopback ports for servers the tests start, and for addresses where nothing listens."""

from __future__ import annotations

import os
import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago. Nothing listens on it once this
    returns (the probing socket is closed), so it serves both as the port for a server to start
    and as an address whose connections are refused. ``WATTFLOW_TEST_PORTS=FIRST-LAST``
    keeps it to that range (a machine whose ports are shared out), else any the system
    gives."""
    span = os.environ.get("WATTFLOW_TEST_PORTS", "")
    candidates = [0]
    if span:
        first, _, last = span.partition("-")
        candidates = list(range(int(first), int(last or first) + 1))
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError(f"no free port in WATTFLOW_TEST_PORTS={span}")


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port`` now."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
