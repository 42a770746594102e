"""A GPU or node is deleted only when nothing names it: its allocations, samples, rollups
and ledger rows are history that budgets and reports count, and deleting the row deleted
them with it (a probe's node delete took a team's budget usage from 9,600 J to 0). A GPU
that left its node is retired instead: it keeps its history, gives up its index and is no
capacity; its node's agent can register the GPU that replaces it."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone
from support.races import Gate, beside_paused, in_thread, while_held

from cluster.choices import AuditAction, JobState
from cluster.models import AuditEntry, Gpu, Node, gpus_in_service
from cluster.services import AllocationError, retire_gpu, set_allocation, transition_job
from scheduling.adapters import cluster_from_rows
from telemetry.models import EnergyLedgerEntry
from telemetry.services import GpuIndexTaken, register_gpus

AT = datetime(2026, 12, 1, 12, tzinfo=UTC)


def _spent(gpu, team, joules=4800.0):
    EnergyLedgerEntry.objects.create(
        gpu=gpu, hour=AT.replace(minute=0), job=None, team=team, energy_j=joules,
        co2_g=1.0, ci_g_per_kwh=200.0, zone="ES",
    )  # fmt: skip


def _team_energy(team) -> float:
    return EnergyLedgerEntry.objects.filter(team=team).aggregate(e=Sum("energy_j"))["e"] or 0.0


def _audit(object_type, action):
    return list(
        AuditEntry.objects.filter(object_type=object_type, action=action).values_list(
            "object_id", flat=True
        )
    )


def test_a_gpu_with_energy_history_is_not_deleted(api_client, admin_user, make_node, team):
    gpu = make_node(gpus=2).gpus.order_by("index").first()
    _spent(gpu, team)

    response = api_client(admin_user).delete(f"/api/gpus/{gpu.pk}/")

    assert response.status_code == 409
    assert "energy ledger rows" in response.json()["detail"]
    assert "retire it instead" in response.json()["detail"]
    assert Gpu.objects.filter(pk=gpu.pk).exists()
    assert _team_energy(team) == 4800.0


def test_a_node_whose_gpus_ran_jobs_is_not_deleted(
    api_client, admin_user, make_node, make_job, member, team
):
    node = make_node(gpus=2)
    job = make_job(owner=member, team=team, total_iterations=1000)
    transition_job(job, to=JobState.RUNNING, at=AT)
    set_allocation(job, gpus=list(node.gpus.all())[:1], batch_size=job.global_batch_size, at=AT)

    response = api_client(admin_user).delete(f"/api/nodes/{node.pk}/")

    assert response.status_code == 409
    assert "job allocations of its GPU 0" in response.json()["detail"]
    assert Gpu.objects.filter(node=node).count() == 2
    assert job.allocations.get().gpus.count() == 1


def test_what_has_no_history_is_deleted_and_audited(api_client, admin_user, make_node):
    node = make_node("spare", gpus=2)
    gpu = node.gpus.order_by("index").last()
    client = api_client(admin_user)

    assert client.delete(f"/api/gpus/{gpu.pk}/").status_code == 204
    assert client.delete(f"/api/nodes/{node.pk}/").status_code == 204

    assert not Node.objects.filter(pk=node.pk).exists()
    assert _audit("gpu", AuditAction.DELETED) == [str(gpu.pk)]
    assert _audit("node", AuditAction.DELETED) == [str(node.pk)]


def test_a_retired_gpu_keeps_its_history_and_leaves_the_capacity(
    api_client, admin_user, make_node, team
):
    node = make_node(gpus=2)
    gone = node.gpus.order_by("index").first()
    _spent(gone, team)

    response = api_client(admin_user).post(f"/api/gpus/{gone.pk}/retire/")

    assert response.status_code == 200
    assert response.json()["retired_at"] is not None
    assert _team_energy(team) == 4800.0
    assert _audit("gpu", AuditAction.UPDATED) == [str(gone.pk)]
    nodes = Node.objects.prefetch_related(gpus_in_service())
    cluster = cluster_from_rows(nodes, now=timezone.now(), timeout_s=60)
    assert [g.index for n in cluster.nodes for g in n.gpus] == [1]
    # and retiring it again changes nothing
    assert api_client(admin_user).post(f"/api/gpus/{gone.pk}/retire/").status_code == 200
    assert len(_audit("gpu", AuditAction.UPDATED)) == 1


def test_a_gpu_that_runs_a_job_is_not_retired(
    api_client, admin_user, make_node, make_job, member, team
):
    gpu = make_node(gpus=1).gpus.get()
    job = make_job(owner=member, team=team, total_iterations=1000)
    transition_job(job, to=JobState.RUNNING, at=AT)
    set_allocation(job, gpus=[gpu], batch_size=job.global_batch_size, at=AT)

    response = api_client(admin_user).post(f"/api/gpus/{gpu.pk}/retire/")

    assert response.status_code == 409
    assert "runs a job now" in response.json()["detail"]
    gpu.refresh_from_db()
    assert gpu.retired_at is None


@pytest.mark.parametrize(
    ("field", "change"), [("node", lambda other: other.pk), ("uuid", lambda other: "GPU-new")]
)
def test_a_gpu_that_runs_a_job_is_not_moved_or_renamed(
    api_client, admin_user, make_node, make_job, member, team, field, change
):
    # (moved, node-01's agent lost the job and had its exit refused, 403, and node-02's was
    # told to run it on a GPU it does not have)
    gpu = make_node("node-01", gpus=1).gpus.get()
    other = make_node("node-02", gpus=1)
    job = make_job(owner=member, team=team, total_iterations=1000)
    transition_job(job, to=JobState.RUNNING, at=AT)
    set_allocation(job, gpus=[gpu], batch_size=job.global_batch_size, at=AT)

    response = api_client(admin_user).patch(
        f"/api/gpus/{gpu.pk}/", {field: change(other), "index": 5}, format="json"
    )

    assert response.status_code == 400
    assert "runs a job now" in response.json()[field][0]
    stored = Gpu.objects.get(pk=gpu.pk)
    assert (stored.node.name, stored.uuid, stored.index) == ("node-01", "GPU-node-01-0", 0)
    # once the job has ended the GPU may move (a board moved between servers)
    transition_job(job, to=JobState.COMPLETED, at=AT + timedelta(hours=1))
    response = api_client(admin_user).patch(
        f"/api/gpus/{gpu.pk}/", {field: change(other), "index": 5}, format="json"
    )
    assert response.status_code == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("field", "change"), [("node", lambda other: other.pk), ("uuid", lambda other: "GPU-new")]
)
def test_a_round_placing_a_job_while_the_gpu_is_moved_is_seen_by_the_edit(
    api_client, admin_user, make_node, make_job, member, team, field, change
):
    # The round's transaction has placed the job (the GPU's row locked, not yet committed)
    # when the edit checks: the check waits for the round's commit and then refuses. It
    # read the uncommitted state before, found no job, and moved the GPU from under it.
    gpu = make_node("node-01", gpus=1).gpus.get()
    other = make_node("node-02", gpus=1)
    job = make_job(owner=member, team=team, total_iterations=1000)
    transition_job(job, to=JobState.RUNNING, at=AT)
    client = api_client(admin_user)

    # (the edit reaches its check while the round holds the GPU)
    response = while_held(
        lambda: set_allocation(job, gpus=[gpu], batch_size=job.global_batch_size, at=AT),
        lambda: client.patch(
            f"/api/gpus/{gpu.pk}/", {field: change(other), "index": 5}, format="json"
        ),
    )
    assert response.status_code == 400, response.content
    assert "runs a job now" in response.json()[field][0]
    stored = Gpu.objects.get(pk=gpu.pk)
    assert (stored.node.name, stored.uuid) == ("node-01", "GPU-node-01-0")
    assert job.allocations.get(ended_at__isnull=True).gpus.get() == stored


@pytest.mark.parametrize(
    ("ended_ago", "status"), [(timedelta(minutes=10), 400), (timedelta(hours=2), 200)]
)
def test_a_gpu_whose_job_ended_within_the_hour_is_not_moved(
    api_client, admin_user, make_node, make_job, member, team, ended_ago, status
):
    # Within the hour its node's agent is told to stop the job and may still send the
    # job's last events, which the server refuses (403) once the GPU is on another node.
    gpu = make_node("node-01", gpus=1).gpus.get()
    other = make_node("node-02", gpus=1)
    job = make_job(owner=member, team=team, total_iterations=1000)
    now = timezone.now()
    transition_job(job, to=JobState.RUNNING, at=now - timedelta(hours=3))
    set_allocation(job, gpus=[gpu], batch_size=job.global_batch_size, at=now - timedelta(hours=3))
    transition_job(job, to=JobState.COMPLETED, at=now - ended_ago)

    response = api_client(admin_user).patch(
        f"/api/gpus/{gpu.pk}/", {"node": other.pk, "index": 5}, format="json"
    )

    assert response.status_code == status
    assert Gpu.objects.get(pk=gpu.pk).node == (other if status == 200 else gpu.node)
    if status == 400:
        assert "within the hour" in response.json()["node"][0]


def _wire(uuid, index, model="A100"):
    return {
        "uuid": uuid, "index": index, "model": model, "memory_mb": 40960,
        "default_power_limit_w": 400, "min_power_limit_w": 100, "max_power_limit_w": 400,
    }  # fmt: skip


def test_the_replacement_registers_at_a_retired_gpus_index(make_node, team):
    node = make_node(gpus=1)
    old = node.gpus.get()
    _spent(old, team)
    new = _wire("GPU-replacement", old.index)
    now = timezone.now()
    # refused while the old GPU holds the index: an admin retires it first
    with pytest.raises(GpuIndexTaken, match="an admin retires them first"):
        register_gpus(node, [new], now=now)

    retire_gpu(old, actor=None)
    register_gpus(node, [new], now=now + timedelta(seconds=1))

    in_service = list(Gpu.objects.in_service().filter(node=node).values_list("uuid", "index"))
    assert in_service == [("GPU-replacement", old.index)]
    assert Gpu.objects.get(pk=old.pk).ledger.count() == 1
    # and the old GPU, reported again elsewhere on the node, is back in service
    register_gpus(node, [new, _wire(old.uuid, 5)], now=now + timedelta(seconds=2))
    old.refresh_from_db()
    assert (old.retired_at, old.index) == (None, 5)


def test_a_gpus_model_with_history_cannot_be_patched(api_client, admin_user, make_node, team):
    gpu = make_node(gpus=1).gpus.get()
    _spent(gpu, team)

    response = api_client(admin_user).patch(
        f"/api/gpus/{gpu.pk}/", {"model": "H100"}, format="json"
    )

    assert response.status_code == 400
    assert "cannot change" in response.json()["model"][0]
    gpu.refresh_from_db()
    assert gpu.model != "H100"


def _node_page_post(node, gpu, **gpu_fields) -> dict:
    """The node's admin change form as posted, with its one GPU row changed by ``gpu_fields``."""
    row = {
        "id": gpu.pk, "node": node.pk, "index": gpu.index, "uuid": gpu.uuid,
        "model": gpu.model, "memory_mb": gpu.memory_mb, "power_limit_w": "",
        "sm_clock_mhz": "", **gpu_fields,
    }  # fmt: skip
    return {
        "name": node.name, "switch_label": node.switch_label, "rack_label": node.rack_label,
        "gpu_model": node.gpu_model, "status": node.status,
        "gpus-TOTAL_FORMS": "1", "gpus-INITIAL_FORMS": "1",
        "gpus-MIN_NUM_FORMS": "0", "gpus-MAX_NUM_FORMS": "1000",
        **{f"gpus-0-{name}": value for name, value in row.items()},
    }  # fmt: skip


def test_a_gpus_model_with_history_cannot_be_changed_on_its_nodes_admin_page(
    client, admin_user, make_node, team
):
    # (the GPU's own admin page shows it read-only; the node page's GPU rows changed it)
    node = make_node(gpus=1)
    gpu = node.gpus.get()
    _spent(gpu, team)
    client.force_login(admin_user)

    response = client.post(
        f"/admin/cluster/node/{node.pk}/change/", _node_page_post(node, gpu, model="H100")
    )

    assert response.status_code == 302
    gpu.refresh_from_db()
    assert gpu.model == "A100"
    # a GPU without history is still corrected there
    spare = Gpu.objects.create(
        node=make_node("node-02", gpus=0), index=0, uuid="GPU-spare", model="A100",
        memory_mb=40960, default_power_limit_w=400, min_power_limit_w=100, max_power_limit_w=400,
    )  # fmt: skip
    client.post(
        f"/admin/cluster/node/{spare.node.pk}/change/",
        _node_page_post(spare.node, spare, model="H100"),
    )
    spare.refresh_from_db()
    assert spare.model == "H100"


def test_the_nodes_admin_page_offers_no_gpu_row_to_add(client, admin_user, make_node):
    # (a row has no power limits: saving one added there was a 500, a null power limit)
    node = make_node(gpus=1)
    gpu = node.gpus.get()
    client.force_login(admin_user)

    data = _node_page_post(node, gpu)
    data.update({
        "gpus-TOTAL_FORMS": "2", "gpus-1-node": node.pk, "gpus-1-index": "1",
        "gpus-1-uuid": "GPU-added-here", "gpus-1-model": "A100", "gpus-1-memory_mb": "40960",
    })  # fmt: skip
    response = client.post(f"/admin/cluster/node/{node.pk}/change/", data)

    assert response.status_code == 302  # the node saved, the extra row not taken
    assert not Gpu.objects.filter(uuid="GPU-added-here").exists()


def test_the_nodes_api_counts_the_gpus_in_service(api_client, admin_user, make_node):
    node = make_node(gpus=2)
    retire_gpu(node.gpus.order_by("index").first(), actor=None)

    rows = api_client(admin_user).get("/api/nodes/").json()["results"]

    assert [(row["name"], row["gpu_count"]) for row in rows] == [(node.name, 1)]


def test_a_round_does_not_place_a_job_on_a_gpu_retired_since_it_read_the_cluster(
    make_node, make_job, member, team
):
    from cluster.services import AllocationError

    gpu = make_node(gpus=1).gpus.get()
    job = make_job(owner=member, team=team, total_iterations=1000)
    transition_job(job, to=JobState.RUNNING, at=AT)
    retire_gpu(gpu, actor=None)

    with pytest.raises(AllocationError, match=r"are retired"):
        set_allocation(job, gpus=[gpu], batch_size=job.global_batch_size, at=AT)
    assert not job.allocations.exists()


def test_seed_demo_brings_its_retired_gpu_back_and_renames_no_other(db, settings, tmp_path):
    import io

    from django.core.management import call_command
    from django.core.management.base import CommandError

    settings.WATTFLOW_VAR_DIR = tmp_path
    call_command("seed_demo", stdout=io.StringIO())
    demo = Gpu.objects.get(uuid="GPU-sim-node-01-0")
    retire_gpu(demo, actor=None)
    call_command("seed_demo", stdout=io.StringIO())
    demo.refresh_from_db()
    assert demo.retired_at is None
    # audited as a registration's return is, and a rerun with it in service adds nothing
    back = (
        AuditEntry.objects.filter(object_type="gpu", object_id=str(demo.pk)).order_by("pk").last()
    )
    assert (back.actor_username, back.after["retired_at"]) == ("seed_demo", None)
    assert back.before["retired_at"] is not None
    count = AuditEntry.objects.filter(object_type="gpu").count()
    call_command("seed_demo", stdout=io.StringIO())
    assert AuditEntry.objects.filter(object_type="gpu").count() == count
    # given another GPU in service at a demo GPU's index
    retire_gpu(demo, actor=None)
    Gpu.objects.create(
        node=demo.node, index=0, uuid="GPU-real", model="A100", memory_mb=1,
        default_power_limit_w=400, min_power_limit_w=100, max_power_limit_w=400,
    )  # fmt: skip
    with pytest.raises(CommandError, match=r"holds GPU-real, not the demo's GPU-sim-node-01-0"):
        call_command("seed_demo", stdout=io.StringIO())
    assert Gpu.objects.get(uuid="GPU-real").index == 0


def test_a_gpu_retired_from_one_node_registers_on_another(make_node, team):
    first, second = make_node("node-01", gpus=1), make_node("node-02", gpus=0)
    board = first.gpus.get()
    _spent(board, team)
    now = timezone.now()
    # in service on node-01, it is node-01's
    from telemetry.services import NotYourNode

    with pytest.raises(NotYourNode):
        register_gpus(second, [_wire(board.uuid, 0)], now=now)
    # retired there (the board moved), node-02 registers it, history and all
    retire_gpu(board, actor=None)
    register_gpus(second, [_wire(board.uuid, 0)], now=now)
    board.refresh_from_db()
    assert (board.node_id, board.retired_at, board.ledger.count()) == (second.pk, None, 1)


def test_a_retired_gpu_registered_again_is_audited_as_retiring_is(make_node):
    node = make_node("node-01", gpus=1)
    board = node.gpus.get()
    retire_gpu(board, actor=None, at=AT)
    retired_at = Gpu.objects.get(pk=board.pk).retired_at
    now = AT + timedelta(hours=1)

    register_gpus(node, [_wire(board.uuid, 0)], now=now)

    entries = AuditEntry.objects.filter(object_type="gpu", object_id=str(board.pk))
    back = entries.get(at=now)
    assert (back.action, back.actor_id, back.actor_username) == (
        AuditAction.UPDATED, None, "agent of node-01",
    )  # fmt: skip
    assert back.before == {"gpu": "node-01/gpu0", "uuid": board.uuid,
                           "retired_at": retired_at.isoformat()}  # fmt: skip
    assert back.after == {"gpu": "node-01/gpu0", "uuid": board.uuid, "retired_at": None}
    # and registering it again, in service, audits nothing more
    register_gpus(node, [_wire(board.uuid, 0)], now=now + timedelta(minutes=1))
    assert entries.count() == 2


def test_a_gpu_retired_on_one_node_and_registered_on_another_is_audited_with_both(make_node):
    first, second = make_node("node-01", gpus=1), make_node("node-02", gpus=0)
    board = first.gpus.get()
    retire_gpu(board, actor=None, at=AT)

    register_gpus(second, [_wire(board.uuid, 3)], now=AT + timedelta(hours=1))

    back = AuditEntry.objects.get(object_type="gpu", at=AT + timedelta(hours=1))
    assert (back.actor_username, back.before["gpu"], back.after["gpu"]) == (
        "agent of node-02", "node-01/gpu0", "node-02/gpu3",
    )  # fmt: skip


def _locking(sql: str) -> str | None:
    """The table a ``SELECT ... FOR UPDATE`` statement locks first (None: no lock)."""
    if "FOR UPDATE" not in sql or "FROM" not in sql:
        return None
    return sql.split("FROM", 1)[1].split()[0].strip('"')


@pytest.mark.parametrize("action", ["retire", "delete"])
def test_retiring_or_deleting_a_gpu_locks_its_node_before_it_as_registration_does(
    make_node, action
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from cluster.services import delete_gpu

    gpu = make_node("node-01", gpus=1).gpus.get()
    with CaptureQueriesContext(connection) as queries:
        if action == "retire":
            retire_gpu(gpu, actor=None, at=AT)
        else:
            delete_gpu(gpu, actor=None, at=AT)

    locks = [t for t in (_locking(q["sql"]) for q in queries.captured_queries) if t]
    # the node's row first, then the GPU's alone (registration: the node, then its GPUs)
    assert locks[:2] == ["cluster_node", "cluster_gpu"]
    gpu_lock = next(
        q["sql"] for q in queries.captured_queries if _locking(q["sql"]) == "cluster_gpu"
    )
    assert 'FOR UPDATE OF "cluster_gpu"' in gpu_lock


@pytest.mark.parametrize(
    ("field", "change"), [("node", lambda other: other.pk), ("uuid", lambda other: "GPU-new")]
)
def test_a_round_that_read_the_gpu_before_it_moved_does_not_place_a_job_on_it(
    api_client, admin_user, make_node, make_job, member, team, field, change
):
    # The round reads the cluster, plans, then places: an edit committed in between finds
    # no job on the GPU (none is placed yet) and moves it. The placement must not then put
    # the job on the GPU where it is now: node-01's agent was planned for, node-02's (or a
    # UUID no board has) would be told to run it.
    gpu = make_node("node-01", gpus=1).gpus.get()
    other = make_node("node-02", gpus=1)
    job = make_job(owner=member, team=team, total_iterations=1000)
    transition_job(job, to=JobState.RUNNING, at=AT)
    read_by_the_round = Gpu.objects.get(pk=gpu.pk)

    response = api_client(admin_user).patch(
        f"/api/gpus/{gpu.pk}/", {field: change(other), "index": 5}, format="json"
    )
    assert response.status_code == 200

    with pytest.raises(AllocationError, match="moved or renamed"):
        set_allocation(job, gpus=[read_by_the_round], batch_size=job.global_batch_size, at=AT)
    assert not job.allocations.exists()


def _edit_waiting_after_its_read(monkeypatch, serializer, send):
    """Run ``send()`` (an API edit) in a thread that stops after it has read the row
    (in ``serializer.validate``) until released; returns (the gate it waits at, the
    thread)."""
    read = Gate()
    validate = serializer.validate

    def validate_then_wait(self, attrs):
        read.pause()
        return validate(self, attrs)

    monkeypatch.setattr(serializer, "validate", validate_then_wait)
    return read, in_thread(send)


@pytest.mark.django_db(transaction=True)
def test_a_power_limit_edit_beside_a_retire_keeps_the_gpu_retired(
    api_client, admin_user, make_node, monkeypatch
):
    # A live probe raced PATCH /api/gpus/<id>/ (a power limit) with POST .../retire/: in 10
    # of 30 tries both answered 200 and the GPU was in service again, its retirement
    # audited: the edit had read the row before the retire and saved all of it after.
    from cluster.api.serializers import GpuSerializer

    gpu = make_node("node-01", gpus=1).gpus.get()
    client = api_client(admin_user)
    read, edit = _edit_waiting_after_its_read(
        monkeypatch,
        GpuSerializer,
        lambda: client.patch(f"/api/gpus/{gpu.pk}/", {"power_limit_w": 300}, format="json"),
    )
    # (the retire commits meanwhile, or waits for the edit's lock)
    edited, retired = beside_paused(
        read, edit, lambda: api_client(admin_user).post(f"/api/gpus/{gpu.pk}/retire/")
    )

    assert edited.status_code == 200, edited.content
    assert retired.status_code == 200, retired.content
    stored = Gpu.objects.get(pk=gpu.pk)
    assert stored.retired_at is not None
    assert stored.power_limit_w == 300


@pytest.mark.django_db(transaction=True)
def test_an_edit_of_a_gpu_deleted_meanwhile_does_not_bring_it_back(
    api_client, admin_user, make_node, monkeypatch
):
    # Django's save() of a row that is gone inserts it again.
    from cluster.api.serializers import GpuSerializer

    gpu = make_node("node-01", gpus=1).gpus.get()
    client = api_client(admin_user)
    read, edit = _edit_waiting_after_its_read(
        monkeypatch,
        GpuSerializer,
        lambda: client.patch(f"/api/gpus/{gpu.pk}/", {"power_limit_w": 300}, format="json"),
    )
    edited, deleted = beside_paused(
        read, edit, lambda: api_client(admin_user).delete(f"/api/gpus/{gpu.pk}/")
    )

    assert deleted.status_code == 204
    assert edited.status_code in (200, 404)
    assert not Gpu.objects.filter(pk=gpu.pk).exists()


def _delete_node_while(node, call):
    """``call()`` run in a thread while another transaction holds ``node``'s row lock (as
    ``delete_node`` does), which deletes it a second later: what ``call`` returned."""
    return while_held(
        lambda: Node.objects.select_for_update().get(pk=node.pk),
        call,
        then=lambda: Node.objects.filter(pk=node.pk).delete(),
    )


@pytest.mark.django_db(transaction=True)
def test_a_gpu_added_while_its_node_is_deleted_is_a_400_naming_the_node(
    api_client, admin_user, make_node
):
    # A live probe raced POST /api/gpus/ with DELETE /api/nodes/<id>/: 4 of 12 were a 500,
    # the insert's foreign key check waiting on the delete's lock and then finding no node.
    node = make_node("node-09", gpus=0)
    client = api_client(admin_user)
    client.raise_request_exception = False

    response = _delete_node_while(
        node,
        lambda: client.post(
            "/api/gpus/",
            {"node": node.pk, "index": 0, "uuid": "GPU-late", "model": "A100",
             "memory_mb": 1, "default_power_limit_w": 400, "min_power_limit_w": 100,
             "max_power_limit_w": 400},
            format="json",
        ),
    )  # fmt: skip

    assert response.status_code == 400, response.content
    assert "no longer exists" in response.json()["node"][0]
    assert not Gpu.objects.filter(uuid="GPU-late").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("action", ["delete", "retire"])
def test_a_gpu_deleted_or_retired_while_its_node_is_deleted_is_a_404(
    api_client, admin_user, make_node, action
):
    # A live probe raced DELETE /api/gpus/<id>/ with its node's delete: 2 of 12 were a 500
    # (Gpu.DoesNotExist from the GPU's lock, taken after the node's).
    node = make_node("node-09", gpus=1)
    gpu = node.gpus.get()
    client = api_client(admin_user)
    client.raise_request_exception = False
    url = f"/api/gpus/{gpu.pk}/"

    response = _delete_node_while(
        node, lambda: client.delete(url) if action == "delete" else client.post(url + "retire/")
    )

    assert response.status_code == 404, response.content
    assert not Gpu.objects.filter(pk=gpu.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_node_deleted_twice_at_once_is_a_204_then_a_404(api_client, admin_user, make_node):
    # The second of two deletes of one node read it before the first committed, then its
    # lock found no row: Node.DoesNotExist, a 500 (as the GPU's delete beside its node's
    # was, ``GpuViewSet.perform_destroy``).
    node = make_node("node-09", gpus=1)
    client = api_client(admin_user)
    client.raise_request_exception = False

    response = _delete_node_while(node, lambda: client.delete(f"/api/nodes/{node.pk}/"))

    assert response.status_code == 404, response.content
    assert not Node.objects.filter(pk=node.pk).exists()
