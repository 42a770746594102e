"""The Slurm executor against a real Slurm 22.05 (two nodes of 8 placeholder GPUs): rounds
submit held jobs on the planned node with the planned GPU count, stops reach the job as
SIGTERM, and the reconciler notices what happens in Slurm outside Wattflow."""

from datetime import timedelta

import pytest
from django.utils import timezone
from support.polling import wait_for

from cluster import services as cluster_services
from cluster.choices import JobState, NodeStatus
from cluster.models import AuditEntry, Job, JobAllocation
from scheduling import services
from scheduling.models import SlurmJob
from telemetry.agent.slurm_handoff import SlurmJobTag
from tests.slurm.conftest import read_text, slurm_job

pytestmark = pytest.mark.django_db(transaction=True)

# A job that says who it is, then works until SIGTERM, on which it writes a checkpoint.
# (The trap is set before the first line, so a test that saw the line may stop the job.)
CHECKPOINTING = (
    'mkdir -p "$WATTFLOW_CHECKPOINT_DIR"\n'
    "trap 'echo step-41 > \"$WATTFLOW_CHECKPOINT_DIR/ckpt\"; exit 0' TERM\n"
    'echo "job=$WATTFLOW_JOB_ID allocation=$WATTFLOW_ALLOCATION_ID gpus=$SLURM_JOB_GPUS"\n'
    "sleep 600 & wait\n"
)


def _running_slurm_job(job: Job, cli, output_dir: str = "") -> tuple[SlurmJob, object]:
    """The job's Slurm job once it runs (and, given ``output_dir``, once its script started:
    Slurm says RUNNING as it allocates, before slurmd launches the script)."""
    row = wait_for(
        lambda: SlurmJob.objects.filter(job=job, ended_at__isnull=True).first(),
        what=f"Slurm job for job {job.pk}",
        timeout_s=20,
    )
    info = wait_for(
        lambda: (i := slurm_job(cli, row.slurm_job_id)) and i.state == "RUNNING" and i,
        what=f"Slurm job {row.slurm_job_id} running",
        timeout_s=20,
    )
    if output_dir:
        out = f"{output_dir}/wattflow-job-{job.pk}.out"
        wait_for(lambda: read_text(out).strip(), what="the job's first line", timeout_s=20)
    return row, info


def test_round_submits_a_held_job_that_runs_on_the_planned_node_with_its_gpus(
    slurm_settings, slurm_cli, slurm_nodes, fifo, make_job, member, team
):
    # given a 3-GPU job queued
    job = make_job(owner=member, team=team, min_gpus=3, max_gpus=3, command=CHECKPOINTING)

    # when a round places it (the executor carries the round out after its commit)
    result = services.run_scheduling_round(now=timezone.now(), force=True)

    # then Slurm runs it on the planned node with 3 GPUs and Wattflow's tag as its comment
    job.refresh_from_db()
    assert result.applied == 1 and job.state == JobState.RUNNING
    allocation = job.current_allocation
    planned = {g.node.name for g in allocation.gpus.all()}
    row, info = _running_slurm_job(job, slurm_cli)
    assert {info.nodes} == planned
    assert info.gpus_per_node == 3
    assert SlurmJobTag.parse(info.comment) == SlurmJobTag(job.pk, allocation.pk, None, None)
    assert row.allocation_id == allocation.pk and row.released_at is not None
    # and the job saw its ids and three GPUs in its environment
    out = slurm_settings.WATTFLOW_SLURM_OUTPUT_DIR + f"/wattflow-job-{job.pk}.out"
    first_line = wait_for(lambda: read_text(out).strip(), what="the job's output", timeout_s=20)
    assert first_line.startswith(f"job={job.pk} allocation={allocation.pk} gpus=")
    assert len(first_line.split("gpus=")[1].split(",")) == 3

    # and the next round's reconciler records it running, and submits nothing twice
    services.run_scheduling_round(now=timezone.now(), force=True)
    row.refresh_from_db()
    assert row.slurm_state == "RUNNING" and row.running_at is not None
    assert SlurmJob.objects.filter(job=job).count() == 1


def test_stop_sends_sigterm_and_the_job_checkpoints_and_stays_paused(
    slurm_settings, slurm_cli, slurm_nodes, fifo, make_job, member, team, executor
):
    # given a job running in Slurm
    job = make_job(owner=member, team=team, min_gpus=2, max_gpus=2, command=CHECKPOINTING)
    services.run_scheduling_round(now=timezone.now(), force=True)
    row, _ = _running_slurm_job(job, slurm_cli, slurm_settings.WATTFLOW_SLURM_OUTPUT_DIR)

    # when Wattflow pauses it (as a round's stop does) and the executor carries that out
    job.refresh_from_db()
    cluster_services.transition_job(job, to=JobState.PAUSED, pending_reason_code="preempted")
    report = executor.carry_out(now=timezone.now())

    # then the job got SIGTERM, wrote its checkpoint and left Slurm
    assert report.stopped == [row.slurm_job_id]
    ckpt = slurm_settings.TELEMETRY_CHECKPOINT_ROOT + f"/job-{job.pk}/ckpt"
    assert wait_for(lambda: read_text(ckpt), what="a checkpoint", timeout_s=20) == "step-41\n"
    wait_for(
        lambda: not slurm_job(slurm_cli, row.slurm_job_id).active, what="the job gone", timeout_s=20
    )
    # and the reconciler records the end as Wattflow's own: the job stays paused
    executor.reconcile(now=timezone.now())
    row.refresh_from_db()
    job.refresh_from_db()
    assert row.ended_at is not None and row.cancel_requested_at is not None
    assert job.state == JobState.PAUSED


def test_reconciler_notices_a_job_cancelled_outside_wattflow(
    slurm_settings, slurm_cli, slurm_nodes, fifo, make_job, member, team, executor
):
    # given a job running in Slurm
    job = make_job(owner=member, team=team, command=CHECKPOINTING)
    services.run_scheduling_round(now=timezone.now(), force=True)
    row, _ = _running_slurm_job(job, slurm_cli)

    # when an admin cancels it with scancel
    slurm_cli.cancel([row.slurm_job_id])
    wait_for(
        lambda: not slurm_job(slurm_cli, row.slurm_job_id).active, what="the job gone", timeout_s=20
    )

    # then the next round cancels the Wattflow job, says why, and frees its GPUs
    result = services.run_scheduling_round(now=timezone.now(), force=True)
    job.refresh_from_db()
    assert result.reconciled == 1
    assert job.state == JobState.CANCELLED
    assert job.log_tail.splitlines()[-1] == (
        f"Slurm job {row.slurm_job_id} was cancelled outside Wattflow."
    )
    assert job.current_allocation is None
    # and nothing is resubmitted for it
    assert SlurmJob.objects.filter(job=job).count() == 1


@pytest.mark.parametrize(
    ("script", "state", "exit_status"),
    [("echo all done\nexit 0", JobState.COMPLETED, 0), ("echo boom\nexit 3", JobState.FAILED, 3)],
)
def test_reconciler_finishes_jobs_with_slurms_exit_code_and_log_tail(
    slurm_settings, slurm_cli, slurm_nodes, fifo, make_job, member, team, executor,
    script, state, exit_status,
):  # fmt: skip
    # given a job whose command ends by itself
    job = make_job(owner=member, team=team, command=script)
    services.run_scheduling_round(now=timezone.now(), force=True)
    row = SlurmJob.objects.get(job=job)
    wait_for(
        lambda: not slurm_job(slurm_cli, row.slurm_job_id).active,
        what="the job's end",
        timeout_s=20,
    )

    # when the reconciler runs
    report = executor.reconcile(now=timezone.now())

    # then the job has Slurm's outcome, exit status and output
    job.refresh_from_db()
    assert report.jobs_finished == [job.pk]
    assert (job.state, job.exit_status) == (state, exit_status)
    assert job.log_tail == script.splitlines()[0].removeprefix("echo ") + "\n"


def test_reconciler_drains_a_node_drained_in_slurm_and_restores_it(
    slurm_settings, slurm_cli, slurm_nodes, executor
):
    # given n1 healthy in Wattflow, then drained by an admin in Slurm
    slurm_cli.run("scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=maintenance")

    # when the reconciler runs
    report = executor.reconcile(now=timezone.now())

    # then n1 is draining in Wattflow (so no round places work there), audited as its doing
    n1, n2 = slurm_nodes
    n1.refresh_from_db()
    n2.refresh_from_db()
    assert report.nodes_drained == ["n1"]
    assert (n1.status, n2.status) == (NodeStatus.DRAINING, NodeStatus.HEALTHY)
    entry = AuditEntry.objects.filter(object_type="node", object_id=str(n1.pk)).get()
    assert entry.actor_username == "slurm-reconciler"

    # and when Slurm has it back, so does Wattflow
    # (Slurm shows the node NOT_RESPONDING for a moment after a resume, until slurmd answers)
    slurm_cli.run("scontrol", "update", "NodeName=n1", "State=RESUME")
    restored = wait_for(
        lambda: executor.reconcile(now=timezone.now()).nodes_restored,
        what="n1 restored",
        timeout_s=20,
    )
    n1.refresh_from_db()
    assert restored == ["n1"] and n1.status == NodeStatus.HEALTHY


def test_an_admins_drain_is_not_undone_by_the_reconciler(
    slurm_settings, slurm_cli, slurm_nodes, executor, admin_user
):
    # given n2 drained by an admin in Wattflow while Slurm has it idle
    cluster_services.drain_node(slurm_nodes[1], actor=admin_user)

    # when the reconciler runs
    report = executor.reconcile(now=timezone.now())

    # then it stays drained
    slurm_nodes[1].refresh_from_db()
    assert report.nodes_restored == [] and slurm_nodes[1].status == NodeStatus.DRAINING


def test_reconciler_cancels_a_wattflow_slurm_job_no_allocation_owns(
    slurm_settings, slurm_cli, slurm_nodes, executor
):
    # given a Slurm job with a Wattflow comment that Wattflow has no record of (a crash
    # between sbatch and the commit), and a job of someone else's
    from scheduling.executors.slurm_cli import Submission

    def submit(comment):
        return slurm_cli.submit_held(
            Submission(script="#!/bin/bash\nsleep 600\n", name="x", comment=comment,
                       nodelist=["n2"], gpus_per_node=1, output="/dev/null",
                       export={"PATH": "/usr/bin:/bin"}, partition="gpu")
        )  # fmt: skip

    orphan = submit(SlurmJobTag(999999, 999999).comment())
    foreign = submit("someone else's job")

    # when the reconciler runs
    report = executor.reconcile(now=timezone.now())

    # then only the orphan is cancelled
    assert report.unknown_cancelled == [orphan]
    assert slurm_job(slurm_cli, foreign).active
    wait_for(
        lambda: not slurm_job(slurm_cli, orphan).active, what="the orphan cancelled", timeout_s=20
    )


def test_slurm_check_names_the_version_what_is_missing_and_the_nodes(
    slurm_settings, slurm_nodes, make_node
):
    from io import StringIO

    from django.core.management import call_command

    # given a Wattflow node Slurm does not know
    make_node("n9", gpus=1)
    out = StringIO()

    # when the check runs
    call_command("slurm_check", stdout=out)

    # then it names Slurm's version, what Slurm lacks, and each node's standing
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Slurm 22.05 through its CLI")
    assert any(line.startswith("MISSING in Slurm: GPU power limits") for line in lines)
    assert "node n1: in Slurm, idle" in lines and "node n2: in Slurm, idle" in lines
    assert lines[-1].startswith("MISSING in Slurm: 1 Wattflow node(s) (n9)")


def test_slurm_check_fails_with_one_line_when_slurm_is_unreachable(settings, db):
    from django.core.management import CommandError, call_command

    settings.WATTFLOW_SLURM_BIN_DIR = "/nonexistent-slurm/bin"

    with pytest.raises(CommandError, match=r"^Slurm is not reachable: sinfo not found"):
        call_command("slurm_check")


def test_a_retune_keeps_the_slurm_job_and_updates_its_comment(
    slurm_settings, slurm_cli, slurm_nodes, fifo, make_job, member, team, executor
):
    # given a 2-GPU job running in Slurm
    job = make_job(owner=member, team=team, min_gpus=2, max_gpus=2, command=CHECKPOINTING)
    services.run_scheduling_round(now=timezone.now(), force=True)
    row, _ = _running_slurm_job(job, slurm_cli, slurm_settings.WATTFLOW_SLURM_OUTPUT_DIR)
    job.refresh_from_db()
    gpus = list(job.current_allocation.gpus.all())

    # when a round retunes it: same GPUs, a 250 W power limit
    new = cluster_services.set_allocation(
        job, gpus=gpus, batch_size=256, power_limit_w=250, at=timezone.now()
    )
    report = executor.carry_out(now=timezone.now())

    # then the same Slurm job runs on, serving the new allocation, with the limit in its comment
    assert (report.retuned, report.stopped, report.submitted) == ([row.slurm_job_id], [], [])
    info = slurm_job(slurm_cli, row.slurm_job_id)
    assert info.state == "RUNNING"
    assert SlurmJobTag.parse(info.comment) == SlurmJobTag(job.pk, new.pk, 250, None)
    row.refresh_from_db()
    assert row.allocation_id == new.pk and row.cancel_requested_at is None


def test_a_retune_on_other_gpus_of_the_node_keeps_the_units_the_script_was_told(
    slurm_settings, slurm_cli, slurm_nodes, fifo, make_job, member, team, executor
):
    # given a 2-GPU job running in Slurm, told its work in units of 0.5 iterations per
    # submitted one (a factor fixed when its allocation started)
    job = make_job(owner=member, team=team, min_gpus=2, max_gpus=2, command=CHECKPOINTING)
    services.run_scheduling_round(now=timezone.now(), force=True)
    row, _ = _running_slurm_job(job, slurm_cli, slurm_settings.WATTFLOW_SLURM_OUTPUT_DIR)
    job.refresh_from_db()
    JobAllocation.objects.filter(pk=job.current_allocation_id).update(iterations_per_submitted=0.5)
    node = job.current_allocation.gpus.first().node
    held = set(job.current_allocation.gpus.values_list("pk", flat=True))
    others = [g for g in node.gpus.order_by("index") if g.pk not in held][:2]

    # when a round moves it to two other GPUs of the same node (Slurm places GPUs itself:
    # the job runs on in place) with a power limit
    new = cluster_services.set_allocation(
        job, gpus=others, batch_size=256, power_limit_w=250, at=timezone.now()
    )
    assert new.iterations_per_submitted == 1.0  # fixed afresh: another GPU set
    report = executor.carry_out(now=timezone.now())

    # then the same Slurm job serves the new allocation, which keeps the job's units
    assert report.retuned == [row.slurm_job_id]
    new.refresh_from_db()
    assert new.iterations_per_submitted == 0.5


def test_a_resize_stops_the_slurm_job_and_submits_one_with_the_new_gpu_count(
    slurm_settings, slurm_cli, slurm_nodes, fifo, make_job, member, team, executor
):
    # given a 1..4-GPU job running on 2 GPUs in Slurm
    job = make_job(owner=member, team=team, min_gpus=1, max_gpus=4, command=CHECKPOINTING)
    job.refresh_from_db()
    node = slurm_nodes[1]
    cluster_services.start_job(
        job, gpus=list(node.gpus.order_by("index")[:2]), batch_size=256, at=timezone.now()
    )
    executor.carry_out(now=timezone.now())
    old, _ = _running_slurm_job(job, slurm_cli, slurm_settings.WATTFLOW_SLURM_OUTPUT_DIR)

    # when a round grows it to 4 GPUs on the same node
    job.refresh_from_db()
    new = cluster_services.set_allocation(
        job, gpus=list(node.gpus.order_by("index")[:4]), batch_size=256, at=timezone.now()
    )
    report = executor.carry_out(now=timezone.now())

    # then the old Slurm job checkpointed and left, and a 4-GPU one runs for the new allocation
    assert report.stopped == [old.slurm_job_id] and len(report.submitted) == 1
    ckpt = slurm_settings.TELEMETRY_CHECKPOINT_ROOT + f"/job-{job.pk}/ckpt"
    assert wait_for(lambda: read_text(ckpt), what="a checkpoint", timeout_s=20) == "step-41\n"
    info = wait_for(
        lambda: (i := slurm_job(slurm_cli, report.submitted[0])) and i.state == "RUNNING" and i,
        what="the resized job running",
        timeout_s=20,
    )
    assert (info.nodes, info.gpus_per_node) == ("n2", 4)
    assert SlurmJobTag.parse(info.comment).allocation_id == new.pk


def test_a_slurmctld_restart_loses_nothing(
    slurm_settings, slurm_cluster, slurm_cli, slurm_nodes, fifo, make_job, member, team,
    executor,
):  # fmt: skip
    import os
    import signal
    import subprocess
    from pathlib import Path

    from tests.slurm.conftest import SCRIPT

    # given a job running in Slurm
    job = make_job(owner=member, team=team, command=CHECKPOINTING)
    services.run_scheduling_round(now=timezone.now(), force=True)
    row, _ = _running_slurm_job(job, slurm_cli, slurm_settings.WATTFLOW_SLURM_OUTPUT_DIR)

    # when slurmctld stops and starts again
    pid_file = Path(slurm_cluster["STATE_DIR"]) / "run" / "slurmctld.pid"
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), what="slurmctld stopped", timeout_s=20)
    up = subprocess.run(["bash", str(SCRIPT), "up", slurm_cluster["STATE_DIR"]],
                        capture_output=True, text=True, timeout=120)  # fmt: skip
    assert up.returncode == 0, up.stderr

    # then the job still runs in Slurm and the next round changes nothing and submits nothing
    assert slurm_job(slurm_cli, row.slurm_job_id).state == "RUNNING"
    result = services.run_scheduling_round(now=timezone.now(), force=True)
    job.refresh_from_db()
    assert (result.reconciled, job.state) == (0, JobState.RUNNING)
    assert SlurmJob.objects.filter(job=job).count() == 1


def test_slurmrestd_answers_with_a_jwt_and_refuses_without(slurm_cluster, slurm_cli):
    import json
    import urllib.error
    import urllib.request

    url = slurm_cluster["WATTFLOW_SLURM_REST_URL"] + "/slurm/v0.0.38/diag"
    token = slurm_cli.run("scontrol", "token", "username=root", "lifespan=60").strip()
    request = urllib.request.Request(url, headers={
        "X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token.split("=", 1)[1],
    })  # fmt: skip

    with urllib.request.urlopen(request, timeout=10) as response:
        body = json.load(response)
    assert body["meta"]["Slurm"]["release"].startswith("22.05")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401


def test_a_job_slurm_keeps_pending_goes_back_to_the_queue(
    slurm_settings, slurm_cli, slurm_nodes, make_job, member, team, executor
):
    from scheduling.executors.slurm_cli import Submission

    # given all of n1's GPUs taken by a job outside Wattflow, which Wattflow does not see
    foreign = slurm_cli.submit_held(
        Submission(script="#!/bin/bash\nsleep 600\n", name="other", comment="not ours",
                   nodelist=["n1"], gpus_per_node=8, output="/dev/null",
                   export={"PATH": "/usr/bin:/bin"}, partition="gpu")
    )  # fmt: skip
    slurm_cli.release([foreign])
    wait_for(
        lambda: slurm_job(slurm_cli, foreign).state == "RUNNING", what="the other job", timeout_s=20
    )
    # and a Wattflow job placed on n1 all the same
    job = make_job(owner=member, team=team, command=CHECKPOINTING)
    job.refresh_from_db()
    cluster_services.start_job(
        job, gpus=[slurm_nodes[0].gpus.get(index=0)], batch_size=256, at=timezone.now()
    )
    executor.carry_out(now=timezone.now())
    row = SlurmJob.objects.get(job=job)
    assert slurm_job(slurm_cli, row.slurm_job_id).state == "PENDING"

    # when the reconciler runs past the start timeout
    executor.start_timeout_s = 0.5
    report = wait_for(
        lambda: (r := executor.reconcile(now=timezone.now())).jobs_requeued and r,
        what="the job re-queued",
        timeout_s=20,
    )

    # then the Slurm job is cancelled and the Wattflow job is queued again, saying why
    job.refresh_from_db()
    assert report.jobs_requeued == [job.pk]
    assert (job.state, job.pending_reason_code) == (JobState.QUEUED, "slurm_pending")
    assert job.pending_reason.startswith(f"Slurm kept job {row.slurm_job_id} pending (")
    wait_for(
        lambda: not slurm_job(slurm_cli, row.slurm_job_id).active, what="it cancelled", timeout_s=20
    )
    assert slurm_job(slurm_cli, foreign).state == "RUNNING"


def test_a_job_slurm_refuses_goes_back_to_the_queue_with_slurms_words(
    slurm_settings, slurm_cli, slurm_nodes, make_node, make_job, member, team, executor
):
    # given a job started on a Wattflow node that Slurm does not know
    n9 = make_node("n9", gpus=1)
    job = make_job(owner=member, team=team, command=CHECKPOINTING)
    job.refresh_from_db()
    cluster_services.start_job(job, gpus=list(n9.gpus.all()), batch_size=256, at=timezone.now())

    # when the executor carries it out
    report = executor.carry_out(now=timezone.now())

    # then nothing was submitted, and the job is queued again with sbatch's refusal as reason
    job.refresh_from_db()
    assert report.submitted == [] and len(report.errors) == 1
    assert (job.state, job.pending_reason_code) == (JobState.QUEUED, "slurm_refused")
    assert job.pending_reason.startswith("Slurm refused the job: sbatch ")
    assert "n9" in job.pending_reason or "node" in job.pending_reason.lower()
    assert not SlurmJob.objects.filter(job=job).exists()


def test_a_job_slurm_has_no_record_of_goes_back_to_the_queue_after_the_start_timeout(
    slurm_settings, slurm_cli, slurm_nodes, make_job, member, team, executor
):
    # given a running Wattflow job whose Slurm job neither squeue nor sacct knows (slurmctld
    # forgot it after MinJobAge and accounting never recorded it)
    job = make_job(owner=member, team=team, command=CHECKPOINTING)
    job.refresh_from_db()
    now = timezone.now()
    cluster_services.start_job(job, gpus=[slurm_nodes[0].gpus.get(index=0)], batch_size=256, at=now)
    job.refresh_from_db()
    row = SlurmJob.objects.create(
        slurm_job_id=9_999_990, job=job, allocation=job.current_allocation, nodes="n1",
        gpus_per_node=1, submitted_at=now, released_at=now,
    )  # fmt: skip

    # when the reconciler runs within the start timeout, accounting may still be catching up
    report = executor.reconcile(now=now + timedelta(seconds=executor.start_timeout_s / 2))
    job.refresh_from_db()
    assert (report.jobs_requeued, job.state) == ([], JobState.RUNNING)

    # then past it the job is re-queued, saying why, and the Slurm job is closed as lost
    report = executor.reconcile(now=now + timedelta(seconds=executor.start_timeout_s + 1))
    job.refresh_from_db()
    row.refresh_from_db()
    assert report.jobs_requeued == [job.pk]
    assert (job.state, job.pending_reason_code) == (JobState.QUEUED, "slurm_lost")
    assert job.pending_reason == (
        "Re-queued: Slurm has no record of job 9999990 (not in squeue, not in its accounting)."
    )
    assert (row.ended_at is not None, row.slurm_state) == (True, "UNKNOWN_TO_SLURM")
    assert job.current_allocation is None
    # and the next round does not re-queue it twice
    assert executor.reconcile(now=now + timedelta(hours=1)).jobs_requeued == []


def test_a_released_job_slurm_holds_again_goes_back_to_the_queue_at_once(
    slurm_settings, slurm_cli, slurm_nodes, make_job, member, team, executor
):
    # given a Wattflow job running in Slurm
    job = make_job(owner=member, team=team, command=CHECKPOINTING)
    job.refresh_from_db()
    cluster_services.start_job(
        job, gpus=[slurm_nodes[0].gpus.get(index=0)], batch_size=256, at=timezone.now()
    )
    executor.carry_out(now=timezone.now())
    row = SlurmJob.objects.get(job=job)
    wait_for(
        lambda: slurm_job(slurm_cli, row.slurm_job_id).state == "RUNNING", what="it running",
        timeout_s=20,
    )  # fmt: skip

    # when Slurm puts it back pending and held (as it does when a launch fails)
    slurm_cli.run("scontrol", "requeuehold", str(row.slurm_job_id))
    held = wait_for(
        lambda: (i := slurm_job(slurm_cli, row.slurm_job_id)).state == "PENDING"
        and "held" in i.reason.lower()
        and i,
        what="it pending and held",
        timeout_s=30,
    )

    # then the reconciler gives it back well within the start timeout, naming the hold
    report = executor.reconcile(now=timezone.now())
    job.refresh_from_db()
    assert report.jobs_requeued == [job.pk]
    assert (job.state, job.pending_reason_code) == (JobState.QUEUED, "slurm_pending")
    assert job.pending_reason == (
        f"Slurm held job {row.slurm_job_id} ({held.reason}); back in the queue."
    )
    wait_for(
        lambda: not slurm_job(slurm_cli, row.slurm_job_id).active, what="it cancelled", timeout_s=20
    )
