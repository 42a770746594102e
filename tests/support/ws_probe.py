"""A websocket client in its own process (autobahn on asyncio; the test process keeps
txaio free of a framework). Opens the dashboard socket of the server on 127.0.0.1:PORT with
the session cookie, waits for its hello, sends a ping padded to SIZE bytes (in fragments of
FRAGMENT bytes; 0: one frame), and prints as JSON the types of the messages received within
10 s and the close code (null where the server did not close the socket). DELAY (seconds,
0 unless given): how long the socket stays idle after the hello before the ping is sent.

    python tests/support/ws_probe.py PORT COOKIE SIZE FRAGMENT [DELAY]
"""

import asyncio
import json
import sys

from autobahn.asyncio.websocket import WebSocketClientFactory, WebSocketClientProtocol


def padded_ping(size: int) -> bytes:
    """A ping the page could send, ``size`` bytes long (at least a bare ping's)."""
    bare = json.dumps({"type": "ping", "pad": ""})
    return json.dumps({"type": "ping", "pad": "x" * max(0, size - len(bare))}).encode()


async def probe(port: int, cookie: str, message: bytes, fragment: int, delay: float = 0) -> dict:
    loop = asyncio.get_running_loop()
    closed: asyncio.Future = loop.create_future()
    answered: asyncio.Future = loop.create_future()
    received: list[str] = []

    class Probe(WebSocketClientProtocol):
        def onMessage(self, payload, isBinary):
            received.append(json.loads(payload)["type"])
            if len(received) == 1:  # the hello: now send (after ``delay``)
                self.autoFragmentSize = fragment
                loop.call_later(delay, self.sendMessage, message)
            elif not answered.done():
                answered.set_result(None)

        def onClose(self, wasClean, code, reason):
            if not closed.done():
                closed.set_result(code)

    factory = WebSocketClientFactory(
        f"ws://127.0.0.1:{port}/ws/dashboard/",
        origin="http://127.0.0.1",
        headers={"Cookie": cookie},
    )
    factory.protocol = Probe
    transport, _ = await loop.create_connection(factory, "127.0.0.1", port)
    try:
        await asyncio.wait(
            {closed, answered}, timeout=10 + delay, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        transport.close()
    return {"received": received, "close": closed.result() if closed.done() else None}


if __name__ == "__main__":
    port, cookie, size, fragment = sys.argv[1:5]
    delay = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    result = asyncio.run(probe(int(port), cookie, padded_ping(int(size)), int(fragment), delay))
    sys.stdout.write(json.dumps(result) + "\n")
