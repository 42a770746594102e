"""A real Slurm 22.05 for the Slurm executor's tests: ``scripts/slurm.sh up`` once per session
(installing the Debian packages when missing), ``down`` at the end.

Where the packages truly cannot be installed (not root, no apt), the tests skip with one
loud line; everywhere else a failure to bring Slurm up fails them.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import timezone
from support.daphne import Daphne
from support.polling import wait_for

from cluster.models import Gpu, Node
from scheduling.executors.slurm import SlurmExecutor
from scheduling.executors.slurm_cli import SlurmCli, SlurmJobInfo
from scheduling.models import SchedulerSettings

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm.sh"
CANNOT_INSTALL = 3  # scripts/slurm.sh's exit status when the packages cannot be installed


@pytest.fixture(scope="session")
def slurm_cluster() -> dict[str, str]:
    state = Path(os.environ.get("WATTFLOW_SLURM_TEST_DIR", ROOT / "var" / "slurm-test"))
    done = subprocess.run(
        ["bash", str(SCRIPT), "up", str(state)], capture_output=True, text=True, timeout=300
    )
    if done.returncode == CANNOT_INSTALL:
        pytest.skip(
            "SLURM TESTS SKIPPED: Slurm's packages cannot be installed here: "
            + done.stderr.strip().splitlines()[-1]
        )
    assert done.returncode == 0, f"scripts/slurm.sh up failed:\n{done.stderr}"
    env = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    env["STATE_DIR"] = str(state)
    yield env
    subprocess.run(["bash", str(SCRIPT), "down", str(state)], capture_output=True, timeout=120)


@pytest.fixture
def slurm_cli(slurm_cluster) -> SlurmCli:
    return SlurmCli(conf=slurm_cluster["WATTFLOW_SLURM_CONF"], timeout_s=30)


@pytest.fixture
def slurm_settings(settings, slurm_cluster, tmp_path):
    """The live service switched to the Slurm executor of the session's cluster."""
    settings.WATTFLOW_EXECUTOR = "slurm"
    settings.WATTFLOW_SLURM_CONF = slurm_cluster["WATTFLOW_SLURM_CONF"]
    settings.WATTFLOW_SLURM_PARTITION = slurm_cluster["WATTFLOW_SLURM_PARTITION"]
    settings.WATTFLOW_SLURM_ACCOUNT = slurm_cluster["WATTFLOW_SLURM_ACCOUNT"]
    settings.WATTFLOW_SLURM_OUTPUT_DIR = str(tmp_path / "out")
    settings.TELEMETRY_CHECKPOINT_ROOT = str(tmp_path / "checkpoints")
    return settings


@pytest.fixture
def executor(slurm_settings) -> SlurmExecutor:
    return SlurmExecutor.from_settings()


@pytest.fixture(autouse=True)
def _empty_queue(request):
    """Each test starts and ends with no job in Slurm and both nodes back in service."""
    if "slurm_cluster" not in request.fixturenames:
        yield
        return
    cli = request.getfixturevalue("slurm_cli")
    _clear(cli)
    yield
    _clear(cli)


def _clear(cli: SlurmCli) -> None:
    cli.run("scancel", "--partition=gpu", "--full")
    for node in cli.nodes():
        if {"DRAIN", "DRAINED", "DRAINING"} & set(node.flags):
            cli.run("scontrol", "update", f"NodeName={node.name}", "State=RESUME")
    wait_for(lambda: not [j for j in cli.jobs() if j.active], what="an empty queue", timeout_s=30)


def read_text(path: str | Path) -> str:
    """The file's text, or "" while it does not exist yet."""
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return ""


def slurm_job(cli: SlurmCli, slurm_id: int) -> SlurmJobInfo | None:
    return next((j for j in cli.jobs() if j.job_id == slurm_id), None)


@pytest.fixture
def slurm_nodes(make_node) -> list[Node]:
    """Wattflow's view of the two Slurm nodes, heard from just now."""
    nodes = [make_node("n1", gpus=8), make_node("n2", gpus=8)]
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(last_heartbeat_at=timezone.now())
    return nodes


@pytest.fixture
def fifo(db):
    config = SchedulerSettings.load()
    config.policy = "fifo"
    config.save()
    return config


@pytest.fixture
def wattflow_server(transactional_db, slurm_settings, tmp_path):
    """A daphne of this checkout on the test database (the agents talk to it); its URL."""
    server = Daphne(
        tmp_path / "daphne.log",
        env={"TELEMETRY_CHECKPOINT_ROOT": slurm_settings.TELEMETRY_CHECKPOINT_ROOT},
    ).start(timeout_s=60)
    try:
        yield server.url
    finally:
        server.stop(grace_s=20)


@pytest.fixture
def monitor_agents(slurm_cluster, wattflow_server, tmp_path):
    """Simulated 8-GPU agents in monitor mode (``--runner none``) for the Slurm nodes n1 and
    n2, as ``docs/slurm-node.md`` runs them on real nodes: they read the handoff directory the
    Prolog of ``scripts/slurm.sh`` writes to. Returns the two registered nodes."""
    agents, logs, nodes = [], [], []
    try:
        for name in ("n1", "n2"):
            node = Node.objects.create(name=name, switch_label="switch-1", gpu_model="A100")
            log = open(tmp_path / f"agent-{name}.log", "w")  # noqa: SIM115 - closed below
            logs.append(log)
            agents.append(subprocess.Popen(
                [sys.executable, "-m", "telemetry.agent", "--server", wattflow_server,
                 "--name", name, "--simulate", "--gpus", "8", "--gpu-model", "A100",
                 "--runner", "none", "--handoff-dir", slurm_cluster["WATTFLOW_HANDOFF_DIR"],
                 "--work-dir", str(tmp_path / f"agent-{name}"), "--post-interval-s", "1"],
                cwd=ROOT, env={**os.environ, "WATTFLOW_AGENT_TOKEN": node.issue_agent_token()},
                stdout=log, stderr=subprocess.STDOUT,
            ))  # fmt: skip
            nodes.append(node)
        for node in nodes:
            wait_for(lambda n=node: Gpu.objects.filter(node=n).count() == 8,
                     what=f"{node.name}'s agent registered", timeout_s=60)  # fmt: skip
        yield nodes
    finally:
        for agent in agents:
            agent.terminate()
        for agent in agents:
            agent.wait(timeout=20)
        for log in logs:
            log.close()
