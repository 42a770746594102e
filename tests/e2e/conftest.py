"""Real processes for the end-to-end tests: daphne, a Celery worker, Celery beat and a
simulated node agent, all on the test database (committed data: ``transactional_db``) and
the Redis named by ``REDIS_URL``. Every process is started in its own session and its whole
group is terminated (then killed) at teardown, so no test leaves one behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from support.daphne import daphne_command, database_url, wait_until_listening
from support.net import free_port

ROOT = Path(__file__).resolve().parents[2]


class Processes:
    """Starts processes with the test database in their environment; stops them all."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.running: dict[str, subprocess.Popen] = {}
        self.env = dict(os.environ)
        self.env.update(
            {
                "DATABASE_URL": database_url(),
                "REDIS_URL": settings.REDIS_URL,
                "TELEMETRY_CHECKPOINT_ROOT": str(work_dir / "checkpoints"),
                "WATTFLOW_VAR_DIR": str(work_dir / "var"),
                "DJANGO_LOG_LEVEL": "WARNING",
            }
        )

    def start(self, name: str, args: list[str], **env: str) -> subprocess.Popen:
        log = (self.work_dir / f"{name}.log").open("wb")
        process = subprocess.Popen(
            args, cwd=ROOT, env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        self.running[name] = process
        return process

    def log(self, name: str) -> str:
        return (self.work_dir / f"{name}.log").read_text(errors="replace")

    def kill(self, name: str) -> None:
        """SIGKILL: the process gets no chance to say goodbye (a crashed node)."""
        process = self.running.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)

    def stop(self, name: str, *, grace_s: float = 15.0) -> int | None:
        process = self.running.pop(name, None)
        if process is None:
            return None
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                return process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return process.wait(timeout=grace_s)

    def stop_all(self) -> None:
        # Agents first (they report their jobs' exits), the server last.
        for name in sorted(self.running, key=lambda n: n == "web"):
            self.stop(name)

    # --- the pieces ---------------------------------------------------------------------------
    def web(self) -> str:
        port = free_port()
        web = self.start("web", daphne_command(port))
        wait_until_listening(port, process=web, timeout_s=30, log=self.work_dir / "web.log")
        return f"http://127.0.0.1:{port}"

    def celery(
        self, *, round_interval_s: int = 1, accounting_interval_s: int = 2, node_timeout_s: int = 60
    ) -> None:
        intervals = {
            "WATTFLOW_ROUND_INTERVAL_S": str(round_interval_s),
            "TELEMETRY_ACCOUNTING_INTERVAL_S": str(accounting_interval_s),
            "WATTFLOW_LIVENESS_INTERVAL_S": "2",
            "WATTFLOW_NODE_TIMEOUT_S": str(node_timeout_s),
        }
        celery = [sys.executable, "-m", "celery", "-A", "config"]
        # Old messages in this Redis database (another run's rounds) must not reach this worker.
        subprocess.run([*celery, "purge", "-f"], cwd=ROOT, env=self.env, check=True,
                       capture_output=True, timeout=60)  # fmt: skip
        worker = [*celery, "worker", "--pool", "solo", "--loglevel", "INFO"]
        self.start("worker", worker, **intervals)
        self.start(
            "beat",
            [*celery, "beat", "--loglevel", "INFO", "--schedule",
             str(self.work_dir / "celerybeat-schedule")],
            **intervals,
        )  # fmt: skip

    def agent(self, server: str, token: str, *, node: str, gpus: int) -> None:
        self.start(
            f"agent-{node}",
            [sys.executable, "-m", "telemetry.agent", "--server", server, "--name", node,
             "--simulate", "--gpus", str(gpus), "--gpu-model", "A100",
             "--work-dir", str(self.work_dir / node), "--post-interval-s", "1",
             "--assignment-interval-s", "1", "--heartbeat-interval-s", "2"],
            WATTFLOW_AGENT_TOKEN=token,
        )  # fmt: skip


@pytest.fixture
def processes(transactional_db, tmp_path):
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()
