"""A GPU model reported in another case than the catalog's or the cluster's spelling of it
(an agent's own backend, a product name lower-cased: ``nvidia a100-sxm4-40gb``, or the key
``a100``) is that model, not a new one: stored as a model of its own, its GPUs were
estimated from the nearest catalog GPU instead of the A100's measured models, and a job
asking for ``A100`` could never be placed on them (a live probe, 7 Dec 2026)."""

import pytest
from support.nodes import registered_gpu

from cluster.models import Gpu
from scheduling import perf_lookup


@pytest.mark.parametrize(
    ("reported", "stored"),
    [
        ("a100", "A100"),
        ("nvidia a100-sxm4-40gb", "A100"),
        ("NVIDIA a100-SXM4-40GB", "A100"),
        ("t4", "T4"),
        ("nvidia tesla t4", "T4"),
    ],
)
def test_a_catalog_model_in_another_case_registers_as_the_catalogs_key(
    make_node, agent_client, reported, stored
):
    assert stored in perf_lookup.current_catalog().gpus  # (the catalog's spelling)
    node = make_node("node-09", gpus=0)
    body = {"gpus": [registered_gpu("GPU-x0", 0, reported)]}
    response = agent_client(node.issue_agent_token()).post(
        "/api/agent/register/", body, format="json"
    )
    assert response.status_code == 200, response.json()
    assert Gpu.objects.get(uuid="GPU-x0").model == stored
    # and the rounds read it as that catalog model, not an estimate
    found = perf_lookup.model_for("bert", Gpu.objects.get(uuid="GPU-x0").model)
    assert found is not None and found.kind == "catalog"


def test_a_model_the_catalog_lacks_joins_the_spelling_already_registered(make_node, agent_client):
    first = make_node("node-09", gpus=0)
    second = make_node("node-10", gpus=0)
    one = agent_client(first.issue_agent_token()).post(
        "/api/agent/register/",
        {"gpus": [registered_gpu("GPU-x0", 0, "NVIDIA GeForce RTX 9090")]},
        format="json",
    )
    assert one.status_code == 200, one.json()
    two = agent_client(second.issue_agent_token()).post(
        "/api/agent/register/",
        {"gpus": [registered_gpu("GPU-y0", 0, "nvidia geforce rtx 9090")]},
        format="json",
    )
    assert two.status_code == 200, two.json()
    assert set(
        Gpu.objects.filter(uuid__in=["GPU-x0", "GPU-y0"]).values_list("model", flat=True)
    ) == {"RTX9090"}


def test_a_gpu_stored_in_another_case_before_registers_again_under_the_catalogs_key(
    agent_node, agent_client, make_job, member, team
):
    # given a GPU stored as "a100" (registered before the spelling was mapped) and a job
    # pinned to that spelling
    node, token = agent_node
    Gpu.objects.filter(node=node).update(model="a100")
    job = make_job(owner=member, team=team, gpu_model="a100")
    body = {
        "gpus": [registered_gpu(g.uuid, g.index, "a100") for g in Gpu.objects.filter(node=node)]
    }
    # when its agent registers again, the same board in the same case
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    # then it is no change of model (a 400 before a fix would be): it is the catalog's A100
    assert response.status_code == 200, response.json()
    assert set(Gpu.objects.filter(node=node).values_list("model", flat=True)) == {"A100"}
    job.refresh_from_db()
    assert job.gpu_model == "A100"


def test_a_job_asking_for_a_catalog_model_in_another_case_asks_for_the_catalogs_key(
    api_client, member, team
):
    # given no GPU registered yet: a job asking for "a100" was stored so, and the A100s
    # that registered next were another model to it (it waited for good)
    assert not Gpu.objects.exists()
    response = api_client(member).post(
        "/api/jobs/",
        {
            "name": "j",
            "team": team.slug,
            "workload": "resnet50",
            "gpu_model": "a100",
            "global_batch_size": 256,
            "total_iterations": 100,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["gpu_model"] == "A100"


@pytest.mark.parametrize("reported", ["nvidia a100-pcie-40gb", "NVIDIA A100-PCIE-40GB"])
def test_a_lower_cased_board_over_the_bare_key_is_its_board_split(
    make_node, agent_client, reported
):
    # given a GPU registered under the bare key by a server that dropped the board token
    node = make_node("node-09", gpus=0)
    client = agent_client(node.issue_agent_token())
    first = client.post(
        "/api/agent/register/", {"gpus": [registered_gpu("GPU-x0", 0, "A100")]}, format="json"
    )
    assert first.status_code == 200, first.json()

    # when its agent reports its board, lower-cased (an agent's own backend) or as NVML
    again = client.post(
        "/api/agent/register/", {"gpus": [registered_gpu("GPU-x0", 0, reported)]}, format="json"
    )

    # then it is the A100's board of its own, spelled as the bare key is (it was a 400:
    # "a GPU's model does not change", the key "a100-PCIe" not read as A100's board)
    assert again.status_code == 200, again.json()
    assert Gpu.objects.get(uuid="GPU-x0").model == "A100-PCIe"
