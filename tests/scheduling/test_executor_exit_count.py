"""A job that Slurm says COMPLETED with status 0 completes at the count it printed at its end,
with the agent path's note when that is short of its total (no Slurm needed: the batch script
the executor submits runs under bash here, and the executor records its output)."""

from __future__ import annotations

import os
import subprocess

import pytest
from django.utils import timezone

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu
from scheduling.executors.base import ReconcileReport
from scheduling.executors.slurm import SlurmExecutor, last_reported_progress
from scheduling.executors.slurm_cli import SlurmJobInfo
from scheduling.models import SlurmJob

SLURM_JOB_ID = 4242


@pytest.fixture
def executor(settings, tmp_path):
    settings.TELEMETRY_CHECKPOINT_ROOT = str(tmp_path / "checkpoints")
    # carry_out is not called: no Slurm command runs
    return SlurmExecutor(cli=None, output_dir=tmp_path / "out")


def _run_in_slurm(executor, job, tmp_path, *, progress_file: bool = True):
    """Start ``job``, run its batch script as Slurm would (bash, output appended to the job's
    file, the Task Prolog's ``WATTFLOW_PROGRESS_FILE``), and hand the reconciler its end."""
    node_gpus = list(Gpu.objects.order_by("pk")[:1])
    cluster_services.start_job(job, gpus=node_gpus, batch_size=256, at=timezone.now())
    job.refresh_from_db()
    alloc = job.current_allocation
    row = SlurmJob.objects.create(
        slurm_job_id=SLURM_JOB_ID, job=job, allocation=alloc, nodes="n1", gpus_per_node=1,
        submitted_at=timezone.now(), released_at=timezone.now(), slurm_state="RUNNING",
    )  # fmt: skip
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": str(SLURM_JOB_ID)}
    if progress_file:
        env["WATTFLOW_PROGRESS_FILE"] = str(tmp_path / f"{SLURM_JOB_ID}.progress")
        (tmp_path / f"{SLURM_JOB_ID}.progress").write_text("")
    out = executor.output_path(job.pk)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("ab") as f:
        f.write(b"output of an earlier Slurm job of this job\n")
        done = subprocess.run(
            ["bash", "-s"], input=executor.submission(alloc).script.encode(), stdout=f,
            stderr=subprocess.STDOUT, env=env, timeout=30, check=False,
        )  # fmt: skip
    info = SlurmJobInfo(
        SLURM_JOB_ID, "COMPLETED", "", "n1", exit_code=done.returncode, output=str(out)
    )
    report = ReconcileReport()
    executor._job_ended(row, info, now=timezone.now(), report=report)
    job.refresh_from_db()
    return done.returncode, job, report


def test_a_job_that_exits_0_early_completes_at_its_own_last_count_with_the_note(
    executor, tmp_path, make_job, make_node, member, team
):
    # (it was completed at its whole total, 1000 of 1000, though it had done 110: the agent
    # path already said "ended early on its own")
    make_node("n1", gpus=1)
    job = make_job(
        owner=member, team=team, min_gpus=1, max_gpus=1,
        command='for i in 10 60 110; do echo "$i" >> "$WATTFLOW_PROGRESS_FILE"; done\nexit 0',
    )  # fmt: skip

    status, job, report = _run_in_slurm(executor, job, tmp_path)

    assert status == 0
    assert job.state == JobState.COMPLETED and report.jobs_finished == [job.pk]
    assert job.completed_iterations == 110.0
    assert job.log_tail.endswith(
        "Exited with status 0 having reported 110 of its 1000 iterations: ended early on its own."
    )
    assert f"wattflow progress of Slurm job {SLURM_JOB_ID}: " in job.log_tail


def test_a_json_progress_file_and_a_count_already_stored_higher_keep_the_higher(
    executor, tmp_path, make_job, make_node, member, team
):
    make_node("n1", gpus=1)
    job = make_job(
        owner=member, team=team, min_gpus=1, max_gpus=1,
        command=(
            "printf '{\\n \"iterations\": 300,\\n \"grad_sqr\": 1.0, \"grad_var\": 2.0}\\n' "
            '> "$WATTFLOW_PROGRESS_FILE"\ntrue'
        ),
    )  # fmt: skip
    type(job).objects.filter(pk=job.pk).update(completed_iterations=450.0)
    job.refresh_from_db()

    _, job, _ = _run_in_slurm(executor, job, tmp_path)

    assert job.state == JobState.COMPLETED
    assert job.completed_iterations == 450.0
    assert "having reported 450 of its 1000 iterations: ended early on its own." in job.log_tail


def test_a_job_at_its_total_completes_without_a_note(
    executor, tmp_path, make_job, make_node, member, team
):
    make_node("n1", gpus=1)
    job = make_job(
        owner=member, team=team, min_gpus=1, max_gpus=1,
        command='echo 1000 > "$WATTFLOW_PROGRESS_FILE"',
    )  # fmt: skip

    _, job, _ = _run_in_slurm(executor, job, tmp_path)

    assert job.state == JobState.COMPLETED and job.completed_iterations == 1000.0
    assert "ended early" not in job.log_tail


@pytest.mark.parametrize("progress_file", [False, True], ids=["no file", "an empty file"])
def test_a_job_without_a_progress_file_says_nothing_and_completes_at_its_total(
    executor, tmp_path, make_job, make_node, member, team, progress_file
):
    # (a guard: it passes before the change too; such a job cannot say how far it got, and
    # its output is only its own: the Prolog makes an empty file for every job)
    make_node("n1", gpus=1)
    job = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, command="exit 0")

    status, job, _ = _run_in_slurm(executor, job, tmp_path, progress_file=progress_file)

    assert status == 0
    assert job.state == JobState.COMPLETED and job.completed_iterations == 1000.0
    assert job.log_tail == "output of an earlier Slurm job of this job\n"


def test_the_trailer_keeps_the_commands_exit_status(
    executor, tmp_path, make_job, make_node, member, team
):
    make_node("n1", gpus=1)
    job = make_job(
        owner=member, team=team, min_gpus=1, max_gpus=1,
        command='echo 5 > "$WATTFLOW_PROGRESS_FILE"\nexit 3',
    )  # fmt: skip

    status, job, _ = _run_in_slurm(executor, job, tmp_path)

    assert status == 3
    assert job.state == JobState.FAILED and job.exit_status == 3


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("wattflow progress of Slurm job 7: 1 2 3.5 \n", 3.5),
        ('x\nwattflow progress of Slurm job 7: { "iterations": 12 } \nmore\n', 12.0),
        ("wattflow progress of Slurm job 7: 4\nwattflow progress of Slurm job 7: 9\n", 9.0),
        ("wattflow progress of Slurm job 8: 4\n", None),
        ("wattflow progress of Slurm job 7: \n", None),
        ("wattflow progress of Slurm job 7: nan\n", None),
        ('wattflow progress of Slurm job 7: {"iterations": 12\n', None),
        # a JSON string holding U+2028 (valid JSON): one line, as the agent reads the file
        ('wattflow progress of Slurm job 7: {"iterations": 12, "note": "a\u2028b"}\n', 12.0),
    ],
)
def test_the_last_progress_line_of_this_slurm_job_is_read(tail, expected):
    progress = last_reported_progress(tail, 7)
    assert (None if progress is None else progress.iterations) == expected


def test_a_file_of_appended_counts_past_the_log_tail_completes_at_its_last_count(
    executor, tmp_path, make_job, make_node, member, team
):
    # (the trailer prints the file's last 4,096 bytes on one line, longer than the 4,000
    # characters of output the reconciler read: the line's mark was cut off and the job,
    # which had done 600 of 1000, completed at 1000 with no note)
    make_node("n1", gpus=1)
    job = make_job(
        owner=member, team=team, min_gpus=1, max_gpus=1,
        command=(
            'for i in $(seq 1 600); do printf "%08d\\n" "$i" >> "$WATTFLOW_PROGRESS_FILE"; done'
        ),
    )  # fmt: skip

    status, job, _ = _run_in_slurm(executor, job, tmp_path)

    assert status == 0 and (tmp_path / f"{SLURM_JOB_ID}.progress").stat().st_size == 5400
    assert job.state == JobState.COMPLETED
    assert job.completed_iterations == 600.0
    assert "having reported 600 of its 1000 iterations: ended early on its own." in job.log_tail
