"""The web process bounds what a websocket client may send (``config.serve``): a real server
process started as the service starts it, a real websocket client (autobahn's, in its own
process: ``support/ws_probe.py``) signed in as a member. An oversized message closes the
connection with 1009; a normal one is answered."""

import json
import re
import subprocess
import sys

import pytest
from django.conf import settings
from django.test import Client
from support.daphne import ROOT, Daphne

from config.serve import WEBSOCKET_MAX_MESSAGE_BYTES

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TOO_BIG = 1009  # RFC 6455: message too big
PROBE = ROOT / "tests" / "support" / "ws_probe.py"


@pytest.fixture
def server(tmp_path):
    daphne = Daphne(
        tmp_path / "daphne.log",
        env={"REDIS_URL": settings.REDIS_URL, "DATABASE_CONN_MAX_AGE_S": "0", "DJANGO_DEBUG": "1"},
    )
    daphne.start()
    yield daphne
    daphne.stop()


def _cookie(user) -> str:
    browser = Client()
    browser.force_login(user)
    return f"sessionid={browser.cookies['sessionid'].value}"


def _probe(port: int, cookie: str, size: int, fragment: int) -> tuple[list[str], int | None]:
    """Types of the messages the socket answered and its close code (``support/ws_probe.py``)."""
    done = subprocess.run(
        [sys.executable, str(PROBE), str(port), cookie, str(size), str(fragment)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    result = json.loads(done.stdout)
    return result["received"], result["close"]


@pytest.mark.parametrize("fragment", [0, 16 * 1024], ids=["one frame", "16 KiB fragments"])
def test_a_5_mb_message_closes_the_socket_and_a_normal_one_is_answered(server, member, fragment):
    cookie = _cookie(member)

    # a 5 MB ping, as one frame or as fragments each under the bound: closed as too big,
    # never answered
    assert _probe(server.port, cookie, 5 * 1024 * 1024, fragment) == (["hello"], TOO_BIG)

    # a ping at the bound, and a bare one, are answered and the socket stays open
    for size in (WEBSOCKET_MAX_MESSAGE_BYTES, 0):
        assert _probe(server.port, cookie, size, fragment) == (["hello", "pong"], None)


def test_the_service_starts_the_bounded_server():
    # what make run (Procfile.dev) and the Docker image start: config.serve, not bare daphne
    web = re.search(r"^web: (.*)$", (ROOT / "Procfile.dev").read_text(), re.M).group(1)
    assert web.startswith(".venv/bin/python -m config.serve ")
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert 'CMD ["python", "-m", "config.serve",' in dockerfile
