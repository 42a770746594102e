"""Loopback ports for servers the tests start, and for addresses where nothing listens."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago. Nothing listens on it once this
    returns (the probing socket is closed), so it serves both as the port for a server to start
    and as an address whose connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port`` now."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
