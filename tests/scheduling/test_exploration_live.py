"""Exploration in live rounds (issue 12 point 4): a new job tries power limits in its first
rounds, learning from the telemetry each probe produces, then settles, and what it cost stays
within its bound; the record is on the job, in the API and on the job page."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from support.jobs import submitted_before

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Job, Node
from scheduling import services
from scheduling.core.exploration import DONE, EXPLORING
from scheduling.core.perf_models import load_catalog
from scheduling.core.types import GpuConfig
from scheduling.models import JobSchedulingState, SchedulerSettings
from telemetry.choices import JobEventKind
from telemetry.models import GpuSample, JobEvent

T0 = datetime(2026, 11, 25, 8, 0, 0, tzinfo=UTC)
ROUND = timedelta(seconds=60)
# What the job really does: BERT's speed and power, 1.5x slower, where it says resnet50.
TRUTH = load_catalog().get("bert", "A100")
SLOWER = 1.5


@pytest.fixture
def make_job(make_job):
    """Jobs submitted before ``T0`` unless told: the rounds here run at ``T0`` and after."""
    return submitted_before(make_job, T0)


def _telemetry(job: Job, node: Node, t0: datetime, t1: datetime) -> None:
    """What the agent and NVML report while ``job`` runs its current allocation in [t0, t1]:
    a start report for a new allocation, progress every 5 s, one power sample per GPU."""
    alloc = job.current_allocation
    gpus = list(alloc.gpus.all())
    cfg = GpuConfig(len(gpus), alloc.batch_size, power_limit_w=alloc.power_limit_w)
    iter_s = TRUTH.iter_time_s(cfg) * SLOWER
    power_w = TRUTH.power_w(cfg)
    now = t0
    event = {"node": node, "job": job, "allocation_id": alloc.pk, "received_at": t1}
    if not JobEvent.objects.filter(allocation_id=alloc.pk, kind=JobEventKind.STARTED).exists():
        JobEvent.objects.create(event_id=uuid.uuid4(), kind=JobEventKind.STARTED, ts=now, **event)
    done = 0.0
    while now + timedelta(seconds=5) < t1:
        now += timedelta(seconds=5)
        done += 5.0 / iter_s
        JobEvent.objects.create(event_id=uuid.uuid4(), kind=JobEventKind.PROGRESS, ts=now,
                                iterations=done, **event)  # fmt: skip
        GpuSample.objects.bulk_create(
            GpuSample(gpu=g, ts=now, power_w=power_w, power_limit_w=alloc.power_limit_w)
            for g in gpus
        )


def _long_resnet50(make_job, member, team):
    """A new resnet50 job on one A100 at a fixed batch: about 8 hours at 400 W, so its
    exploration bound (about 10 minutes) lets it measure every limit in 1-minute rounds."""
    return make_job(owner=member, team=team, gpu_model="A100", min_gpus=1, max_gpus=1,
                    global_batch_size=64, min_batch_size=64, max_batch_size=64,
                    total_iterations=80_000)  # fmt: skip


@pytest.fixture
def zeus(db):
    config = SchedulerSettings.load()
    config.policy = "zeus"
    config.save()


def test_a_new_job_explores_power_limits_then_settles_within_its_bound(
    zeus, make_node, make_job, member, team, client
):
    # given one A100 node and a new resnet50 job (a long one: about 8 hours at 400 W, so
    # its bound, about 10 minutes, lets it measure every limit in one-minute rounds)
    node = make_node(gpus=1)
    job = _long_resnet50(make_job, member, team)
    limits = []
    records = []
    # when rounds run a minute apart, the job reporting what it does between them
    for k in range(18):
        now = T0 + k * ROUND
        Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
        result = services.run_scheduling_round(now=now, force=True)
        assert result.ran
        job.refresh_from_db()
        assert job.state == JobState.RUNNING
        limits.append(job.current_allocation.power_limit_w)
        records.append(JobSchedulingState.objects.get(job=job).exploration)
        _telemetry(job, node, now, now + ROUND)

    # then it started at the default limit and tried others in its first rounds
    assert records[0]["status"] == EXPLORING
    assert limits[0] == 400
    settled = next(k for k, r in enumerate(records) if r["status"] == DONE)
    rec = records[settled]
    tried = [t["limit_w"] for t in rec["tried"]]
    assert tried[:4] == [400.0, 200.0, 225.0, 175.0]  # the model's best, its neighbours
    assert sorted(tried) == [100.0 + 25.0 * i for i in range(13)]  # then all the bound allows
    # (progress every 5 s: the first probe's repeated reports already show the noise, none)
    assert rec["reason"] == "every limit is measured; the optimum is decided within 25 W"
    assert [float(w) for w in limits[: len(tried)]] == tried
    # and it settled near the truth's energy-optimal limit, within the 25 W grid step
    assert abs(rec["result_w"] - 200.0) <= 25.0
    # what exploring cost stays within its bound: 3 % of the predicted completion time
    assert 0.0 < rec["spent_s"] <= rec["budget_s"]
    assert rec["budget_frac"] == pytest.approx(0.03)
    # and after it the policy's own choice from the learned model stands
    assert len(set(limits[settled:])) == 1
    assert records[-1] == rec

    # the API's job detail and the job page show it
    client.force_login(member)
    data = client.get(f"/api/jobs/{job.pk}/").json()["exploration"]
    assert data["status"] == "done"
    assert [t["limit_w"] for t in data["tried"]] == tried
    assert data["spent_s"] == pytest.approx(rec["spent_s"])
    assert data["result_w"] == rec["result_w"]
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="exploration-table"' in page
    assert f"{rec['result_w']:.0f} W" in page


def test_fifo_never_explores_and_the_api_says_null(make_node, make_job, member, team, client):
    node = make_node(gpus=1)
    job = make_job(owner=member, team=team, gpu_model="A100", min_gpus=1, max_gpus=1,
                   global_batch_size=64, min_batch_size=64, max_batch_size=64)  # fmt: skip
    config = SchedulerSettings.load()
    config.policy = "fifo"
    config.save()
    for k in range(3):
        now = T0 + k * ROUND
        Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
        services.run_scheduling_round(now=now, force=True)
        job.refresh_from_db()
        _telemetry(job, node, now, now + ROUND)
    assert not JobSchedulingState.objects.get(job=job).exploration
    client.force_login(member)
    assert client.get(f"/api/jobs/{job.pk}/").json()["exploration"] is None
    assert 'id="exploration-table"' not in client.get(f"/jobs/{job.pk}/").content.decode()


def test_the_job_page_and_the_api_show_the_gpu_counts_a_job_probed(make_job, member, team, client):
    # What gpu_probe records on a job an elastic policy probed (no power-limit search).
    job = make_job(owner=member, team=team, gpu_model="A100", min_gpus=1, max_gpus=64,
                   global_batch_size=32, min_batch_size=32, max_batch_size=32)  # fmt: skip
    record = {
        "status": DONE, "gpu_model": "A100", "n_gpus": 4, "started_s": 0.0,
        "budget_frac": 0.03, "budget_s": 494.0, "spent_s": 172.3, "tried": [], "probe": None,
        "other_gpus": None, "result_w": None,
        "reason": "power limits not explored by this policy",
        "gpu_probes": [
            {"from_gpus": 4, "n_gpus": 8, "since_s": 300.0, "cost_s": 62.9},
            {"from_gpus": 8, "n_gpus": 16, "since_s": 600.0, "cost_s": 109.4,
             "sm_clock_mhz": 1125},
        ],
    }  # fmt: skip
    JobSchedulingState.objects.update_or_create(job=job, defaults={"exploration": record})

    client.force_login(member)
    data = client.get(f"/api/jobs/{job.pk}/").json()["exploration"]
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert [p["n_gpus"] for p in data["gpu_probes"]] == [8, 16]
    assert 'id="exploration-gpu-probes"' in page
    assert "4 &rarr; 8 GPUs (63 s predicted), 8 &rarr; 16 GPUs (109 s predicted; at 1125" in page
    assert data["gpu_probes"][0]["sm_clock_mhz"] is None  # a record from before the field
    assert "172 s of its bound of 494 s" in page
    assert 'id="exploration-table"' not in page  # no power limit was tried


def _record_with_batch_probe(other_batch: dict | None) -> dict:
    """A record zeus leaves on a job whose limits it explored at batch 64, with the batch
    probe (exploration.BATCH_PROBE) as ``other_batch`` where given."""
    record = {
        "status": DONE, "gpu_model": "A100", "n_gpus": 1, "started_s": 0.0,
        "budget_frac": 0.03, "budget_s": 860.0, "spent_s": 301.0,
        "tried": [{"limit_w": 400.0, "n_gpus": 1, "seconds": 60.0, "cost_s": 0.0,
                   "energy_j": 21.5}],
        "probe": None, "other_gpus": None, "result_w": 200.0,
        "reason": "every limit is measured; the optimum is decided within 25 W",
    }  # fmt: skip
    if other_batch is not None:
        record["other_batch"] = {
            "batch": 128, "from_batch": 64, "n_gpus": 1, "limit_w": 400.0,
            "since_s": 360.0, "seconds": 60.0, "cost_s": 17.8, "energy_j": 19.25,
            "runnable": True, "reason": "", **other_batch,
        }  # fmt: skip
    return record


@pytest.mark.parametrize(
    "other_batch, line",
    [
        ({}, "batch probe: global batch 128 (from 64): ran 60 s, cost 18 s, runnable."),
        (
            {"energy_j": None, "runnable": False, "cost_s": 60.0,
             "reason": "no progress at batch 128"},
            "batch probe: global batch 128 (from 64): ran 60 s, cost 60 s, not runnable: "
            "no progress at batch 128.",
        ),
        (
            {"seconds": 0.0, "cost_s": 89.2, "energy_j": None, "runnable": None,
             "reason": "it would exceed the exploration budget"},
            "batch probe: global batch 128 (from 64): not run: it would exceed the "
            "exploration budget (predicted cost 89 s).",
        ),
        (
            # what services leaves on a job that failed during the probe: it never reported
            {"seconds": 0.0, "cost_s": 17.8, "energy_j": None, "runnable": False,
             "reason": "the job ended (failed) during the probe"},
            "batch probe: global batch 128 (from 64): not runnable: the job ended (failed) "
            "during the probe.",
        ),
    ],
)  # fmt: skip
def test_the_job_page_and_the_api_show_the_batch_probe(
    other_batch, line, make_job, member, outsider, team, client
):
    job = _tunable_resnet50(make_job, member, team)
    record = _record_with_batch_probe(other_batch)
    JobSchedulingState.objects.update_or_create(job=job, defaults={"exploration": record})

    client.force_login(member)
    data = client.get(f"/api/jobs/{job.pk}/").json()["exploration"]
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert data["other_batch"] == record["other_batch"]
    assert line in " ".join(page.split())  # the template wraps and indents
    assert 'id="exploration-batch-probe"' in page
    assert 'id="exploration-table"' in page  # the limit search is still shown
    # another team's user sees neither the job nor its probe
    client.force_login(outsider)
    assert client.get(f"/api/jobs/{job.pk}/").status_code == 404
    assert client.get(f"/jobs/{job.pk}/").status_code == 404


def test_a_record_without_a_batch_probe_shows_none(make_job, member, team, client):
    job = _tunable_resnet50(make_job, member, team)
    record = _record_with_batch_probe(None)
    JobSchedulingState.objects.update_or_create(job=job, defaults={"exploration": record})

    client.force_login(member)
    data = client.get(f"/api/jobs/{job.pk}/").json()["exploration"]
    page = client.get(f"/jobs/{job.pk}/").content.decode()

    assert data["other_batch"] is None
    assert data["result_w"] == 200.0
    assert 'id="exploration-table"' in page
    assert 'id="exploration-batch-probe"' not in page and "batch probe" not in page


def test_a_job_cancelled_while_exploring_is_not_shown_as_exploring(
    zeus, make_node, make_job, member, team, client
):
    # given a new job in its power-limit sweep (the test above's)
    node = make_node(gpus=1)
    job = _long_resnet50(make_job, member, team)
    for k in range(2):
        now = T0 + k * ROUND
        Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
        assert services.run_scheduling_round(now=now, force=True).ran
        job.refresh_from_db()
        _telemetry(job, node, now, now + ROUND)
    assert JobSchedulingState.objects.get(job=job).exploration["status"] == EXPLORING

    # when it is cancelled and the next round runs
    cluster_services.cancel_job(job, at=T0 + 2 * ROUND)
    now = T0 + 2 * ROUND
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
    assert services.run_scheduling_round(now=now, force=True).ran

    # then its record is closed, with why, and its page no longer says "Exploring"
    rec = JobSchedulingState.objects.get(job=job).exploration
    assert (rec["status"], rec["reason"]) == (DONE, "the job ended")
    client.force_login(member)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Exploring:" not in page
    assert "Stopped: the job ended." in page


def _tunable_resnet50(make_job, member, team):
    """The job above, allowed up to twice its batch, with gradient statistics that give it
    a small noise scale (so 128 teaches too little per sample and zeus keeps it at 64): it
    may be probed at 128."""
    job = make_job(owner=member, team=team, gpu_model="A100", min_gpus=1, max_gpus=1,
                   global_batch_size=64, min_batch_size=64, max_batch_size=128,
                   total_iterations=80_000)  # fmt: skip
    Job.objects.filter(pk=job.pk).update(grad_sqr=1.0, grad_var=0.25, grad_batch_size=64)
    job.refresh_from_db()
    return job


def _live_rounds(job, node, n_rounds, *, report=_telemetry, start=0):
    batches, records = [], []
    for k in range(start, start + n_rounds):
        now = T0 + k * ROUND
        Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
        assert services.run_scheduling_round(now=now, force=True).ran
        job.refresh_from_db()
        if job.state != JobState.RUNNING:
            break
        batches.append(job.current_allocation.batch_size)
        records.append(JobSchedulingState.objects.get(job=job).exploration)
        report(job, node, now, now + ROUND)
    return batches, records


def test_with_the_batch_probe_on_a_live_job_runs_one_round_at_twice_its_batch(
    zeus, settings, make_node, make_job, member, team
):
    # given the batch probe turned on, one A100 and a new job that may run up to 128
    settings.WATTFLOW_EXPLORATION_BATCH_PROBE = True
    node = make_node(gpus=1)
    job = _tunable_resnet50(make_job, member, team)
    assert job.noise_scale is not None
    # when rounds run a minute apart, the job reporting what it does between them
    batches, records = _live_rounds(job, node, 18)
    # then it ran one round at 128 once its limits were explored, and went back to 64
    assert batches.count(128) == 1 and batches[0] == 64
    k = batches.index(128)
    assert records[k]["probe"]["batch"] == 128
    assert records[k]["probe"]["limit_w"] == 400.0
    assert batches[k + 1] == 64
    other = records[-1]["other_batch"]
    assert (other["batch"], other["from_batch"], other["runnable"]) == (128, 64, True)
    assert 0.0 <= other["cost_s"] <= records[-1]["spent_s"] <= records[-1]["budget_s"]
    # the model learned the job at a second per-GPU batch from what it reported there
    assert records[-1]["status"] == DONE


def test_a_live_batch_probe_that_makes_no_progress_goes_back_and_is_marked(
    zeus, settings, make_node, make_job, member, team
):
    settings.WATTFLOW_EXPLORATION_BATCH_PROBE = True
    node = make_node(gpus=1)
    job = _tunable_resnet50(make_job, member, team)

    def stalls_at_128(job, node, t0, t1):  # the larger batch does not fit: no progress
        if job.current_allocation.batch_size != 128:
            _telemetry(job, node, t0, t1)

    batches, records = _live_rounds(job, node, 18, report=stalls_at_128)
    # it is judged once it has had BATCH_PROBE_WAIT_S (two 1-minute rounds) at 128
    k = batches.index(128)
    assert batches[k : k + 2] == [128, 128]
    assert batches[k + 2 :] and set(batches[k + 2 :]) == {64}
    other = records[-1]["other_batch"]
    assert (other["runnable"], other["reason"]) == (False, "no progress at batch 128")
    assert other["cost_s"] == pytest.approx(120.0)  # the whole wait lost


def test_a_live_batch_probe_whose_job_restarts_slowly_is_not_marked(
    zeus, settings, make_node, make_job, member, team
):
    settings.WATTFLOW_EXPLORATION_BATCH_PROBE = True
    node = make_node(gpus=1)
    job = _tunable_resnet50(make_job, member, team)
    seen: list[int] = []

    def restarts_slowly(job, node, t0, t1):  # no report in its first round at a new batch
        alloc = job.current_allocation
        if alloc.batch_size == 128 and alloc.pk not in seen:
            seen.append(alloc.pk)
            return
        _telemetry(job, node, t0, t1)

    batches, records = _live_rounds(job, node, 18, report=restarts_slowly)
    # then the probe waits for its reports, and the batch is measured, not marked
    k = batches.index(128)
    assert batches[k : k + 3] == [128, 128, 64]
    other = records[-1]["other_batch"]
    assert (other["batch"], other["runnable"]) == (128, True)


def test_a_job_that_fails_during_its_batch_probe_keeps_the_batch_marked(
    zeus, settings, make_node, make_job, member, team
):
    settings.WATTFLOW_EXPLORATION_BATCH_PROBE = True
    node = make_node(gpus=1)
    job = _tunable_resnet50(make_job, member, team)
    # rounds until one starts the batch probe
    for k in range(18):
        now = T0 + k * ROUND
        Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
        assert services.run_scheduling_round(now=now, force=True).ran
        job.refresh_from_db()
        if job.current_allocation.batch_size == 128:
            break
        _telemetry(job, node, now, now + ROUND)
    assert JobSchedulingState.objects.get(job=job).exploration["probe"]["batch"] == 128
    # when the job fails at that batch (out of memory, say) and the next round runs
    cluster_services.transition_job(job, to=JobState.FAILED, at=now + ROUND / 2)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now + ROUND)
    assert services.run_scheduling_round(now=now + ROUND, force=True).ran
    # then its record is closed with the batch marked as not runnable
    rec = JobSchedulingState.objects.get(job=job).exploration
    assert rec["status"] == DONE and rec["probe"] is None
    assert rec["other_batch"]["runnable"] is False
    assert rec["other_batch"]["reason"] == "the job ended (failed) during the probe"
