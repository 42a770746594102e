"""A request must arrive whole within ``WATTFLOW_REQUEST_READ_TIMEOUT_S`` of its first line,
or it is answered 408 and its connection closed (``config.serve``). Twisted times a
connection out only after 12 hours without a byte, so a client that sent half a request
(a head, or part of a body) and stopped held its connection for that long, and one that
sent a byte now and then held it for ever.

A real server process (``support/daphne.py``) with a bound of 1 s; raw sockets."""

import json
import socket
import subprocess
import sys
import time

import pytest
from django.test import Client
from support.daphne import ROOT, serving

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

READ_TIMEOUT_S = 1.0
IDLE_TIMEOUT_S = 4.0


@pytest.fixture
def server(tmp_path):
    with serving(
        tmp_path / "daphne.log",
        WATTFLOW_REQUEST_READ_TIMEOUT_S=str(READ_TIMEOUT_S),
        WATTFLOW_IDLE_CONNECTION_TIMEOUT_S=str(IDLE_TIMEOUT_S),
    ) as daphne:
        yield daphne


def _until_closed(sock: socket.socket, *, within_s: float) -> tuple[bytes, float, bool]:
    """What the server sends until it closes the connection, when it closed (seconds from
    now), and whether it did within ``within_s``."""
    start = time.monotonic()
    sock.settimeout(within_s)
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except TimeoutError:
        return answer, time.monotonic() - start, False
    return answer, time.monotonic() - start, True


HEAD = b"POST /api/jobs/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    "sent",
    [HEAD + b"Content-Length: 100\r\n\r\n" + b'{"name": ', HEAD + b"Content-Len"],
    ids=["half a body", "half a head"],
)
def test_a_half_sent_request_is_answered_408_and_closed(server, sent):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(sent)
        answer, after_s, closed = _until_closed(sock, within_s=READ_TIMEOUT_S + 5)

    # (before: nothing, the connection held open; Twisted's idle timeout is 12 hours)
    assert closed, f"still open after {after_s:.1f} s"
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"within 1 s" in answer


def test_a_body_sent_a_byte_at_a_time_is_cut_off_at_the_bound(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(HEAD + b"Content-Length: 1000\r\n\r\n")
        start = time.monotonic()
        answer = b""
        sock.settimeout(0.2)
        while time.monotonic() - start < READ_TIMEOUT_S + 5:
            try:
                sock.sendall(b" ")  # each byte resets Twisted's own idle timeout
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            answer += chunk
            if not chunk:
                break
        took = time.monotonic() - start

    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert took < READ_TIMEOUT_S + 3


def test_a_request_received_in_time_is_served_and_its_keep_alive_connection_kept(server):
    body = b'{"name": "x"}'
    request = HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        # a request sent slowly but whole within the bound
        sock.sendall(request[:20])
        time.sleep(READ_TIMEOUT_S / 2)
        sock.sendall(request[20:])
        first = sock.recv(65536)
        # then the connection idle past the bound (no request begun), and a second request
        time.sleep(READ_TIMEOUT_S * 2)
        sock.sendall(request)
        second = sock.recv(65536)

    # the API's own answer to an anonymous submit, both times
    assert first.startswith(b"HTTP/1.1 401"), first[:200]
    assert second.startswith(b"HTTP/1.1 401"), second[:200]


@pytest.mark.parametrize("served_first", [False, True], ids=["nothing sent", "kept alive"])
def test_an_idle_connection_is_closed_after_the_idle_bound(server, served_first):
    # (a connection that sent nothing never started the read clock, and one kept alive
    # after its request had none: Twisted's idle timeout, 12 hours, held both)
    body = b'{"name": "x"}'
    request = HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        if served_first:
            sock.sendall(request)
            assert sock.recv(65536).startswith(b"HTTP/1.1 401")
        answer, after_s, closed = _until_closed(sock, within_s=IDLE_TIMEOUT_S + 5)

    assert closed, f"still open after {after_s:.1f} s"
    assert after_s > IDLE_TIMEOUT_S - 1.5  # (not at the read bound: no request was begun)
    if not served_first:
        assert answer == b""


def test_a_websocket_idle_past_the_idle_bound_stays_open(server, member):
    # (a guard, passing before the change too: once upgraded, a websocket's connection is no
    # longer timed by the HTTP channel, whose idle bound is now seconds, not 12 hours)
    browser = Client()
    browser.force_login(member)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    probe = ROOT / "tests" / "support" / "ws_probe.py"
    done = subprocess.run(
        [sys.executable, str(probe), str(server.port), cookie, "0", "0", str(IDLE_TIMEOUT_S + 2)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip

    assert json.loads(done.stdout) == {"received": ["hello", "pong"], "close": None}
