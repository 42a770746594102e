"""The README's commands need nothing beforehand (issue 17, point 8): pointed at ports where
no PostgreSQL and no Redis listen, ``scripts/bootstrap.sh`` creates a PostgreSQL cluster on
the configured port, starts Redis there, creates the database and migrates it.

Runs the real script against the machine's PostgreSQL installation, so it needs root and
Debian's ``pg_createcluster``; it removes what it made."""

import os
import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest
import redis
from support.net import free_port

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("pg_createcluster") is None,
    reason="creates a PostgreSQL cluster: needs root and Debian's postgresql-common",
)


def _clusters() -> str:
    return subprocess.run(
        ["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=True
    ).stdout


def test_bootstrap_creates_and_starts_postgresql_and_redis_on_unused_ports():
    pg_port, redis_port = free_port(), free_port()
    name = f"wattflow{pg_port}"
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{pg_port}/wattflow_fresh",
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
    }
    try:
        first = subprocess.run(
            ["bash", "scripts/bootstrap.sh"], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert first.returncode == 0, first.stdout + first.stderr
        assert "creating PostgreSQL" in first.stdout and f"on port {pg_port}" in first.stdout
        assert name in _clusters()
        with psycopg.connect(
            host="127.0.0.1", port=pg_port, user="postgres", dbname="wattflow_fresh"
        ) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE tablename = 'cluster_job'"
            ).fetchone()
        assert tables == (1,)
        assert redis.Redis(host="127.0.0.1", port=redis_port).ping()

        # and a second run finds the stopped cluster on its port and starts it again
        version = _clusters().split(name)[0].split()[-1]
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, "stop"], check=True
        )
        again = subprocess.run(
            ["bash", "scripts/bootstrap.sh"], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert again.returncode == 0, again.stdout + again.stderr
        assert "creating PostgreSQL" not in again.stdout
        assert f"starting local PostgreSQL {version}/{name}" in again.stdout
    finally:
        for line in _clusters().splitlines():
            fields = line.split()
            if fields[1] == name:
                subprocess.run(["pg_dropcluster", "--stop", fields[0], name], check=False)
        try:
            redis.Redis(host="127.0.0.1", port=redis_port).shutdown(nosave=True)
        except redis.exceptions.ConnectionError:
            pass
