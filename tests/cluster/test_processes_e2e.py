"""The real processes start with the project's settings: daphne serves HTTP (pages, static
files through whitenoise) and a Celery worker answers on the Redis broker."""

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from support.daphne import Daphne
from support.polling import wait_for

from config import celery_app

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.e2e


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:  # loopback only
        return response.status, response.read()


@pytest.fixture
def process_env(tmp_path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": settings.DATABASE_URL,
            "REDIS_URL": settings.REDIS_URL,
            "WATTFLOW_VAR_DIR": str(tmp_path),
            "DJANGO_DEBUG": "true",
        }
    )
    return env


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def test_daphne_serves_the_login_page_and_static_files(process_env, tmp_path):
    # daphne's own entry point (the console script), as the Procfile and the image run it
    server = Daphne(tmp_path / "daphne.log", env=process_env, daphne=[str(VENV_BIN / "daphne")])
    server.start()
    try:
        status, body = _get(f"{server.url}/accounts/login/")
        assert status == 200
        assert b'name="username"' in body
        static_status, css = _get(f"{server.url}/static/admin/css/base.css")
        assert static_status == 200
        assert b"{" in css
        bundle = "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"
        bundle_status, js = _get(f"{server.url}{bundle}")
        assert bundle_status == 200
        assert len(js) > 100_000
    finally:
        server.stop()


def test_celery_worker_answers_a_ping_over_redis(process_env):
    name = f"e2e-{os.getpid()}@{socket.gethostname()}"
    worker = subprocess.Popen(
        [
            str(VENV_BIN / "celery"),
            "-A",
            "config",
            "worker",
            "--pool=solo",
            "--without-gossip",
            "--without-mingle",
            "-n",
            name,
            "--loglevel=WARNING",
        ],
        cwd=ROOT,
        env=process_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert celery_app.conf.broker_url == settings.REDIS_URL

        def pong() -> list:
            assert worker.poll() is None, worker.stderr.read().decode()
            return celery_app.control.ping(destination=[name], timeout=1.0)

        replies = wait_for(pong, timeout_s=45, what="the worker to answer a ping", every_s=0)

        assert replies == [{name: {"ok": "pong"}}]
    finally:
        _stop(worker)
