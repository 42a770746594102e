"""The service fed what the real agent sent from a real GPU.

``data/device/h100_2026-11-26/agent_requests.jsonl`` (and ``h100_2026-11-27``'s, made after
the client began to write when it reached each count, and ``h100_2026-11-27_head``'s, the
same check repeated on another machine at a later head) is every request the node agent made,
with the real ``NvmlBackend`` and the process runner, on an NVIDIA H100 while it ran one
job (``benchmarks/device/nvml_agent_check.py``: 1,500 iterations of an MLP at batch 512).
``h200_2026-11-28`` is the same check on an NVIDIA H200, after the agent kept a job's own
clock across a retune; its agent sent the product name ("NVIDIA H200") as the model, which
the service now stores as its key (H200).
Here those requests go, in their order, to the real agent API, so what NVML said of a GPU
model the catalog lacks (700 W, 110 lockable clocks, an energy counter in the kJ) meets the
service's validation, accounting and online model. Only the job and allocation ids are
mapped to this database's, and the timestamps shifted to the present (the retention window
would refuse November 2026 forever after); their spacing is kept.
"""

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, Job, Node
from scheduling import adapters, services
from scheduling.models import JobSchedulingState
from telemetry.models import GpuSample

RECORDINGS = Path(__file__).resolve().parents[2] / "data/device"
FIRST, WITH_TS, AT_HEAD = "h100_2026-11-26", "h100_2026-11-27", "h100_2026-11-27_head"
H200 = "h200_2026-11-28"  # the same two runs on an H200, after the retune kept the job's time
DAYS = [FIRST, WITH_TS, AT_HEAD, H200]


def _model(day: str) -> str:
    return "H200" if day == H200 else "H100"


def _requests(day: str, name: str = "agent_requests.jsonl") -> list[dict]:
    with (RECORDINGS / day / name).open() as f:
        return [json.loads(line) for line in f]


def _shift(value, delta: timedelta):
    """Every ISO timestamp under ``value`` moved by ``delta``."""
    if isinstance(value, dict):
        return {k: (_shift(v, delta) if k != "ts" else _moved(v, delta)) for k, v in value.items()}
    if isinstance(value, list):
        return [_shift(v, delta) for v in value]
    return value


def _moved(ts: str, delta: timedelta) -> str:
    return (datetime.fromisoformat(ts) + delta).isoformat()


def _now_shifted(requests: list[dict]) -> tuple[list[dict], timedelta]:
    """``requests`` with every timestamp moved so that the newest is 5 s ago."""
    stamps = [
        datetime.fromisoformat(item["ts"])
        for r in requests
        if r["method"] == "POST"
        for item in r["body"].get("samples", r["body"].get("events", [r["body"]]))
        if isinstance(item, dict) and "ts" in item
    ]
    delta = timezone.now() - timedelta(seconds=5) - max(stamps)
    return [r | {"body": _shift(r.get("body"), delta)} for r in requests], delta


@pytest.fixture(params=DAYS)
def recorded(request):
    return request.param, *_now_shifted(_requests(request.param))


def test_the_h100_agent_recording_registers_meters_and_completes_its_job(
    recorded, agent_client, make_job, member, team
):
    day, requests, delta = recorded
    node = Node.objects.create(name="device-h100", switch_label="s1", rack_label="r1")
    client = agent_client(node.issue_agent_token())
    register = requests[0]
    assert register["path"] == "/api/agent/register/"
    assert client.post(register["path"], register["body"], format="json").status_code == 200
    gpu = Gpu.objects.get(node=node)
    # what NVML reported of an H100 (H200), stored as such (a GPU model the catalog lacks)
    assert (gpu.model, gpu.min_power_limit_w, gpu.max_power_limit_w) == (_model(day), 200, 700)
    assert (gpu.default_power_limit_w, len(gpu.supported_sm_clocks_mhz)) == (700, 110)

    # the job the agent ran: an unprofiled workload on it, at the recorded batch
    job = make_job(
        owner=member, team=team, workload="device_mlp", total_iterations=1500,
        global_batch_size=512, min_gpus=1, max_gpus=1, min_batch_size=512, max_batch_size=512,
    )  # fmt: skip
    events = [e for r in requests if r["path"].endswith("job-events/") for e in r["body"]["events"]]
    started_at = datetime.fromisoformat(events[0]["ts"])
    at = started_at - timedelta(seconds=1)
    cluster_services.start_job(job, gpus=[gpu], batch_size=512, at=at)
    job.refresh_from_db()

    def post(r):
        body = r["body"]
        if r["path"].endswith("job-events/"):
            body = {
                "events": [
                    e | {"job_id": job.pk, "allocation_id": job.current_allocation_id}
                    for e in body["events"]
                ]
            }
        response = client.post(r["path"], body, format="json")
        assert response.status_code in (200, 201), (r["path"], response.content[:300])

    exited_at = None
    for r in requests[1:]:
        if r["method"] != "POST":
            continue
        exits = [e for e in r["body"].get("events", []) if e["kind"] == "exited"]
        if r["path"].endswith("job-events/") and exits:
            exited_at = datetime.fromisoformat(exits[0]["ts"])
            # before the exit: the round folds the job's telemetry into its online model
            running = Job.objects.filter(pk=job.pk)
            assert (
                services.refresh_online_models(
                    list(running.select_related("current_allocation")),
                    catalog=adapters.current_catalog(),
                    now=exited_at,
                )
                == 1
            )
        post(r)

    samples = [s for r in requests if r["path"].endswith("samples/") for s in r["body"]["samples"]]
    assert (
        GpuSample.objects.filter(gpu=gpu).count()
        == len(samples)
        == {FIRST: 54, WITH_TS: 64, AT_HEAD: 57, H200: 55}[day]
    )
    job.refresh_from_db()
    assert (job.state, job.exit_status, job.completed_iterations) == (JobState.COMPLETED, 0, 1500)
    assert job.grad_sqr and job.grad_var  # the job's own gradient statistics, kept

    # energy: the counter's delta over the allocation, as the samples stored it
    during = [s for s in samples if started_at <= datetime.fromisoformat(s["ts"]) <= exited_at]
    counter_j = during[-1]["energy_j"] - during[0]["energy_j"]
    assert 1_000 < counter_j < 20_000  # ~12 s at 100-480 W

    # the online model saw this job's own speed and draw on the H100 from its second progress
    # report on: 7.9 ms an iteration and 405 W (geometric means; the steady state is about
    # 7.1 ms and 440 W). Not the 11.5 s of imports and CUDA start-up at 72-121 W between the
    # agent's "started" and the job's first report (counted, they made the draw 193 W), nor
    # the first interval's warm-up (9.7 ms an iteration; with it 8.2 ms and 390 W). In the
    # first recording the last interval still holds the checkpoint save (12.5 ms): its
    # client did not yet write the time it reached its count. The second recording's
    # client does, the agent sends that time, and the intervals agree (the spread of their
    # log times, log_t_ss, falls from 0.27 to 0.001).
    cells = JobSchedulingState.objects.get(job=job).observations[_model(day)]
    assert len(cells) == 2  # time and draw pooled apart (5 intervals, 20 samples)
    cell_t, cell_p = sorted(cells, key=lambda c: c["power_w"] is not None)
    assert cell_t["local_batch"] == cell_p["local_batch"] == 512
    assert (cell_t["weight"], cell_p["weight"]) == (5.0, {AT_HEAD: 19.0, H200: 17.0}.get(day, 20.0))
    # the third recording, on another H100 machine: 7.4 ms and 440 W; the H200: 6.3 ms, 446 W
    low, high = {AT_HEAD: (0.0072, 0.0077), H200: (0.0060, 0.0067)}.get(day, (0.0077, 0.0081))
    assert low < cell_t["iter_time_s"] < high, cell_t
    low, high = {AT_HEAD: (425, 455), H200: (430, 460)}.get(day, (395, 415))
    assert low < cell_p["power_w"] < high, cell_p
    if day == FIRST:
        assert cell_t["log_t_ss"] > 0.1  # the save's interval, 1.6 times the others
    else:
        assert cell_t["log_t_ss"] < 0.01, cell_t


@pytest.mark.parametrize("day", DAYS)
def test_the_h100_recording_of_a_retune_and_a_resize_teaches_every_allocation(
    day, agent_client, make_job, member, team
):
    # given what the agent sent on the H100 while its job was retuned in place (a new
    # allocation of the same shape at 15 s: no restart, so no "started" report) and then
    # resized to twice the batch at 30 s (stopped, checkpointed, started again)
    requests, _ = _now_shifted(_requests(day, "agent_requests_resize.jsonl"))
    node = Node.objects.create(name="device-h100", switch_label="s1", rack_label="r1")
    client = agent_client(node.issue_agent_token())
    assert client.post(requests[0]["path"], requests[0]["body"], format="json").status_code == 200
    gpu = Gpu.objects.get(node=node)
    # The recorded job ran to the count its server told it, 4,000 iterations at batch 1024
    # (every sample useful there: 8,000 at 512); this database's allocation converts that
    # count with the efficiency it knows now (about 4,230 at 512), so the job's total here
    # is what the recorded count completes: an exit 0 short of it is a failure.
    job = make_job(
        owner=member, team=team, workload="device_mlp", total_iterations=4000,
        global_batch_size=512, min_gpus=1, max_gpus=1, min_batch_size=512, max_batch_size=1024,
    )  # fmt: skip
    events = [e for r in requests if r["path"].endswith("job-events/") for e in r["body"]["events"]]
    first = datetime.fromisoformat(events[0]["ts"])
    cluster_services.start_job(job, gpus=[gpu], batch_size=512, at=first - timedelta(seconds=1))
    job.refresh_from_db()
    allocation = {1: job.current_allocation_id}  # recorded id -> this database's
    batch = {1: 512, 2: 512, 3: 1024}

    def fold(at: datetime) -> None:
        rows = list(Job.objects.filter(pk=job.pk).select_related("current_allocation"))
        services.refresh_online_models(rows, catalog=adapters.current_catalog(), now=at)

    def allocate(recorded_id: int, at: datetime) -> None:
        # what the server's round did before the agent saw the new assignment
        fold(at)
        cluster_services.set_allocation(job, gpus=[gpu], batch_size=batch[recorded_id], at=at)
        job.refresh_from_db()
        allocation[recorded_id] = job.current_allocation_id

    for r in requests[1:]:
        if r["method"] != "POST":
            continue
        body = r["body"]
        if r["path"].endswith("job-events/"):
            for e in body["events"]:
                at = datetime.fromisoformat(e["ts"]) - timedelta(milliseconds=1)
                if e["allocation_id"] not in allocation:
                    allocate(e["allocation_id"], at)
                if e["kind"] == "exited" and e["reason"] == "resized":
                    allocate(e["allocation_id"] + 1, at)
            body = {
                "events": [
                    e | {"job_id": job.pk, "allocation_id": allocation[e["allocation_id"]]}
                    for e in body["events"]
                ]
            }
        response = client.post(r["path"], body, format="json")
        assert response.status_code in (200, 201), (r["path"], response.content[:300])

    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    # the round after the exit reads the last allocation to its end: in the third recording
    # the job restarted at batch 1024, ran 24 s and exited between two rounds (every report
    # of it after the last round before), which taught nothing before
    assert JobSchedulingState.objects.get(job=job).observed_until < job.finished_at
    catalog = adapters.current_catalog()
    after = job.finished_at + timedelta(seconds=30)
    assert services.refresh_ended_allocations(catalog=catalog, now=after) == 1
    # (read again while its last samples may be on their way, then ended: read once)
    after = job.finished_at + timedelta(seconds=adapters.SAMPLE_LAG_S + 30)
    assert services.refresh_ended_allocations(catalog=catalog, now=after) == 0
    assert JobSchedulingState.objects.get(job=job).observed_until == job.finished_at
    assert services.refresh_ended_allocations(catalog=catalog, now=after) == 0
    assert job.allocations.count() == 3
    cells = JobSchedulingState.objects.get(job=job).observations[_model(day)]
    at = {b: [c for c in cells if c["local_batch"] == b] for b in (512, 1024)}
    # then batch 512 was learned over both of its allocations: 1 interval of the first and
    # 7 (6 in the second recording) of the retuned one (which sent no "started" report and
    # taught nothing before; a restart's first interval is left out as its warm-up, a
    # retune in place's is not: its process ran on, warm), at the draw it trained at
    # (about 420-440 W)
    t512 = [c for c in at[512] if c["iter_time_s"]]
    assert sum(c["weight"] for c in t512) == {FIRST: 8, WITH_TS: 7, AT_HEAD: 8, H200: 9}[day]
    assert 0.006 < t512[0]["iter_time_s"] < 0.0085
    assert 400 < [c for c in at[512] if c["power_w"]][0]["power_w"] < 470
    # and batch 1024 after its restart: its own speed and draw (about 490 W; the H200 531 W)
    assert [c for c in at[1024] if c["iter_time_s"]], cells
    low, high = (510, 550) if day == H200 else (460, 520)
    assert low < [c for c in at[1024] if c["power_w"]][0]["power_w"] < high
    if day in (WITH_TS, H200):
        # the job's own times: no interval holds the save or the restart (the retune's first
        # report still took the agent's tick in these recordings, up to a tick late, which
        # its first interval, learned since, shows: 0.013; the agent now keeps the job's
        # time across a retune, and the H200 recording, made after, has 0.009 over the nine)
        assert all(c["log_t_ss"] < 0.02 for c in cells if c["iter_time_s"]), cells
