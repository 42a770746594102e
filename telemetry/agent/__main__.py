"""``python -m telemetry.agent --server URL --token TOKEN [--simulate --gpus 8 --gpu-model A100]
[--runner process|simulated|none] [--handoff-dir DIR]``

Runs the Wattflow node agent until SIGTERM or Ctrl-C; on exit it stops its jobs (they
checkpoint), puts back the clocks and power limits it changed and flushes its buffer.
The token may also come from ``WATTFLOW_AGENT_TOKEN`` (keeps it out of ``ps``).

``--runner`` says who runs the jobs: ``process`` (the default with real GPUs), ``simulated``
(the default with ``--simulate``) or ``none`` (Slurm runs them: monitor mode, with
``--handoff-dir`` the directory the Slurm Prolog writes into; see ``monitor.py``).
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import math
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from telemetry.agent.client import AgentClient
from telemetry.agent.loop import Agent, AgentConfig
from telemetry.agent.monitor import HandoffWatcher
from telemetry.agent.runners import RUNNER_NAMES, default_runner_name, make_runner
from telemetry.agent.spool import DEFAULT_MAX_SERVER_ERRORS, Rejected, Spool

# Each interval (sampling, posting, heartbeat, asking for assignments) in seconds: NVML's
# power counter moves every few tens of milliseconds, so faster sampling only fills the
# spool (1e-9 s wrote 117 MB of quarantine in 15 s), and a node heard from less than hourly
# is long since marked silent.
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 3600.0


class _OneLineParser(argparse.ArgumentParser):
    """A bad argument is one line on stderr and exit 2 (argparse prints its whole usage
    first, 14 lines here); ``--help`` still shows the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _OneLineParser(prog="python -m telemetry.agent", description=__doc__)
    parser.add_argument("--server", required=True, help="e.g. http://127.0.0.1:8000")
    parser.add_argument("--token", default=os.environ.get("WATTFLOW_AGENT_TOKEN", ""))
    parser.add_argument("--name", default=socket.gethostname(), help="node name to register")
    parser.add_argument("--work-dir", type=Path, default=Path("var/agent"))
    parser.add_argument("--simulate", action="store_true", help="no driver: simulated GPUs")
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPU count")
    parser.add_argument("--gpu-model", default="A100", help="simulated GPU model (perf key)")
    parser.add_argument(
        "--runner",
        choices=RUNNER_NAMES,
        default=None,
        help="who runs jobs: process (default), simulated (default with --simulate), "
        "none (Slurm runs them; the agent only monitors)",
    )
    parser.add_argument(
        "--handoff-dir",
        type=Path,
        default=None,
        help="with --runner none: the Slurm Prolog's handoff directory (it reads DIR/<name>/)",
    )
    parser.add_argument("--sample-interval-s", type=float, default=1.0)
    parser.add_argument("--post-interval-s", type=float, default=5.0)
    parser.add_argument("--heartbeat-interval-s", type=float, default=15.0)
    parser.add_argument("--assignment-interval-s", type=float, default=5.0)
    parser.add_argument("--stop-grace-s", type=float, default=30.0)
    parser.add_argument(
        "--max-server-errors",
        type=int,
        default=DEFAULT_MAX_SERVER_ERRORS,
        help="server errors (500 and the like) in a row that quarantine a spooled message",
    )
    parser.add_argument(
        "--requeue-quarantine",
        action="store_true",
        help="put the quarantined messages back in the spool, then run",
    )
    args = parser.parse_args(argv)
    server = urlsplit(args.server)
    if server.scheme not in ("http", "https") or not server.netloc:
        # (the first request ended in a 35-line traceback)
        parser.error(f"--server {args.server!r} is not an http(s) URL such as http://host:8000")
    for path in (args.work_dir, args.work_dir / "spool"):
        if path.exists() and not path.is_dir():
            parser.error(f"--work-dir: {path} is not a directory")
    if not args.token:
        parser.error("--token (or WATTFLOW_AGENT_TOKEN) is required")
    if args.gpus < 1:
        parser.error("--gpus must be at least 1")
    for option in (
        "sample_interval_s",
        "post_interval_s",
        "heartbeat_interval_s",
        "assignment_interval_s",
    ):
        value = getattr(args, option)
        if not (MIN_INTERVAL_S <= value <= MAX_INTERVAL_S):
            parser.error(
                f"--{option.replace('_', '-')} must be between {MIN_INTERVAL_S:g} and "
                f"{MAX_INTERVAL_S:g} seconds"
            )
    if not (args.stop_grace_s >= 0 and math.isfinite(args.stop_grace_s)):
        parser.error("--stop-grace-s must be a finite number, not negative")
    if args.max_server_errors < 1:
        parser.error("--max-server-errors must be at least 1")
    if args.runner == "simulated" and not args.simulate:
        parser.error("--runner simulated needs --simulate (simulated jobs run on simulated GPUs)")
    if args.handoff_dir is not None and args.runner != "none":
        parser.error("--handoff-dir is for monitor mode: add --runner none")
    if args.handoff_dir is not None and args.handoff_dir.exists() and not args.handoff_dir.is_dir():
        parser.error(f"--handoff-dir {args.handoff_dir} is not a directory")
    if args.handoff_dir is not None and "/" in args.name:
        parser.error("--name must not contain '/' (it names the handoff subdirectory)")
    return args


def _lock_work_dir(work_dir: Path) -> Any | None:
    """The open lock file of ``work_dir`` (held while the process lives), or None where
    another agent holds it: two agents on one work dir would share a spool and put back each
    other's GPU settings (``gpu_settings.json``)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    handle = open(work_dir / "agent.lock", "a")  # noqa: SIM115 - held until the process ends
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    lock = _lock_work_dir(args.work_dir)
    if lock is None:
        sys.stderr.write(
            f"agent: another agent runs with --work-dir {args.work_dir} (it holds its lock); "
            "give each agent its own\n"
        )
        return 2
    try:
        return _run(args)
    finally:
        lock.close()  # the lock goes with it


def _run(args: argparse.Namespace) -> int:
    if args.simulate:
        from telemetry.agent.simulated import PerfModelUnavailable, SimulatedBackend

        try:
            backend = SimulatedBackend(
                node_name=args.name, n_gpus=args.gpus, gpu_model=args.gpu_model
            )
        except PerfModelUnavailable as exc:
            sys.stderr.write(f"agent: cannot simulate: {exc}\n")
            return 2
    else:
        import pynvml

        from telemetry.agent.backends import NoUsableGpu, NvmlBackend

        try:
            backend = NvmlBackend(state_file=args.work_dir / "gpu_settings.json")
        except pynvml.NVMLError as exc:
            sys.stderr.write(f"agent: NVML is not usable here ({exc}); --simulate runs without\n")
            return 2
        except NoUsableGpu as exc:
            sys.stderr.write(f"agent: {exc}\n")
            return 2
    config = AgentConfig(
        node_name=args.name,
        work_dir=args.work_dir,
        sample_interval_s=args.sample_interval_s,
        post_interval_s=args.post_interval_s,
        heartbeat_interval_s=args.heartbeat_interval_s,
        assignment_interval_s=args.assignment_interval_s,
        stop_grace_s=args.stop_grace_s,
    )
    spool = Spool(args.work_dir / "spool", max_server_errors=args.max_server_errors)
    if args.requeue_quarantine:
        logging.info("requeued %d quarantined messages", spool.requeue())
    client = AgentClient(args.server, args.token, spool)
    runner = make_runner(
        args.runner or default_runner_name(backend),
        backend,
        work_dir=args.work_dir,
        stop_grace_s=args.stop_grace_s,
    )
    handoffs = None if args.handoff_dir is None else HandoffWatcher(args.handoff_dir, args.name)
    agent = Agent(backend, client, config, runner=runner, handoffs=handoffs)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: agent.stopping.set())
    try:
        agent.run()
    except Rejected as exc:
        if exc.status == 404:
            # No agent API at that URL: a --server with a path, or another site.
            sys.stderr.write(
                f"agent: {exc}: no agent API there; is --server {args.server} the site's "
                "root (such as http://host:8000)?\n"
            )
            return 1
        # The server refused the registration (bad token, GPUs of another node): retrying
        # cannot help, so stop with one line saying why.
        sys.stderr.write(f"agent: {args.server} refused the registration: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
