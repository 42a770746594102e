"""The web process: daphne, with a bound on what a client may send.

Run it as daphne is run (``python -m config.serve -b 127.0.0.1 -p 8000
config.asgi:application``, the same options): ``Procfile.dev``, the Docker image and the
tests' servers start it. Daphne sets no frame or message size on its websocket factory and
has no option for one, so autobahn's default (none) held: a signed-in user's 5 MB frame was
read whole into memory and handed to the consumer. Here a frame or a message (fragments
together) over ``WEBSOCKET_MAX_MESSAGE_BYTES`` fails the connection as its length is read:
the rest of its payload is discarded as it arrives, not buffered, and the client gets a
close frame with 1009 (message too big; autobahn's default for a server was to drop the TCP
connection, which a browser reports as 1006, no reason). A client that does not answer the
close is dropped after autobahn's close handshake timeout (1 s).

An HTTP request body is bounded the same way, by ``WATTFLOW_MAX_REQUEST_BODY_BYTES``: daphne
reads the whole body (into a buffer, then every chunk of it into the application's queue,
in memory) before the application sees the request, so ``RequestBodyLimitMiddleware``'s 413
came only after all of it had arrived; an anonymous 1,000 MB POST took the web process from
169 MB to 1.2 GB resident (a live probe). Here a declared ``Content-Length`` over the bound,
or a chunked body once its bytes pass it, is answered 413 at once, as the middleware words
it; what the client still sends is dropped as it arrives, never kept, for
``REFUSED_LINGER_S``, and the connection is closed (``bound_request_bodies``).

A request must also arrive whole within ``WATTFLOW_REQUEST_READ_TIMEOUT_S`` of its first
line (head and body): Twisted only times a connection out after 12 hours without a byte
(its ``HTTPFactory`` default, which daphne keeps), so a client that sent half a request and
stopped, or sent a byte a minute, held its connection (and what was read of its body) for
that long; many such clients hold as many sockets. Past the bound the request is answered
408 and the connection closed. A request received whole stops its clock: the time the
application takes to answer, and an idle keep-alive connection between requests, are not
counted.

An idle connection, one open with no request begun (none yet, or kept alive after one), is
closed after ``WATTFLOW_IDLE_CONNECTION_TIMEOUT_S`` without a byte (Twisted's own idle
timeout, set on the factory: it is off while a request is answered, and a websocket's
connection is no longer the HTTP channel's). Left at Twisted's 12 hours, a client that
connected and sent nothing, never starting the read clock above, held its socket that long.
"""

from __future__ import annotations

import functools
import json
import logging

# The dashboard page sends only {"type": "ping"} (``frontend.consumers``): 64 KiB is room
# for any message it could grow to, where before no size at all was refused.
WEBSOCKET_MAX_MESSAGE_BYTES = 64 * 1024

log = logging.getLogger("config.serve")  # (run as __main__)


def bound_messages(factory) -> None:
    """Refuse frames and messages over ``WEBSOCKET_MAX_MESSAGE_BYTES`` on ``factory``'s
    connections, closing them with 1009 (and any other failed connection with its code)."""
    factory.setProtocolOptions(
        maxFramePayloadSize=WEBSOCKET_MAX_MESSAGE_BYTES,
        maxMessagePayloadSize=WEBSOCKET_MAX_MESSAGE_BYTES,
        failByDrop=False,
    )


def _too_large(declared: int | None, limit: int) -> bytes:
    """The 413 the service gives a body over ``limit`` (``RequestBodyLimitMiddleware``'s
    words), a whole HTTP/1.1 response that closes the connection."""
    size = f"{declared} bytes" if declared is not None else f"more than {limit} bytes"
    body = json.dumps({"detail": f"The request body is {size}; at most {limit} are accepted."})
    head = (
        "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return (head + body).encode()


def body_limit() -> int:
    from django.conf import settings

    return settings.WATTFLOW_MAX_REQUEST_BODY_BYTES


def read_timeout_s() -> float:
    from django.conf import settings

    return settings.WATTFLOW_REQUEST_READ_TIMEOUT_S


def idle_timeout_s() -> float:
    from django.conf import settings

    return settings.WATTFLOW_IDLE_CONNECTION_TIMEOUT_S


def _timed_out(limit_s: float) -> bytes:
    """The 408 a request not received whole within ``limit_s`` gets, closing the
    connection."""
    body = json.dumps({"detail": f"The request did not arrive whole within {limit_s:g} s."})
    head = (
        "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return (head + body).encode()


@functools.cache
def bounded_request(request_class):
    """``request_class`` (daphne's ``WebRequest``) refusing a body over ``body_limit()``:
    by its declared length before any of it is read, or, chunked, once the bytes received
    pass the bound. The refused request never reaches the application."""

    class BoundedRequest(request_class):
        _refused = False
        _received = 0
        _read_clock = None

        def __init__(self, *args, **kwargs):
            # (made by the channel at the request's first line)
            super().__init__(*args, **kwargs)
            from twisted.internet import reactor

            self._read_clock = reactor.callLater(read_timeout_s(), self._too_slow)

        def _stop_read_clock(self) -> None:
            clock, self._read_clock = self._read_clock, None
            if clock is not None and clock.active():
                clock.cancel()

        def _too_slow(self) -> None:
            self._read_clock = None
            if self._refused:
                return
            self._refused = True  # what still arrives is dropped, the request never served
            if self.content is not None:
                self.content.close()
            self.content = None
            channel = self.channel
            if channel is None or not channel.transport.connected:
                return
            log.warning(
                "408: %s %s from %s: not received whole within %g s",
                getattr(channel, "_command", None) or b"?",
                (getattr(channel, "_path", None) or b"?")[:200],
                getattr(channel.transport.getPeer(), "host", "?"), read_timeout_s(),
            )  # fmt: skip
            channel.transport.write(_timed_out(read_timeout_s()))
            channel.loseConnection()

        def connectionLost(self, reason):  # noqa: N802 - Twisted's name
            self._stop_read_clock()
            super().connectionLost(reason)

        def gotLength(self, length):  # noqa: N802 - Twisted's name
            if length is not None and length > body_limit():
                # Twisted answers "Expect: 100-continue" right after this: left in, the
                # client read a "100 Continue" after the 413, inviting the body refused.
                self.requestHeaders.removeHeader(b"Expect")
                self._refuse(length)
                return
            super().gotLength(length)

        def handleContentChunk(self, data):  # noqa: N802 - Twisted's name
            if self._refused:
                return
            self._received += len(data)
            if self._received > body_limit():
                self._refuse(None)
                return
            super().handleContentChunk(data)

        def requestReceived(self, command, path, version):  # noqa: N802 - Twisted's name
            self._stop_read_clock()
            if not self._refused:
                super().requestReceived(command, path, version)

        def _refuse(self, declared: int | None) -> None:
            self._stop_read_clock()  # (the refusal closes the connection on its own clock)
            self._refused = True
            if self.content is not None:
                self.content.close()  # what was read of it is dropped
            self.content = None
            channel = self.channel
            peer = getattr(channel.transport.getPeer(), "host", "?")
            log.warning(
                "413: %s %s from %s: body %s over the bound of %s bytes; not read",
                # (the request line is the channel's until the request is handed on)
                getattr(channel, "_command", b"?").decode(errors="replace"),
                getattr(channel, "_path", b"?").decode(errors="replace")[:200],
                peer, "declared" if declared is not None else "chunked", body_limit(),
            )  # fmt: skip
            transport = channel.transport
            transport.write(_too_large(declared, body_limit()))
            if not hasattr(transport, "loseWriteConnection"):
                channel.loseConnection()
                return
            # The answer, then the end of what is sent (the client reads the 413 and EOF);
            # what it still sends is read and dropped (``handleContentChunk``; a request
            # after it waits unparsed, paused once it fills Twisted's small buffer) for
            # ``REFUSED_LINGER_S``, then the connection is closed. Closed at once, with
            # the body still arriving, the client's send was reset and a client that
            # sends its whole body before reading (most do) never saw the 413.
            transport.loseWriteConnection()
            from twisted.internet import reactor

            reactor.callLater(REFUSED_LINGER_S, _close_if_open, channel, transport)

    return BoundedRequest


# How long a refused body's connection goes on reading (and dropping) what the client still
# sends before it is closed: time for a client that sends its whole body before reading to
# finish sending and read the 413.
REFUSED_LINGER_S = 5.0


def _close_if_open(channel, transport) -> None:
    if transport.connected:
        channel.loseConnection()


def bound_request_bodies(factory) -> None:
    """Have ``factory`` (daphne's ``HTTPFactory``) build connections whose requests refuse a
    body over ``WATTFLOW_MAX_REQUEST_BODY_BYTES`` as it arrives and a request not received
    whole within ``WATTFLOW_REQUEST_READ_TIMEOUT_S`` (``bounded_request``), and that close
    after ``WATTFLOW_IDLE_CONNECTION_TIMEOUT_S`` idle (Twisted's ``timeOut``, 12 h)."""
    factory.timeOut = idle_timeout_s()  # (``HTTPFactory.buildProtocol`` hands it on)
    build = factory.buildProtocol

    def build_protocol(addr):
        protocol = build(addr)
        if protocol is not None:
            protocol.requestFactory = bounded_request(protocol.requestFactory)
        return protocol

    factory.buildProtocol = build_protocol


def main() -> None:
    # Imported here: importing daphne's server installs Twisted's reactor, which reading
    # the bound above (the tests do) has no need of.
    from daphne.cli import CommandLineInterface
    from daphne.server import Server

    class BoundedServer(Server):
        """``Server.run`` makes its HTTP and websocket factories and listens at once: the
        bounds are set as each factory is assigned (``run`` then adds options of its own,
        leaving these)."""

        @property
        def http_factory(self):
            return self._http_factory

        @http_factory.setter
        def http_factory(self, factory) -> None:
            bound_request_bodies(factory)
            self._http_factory = factory

        @property
        def ws_factory(self):
            return self._ws_factory

        @ws_factory.setter
        def ws_factory(self, factory) -> None:
            bound_messages(factory)
            self._ws_factory = factory

    class BoundedCommandLineInterface(CommandLineInterface):
        server_class = BoundedServer

    BoundedCommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
