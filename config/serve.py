"""The web process: daphne, with a bound on what a websocket client may send.

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
"""

from __future__ import annotations

# The dashboard page sends only {"type": "ping"} (``frontend.consumers``): 64 KiB is room
# for any message it could grow to, where before no size at all was refused.
WEBSOCKET_MAX_MESSAGE_BYTES = 64 * 1024


def bound_messages(factory) -> None:
    """Refuse frames and messages over ``WEBSOCKET_MAX_MESSAGE_BYTES`` on ``factory``'s
    connections, closing them with 1009 (and any other failed connection with its code)."""
    factory.setProtocolOptions(
        maxFramePayloadSize=WEBSOCKET_MAX_MESSAGE_BYTES,
        maxMessagePayloadSize=WEBSOCKET_MAX_MESSAGE_BYTES,
        failByDrop=False,
    )


def main() -> None:
    # Imported here: importing daphne's server installs Twisted's reactor, which reading
    # the bound above (the tests do) has no need of.
    from daphne.cli import CommandLineInterface
    from daphne.server import Server

    class BoundedServer(Server):
        """``Server.run`` makes its websocket factory and listens at once: the bound is set
        as the factory is assigned (``run`` then adds options of its own, leaving these)."""

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
