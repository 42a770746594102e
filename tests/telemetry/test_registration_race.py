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


def test_an_index_given_to_another_gpu_while_an_agent_registers_is_a_409(
    make_node, agent_client, monkeypatch
):
    # An admin puts another GPU at an index the agent reports between the registration's
    # index check and its write (modelled by doing it from inside the check's last step):
    # the unique (node, index) constraint refused the write, and the agent got a 500.
    from telemetry import services

    node = make_node("node-a", gpus=1)
    client = agent_client(node.issue_agent_token())
    registered = node.gpus.get()
    checks = services._clock_conflicts

    def admin_edits_meanwhile(*args, **kwargs):
        Gpu.objects.create(
            node=node, index=1, uuid="GPU-admin-added", model="A100", memory_mb=1,
            default_power_limit_w=400, min_power_limit_w=100, max_power_limit_w=400,
        )  # fmt: skip
        return checks(*args, **kwargs)

    monkeypatch.setattr(services, "_clock_conflicts", admin_edits_meanwhile)
    body = {"gpus": [_gpu(registered.uuid, 0), _gpu("GPU-new-board", 1)]}
    answer = client.post("/api/agent/register/", body, format="json")

    assert answer.status_code == 409, answer.content
    assert "while it registered" in answer.json()["gpus"][0]
    assert not Gpu.objects.filter(uuid="GPU-new-board").exists()
    assert Gpu.objects.get(pk=registered.pk).index == 0
    monkeypatch.undo()
    # the agent's next registration reads the index as it is now
    assert client.post("/api/agent/register/", body, format="json").status_code == 200
