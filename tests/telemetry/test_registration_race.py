"""Two nodes' agents registering one GPU UUID at the same instant: one is refused.

The check that a UUID is not another node's GPU ran before the registration's transaction,
with no lock: both requests saw the UUID free, both answered 200 with the GPU in their list,
and the GPU ended on the node that wrote last, taken from the node that registered it
(5 of 5 tries on the project's machine). Against the real PostgreSQL, two threads, two
connections, released together."""

import pytest

from cluster.models import Gpu

pytestmark = pytest.mark.django_db(transaction=True)


def _gpu(uuid: str, index: int) -> dict:
    return {
        "uuid": uuid,
        "index": index,
        "model": "A100",
        "memory_mb": 40960,
        "default_power_limit_w": 400,
        "min_power_limit_w": 100,
        "max_power_limit_w": 400,
    }


def test_two_nodes_registering_one_uuid_at_once_one_is_refused(make_node, agent_client, race):
    nodes = [make_node("node-a", gpus=0), make_node("node-b", gpus=0)]
    clients = [agent_client(node.issue_agent_token()) for node in nodes]
    for attempt in range(6):
        uuid = f"GPU-contested-{attempt}"

        def register(client, uuid=uuid, index=attempt):
            body = {"gpus": [_gpu(uuid, index)]}
            return client.post("/api/agent/register/", body, format="json")

        answers = race(*(lambda c=c: register(c) for c in clients))
        codes = sorted(a.status_code for a in answers)
        assert codes == [200, 403], (attempt, codes)
        winner = nodes[[a.status_code for a in answers].index(200)]
        gpu = Gpu.objects.get(uuid=uuid)
        assert gpu.node_id == winner.pk
        loser = answers[[a.status_code for a in answers].index(403)]
        assert "another node" in loser.json()["detail"]
