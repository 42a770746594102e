"""Nodes and GPUs over REST are for admins only; agent tokens are issued once."""

import pytest

from cluster.models import Gpu, Node

NON_ADMINS = ["member", "lead", "outsider"]


@pytest.mark.parametrize("persona", NON_ADMINS)
@pytest.mark.parametrize("path", ["/api/nodes/", "/api/gpus/"])
def test_non_admins_cannot_list_nodes_or_gpus(api_client, personas, make_node, persona, path):
    make_node()

    response = api_client(personas[persona]).get(path)

    assert response.status_code == 403


@pytest.mark.parametrize("persona", NON_ADMINS)
def test_non_admins_cannot_create_nodes(api_client, personas, persona):
    response = api_client(personas[persona]).post(
        "/api/nodes/", {"name": "rogue", "switch_label": "s", "gpu_model": "A100"}, format="json"
    )

    assert response.status_code == 403
    assert Node.objects.count() == 0


def test_admin_lists_nodes_with_gpu_counts(api_client, admin_user, make_node):
    make_node("node-01", gpus=8)
    make_node("node-02", gpus=4, switch_label="switch-2")

    response = api_client(admin_user).get("/api/nodes/")

    assert response.status_code == 200
    assert [
        (row["name"], row["switch_label"], row["gpu_count"], row["status"], row["has_agent_token"])
        for row in response.json()["results"]
    ] == [
        ("node-01", "switch-1", 8, "healthy", False),
        ("node-02", "switch-2", 4, "healthy", False),
    ]


def test_admin_filters_gpus_by_node(api_client, admin_user, make_node):
    make_node("node-01", gpus=2)
    node = make_node("node-02", gpus=3)

    response = api_client(admin_user).get(f"/api/gpus/?node={node.pk}")

    assert response.status_code == 200
    assert [row["uuid"] for row in response.json()["results"]] == [
        "GPU-node-02-0",
        "GPU-node-02-1",
        "GPU-node-02-2",
    ]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"power_limit_w": 450}, "power_limit_w"),
        ({"min_power_limit_w": 500}, "default_power_limit_w"),
        ({"sm_clock_mhz": 999}, "sm_clock_mhz"),
        ({"index": 0}, "non_field_errors"),  # (node, index) is taken
        # (registration allows 0..255; the admin API took 300, fourth probe)
        ({"index": 256}, "index"),
        ({"index": 300}, "index"),
        ({"index": -1}, "index"),
        ({"uuid": "GPU-node-01-0"}, "uuid"),  # taken
    ],
)
def test_admin_gpu_validation_errors(api_client, admin_user, make_node, change, field):
    node = make_node("node-01", gpus=1)
    payload = {
        "node": node.pk,
        "index": 1,
        "uuid": "GPU-new",
        "model": "A100",
        "memory_mb": 40960,
        "default_power_limit_w": 400,
        "min_power_limit_w": 100,
        "max_power_limit_w": 400,
        "supported_sm_clocks_mhz": [1410, 1200],
        **change,
    }

    response = api_client(admin_user).post("/api/gpus/", payload, format="json")

    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert Gpu.objects.count() == 1


def test_the_admin_api_and_registration_take_the_same_highest_index(
    api_client, admin_user, make_node
):
    from telemetry.api.serializers import GpuRegistrationSerializer

    node = make_node("node-01", gpus=1)
    payload = {
        "node": node.pk,
        "index": 255,
        "uuid": "GPU-new",
        "model": "A100",
        "memory_mb": 40960,
        "default_power_limit_w": 400,
        "min_power_limit_w": 100,
        "max_power_limit_w": 400,
        "supported_sm_clocks_mhz": [1410, 1200],
    }
    response = api_client(admin_user).post("/api/gpus/", payload, format="json")
    assert response.status_code == 201, response.json()
    registration = GpuRegistrationSerializer().fields["index"]
    assert (registration.min_value, registration.max_value) == (0, 255)
    gpu = Gpu.objects.get(uuid="GPU-new")
    response = api_client(admin_user).patch(f"/api/gpus/{gpu.pk}/", {"index": 256}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["index"]
    gpu.refresh_from_db()
    assert gpu.index == 255


def test_admin_cannot_list_a_clock_above_the_registered_maximum(api_client, admin_user, make_node):
    gpu = make_node("node-01", gpus=1).gpus.get()
    Gpu.objects.filter(pk=gpu.pk).update(max_sm_clock_mhz=1410)

    response = api_client(admin_user).patch(
        f"/api/gpus/{gpu.pk}/", {"supported_sm_clocks_mhz": [1980, 1410]}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "supported_sm_clocks_mhz": [
            "max_sm_clock_mhz 1410 MHz is below 1980 MHz, the highest of supported_sm_clocks_mhz."
        ]
    }
    assert Gpu.objects.get(pk=gpu.pk).supported_sm_clocks_mhz == [1410, 1200, 1005]


def test_issue_token_returns_a_token_that_finds_the_node(api_client, admin_user, make_node):
    node = make_node()

    response = api_client(admin_user).post(f"/api/nodes/{node.pk}/issue-token/")

    assert response.status_code == 201
    token = response.json()["token"]
    assert Node.for_agent_token(token) == node
    node.refresh_from_db()
    assert token not in node.agent_token_hash


def test_member_cannot_issue_tokens(api_client, member, make_node):
    node = make_node()

    response = api_client(member).post(f"/api/nodes/{node.pk}/issue-token/")

    assert response.status_code == 403
    node.refresh_from_db()
    assert node.agent_token_hash == ""


def test_a_patched_clock_list_is_stored_highest_first_once_each_as_registration_stores_it(
    api_client, admin_user, make_node
):
    gpu = make_node("node-01", gpus=1).gpus.get()

    response = api_client(admin_user).patch(
        f"/api/gpus/{gpu.pk}/", {"supported_sm_clocks_mhz": [1005, 1410, 1200, 1410]},
        format="json",
    )  # fmt: skip

    assert response.status_code == 200, response.content
    assert response.json()["supported_sm_clocks_mhz"] == [1410, 1200, 1005]
    assert Gpu.objects.get(pk=gpu.pk).supported_sm_clocks_mhz == [1410, 1200, 1005]


def test_a_created_gpus_clock_list_is_stored_highest_first(api_client, admin_user, make_node):
    node = make_node("node-01", gpus=0)
    payload = {
        "node": node.pk, "index": 0, "uuid": "GPU-new", "model": "A100", "memory_mb": 40960,
        "default_power_limit_w": 400, "min_power_limit_w": 100, "max_power_limit_w": 400,
        "supported_sm_clocks_mhz": [210, 1410, 810, 210],
    }  # fmt: skip

    response = api_client(admin_user).post("/api/gpus/", payload, format="json")

    assert response.status_code == 201, response.content
    assert Gpu.objects.get(uuid="GPU-new").supported_sm_clocks_mhz == [1410, 810, 210]


@pytest.mark.parametrize(
    "clocks",
    [[1410, 0], [1410, -5], [1410, 1_000_000], [1410, "NaN"], [1410, 1200.5], [1] * 1025],
)
def test_a_clock_list_with_an_impossible_clock_is_a_400_naming_the_field(
    api_client, admin_user, make_node, clocks
):
    gpu = make_node("node-01", gpus=1).gpus.get()

    response = api_client(admin_user).patch(
        f"/api/gpus/{gpu.pk}/", {"supported_sm_clocks_mhz": clocks}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["supported_sm_clocks_mhz"]
    assert Gpu.objects.get(pk=gpu.pk).supported_sm_clocks_mhz == [1410, 1200, 1005]


def test_a_new_gpus_clock_no_gpu_runs_at_is_a_400_without_a_registered_maximum(
    api_client, admin_user, make_node
):
    # (5,000 MHz on an A100 with no maximum registered was a 201: clocks to 100,000 MHz
    # were taken, and the rounds would have planned jobs at it)
    node = make_node("node-01", gpus=0)
    payload = {
        "node": node.pk, "index": 0, "uuid": "GPU-new", "model": "A100", "memory_mb": 40960,
        "default_power_limit_w": 400, "min_power_limit_w": 100, "max_power_limit_w": 400,
        "supported_sm_clocks_mhz": [5000, 1410],
    }  # fmt: skip

    response = api_client(admin_user).post("/api/gpus/", payload, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "supported_sm_clocks_mhz": {"0": ["Ensure this value is less than or equal to 4000."]}
    }
    assert not Gpu.objects.filter(uuid="GPU-new").exists()


def test_a_clock_list_longer_than_an_agent_may_register_says_so(api_client, admin_user, make_node):
    gpu = make_node("node-01", gpus=1).gpus.get()

    response = api_client(admin_user).patch(
        f"/api/gpus/{gpu.pk}/", {"supported_sm_clocks_mhz": list(range(1, 1026))}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "supported_sm_clocks_mhz": ["Ensure this list has at most 1024 clocks (it has 1025)."]
    }


@pytest.mark.parametrize(
    ("typed", "stored"),
    [("a100", "A100"), ("NVIDIA A100-SXM4-40GB", "A100"), ("nvidia tesla t4", "T4")],
)
def test_a_gpu_added_by_an_admin_is_stored_under_the_catalogs_model_key(
    api_client, admin_user, make_node, typed, stored
):
    # as the agent's registration stores it (an "a100" was a GPU model of its own, estimated,
    # beside the catalog's A100, and never given a job that asked for A100)
    node = make_node("node-01", gpus=0)
    payload = {
        "node": node.pk, "index": 0, "uuid": "GPU-new", "model": typed, "memory_mb": 40960,
        "default_power_limit_w": 70, "min_power_limit_w": 60, "max_power_limit_w": 70,
    }  # fmt: skip

    response = api_client(admin_user).post("/api/gpus/", payload, format="json")

    assert response.status_code == 201, response.content
    assert Gpu.objects.get(uuid="GPU-new").model == stored


def test_a_gpu_added_by_an_admin_with_a_top_power_limit_no_gpu_has_is_refused(
    api_client, admin_user, make_node
):
    # as registration refuses it: every draw of such a GPU was refused from the ledger
    node = make_node("node-01", gpus=0)
    payload = {
        "node": node.pk, "index": 0, "uuid": "GPU-new", "model": "A100", "memory_mb": 40960,
        "default_power_limit_w": 1, "min_power_limit_w": 1, "max_power_limit_w": 1,
    }  # fmt: skip

    response = api_client(admin_user).post("/api/gpus/", payload, format="json")

    assert response.status_code == 400, response.content
    assert "at least 10 W" in response.json()["max_power_limit_w"][0]
    assert not Gpu.objects.filter(uuid="GPU-new").exists()
