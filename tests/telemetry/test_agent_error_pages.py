"""A server answer that is not the agent API's JSON (a wrong ``--server`` path, a proxy's
error page) becomes one line: the status, the URL and the page's title or first line."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from telemetry.agent.client import AgentClient
from telemetry.agent.spool import Rejected, Spool

NOT_FOUND_PAGE = (
    '<!DOCTYPE html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">\n'
    "  <title>Page not found at /wrong/api/agent/register/</title>\n</head>\n<body>\n"
    + "  <p>Using the URLconf defined in config.urls, Django tried these patterns</p>\n" * 40
    + "</body>\n</html>\n"
)


@pytest.fixture
def answering():
    """``answering(status, content_type, body)``: the URL of a server that answers every
    request so."""
    servers = []

    def start(status: int, content_type: str, body: str) -> str:
        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body.encode())))
                self.end_headers()
                self.wfile.write(body.encode())

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_an_agent_pointed_at_a_wrong_path_stops_with_one_line(answering, tmp_path, capsys):
    from telemetry.agent.__main__ import main

    # given a --server whose path is not the site's root (Django's 404 page, 49 lines)
    server = answering(404, "text/html; charset=utf-8", NOT_FOUND_PAGE) + "/wrong"

    # when the agent starts
    status = main(
        ["--server", server, "--token", "t", "--simulate", "--gpus", "1",
         "--work-dir", str(tmp_path)]
    )  # fmt: skip

    # then it stops with one line: the status, the URL, the page's title, and what to check
    assert status == 1
    assert capsys.readouterr().err == (
        f"agent: POST {server}/api/agent/register/: HTTP 404 Page not found at "
        f"/wrong/api/agent/register/: no agent API there; is --server {server} the site's "
        "root (such as http://host:8000)?\n"
    )


def test_a_non_json_refusal_is_its_first_line_cut_short(answering, tmp_path):
    # given a proxy that refuses with a long plain-text page
    server = answering(413, "text/plain", "\n  " + "Request Entity Too Large " * 20 + "\nmore\n")
    client = AgentClient(server, "t", Spool(tmp_path / "spool"))

    # when the agent posts to it
    with pytest.raises(Rejected) as refused:
        client.post("heartbeat", {"ts": "2026-01-01T00:00:00+00:00"})

    # then the refusal is the first non-blank line, cut to 120 characters
    reason = ("Request Entity Too Large " * 5)[:117] + "..."
    assert refused.value.reason == reason
    assert str(refused.value) == f"POST {server}/api/agent/heartbeat/: HTTP 413 {reason}"
    assert refused.value.data is None
