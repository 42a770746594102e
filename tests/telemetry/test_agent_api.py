"""Registration, heartbeat, assignments and job events of the agent API."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from support.nodes import registered_gpu

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, Job, Node
from scheduling.core.goodput import load_curves
from telemetry.models import JobEvent


def test_registration_creates_gpus_and_is_idempotent(make_node, agent_client):
    node = make_node("node-09", gpus=0)
    client = agent_client(node.issue_agent_token())
    body = {"name": "host-9", "gpus": [registered_gpu("GPU-x0", 0), registered_gpu("GPU-x1", 1)]}
    first = client.post("/api/agent/register/", body, format="json")
    assert first.status_code == 200, first.json()
    again = client.post("/api/agent/register/", body, format="json")
    assert again.json() == first.json()
    assert first.json()["node_name"] == "node-09"
    gpus = Gpu.objects.filter(node=node).order_by("index")
    assert [(g.uuid, g.index, g.default_power_limit_w) for g in gpus] == [
        ("GPU-x0", 0, 400),
        ("GPU-x1", 1, 400),
    ]
    node.refresh_from_db()
    assert node.last_heartbeat_at is not None


def test_registration_without_memory_keeps_the_registered_value(agent_node, agent_client):
    node, token = agent_node  # GPUs registered with 40960 MB by the fixture
    body = {
        "gpus": [
            registered_gpu("GPU-node-01-0", 0, memory_mb=None),
            registered_gpu("GPU-node-01-1", 1),
        ]
    }
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    assert response.status_code == 200
    assert list(Gpu.objects.filter(node=node).values_list("memory_mb", flat=True)) == [
        40960, 40960,
    ]  # fmt: skip


def test_swapped_indices_are_renumbered(agent_node, agent_client):
    node, token = agent_node
    body = {"gpus": [registered_gpu("GPU-node-01-0", 1), registered_gpu("GPU-node-01-1", 0)]}
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    assert response.status_code == 200
    assert dict(Gpu.objects.filter(node=node).values_list("uuid", "index")) == {
        "GPU-node-01-0": 1,
        "GPU-node-01-1": 0,
    }


def test_a_replaced_gpu_is_not_deleted_behind_the_admins_back(agent_node, agent_client):
    node, token = agent_node
    body = {"gpus": [registered_gpu("GPU-new", 0), registered_gpu("GPU-node-01-1", 1)]}
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    assert response.status_code == 409
    assert response.json() == {
        "gpus": [
            "GPU index(es) 0 (GPU-node-01-0) belong to GPUs no longer reported; an admin "
            "retires them first (POST /api/gpus/<id>/retire/)"
        ]
    }
    assert sorted(Gpu.objects.filter(node=node).values_list("uuid", flat=True)) == [
        "GPU-node-01-0",
        "GPU-node-01-1",
    ]


def test_registering_a_gpu_of_another_node_is_refused(agent_node, other_node, agent_client):
    node, token = agent_node
    body = {"gpus": [registered_gpu("GPU-node-02-0", 0)]}
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    assert response.status_code == 403
    assert Gpu.objects.get(uuid="GPU-node-02-0").node == other_node[0]
    assert Gpu.objects.filter(node=node).count() == 2


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (
            {"supported_sm_clocks_mhz": [5000, 1410], "max_sm_clock_mhz": None},
            "supported_sm_clocks_mhz",
        ),
        ({"supported_sm_clocks_mhz": [1410], "max_sm_clock_mhz": 5000}, "max_sm_clock_mhz"),
    ],
)
def test_a_clock_no_gpu_runs_at_is_refused_at_registration(
    make_node, agent_client, overrides, field
):
    # (a 5,000 MHz clock on an A100, no maximum registered, was stored: 1 to 100,000 MHz
    # were taken, and the rounds would have planned a job at 5,000 MHz)
    node = make_node("node-09", gpus=0)
    body = {"gpus": [registered_gpu("GPU-x0", 0, **overrides)]}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", body, format="json"
    )
    assert response.status_code == 400
    assert list(response.json()["gpus"][0]) == [field]
    assert not Gpu.objects.filter(node=node).exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"model": "A100\x1b[31m"}, "model"),
        ({"uuid": "GPU-\x1b[0m"}, "uuid"),
        ({"model": "A100\u202e"}, "model"),  # a direction override reorders the pages
        ({"uuid": "GPU-\u200b1"}, "uuid"),  # a zero-width space: two UUIDs that look alike
    ],
)
def test_a_gpu_name_with_a_terminal_escape_is_refused(make_node, agent_client, overrides, field):
    # It was stored and shown on the node pages (found by probing the API).
    node = make_node("node-09", gpus=0)
    body = {"gpus": [registered_gpu("GPU-x0", 0, **overrides)]}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", body, format="json"
    )
    assert response.status_code == 400
    assert field in response.json()["gpus"][0]
    assert not Gpu.objects.filter(node=node).exists()


def test_a_quarantine_reason_with_a_terminal_escape_is_refused(agent_node, agent_client):
    node, token = agent_node
    response = agent_client(token).post(
        "/api/agent/heartbeat/", {"last_quarantine_reason": "\x1b[31mred"}, format="json"
    )
    assert response.status_code == 400
    assert "last_quarantine_reason" in response.json()


def test_registration_with_inconsistent_limits_is_a_400(make_node, agent_client):
    node = make_node("node-09", gpus=0)
    body = {"gpus": [registered_gpu("GPU-x0", 0, min_power_limit_w=450.0)]}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", body, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {
        "gpus": [{"default_power_limit_w": ["Power limits must satisfy min <= default <= max."]}]
    }
    assert not Gpu.objects.filter(node=node).exists()


def test_a_product_name_and_a_fixed_power_limit_register_as_the_model_key(make_node, agent_client):
    # given what an older agent sends for an H200 (NVML's product name) and what an agent
    # sends for a board whose limit NVML cannot manage (a range of its one enforced limit)
    node = make_node("node-09", gpus=0)
    fixed = {"min_power_limit_w": 250.0, "default_power_limit_w": 250.0, "max_power_limit_w": 250.0}
    body = {
        "gpus": [
            registered_gpu("GPU-x0", 0, model="NVIDIA H200"),
            registered_gpu("GPU-x1", 1, **fixed),
        ]
    }
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", body, format="json"
    )
    # then both are stored: the first under its model key, the second at its fixed limit
    assert response.status_code == 200, response.json()
    gpus = Gpu.objects.filter(node=node).order_by("index")
    assert [(g.model, g.min_power_limit_w, g.max_power_limit_w) for g in gpus] == [
        ("H200", 100, 400),
        ("A100", 250, 250),
    ]


def test_heartbeat_updates_only_the_tokens_node(agent_node, other_node, agent_client):
    node, token = agent_node
    response = agent_client(token).post("/api/agent/heartbeat/", {}, format="json")
    assert response.status_code == 200
    assert Node.objects.get(pk=node.pk).last_heartbeat_at is not None
    assert Node.objects.get(pk=other_node[0].pk).last_heartbeat_at is None


@pytest.fixture
def running_job(agent_node, make_job, member, team):
    node, _ = agent_node
    job = make_job(owner=member, team=team, command="python train.py", max_gpus=2)
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    cluster_services.start_job(job, gpus=gpus, batch_size=256, sm_clock_mhz=1200, at=timezone.now())
    job.refresh_from_db()
    return job


def test_a_job_on_two_nodes_is_assigned_its_whole_shape_on_each(
    agent_node, other_node, agent_client, make_job, member, team
):
    # given a job on both GPUs of node-01 and one GPU of node-02
    job = make_job(owner=member, team=team, command="python train.py", max_gpus=3)
    gpus = list(Gpu.objects.filter(node__in=[agent_node[0], other_node[0]]).order_by("uuid"))[:3]
    cluster_services.start_job(job, gpus=gpus, batch_size=240, at=timezone.now())
    # then each node's agent is given its own GPUs and the job's whole count and shape
    for (_, token), here in ((agent_node, 2), (other_node, 1)):
        (got,) = agent_client(token).get("/api/agent/assignments/").json()["assignments"]
        assert (len(got["gpu_uuids"]), got["gpu_count"], got["gpus_per_node"]) == (here, 3, [2, 1])


def test_assignments_list_the_open_allocations_on_this_node(
    running_job, agent_node, other_node, agent_client, settings
):
    settings.TELEMETRY_CHECKPOINT_ROOT = "/ckpt"
    node, token = agent_node
    answer = agent_client(token).get("/api/agent/assignments/").json()
    assert answer == {
        "assignments": [
            {
                "allocation_id": running_job.current_allocation_id,
                "job_id": running_job.pk,
                "workload": "resnet50",
                "resembles": "",
                "param_count": None,
                "command": "python train.py",
                "gpu_uuids": ["GPU-node-01-0", "GPU-node-01-1"],
                "gpu_count": 2,
                "gpus_per_node": [2],
                "batch_size": 256,
                "sm_clock_mhz": 1200,
                "power_limit_w": None,
                "checkpoint_dir": f"/ckpt/job-{running_job.pk}",
                "total_iterations": 1000,
                "completed_iterations": 0.0,
                "env": {
                    "WATTFLOW_WORKLOAD": "resnet50",
                    "WATTFLOW_TOTAL_ITERATIONS": "1000.0",
                    "WATTFLOW_COMPLETED_ITERATIONS": "0.0",
                },
            }
        ],
        "stop": [],
    }
    # the other node has nothing to run
    other = agent_client(other_node[1]).get("/api/agent/assignments/").json()
    assert other == {"assignments": [], "stop": []}


def test_a_paused_job_is_listed_to_stop(running_job, agent_node, agent_client):
    node, token = agent_node
    cluster_services.transition_job(running_job, to=JobState.PAUSED)
    answer = agent_client(token).get("/api/agent/assignments/").json()
    assert answer == {"assignments": [], "stop": [running_job.pk]}


def _event(job, kind, **extra):
    return {
        "event_id": str(uuid.uuid4()),
        "job_id": job.pk,
        "allocation_id": job.current_allocation_id,
        "kind": kind,
        "ts": timezone.now().isoformat(),
        **extra,
    }


def test_progress_and_a_clean_exit_complete_the_job(running_job, agent_node, agent_client):
    node, token = agent_node
    client = agent_client(token)
    progress = _event(running_job, "progress", iterations=420.0)
    exited = _event(
        running_job, "exited", reason="completed", exit_status=0, iterations=1000.0,
        log_tail="epoch 9 done\n",
    )  # fmt: skip
    response = client.post("/api/agent/job-events/", {"events": [progress]}, format="json")
    assert response.json() == {"received": 1, "new": 1}
    assert Job.objects.get(pk=running_job.pk).completed_iterations == 420.0
    client.post("/api/agent/job-events/", {"events": [exited]}, format="json")
    job = Job.objects.get(pk=running_job.pk)
    assert (job.state, job.exit_status, job.log_tail, job.completed_iterations) == (
        JobState.COMPLETED, 0, "epoch 9 done\n", 1000.0,
    )  # fmt: skip
    assert job.current_allocation_id is None


def test_a_replayed_event_is_applied_once(running_job, agent_node, agent_client):
    node, token = agent_node
    client = agent_client(token)
    failed = _event(running_job, "exited", reason="failed", exit_status=3, log_tail="OOM")
    assert client.post("/api/agent/job-events/", {"events": [failed]}, format="json").json() == {
        "received": 1,
        "new": 1,
    }
    again = client.post("/api/agent/job-events/", {"events": [failed]}, format="json")
    assert again.json() == {"received": 1, "new": 0}
    assert JobEvent.objects.filter(job=running_job).count() == 1
    assert Job.objects.get(pk=running_job.pk).state == JobState.FAILED


def test_progress_never_goes_backwards(running_job, agent_node, agent_client):
    node, token = agent_node
    events = [
        _event(running_job, "progress", iterations=500.0),
        _event(running_job, "progress", iterations=300.0),
    ]
    agent_client(token).post("/api/agent/job-events/", {"events": events}, format="json")
    assert Job.objects.get(pk=running_job.pk).completed_iterations == 500.0


def test_an_exit_of_a_stale_allocation_leaves_the_job_running(
    running_job, agent_node, agent_client
):
    # given the job resized on this node: its first allocation ended, a second one runs
    node, token = agent_node
    first = running_job.current_allocation_id
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    cluster_services.set_allocation(running_job, gpus=[gpu], batch_size=256, at=timezone.now())
    stale = _event(running_job, "exited", reason="completed", exit_status=0)
    stale["allocation_id"] = first
    response = agent_client(token).post(
        "/api/agent/job-events/", {"events": [stale]}, format="json"
    )
    # then the exit is recorded but changes nothing: it is not the current allocation's
    assert response.json() == {"received": 1, "new": 1}
    assert Job.objects.get(pk=running_job.pk).state == JobState.RUNNING


def test_a_stop_on_the_schedulers_order_changes_no_state(running_job, agent_node, agent_client):
    node, token = agent_node
    stopped = _event(running_job, "exited", reason="stopped", exit_status=0, log_tail="ckpt")
    agent_client(token).post("/api/agent/job-events/", {"events": [stopped]}, format="json")
    job = Job.objects.get(pk=running_job.pk)
    assert (job.state, job.log_tail) == (JobState.RUNNING, "ckpt")


def test_a_late_stop_of_an_old_allocation_keeps_a_failed_jobs_output(
    running_job, agent_node, other_node, agent_client
):
    # given the job moved to node-02 and failed there with its message
    first = running_job.current_allocation_id
    gpus = list(Gpu.objects.filter(node=other_node[0]))
    cluster_services.set_allocation(running_job, gpus=gpus, batch_size=256, at=timezone.now())
    running_job.refresh_from_db()
    failed = _event(running_job, "exited", reason="failed", exit_status=1, log_tail="OOM at 41")
    url = "/api/agent/job-events/"
    answer = agent_client(other_node[1]).post(url, {"events": [failed]}, format="json")
    assert answer.status_code == 200
    # when node-01 delivers, late, the stop of the job's first allocation
    late = _event(running_job, "exited", reason="stopped", exit_status=0, log_tail="")
    late["allocation_id"] = first
    late_with_text = {**late, "event_id": str(uuid.uuid4()), "log_tail": "ckpt"}
    client = agent_client(agent_node[1])
    for event in (late, late_with_text):
        assert client.post(url, {"events": [event]}, format="json").status_code == 200
    # then the failure and its message stand
    job = Job.objects.get(pk=running_job.pk)
    assert (job.state, job.exit_status, job.log_tail) == (JobState.FAILED, 1, "OOM at 41")


def test_a_stop_that_printed_nothing_keeps_the_last_output(running_job, agent_node, agent_client):
    client = agent_client(agent_node[1])
    for tail in ("ckpt at 400", ""):
        stopped = _event(running_job, "exited", reason="stopped", exit_status=0, log_tail=tail)
        client.post("/api/agent/job-events/", {"events": [stopped]}, format="json")
    assert Job.objects.get(pk=running_job.pk).log_tail == "ckpt at 400"


def test_events_for_a_job_of_another_node_are_refused(running_job, other_node, agent_client):
    progress = _event(running_job, "progress", iterations=999.0)
    response = agent_client(other_node[1]).post(
        "/api/agent/job-events/", {"events": [progress]}, format="json"
    )
    assert response.status_code == 403
    assert not JobEvent.objects.exists()
    assert Job.objects.get(pk=running_job.pk).completed_iterations == 0.0


def test_an_exit_without_reason_is_a_400(running_job, agent_node, agent_client):
    node, token = agent_node
    bad = _event(running_job, "exited", exit_status=0)
    response = agent_client(token).post("/api/agent/job-events/", {"events": [bad]}, format="json")
    assert response.status_code == 400
    assert response.json() == {"events": [{"reason": ["An exit needs a reason."]}]}
    assert not JobEvent.objects.exists()


def test_old_allocations_are_not_listed_to_stop(agent_node, agent_client, make_job, member, team):
    node, token = agent_node
    job = make_job(owner=member, team=team)
    gpu = Gpu.objects.get(uuid="GPU-node-01-0")
    now = timezone.now()
    cluster_services.start_job(job, gpus=[gpu], batch_size=256, at=now - timedelta(hours=3))
    cluster_services.transition_job(job, to=JobState.PAUSED, at=now - timedelta(hours=2))
    answer = agent_client(token).get("/api/agent/assignments/").json()
    assert answer == {"assignments": [], "stop": []}


def test_gradient_statistics_on_a_start_are_refused(running_job, agent_node, agent_client):
    # the schema says they come with a progress event; on a start or an exit they replaced
    # the job's statistics (a live probe)
    node, token = agent_node
    event = _event(running_job, "started", grad_sqr=4.0, grad_var=2.0)
    response = agent_client(token).post(
        "/api/agent/job-events/", {"events": [event]}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["events"][0] == {
        "grad_sqr": ["Gradient statistics come with a progress event."]
    }
    assert Job.objects.get(pk=running_job.pk).grad_sqr is None


def test_a_count_on_a_start_is_refused(running_job, agent_node, agent_client):
    # a live probe: any event kind raised the job's completed count
    node, token = agent_node
    event = _event(running_job, "started", iterations=500.0)
    response = agent_client(token).post(
        "/api/agent/job-events/", {"events": [event]}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["events"][0] == {
        "iterations": ["A start carries no count: progress and exit events do."]
    }
    assert Job.objects.get(pk=running_job.pk).completed_iterations == 0.0


def test_gradient_statistics_are_stored_on_the_job_and_an_older_report_does_not_win(
    running_job, agent_node, agent_client
):
    # given two progress reports with gradient statistics, the later one arriving first
    node, token = agent_node
    batch = running_job.current_allocation.batch_size
    late = _event(running_job, "progress", iterations=200.0, grad_sqr=4.0, grad_var=2.0)
    early = _event(running_job, "progress", iterations=100.0, grad_sqr=9.0, grad_var=9.0)
    early["ts"] = (timezone.now() - timedelta(minutes=1)).isoformat()
    client = agent_client(token)
    for event in (late, early):
        client.post("/api/agent/job-events/", {"events": [event]}, format="json")
    # then the job keeps the newer statistics, at the batch of the allocation they came from
    job = Job.objects.get(pk=running_job.pk)
    assert (job.grad_sqr, job.grad_var, job.grad_batch_size) == (4.0, 2.0, batch)
    assert JobEvent.objects.get(event_id=early["event_id"]).grad_sqr == 9.0
    assert job.noise_scale == pytest.approx(load_curves().calibration * 2.0 * batch / 4.0)


@pytest.mark.parametrize(
    ("fields", "bad_field"),
    [
        ({"grad_sqr": 1.0}, "grad_var"),  # one without the other means nothing
        ({"grad_var": 1.0}, "grad_sqr"),
        ({"grad_sqr": -1.0, "grad_var": 1.0}, "grad_sqr"),
        ({"grad_sqr": "NaN", "grad_var": 1.0}, "grad_sqr"),
        ({"grad_sqr": 1.0, "grad_var": "Infinity"}, "grad_var"),
        # each finite, but their ratio overflows: stored, the job's noise scale was inf
        ({"grad_sqr": 5e-324, "grad_var": 1e308}, "grad_sqr"),
        # finite, and finite times the batch, but the calibration took it past a float
        ({"grad_sqr": 1.0, "grad_var": 5e305}, "grad_sqr"),
        ({"grad_sqr": True, "grad_var": 1.0}, "grad_sqr"),  # float(True) is 1.0
        # a zero norm has no ratio: stored, it replaced a measured noise scale with none
        ({"grad_sqr": 0.0, "grad_var": 0.04}, "grad_sqr"),
        ({"grad_sqr": 0.0, "grad_var": 0.0}, "grad_sqr"),
    ],
)
def test_unusable_gradient_statistics_are_refused_per_field(
    running_job, agent_node, agent_client, fields, bad_field
):
    node, token = agent_node
    event = _event(running_job, "progress", iterations=100.0, **fields)
    response = agent_client(token).post(
        "/api/agent/job-events/", {"events": [event]}, format="json"
    )
    # then a 400 names the field, and nothing of the event was stored
    assert response.status_code == 400
    assert list(response.json()["events"][0]) == [bad_field]
    job = Job.objects.get(pk=running_job.pk)
    assert (job.grad_sqr, job.completed_iterations) == (None, 0.0)
    assert not JobEvent.objects.filter(event_id=event["event_id"]).exists()


def test_a_registered_gpu_cannot_change_its_model(agent_node, agent_client):
    # given a node whose two A100s are registered (the fixture)
    node, token = agent_node
    before = list(Gpu.objects.filter(node=node).order_by("index").values_list("uuid", "model"))
    # when its agent says one of them is now an H100, beside a new GPU
    body = {
        "gpus": [
            registered_gpu("GPU-node-01-0", 0),
            registered_gpu("GPU-node-01-1", 1, model="NVIDIA H100 80GB HBM3"),
            registered_gpu("GPU-new", 2),
        ]
    }
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    # then nothing is stored, and the error names the GPU and both models
    assert response.status_code == 400
    assert response.json() == {
        "gpus": [
            {},
            {
                "model": [
                    "GPU GPU-node-01-1 is registered as A100, not H100: a GPU's model does "
                    "not change (a new board has a UUID of its own)."
                ]
            },
            {},
        ]
    }
    after = list(Gpu.objects.filter(node=node).order_by("index").values_list("uuid", "model"))
    assert after == before


def test_a_product_name_stored_by_an_older_agent_registers_as_its_key(agent_node, agent_client):
    # given a GPU stored under NVML's product name (agents before the model key)
    node, token = agent_node
    Gpu.objects.filter(uuid="GPU-node-01-0").update(model="NVIDIA A100-SXM4-40GB")
    body = {"gpus": [registered_gpu("GPU-node-01-0", 0), registered_gpu("GPU-node-01-1", 1)]}
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    assert response.status_code == 200, response.json()
    assert Gpu.objects.get(uuid="GPU-node-01-0").model == "A100"


def test_a_pcie_board_registered_as_the_sxm_model_moves_to_its_own_model(agent_node, agent_client):
    # given A100 PCIe boards registered as "A100" (before the server kept the form factor,
    # both boards were keyed as the catalog's 400 W SXM4 A100)
    node, token = agent_node
    # when their agent registers them again under their NVML name
    body = {
        "gpus": [
            registered_gpu("GPU-node-01-0", 0, model="NVIDIA A100-PCIE-40GB"),
            registered_gpu("GPU-node-01-1", 1, model="NVIDIA A100 80GB PCIe"),
        ]
    }
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    # then it is no model change refused (the old key only lacked the form factor): both
    # are the A100-PCIe from now on
    assert response.status_code == 200, response.json()
    models = set(Gpu.objects.filter(node=node).values_list("model", flat=True))
    assert models == {"A100-PCIe"}
    # and a board registered as the PCIe model cannot turn back into the SXM4 one
    body = {"gpus": [registered_gpu("GPU-node-01-0", 0), registered_gpu("GPU-node-01-1", 1)]}
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    assert response.status_code == 400
    assert set(Gpu.objects.filter(node=node).values_list("model", flat=True)) == {"A100-PCIe"}


@pytest.mark.parametrize(
    ("stored", "product_name", "key"),
    [
        ("V100", "Tesla V100-FHHL-16GB", "V100-FHHL"),  # a 150 W card, not the 300 W SXM2
        ("H100", "NVIDIA H100 NVL", "H100-NVL"),  # 350-400 W, 94 GB, not the 700 W SXM
    ],
)
def test_an_fhhl_or_nvl_board_registered_as_the_sxm_model_moves_to_its_own_model_once(
    agent_node, agent_client, stored, product_name, key
):
    # given boards registered under the bare model's key (before the server kept the FHHL
    # and NVL boards apart, they shared the SXM board's key, power range and profiles)
    node, token = agent_node
    Gpu.objects.filter(node=node).update(model=stored)
    # when their agent registers them again under their NVML name
    body = {
        "gpus": [
            registered_gpu("GPU-node-01-0", 0, model=product_name),
            registered_gpu("GPU-node-01-1", 1, model=product_name),
        ]
    }
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    # then it is no model change refused: both are the board's own model from now on
    assert response.status_code == 200, response.json()
    assert set(Gpu.objects.filter(node=node).values_list("model", flat=True)) == {key}
    # and once moved, a board goes neither back to the bare key nor to another board
    for other in (stored, f"{stored}-PCIe"):
        body = {
            "gpus": [
                registered_gpu("GPU-node-01-0", 0, model=other),
                registered_gpu("GPU-node-01-1", 1, model=other),
            ]
        }
        response = agent_client(token).post("/api/agent/register/", body, format="json")
        assert response.status_code == 400
        assert set(Gpu.objects.filter(node=node).values_list("model", flat=True)) == {key}


def test_jobs_pinned_to_the_bare_key_follow_the_boards_when_none_is_left_under_it(
    agent_node, other_node, agent_client, make_job, member, team
):
    # given jobs pinned to "A100" (waiting and finished) while the cluster's only A100s were
    # PCIe boards keyed so, and a V100 job on another node's V100s
    node, token = agent_node
    other, _ = other_node
    Gpu.objects.filter(node=other).update(model="V100")
    waiting = make_job(owner=member, team=team, gpu_model="A100")
    done = make_job(owner=member, team=team, gpu_model="A100")
    Job.objects.filter(pk=done.pk).update(state=JobState.COMPLETED)
    v100 = make_job(owner=member, team=team, gpu_model="V100")
    # when the agent registers the boards under their own key
    body = {
        "gpus": [
            registered_gpu("GPU-node-01-0", 0, model="NVIDIA A100-PCIE-40GB"),
            registered_gpu("GPU-node-01-1", 1, model="NVIDIA A100-PCIE-40GB"),
        ]
    }
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    assert response.status_code == 200, response.json()
    # then the waiting job is pinned to the boards it was submitted for (under the bare key
    # it would wait for good: no A100 is left), the finished job keeps its record, and the
    # other model's job is untouched
    pinned = dict(Job.objects.values_list("pk", "gpu_model"))
    assert pinned == {waiting.pk: "A100-PCIe", done.pk: "A100", v100.pk: "V100"}


def test_jobs_pinned_to_the_bare_key_stay_while_boards_of_it_are_left(
    agent_node, other_node, agent_client, make_job, member, team
):
    # given SXM A100s on another node beside the PCIe boards keyed as A100
    node, token = agent_node
    waiting = make_job(owner=member, team=team, gpu_model="A100")
    # when the PCIe boards move to their own key
    body = {
        "gpus": [
            registered_gpu("GPU-node-01-0", 0, model="NVIDIA A100-PCIE-40GB"),
            registered_gpu("GPU-node-01-1", 1, model="NVIDIA A100-PCIE-40GB"),
        ]
    }
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    assert response.status_code == 200, response.json()
    # then the job still asks for the A100s the cluster has
    assert Job.objects.get(pk=waiting.pk).gpu_model == "A100"


@pytest.mark.django_db(transaction=True)
def test_a_registration_beside_its_nodes_delete_is_a_401_not_a_500(make_node, agent_client):
    # A live probe raced an agent's registration with DELETE /api/nodes/<id>/: 5 of 12 were
    # a 500, the new GPUs' foreign key failing at the commit, the node deleted meanwhile.
    # Its token went with the node: the agent hears what its next request would, a 401.
    from support.races import while_held

    node = make_node("node-09", gpus=0)
    client = agent_client(node.issue_agent_token())
    client.raise_request_exception = False

    response = while_held(
        lambda: Node.objects.select_for_update().get(pk=node.pk),
        lambda: client.post(
            "/api/agent/register/", {"gpus": [registered_gpu("GPU-late", 0)]}, format="json"
        ),
        then=lambda: Node.objects.filter(pk=node.pk).delete(),
    )
    assert response.status_code == 401, response.content
    assert "deleted" in response.json()["detail"]
    assert not Gpu.objects.filter(uuid="GPU-late").exists()


@pytest.mark.parametrize("top_w", [1.0, 9.0])
def test_a_top_power_limit_no_gpu_has_is_refused_at_registration(make_node, agent_client, top_w):
    # given an agent reporting a GPU whose highest power limit is a few watts (every draw
    # above 1.5 x it was then refused from the ledger: its team never charged)
    node = make_node("node-09", gpus=0)
    limits = {"min_power_limit_w": 1.0, "default_power_limit_w": 1.0, "max_power_limit_w": top_w}
    body = {"gpus": [registered_gpu("GPU-x0", 0, **limits)]}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", body, format="json"
    )
    # then the registration is a 400 naming the field, and nothing is stored
    assert response.status_code == 400
    message = response.json()["gpus"][0]["max_power_limit_w"][0]
    assert "at least 10 W" in message
    assert not Gpu.objects.filter(node=node).exists()


def test_a_top_power_limit_of_ten_watts_registers(make_node, agent_client):
    node = make_node("node-09", gpus=0)
    limits = {"min_power_limit_w": 5.0, "default_power_limit_w": 10.0, "max_power_limit_w": 10.0}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", {"gpus": [registered_gpu("GPU-x0", 0, **limits)]}, format="json"
    )
    assert response.status_code == 200, response.json()


@pytest.mark.parametrize(("top_w", "stored_w"), [(9.5, 10), (9.6, 10), (10.4, 10)])
def test_a_top_power_limit_stored_at_the_floor_registers_as_stored(
    make_node, agent_client, top_w, stored_w
):
    # given an agent reporting a top limit under 10 W that is stored, in whole watts, as
    # 10 W (it was refused: the floor was checked on the reported float, the store rounds)
    node = make_node("node-09", gpus=0)
    limits = {"min_power_limit_w": 5.0, "default_power_limit_w": 9.0, "max_power_limit_w": top_w}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", {"gpus": [registered_gpu("GPU-x0", 0, **limits)]}, format="json"
    )
    # then it registers, and the top limit stored is the one the floor was checked on
    assert response.status_code == 200, response.json()
    assert Gpu.objects.get(uuid="GPU-x0").max_power_limit_w == stored_w


def test_a_top_power_limit_stored_below_the_floor_is_refused_saying_so(make_node, agent_client):
    # given a top limit of 9.4 W, which would be stored as 9 W
    node = make_node("node-09", gpus=0)
    limits = {"min_power_limit_w": 5.0, "default_power_limit_w": 9.0, "max_power_limit_w": 9.4}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", {"gpus": [registered_gpu("GPU-x0", 0, **limits)]}, format="json"
    )
    # then it is a 400 whose message says the limit is judged as stored, in whole watts
    assert response.status_code == 400
    message = response.json()["gpus"][0]["max_power_limit_w"][0]
    assert "at least 10 W" in message
    assert "whole watts" in message
    assert not Gpu.objects.filter(node=node).exists()


# One rule for a GPU's three power limits: each is judged in the whole watts the row stores
# (``whole_watts``), as the top limit's floor is; the bottom and default limits were judged
# on the reported float (``min_value=1``, ``max_value=2000``), and the order of the three too.
@pytest.mark.parametrize(
    ("limits", "stored"),
    [
        # a bottom limit of 0.6 W is stored as 1 W (it was refused: below 1 on the float)
        ({"min_power_limit_w": 0.6, "default_power_limit_w": 0.7, "max_power_limit_w": 70.0},
         (1, 1, 70)),
        # 2000.4 W is stored as 2000 W, the ceiling (it was refused: above 2000 on the float)
        ({"min_power_limit_w": 100.0, "default_power_limit_w": 2000.4,
          "max_power_limit_w": 2000.4}, (100, 2000, 2000)),
        # min 70.4 > default 70.2 as floats, but all three are stored as 70 W
        ({"min_power_limit_w": 70.4, "default_power_limit_w": 70.2, "max_power_limit_w": 70.3},
         (70, 70, 70)),
    ],
)  # fmt: skip
def test_power_limits_are_judged_as_stored_in_whole_watts(make_node, agent_client, limits, stored):
    # given an agent reporting limits that are valid once rounded as the row stores them
    node = make_node("node-09", gpus=0)
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", {"gpus": [registered_gpu("GPU-x0", 0, **limits)]}, format="json"
    )
    # then they register, stored as the values they were judged on
    assert response.status_code == 200, response.json()
    gpu = Gpu.objects.get(uuid="GPU-x0")
    assert (gpu.min_power_limit_w, gpu.default_power_limit_w, gpu.max_power_limit_w) == stored


@pytest.mark.parametrize(
    ("field", "limits", "words"),
    [
        # 0.4 W would be stored as 0 W, 0.5 W too (half to even)
        ("min_power_limit_w",
         {"min_power_limit_w": 0.4, "default_power_limit_w": 60.0, "max_power_limit_w": 70.0},
         "at least 1 W"),
        ("default_power_limit_w",
         {"min_power_limit_w": 0.5, "default_power_limit_w": 0.5, "max_power_limit_w": 70.0},
         "at least 1 W"),
        # 2000.6 W would be stored as 2001 W
        ("max_power_limit_w",
         {"min_power_limit_w": 100.0, "default_power_limit_w": 400.0,
          "max_power_limit_w": 2000.6}, "at most 2000 W"),
    ],
)  # fmt: skip
def test_power_limits_stored_out_of_bounds_are_refused_saying_so(
    make_node, agent_client, field, limits, words
):
    node = make_node("node-09", gpus=0)
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", {"gpus": [registered_gpu("GPU-x0", 0, **limits)]}, format="json"
    )
    assert response.status_code == 400
    message = response.json()["gpus"][0][field][0]
    assert words in message
    assert "whole watts" in message
    assert not Gpu.objects.filter(node=node).exists()


def test_power_limits_out_of_order_once_stored_are_refused(make_node, agent_client):
    # min 70.6 W (stored 71) above default 70.4 W (stored 70)
    node = make_node("node-09", gpus=0)
    limits = {"min_power_limit_w": 70.6, "default_power_limit_w": 70.4, "max_power_limit_w": 80}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", {"gpus": [registered_gpu("GPU-x0", 0, **limits)]}, format="json"
    )
    assert response.status_code == 400
    assert "min <= default <= max" in response.json()["gpus"][0]["default_power_limit_w"][0]
    assert not Gpu.objects.filter(node=node).exists()


# A site's own cap (``nvidia-smi -pl``): the agent reads the limit each GPU enforces at its
# start, before it changes anything, and registers it (``site_power_limit_w``); rounds plan
# no limit above it. An older agent sends none.


def test_a_sites_power_cap_is_registered_and_kept_when_an_older_agent_sends_none(
    make_node, agent_client
):
    node = make_node("node-09", gpus=0)
    client = agent_client(node.issue_agent_token())
    capped = {"gpus": [registered_gpu("GPU-x0", 0, site_power_limit_w=300.4)]}
    assert client.post("/api/agent/register/", capped, format="json").status_code == 200
    assert Gpu.objects.get(uuid="GPU-x0").site_power_limit_w == 300  # as stored, whole watts
    # an older agent (no field) or one that could not read it (null) registers as before,
    # and the cap stays what the newer agent read
    for gpu in (registered_gpu("GPU-x0", 0), registered_gpu("GPU-x0", 0, site_power_limit_w=None)):
        response = client.post("/api/agent/register/", {"gpus": [gpu]}, format="json")
        assert response.status_code == 200, response.json()
        assert Gpu.objects.get(uuid="GPU-x0").site_power_limit_w == 300
    # and a cap the range reported now leaves out is dropped (not known until reported)
    narrower = registered_gpu(
        "GPU-x0", 0, min_power_limit_w=150.0, default_power_limit_w=250.0, max_power_limit_w=250.0
    )
    response = client.post("/api/agent/register/", {"gpus": [narrower]}, format="json")
    assert response.status_code == 200, response.json()
    assert Gpu.objects.get(uuid="GPU-x0").site_power_limit_w is None


def test_an_old_agents_registration_leaves_no_cap(make_node, agent_client):
    node = make_node("node-09", gpus=0)
    body = {"gpus": [registered_gpu("GPU-x0", 0)]}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", body, format="json"
    )
    assert response.status_code == 200
    assert Gpu.objects.get(uuid="GPU-x0").site_power_limit_w is None


@pytest.mark.parametrize(
    "cap",
    [99.4, 400.6, "NaN", "Infinity", 0, -5, True, "300 W"],
    ids=["below-min", "above-max", "nan", "inf", "zero", "negative", "bool", "text"],
)
def test_a_site_power_cap_outside_the_range_or_not_finite_is_a_400(make_node, agent_client, cap):
    node = make_node("node-09", gpus=0)
    body = {"gpus": [registered_gpu("GPU-x0", 0, site_power_limit_w=cap)]}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", body, format="json"
    )
    assert response.status_code == 400, response.content
    assert "site_power_limit_w" in response.json()["gpus"][0]
    assert not Gpu.objects.filter(node=node).exists()


@pytest.mark.parametrize("cap", [99.5, 100.0, 400.0, 400.4])
def test_a_site_power_cap_within_the_range_as_stored_registers(make_node, agent_client, cap):
    node = make_node("node-09", gpus=0)
    body = {"gpus": [registered_gpu("GPU-x0", 0, site_power_limit_w=cap)]}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", body, format="json"
    )
    assert response.status_code == 200, response.json()
    assert 100 <= Gpu.objects.get(uuid="GPU-x0").site_power_limit_w <= 400
