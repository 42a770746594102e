"""GPUs that moved to another node before ``Gpu.node_since`` existed (cluster 0024 added it
null for every GPU): with no arrival time, the new node's token could post samples stamped
in the time the GPU ran its old node's jobs. The audit log records each move an agent's
registration made (a GPU retired on one node brought back into service on another), so the
migration (cluster 0025) takes its time from there."""

from datetime import UTC, datetime, timedelta

import pytest
from support.migrations import stored_before

BEFORE = [("cluster", "0024_gpu_node_since")]
T0 = datetime(2026, 12, 1, tzinfo=UTC)
LIMITS = {"default_power_limit_w": 400, "min_power_limit_w": 100, "max_power_limit_w": 400}


def _returned(apps, gpu, *, was: str, now: str, at: datetime) -> None:
    """The audit entry of an agent's registration bringing ``gpu`` back into service."""
    apps.get_model("cluster", "AuditEntry").objects.create(
        at=at, actor_username=f"agent of {now.split('/')[0]}", action="updated",
        object_type="gpu", object_id=str(gpu.pk),
        before={"gpu": was, "uuid": gpu.uuid, "retired_at": (at - timedelta(hours=1)).isoformat()},
        after={"gpu": now, "uuid": gpu.uuid, "retired_at": None},
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_a_gpu_moved_before_node_since_gets_the_time_of_its_last_move():
    with stored_before(BEFORE) as (apps, user, team):
        Node, Gpu = apps.get_model("cluster", "Node"), apps.get_model("cluster", "Gpu")
        n1, n2 = Node.objects.create(name="node-01"), Node.objects.create(name="node-02")

        def gpu(node, index, uuid):
            return Gpu.objects.create(
                node=node, index=index, uuid=uuid, model="A100", memory_mb=1, **LIMITS
            )

        moved, twice = gpu(n2, 2, "GPU-a"), gpu(n1, 3, "GPU-b")
        stayed, _ = gpu(n1, 0, "GPU-c"), gpu(n1, 1, "GPU-d")
        _returned(apps, moved, was="node-01/gpu0", now="node-02/gpu2", at=T0)
        _returned(apps, twice, was="node-01/gpu3", now="node-02/gpu3", at=T0)
        _returned(apps, twice, was="node-02/gpu3", now="node-01/gpu3", at=T0 + timedelta(days=2))
        # retired and brought back on its own node: no move
        _returned(apps, stayed, was="node-01/gpu0", now="node-01/gpu0", at=T0)

    from cluster.models import Gpu

    since = dict(Gpu.objects.values_list("uuid", "node_since"))
    assert since == {
        "GPU-a": T0,
        "GPU-b": T0 + timedelta(days=2),
        "GPU-c": None,
        "GPU-d": None,
    }
