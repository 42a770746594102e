"""A message the web process did not receive whole within its read bound (408,
``config.serve``) is kept and sent again, as after an outage: it was quarantined as a refused
message, a valid batch set aside for good. A real server process (``support/daphne.py``)
with a read bound of 1 s; the agent's own client, its upload slowed on the wire (its JSON
sent in small chunks, a pause between them)."""

import json
import time

import pytest
from support.daphne import serving

from telemetry.agent.client import AgentClient
from telemetry.agent.spool import Spool

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def server(tmp_path):
    with serving(tmp_path / "daphne.log", WATTFLOW_REQUEST_READ_TIMEOUT_S="1") as daphne:
        yield daphne


def _slowed(session, *, chunk: int = 200, pause_s: float = 0.1):
    request = session.request

    def slow_request(method, url, **kwargs):
        body = json.dumps(kwargs.pop("json")).encode()

        def trickle():
            for start in range(0, len(body), chunk):
                yield body[start : start + chunk]
                time.sleep(pause_s)

        headers = {**kwargs.pop("headers", {}), "Content-Type": "application/json"}
        return request(method, url, data=trickle(), headers=headers, **kwargs)

    return slow_request


def test_a_batch_cut_off_by_the_read_bound_is_spooled_not_quarantined(server, tmp_path):
    spool = Spool(tmp_path / "spool")
    client = AgentClient(f"http://127.0.0.1:{server.port}", "any-token", spool)
    client.session.request = _slowed(client.session)
    samples = [{"gpu_uuid": f"GPU-{i}", "ts": "2026-12-08T00:00:00+00:00"} for i in range(60)]

    delivered = client.deliver("samples", {"samples": samples})  # (about 3 s to send)

    assert delivered is False
    assert len(spool) == 1 and spool.quarantine_status().count == 0
