"""The Slurm executor when Slurm's commands fail, through a fake command line (no Slurm
needed): what Wattflow believes must stay what Slurm runs."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu
from scheduling.executors.slurm import SlurmExecutor
from scheduling.executors.slurm_cli import SlurmError, SlurmJobInfo
from scheduling.models import SlurmJob


class FakeSlurm:
    """What ``SlurmCli`` answers, kept in a dict; ``failing`` names commands that fail."""

    def __init__(self) -> None:
        self.jobs_by_id: dict[int, SlurmJobInfo] = {}
        self.next_id = 100
        self.failing: set[str] = set()
        self.cancelled: list[int] = []

    def _maybe_fail(self, command: str) -> None:
        if command in self.failing:
            raise SlurmError(f"{command} took over 30 s")

    def jobs(self):
        self._maybe_fail("squeue")
        return list(self.jobs_by_id.values())

    def nodes(self):
        return []

    def ended(self, infos):
        return [self.jobs_by_id[i.job_id] for i in infos]

    def accounting(self, job_ids):
        return []

    def submit_held(self, sub):
        self._maybe_fail("sbatch")
        self.next_id += 1
        self.jobs_by_id[self.next_id] = SlurmJobInfo(
            self.next_id, "PENDING", sub.comment, ",".join(sub.nodelist), reason="JobHeldUser"
        )
        return self.next_id

    def release(self, job_ids):
        self._maybe_fail("scontrol")
        for i in job_ids:
            info = self.jobs_by_id[i]
            self.jobs_by_id[i] = SlurmJobInfo(i, "RUNNING", info.comment, info.nodes)

    def set_comment(self, job_id, comment):
        self._maybe_fail("scontrol")

    def cancel(self, job_ids):
        self._maybe_fail("scancel")
        for i in job_ids:
            info = self.jobs_by_id[i]
            self.jobs_by_id[i] = SlurmJobInfo(i, "CANCELLED", info.comment, info.nodes)
            self.cancelled.append(i)


@pytest.fixture
def slurm(settings, tmp_path):
    settings.TELEMETRY_CHECKPOINT_ROOT = str(tmp_path / "checkpoints")
    fake = FakeSlurm()
    return fake, SlurmExecutor(fake, output_dir=tmp_path / "out")


def _running(job, node) -> None:
    cluster_services.start_job(
        job, gpus=list(Gpu.objects.filter(node=node).order_by("index")[:1]), batch_size=256,
        at=timezone.now(),
    )  # fmt: skip


def test_a_stop_whose_scancel_failed_is_cancelled_by_the_next_carry_out(
    slurm, make_job, make_node, member, team
):
    # (the row was marked cancel-requested whether or not scancel worked, and never tried
    # again: the paused job ran on in Slurm, on GPUs Wattflow counted free, drawing energy
    # a pause_jobs budget had stopped)
    fake, executor = slurm
    node = make_node("n1", gpus=2)
    job = make_job(owner=member, team=team, min_gpus=1, max_gpus=1)
    _running(job, node)
    executor.carry_out(now=timezone.now())
    [row] = SlurmJob.objects.all()
    assert fake.jobs_by_id[row.slurm_job_id].state == "RUNNING"

    # when a round pauses the job and scancel times out
    job.refresh_from_db()
    cluster_services.transition_job(job, to=JobState.PAUSED, pending_reason_code="preempted")
    fake.failing = {"scancel"}
    report = executor.carry_out(now=timezone.now())
    assert report.errors and report.stopped == []
    assert fake.jobs_by_id[row.slurm_job_id].active

    # then a later carry-out, with Slurm answering again, cancels it
    fake.failing = set()
    report = executor.carry_out(now=timezone.now())
    assert report.stopped == [row.slurm_job_id]
    assert not fake.jobs_by_id[row.slurm_job_id].active
    # and the reconciler counts its end as Wattflow's own: the job stays paused
    executor.reconcile(now=timezone.now())
    job.refresh_from_db()
    row.refresh_from_db()
    assert job.state == JobState.PAUSED and row.ended_at is not None
