"""``WATTFLOW_DEMO_SLURM=1 make run``: the demo on a local Slurm, brought up as ``make run``
brings it up (``seed_demo``, then ``scripts/demo_slurm.sh run``: Slurm with the demo's nodes,
then the Procfile's web, worker, beat, four simulated agents in monitor mode and the trace
replay) on private ports. Replayed jobs run as Slurm jobs on node-01..04, handed to the
agents by the Prolog; they complete from Slurm's accounting and their GPUs' energy lands in
the ledger through the demo's own accounting task. Ctrl-C stops the demo and its Slurm."""

import os
import signal
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from support import polling
from support.net import free_port

from cluster.choices import JobState
from cluster.models import Budget, Job
from scheduling.executors.slurm_cli import SlurmCli
from scheduling.models import SlurmJob
from telemetry.models import EnergyLedgerEntry, JobEvent
from tests.slurm.conftest import ROOT

pytestmark = pytest.mark.django_db(transaction=True)
DEMO_NODES = ["node-01", "node-02", "node-03", "node-04"]


@pytest.fixture
def demo(slurm_cluster, settings, tmp_path):
    """The running demo in Slurm mode; yields (process, var dir). Its own Slurm: 20 ports
    above the session's test Slurm."""
    var = tmp_path / "var"
    var.mkdir()
    settings.WATTFLOW_VAR_DIR = var
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    # The demo's budgets are sized so that limits are crossed within minutes (issue 17); here
    # what is tested is Slurm carrying out rounds, so pacing must not slow the first job.
    Budget.objects.all().delete()
    db = connection.settings_dict
    base = int(os.environ.get("WATTFLOW_SLURM_PORT_BASE", "16900")) + 20
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "WATTFLOW_DEMO_SLURM": "1",
        "WATTFLOW_VAR_DIR": str(var),
        "WATTFLOW_WEB_PORT": str(free_port()),
        "WATTFLOW_SLURM_PORT_BASE": str(base),
        "WATTFLOW_REPLAY_JOBS": "6",
        "WATTFLOW_REPLAY_MAX_WAIT_S": "1",
        "WATTFLOW_ROUND_INTERVAL_S": "3",
        "TELEMETRY_ACCOUNTING_INTERVAL_S": "5",
        "TELEMETRY_CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
    }
    env.pop("SLURM_CONF", None)
    log = open(tmp_path / "demo.log", "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        ["bash", "scripts/demo_slurm.sh", "run"], cwd=ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        yield process, var
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                subprocess.run(["bash", str(ROOT / "scripts/demo_slurm.sh"), "down"], env=env)
        log.close()


def test_the_demo_runs_replayed_jobs_as_slurm_jobs_and_books_their_energy(demo, tmp_path):
    process, var = demo

    def wait_for(predicate, *, what, timeout_s):
        """support's wait_for, with the tail of the demo's log in the failure: a demo that
        stalls says why only there."""
        try:
            return polling.wait_for(predicate, what=what, timeout_s=timeout_s)
        except pytest.fail.Exception as exc:
            tail = (tmp_path / "demo.log").read_text()[-6000:]
            pytest.fail(f"{exc}\n--- tail of the demo's log ---\n{tail}")

    state = var / "slurm-demo"
    # given the demo's Slurm up with the demo's node names and the executor switched to it
    conf = wait_for(
        lambda: (state / "etc" / "slurm.conf").exists() and (var / "slurm-demo.env").exists(),
        what="the demo's Slurm",
        timeout_s=90,
    )
    assert conf
    cli = SlurmCli(conf=str(state / "etc" / "slurm.conf"), timeout_s=30)
    assert sorted(n.name for n in cli.nodes()) == DEMO_NODES
    # when the replay submits trace jobs, they run as Slurm jobs handed to the agents
    slurm_job = wait_for(
        lambda: SlurmJob.objects.order_by("pk").first(), what="a Slurm job", timeout_s=90
    )
    assert slurm_job.nodes in DEMO_NODES or "," in slurm_job.nodes
    # and a job completes from Slurm's accounting, with its GPUs' energy in the ledger
    done = wait_for(
        lambda: Job.objects.filter(
            state=JobState.COMPLETED, exit_status=0, slurm_jobs__isnull=False
        ).first(),
        what="a replayed job completed through Slurm",
        timeout_s=180,
    )
    charged = wait_for(
        lambda: sum(e.energy_j for e in EnergyLedgerEntry.objects.filter(job=done)),
        what=f"job {done.pk}'s energy in the ledger",
        timeout_s=60,
    )
    assert charged > 0
    # the stand-in job ran to its end in Slurm, and its progress (written to the file the
    # TaskProlog named) reached the server through the agent
    out = Path(slurm_job_output(var, done.pk)).read_text()
    assert "done:" in out, out
    assert JobEvent.objects.filter(job=done, kind="progress", iterations__gt=0).exists()
    assert process.poll() is None, "the demo stopped by itself"
    # when the demo is stopped as Ctrl-C stops it, its Slurm goes down with it
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=60) in (0, 130, -2)  # honcho's status after Ctrl-C
    assert not (state / "run" / "slurmctld.pid").exists()
    assert not (var / "slurm-demo.env").exists()


def slurm_job_output(var: Path, job_pk: int) -> Path:
    return var / "slurm-demo" / "out" / f"wattflow-job-{job_pk}.out"
