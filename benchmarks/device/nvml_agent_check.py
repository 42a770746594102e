"""The node agent's NVML path on a real GPU, in one run that leaves the GPU's settings alone.

    python3 benchmarks/device/nvml_agent_check.py --out DIR [--agent-s 60] [--sweep-s 5]
        [--workloads mlp,cnn] [--sweep-file sweep.json] [--skip-agent]

Written for a borrowed GPU machine (the ``device`` tool), where the service itself cannot
run: no PostgreSQL, and nothing outside the machine can be reached. Three parts:

1. ``nvml_check --read-only``: what the agent registers for each GPU, and a few readings.
2. The agent itself (``telemetry.agent.loop.Agent`` with the real ``NvmlBackend`` and the
   process runner) against a local HTTP endpoint that answers as the agent API does and
   records every request: it registers, samples, heartbeats, fetches one assignment, runs
   ``torch_job.py`` on GPU 0 through ``jobclient/wattflow_client.py`` until it finishes,
   and reports its progress and exit. The backend's ``apply_settings`` and
   ``restore_defaults`` are recorded and not sent to the driver: the machine is shared,
   and its power limit and clocks are not ours to change. Requests go to
   ``DIR/agent_requests.jsonl``; ``tests/telemetry/test_device_recording.py`` posts them to
   the real service.
3. A sweep: the GPU idle, then training workloads (``--workloads``, of
   ``sweep_workloads``: MLPs, CNNs, a transformer encoder, an LSTM) at per-GPU batch
   16-1024, each for ``--sweep-s`` seconds, timed on the GPU and metered by the backend's
   readings (NVML's energy counter; the mean of power samples as a check). Written to
   ``DIR/sweep.json`` (``--sweep-file``) for ``benchmarks/bench_device_sweep.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from telemetry.agent import nvml_check  # noqa: E402
from telemetry.agent.backends import NvmlBackend  # noqa: E402
from telemetry.agent.client import AgentClient  # noqa: E402
from telemetry.agent.loop import Agent, AgentConfig  # noqa: E402
from telemetry.agent.runners import make_runner  # noqa: E402
from telemetry.agent.spool import Spool  # noqa: E402


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class ReadOnlyNvml(NvmlBackend):
    """The real backend, except that settings are recorded instead of applied."""

    def __init__(self) -> None:
        super().__init__()
        self.settings_calls: list[tuple] = []

    def apply_settings(self, index, *, sm_clock_mhz, power_limit_w):  # type: ignore[override]
        self.settings_calls.append(("apply", index, sm_clock_mhz, power_limit_w))

    def restore_defaults(self, index):  # type: ignore[override]
        self.settings_calls.append(("restore", index))


def job_events(log: list[dict]) -> list[dict]:
    return [e for r in log if r["path"].endswith("job-events/") for e in r["body"]["events"]]


def recording_server(log: list[dict], assignment) -> ThreadingHTTPServer:
    """An endpoint that answers the agent API's five calls and keeps each request;
    ``assignment(log)`` is the job's assignment now (None: none)."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            log.append({"t": time.time(), "method": "GET", "path": self.path})
            current = assignment(log)
            self._answer(200, {"assignments": [] if current is None else [current], "stop": []})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            log.append({"t": time.time(), "method": "POST", "path": self.path, "body": body})
            self._answer(200, {"ok": True})

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run_agent(
    out: Path,
    seconds: float,
    iterations: int,
    batch: int,
    *,
    resize_s: float | None = None,
    requests_file: str = "agent_requests.jsonl",
) -> dict:
    """The agent runs one job to completion. With ``resize_s``: after ``resize_s`` seconds
    of the job's first assignment the job gets a new allocation of the same shape (the
    agent retunes it in place: no restart, no ``started`` report), and after twice that
    one at twice the batch (the agent stops it, it checkpoints, and starts again)."""
    log: list[dict] = []
    backend = ReadOnlyNvml()
    gpu = backend.gpus()[0]
    first = {
        "job_id": 1,
        "allocation_id": 1,
        "gpu_uuids": [gpu.uuid],
        "workload": "device_mlp",
        "batch_size": batch,
        "total_iterations": iterations,
        "completed_iterations": 0,
        "sm_clock_mhz": None,
        "power_limit_w": None,
        "command": f"exec {sys.executable} {ROOT / 'benchmarks/device/torch_job.py'}",
        "env": {"WATTFLOW_TOTAL_ITERATIONS": iterations},
    }
    assigned_at: float | None = None  # when the agent first asked

    def assignment(log: list[dict]) -> dict | None:
        events = job_events(log)
        if any(e["kind"] == "exited" and e.get("reason") == "completed" for e in events):
            return None
        nonlocal assigned_at
        now = time.time()
        assigned_at = assigned_at or now
        elapsed = now - assigned_at
        if resize_s is None or elapsed < resize_s:
            return first
        if elapsed < 2 * resize_s:
            return first | {"allocation_id": 2}
        stops = [e for e in events if e["kind"] == "exited"]
        reports = [e["iterations"] or 0.0 for e in events if e["kind"] == "progress"]
        done = (stops[-1]["iterations"] if stops else None) or max(reports, default=0.0)
        # Counted on at twice the batch: the same samples in half the iterations, as the
        # server recounts them (without the statistical efficiency it would also apply).
        done, total = done / 2, iterations / 2
        env = {"WATTFLOW_TOTAL_ITERATIONS": total, "WATTFLOW_COMPLETED_ITERATIONS": done}
        return first | {
            "allocation_id": 3,
            "batch_size": 2 * batch,
            "total_iterations": total,
            "completed_iterations": done,
            "env": env,
        }

    server = recording_server(log, assignment)
    work = Path(tempfile.mkdtemp(prefix="wattflow-agent-"))
    config = AgentConfig(
        node_name="device-h100",
        work_dir=work,
        sample_interval_s=0.5,
        post_interval_s=2.0,
        heartbeat_interval_s=5.0,
        assignment_interval_s=2.0,
        stop_grace_s=10.0,
    )
    address = f"http://127.0.0.1:{server.server_port}"
    client = AgentClient(address, "device-token", Spool(work / "spool"))
    runner = make_runner("process", backend, work_dir=work, stop_grace_s=10.0)
    agent = Agent(backend, client, config, runner=runner)
    thread = threading.Thread(target=agent.run, daemon=True)
    started = time.time()
    thread.start()
    while time.time() - started < seconds:
        events = job_events(log)
        if any(e["kind"] == "exited" and e.get("reason") == "completed" for e in events):
            break
        time.sleep(0.5)
    time.sleep(2.5)  # one more post of samples after the exit
    agent.stopping.set()
    thread.join(timeout=30)
    server.shutdown()
    with (out / requests_file).open("w") as f:
        for r in log:
            f.write(json.dumps(r) + "\n")
    job_log = work / "jobs" / "1" / "log.txt"
    tail = job_log.read_text()[-2000:] if job_log.exists() else "(no job log)"
    events = job_events(log)
    samples = [s for r in log if r["path"].endswith("samples/") for s in r["body"]["samples"]]
    return {
        "seconds": round(time.time() - started, 1),
        "requests": {p: sum(r["path"] == p for r in log) for p in sorted({r["path"] for r in log})},
        "events": [
            (e["kind"], e.get("allocation_id"), e.get("reason"), e.get("iterations"))
            for e in events
        ],
        "samples": len(samples),
        "power_w_max": max((s["power_w"] for s in samples), default=None),
        "settings_calls": backend.settings_calls,
        "job_log_tail": tail,
    }


def sweep_workloads(torch, dev: str) -> dict:
    """Name -> (model, batch maker): small training workloads of different kinds. The batch
    maker gives inputs and class labels for a batch of ``b`` samples."""
    nn = torch.nn

    def labels(b: int, classes: int):
        return torch.randint(0, classes, (b,), device=dev)

    class Tokens(nn.Module):  # a transformer encoder over 128-token sequences
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(8000, 512)
            layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 4)
            self.head = nn.Linear(512, 10)

        def forward(self, x):
            return self.head(self.encoder(self.embed(x)).mean(dim=1))

    class Recurrent(nn.Module):  # a two-layer LSTM over 64 steps
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(256, 1024, num_layers=2, batch_first=True)
            self.head = nn.Linear(1024, 10)

        def forward(self, x):
            return self.head(self.lstm(x)[0][:, -1])

    def block(cin: int, cout: int) -> list:
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    mlp = nn.Sequential(
        nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 1000)
    )
    cnn = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 100),
    )  # fmt: skip
    wide = nn.Sequential(
        nn.Linear(8192, 8192), nn.GELU(), nn.Linear(8192, 8192), nn.GELU(), nn.Linear(8192, 1000)
    )
    convnet = nn.Sequential(
        *block(3, 64), *block(64, 64), nn.MaxPool2d(2), *block(64, 128), *block(128, 128),
        nn.MaxPool2d(2), *block(128, 256), *block(256, 256), nn.MaxPool2d(2), *block(256, 512),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10),
    )  # fmt: skip
    return {
        "mlp": (mlp.to(dev), lambda b: (torch.randn(b, 4096, device=dev), labels(b, 1000))),
        "cnn": (cnn.to(dev), lambda b: (torch.randn(b, 3, 64, 64, device=dev), labels(b, 100))),
        "mlp_wide": (wide.to(dev), lambda b: (torch.randn(b, 8192, device=dev), labels(b, 1000))),
        "convnet": (
            convnet.to(dev),
            lambda b: (torch.randn(b, 3, 32, 32, device=dev), labels(b, 10)),
        ),  # fmt: skip
        "transformer": (
            Tokens().to(dev),
            lambda b: (torch.randint(0, 8000, (b, 128), device=dev), labels(b, 10)),
        ),  # fmt: skip
        "lstm": (
            Recurrent().to(dev),
            lambda b: (torch.randn(b, 64, 256, device=dev), labels(b, 10)),
        ),  # fmt: skip
    }


def sweep(out: Path, seconds: float, names: list[str], filename: str) -> dict:
    import torch

    backend = NvmlBackend()
    stop = threading.Event()
    samples: list[tuple[float, float, float, int]] = []  # (t, power W, util %, SM MHz)

    def sample() -> None:
        while not stop.is_set():
            r = backend.read(datetime.now(UTC))[0]
            samples.append((time.time(), r.power_w, r.util_pct, r.sm_clock_mhz))
            time.sleep(0.1)

    def meter(fn, duration: float) -> dict:
        fn()
        torch.cuda.synchronize()
        t0, e0 = time.time(), backend.read(datetime.now(UTC))[0].energy_j
        iters = 0
        while time.time() - t0 < duration:
            fn()
            iters += 1
            torch.cuda.synchronize()
        t1, e1 = time.time(), backend.read(datetime.now(UTC))[0].energy_j
        window = [s for s in samples if t0 <= s[0] <= t1]
        mean_w = statistics.fmean(s[1] for s in window) if window else None
        return {
            "iterations": iters,
            "seconds": t1 - t0,
            "iter_time_s": (t1 - t0) / max(iters, 1),
            "energy_j": None if e0 is None or e1 is None else e1 - e0,
            "mean_power_w": mean_w,
            "util_pct": statistics.fmean(s[2] for s in window) if window else None,
            "sm_clock_mhz": statistics.median(s[3] for s in window) if window else None,
        }

    threading.Thread(target=sample, daemon=True).start()
    time.sleep(0.3)
    gpu = backend.gpus()[0]
    idle = meter(lambda: time.sleep(0.05), seconds)
    result: dict = {"gpu": gpu.to_wire(), "idle": idle, "runs": []}
    dev = "cuda"
    torch.manual_seed(0)

    def trainer(model, make_batch):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            x, y = make_batch()
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=dev, dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x).float(), y)
            loss.backward()
            opt.step()

        return step

    workloads = {n: w for n, w in sweep_workloads(torch, dev).items() if n in names}
    for name, (model, data) in workloads.items():
        for batch in (16, 32, 64, 128, 256, 512, 1024):
            step = trainer(model, lambda b=batch, d=data: d(b))
            row = {"workload": name, "batch": batch, **meter(step, seconds)}
            result["runs"].append(row)
            say(
                f"  {name:4s} batch {batch:5d}: {row['iter_time_s'] * 1e3:8.2f} ms/iter, "
                f"{row['energy_j'] / row['iterations']:8.3f} J/iter, "
                f"{row['mean_power_w']:6.1f} W, util {row['util_pct']:5.1f}%, "
                f"SM {row['sm_clock_mhz']} MHz"
            )
    stop.set()
    backend.close()
    (out / filename).write_text(json.dumps(result, indent=1))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--agent-s", type=float, default=60.0)
    parser.add_argument("--agent-iterations", type=int, default=1500)
    parser.add_argument("--agent-batch", type=int, default=512)
    parser.add_argument("--sweep-s", type=float, default=5.0)
    parser.add_argument("--workloads", default="mlp,cnn", help="comma-separated, of the sweep")
    parser.add_argument("--sweep-file", default="sweep.json")
    parser.add_argument("--skip-agent", action="store_true", help="parts 1 and 3 only")
    parser.add_argument(
        "--resize-s", type=float, default=None, help="retune, then resize, the agent's job"
    )
    parser.add_argument("--requests-file", default="agent_requests.jsonl")
    parser.add_argument("--skip-sweep", action="store_true", help="parts 1 and 2 only")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    say("== 1. nvml_check --read-only")
    status = nvml_check.run(None, gpu=0, samples=3, out=sys.stdout, pause_s=0.5, read_only=True)
    say(f"nvml_check exit {status}")
    if not args.skip_agent:
        say("== 2. the agent with the process runner")
        summary = run_agent(
            args.out,
            args.agent_s,
            args.agent_iterations,
            args.agent_batch,
            resize_s=args.resize_s,
            requests_file=args.requests_file,
        )
        summary_file = Path(args.requests_file).stem.replace("requests", "summary") + ".json"
        (args.out / summary_file).write_text(json.dumps(summary, indent=1, default=str))
        say(json.dumps({k: v for k, v in summary.items() if k != "job_log_tail"}, default=str))
        say(summary["job_log_tail"][-600:])
    if args.skip_sweep:
        return 0
    say("== 3. sweep")
    result = sweep(args.out, args.sweep_s, args.workloads.split(","), args.sweep_file)
    idle = result["idle"]
    say(
        f"  idle: {idle['mean_power_w']:.1f} W mean, "
        f"{idle['energy_j'] / idle['seconds']:.1f} W by counter"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
