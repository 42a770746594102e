"""The web process refuses a body over ``WATTFLOW_MAX_REQUEST_BODY_BYTES`` as it arrives.

``RequestBodyLimitMiddleware`` answers 413 from the declared ``Content-Length``, but under
daphne it runs only once the whole body has been received: daphne queues every chunk of it
for the application in memory first. An eighth probe of the live service sent an anonymous
POST of 1,000 MB to ``/api/jobs/``: the 413 came after all of it (30 s), and the web
process grew from 169 MB to 1.2 GB resident meanwhile; a chunked body (no length) was read
whole the same way. ``config.serve`` now answers 413 as soon as the declared length, or
the bytes counted so far, pass the bound, and stops reading.

A real server process (``support/daphne.py``) with a bound of 64 KiB; raw sockets, so the
test sees when the answer comes.
"""

import socket
import time

import pytest
from support.daphne import serving

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

BOUND = 64 * 1024
BLOCK = b"x" * 16 * 1024


@pytest.fixture
def server(tmp_path):
    with serving(tmp_path / "daphne.log", WATTFLOW_MAX_REQUEST_BODY_BYTES=str(BOUND)) as daphne:
        yield daphne


def _answer_while_sending(port: int, head: bytes, *, chunked: bool, total: int) -> tuple:
    """Send ``head`` then up to ``total`` body bytes in blocks, reading between blocks;
    (body bytes sent when the first answer bytes came, the answer) or (total, b"")."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(head)
        sent, answer = 0, b""
        while sent < total:
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(BLOCK), BLOCK) if chunked else BLOCK)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(BLOCK)
            deadline = time.monotonic() + 0.05
            sock.setblocking(False)
            try:
                while time.monotonic() < deadline and not answer:
                    try:
                        answer = sock.recv(65536)
                    except BlockingIOError:
                        time.sleep(0.005)
            except ConnectionResetError:
                pass
            finally:
                sock.setblocking(True)
            if answer:
                return sent, answer
        sock.settimeout(5)
        try:
            answer = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            answer = b""
        return sent, answer
    finally:
        sock.close()


def _head(*, length: int | None) -> bytes:
    framing = b"Transfer-Encoding: chunked" if length is None else b"Content-Length: %d" % length
    return (
        b"POST /api/jobs/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\n" + framing + b"\r\n\r\n"
    )


def test_a_declared_length_over_the_bound_is_refused_before_the_body(server):
    sent, answer = _answer_while_sending(
        server.port, _head(length=64 * 1024 * 1024), chunked=False, total=8 * 1024 * 1024
    )

    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"at most 65536" in answer
    # answered at once, not after the body: before this, nothing came until all was sent
    assert sent <= 4 * len(BLOCK)


def test_a_client_that_waits_for_100_continue_gets_the_413_alone(server):
    head = _head(length=64 * 1024 * 1024).replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    finally:
        sock.close()

    # one answer, the refusal, and no invitation to send the body after it
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"100 Continue" not in answer


def test_a_chunked_body_over_the_bound_is_refused_as_it_passes_it(server):
    sent, answer = _answer_while_sending(
        server.port, _head(length=None), chunked=True, total=8 * 1024 * 1024
    )

    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent <= BOUND + 4 * len(BLOCK)


def test_a_body_within_the_bound_reaches_the_service(server):
    body = b'{"name": "x"}'
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        sock.sendall(_head(length=len(body)) + body)
        answer = sock.recv(65536)
    finally:
        sock.close()

    # the API's own answer to an anonymous submit
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]


def test_a_client_that_sends_the_whole_body_before_reading_gets_the_413(server):
    # Most clients send the whole body, then read the answer. Closed at once, the
    # connection reset such a client mid-send (BrokenPipeError here, "connection reset" in
    # other clients) and it never read the 413; the middleware's 413 had reached it, only
    # late. The refusal is sent, then the rest of the body read and dropped for a while
    # (never kept), then the connection closed.
    size = 32 * 1024 * 1024
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    try:
        sock.sendall(_head(length=size) + b"x" * size)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    finally:
        sock.close()

    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"at most 65536" in answer
