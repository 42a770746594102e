"""The prediction before submit says whether its model was measured, learned or estimated."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from cluster.models import Gpu, Job, Node
from scheduling.core.perf_models import FittedPerfModel, load_catalog
from scheduling.core.types import GpuConfig
from scheduling.models import WorkloadProfile
from scheduling.workload_profiles import model_to_params

pytestmark = pytest.mark.django_db

QUERY = {"workload": "resnet50", "gpus": 2, "batch_size": 128, "iterations": 1000}
CFG = GpuConfig(n_gpus=2, global_batch=128)


@pytest.fixture
def client_for(client):
    def make(user):
        client.force_login(user)
        return client

    return make


def _predict(client_for, member) -> dict:
    response = client_for(member).get(reverse("frontend:job-predict"), QUERY)
    assert response.status_code == 200, response.content
    return response.json()


def test_a_catalog_pair_is_called_measured(client_for, member, make_node):
    make_node("node-01", gpus=4)
    body = _predict(client_for, member)
    assert (body["model_kind"], body["model_source"]) == ("catalog", "catalog resnet50@A100")


def test_a_workload_profile_is_called_learned_and_predicts_what_it_learned(
    client_for, member, make_node
):
    # given a resnet50 profile on A100 that learned the job runs twice as slow as the catalog
    make_node("node-01", gpus=4)
    base = load_catalog().get("resnet50", "A100")
    tp = base.throughput
    slow = replace(
        tp,
        alpha_c_s=2 * tp.alpha_c_s, beta_c_s=2 * tp.beta_c_s, alpha_r_s=2 * tp.alpha_r_s,
        beta_r_s=2 * tp.beta_r_s, alpha_n_s=2 * tp.alpha_n_s, beta_n_s=2 * tp.beta_n_s,
    )  # fmt: skip
    learned = FittedPerfModel(
        workload="resnet50", gpu=base.gpu, batch_sizes=base.batch_sizes, throughput=slow,
        power=base.power,
    )  # fmt: skip
    WorkloadProfile.objects.create(
        workload="resnet50", gpu_model="A100", version=1, prior="catalog resnet50@A100",
        params=model_to_params(learned), n_observations=12, jobs=1,
        created_at=datetime(2026, 11, 25, tzinfo=UTC),
    )  # fmt: skip

    body = _predict(client_for, member)

    assert (body["model_kind"], body["model_source"]) == ("learned", "profile v1")
    assert body["duration_s"] == pytest.approx(1000 * learned.iter_time_s(CFG), rel=1e-9)
    assert body["duration_s"] != pytest.approx(1000 * base.iter_time_s(CFG), rel=0.1)


def test_a_gpu_model_without_catalog_entry_is_called_estimated(client_for, member):
    # given a cluster of A40s only (the catalog has A100 and T4)
    node = Node.objects.create(name="a40-01", switch_label="s1", rack_label="r1", gpu_model="A40")
    for index in range(4):
        Gpu.objects.create(
            node=node, index=index, uuid=f"GPU-a40-{index}", model="A40", memory_mb=46068,
            default_power_limit_w=300, min_power_limit_w=100, max_power_limit_w=300,
            supported_sm_clocks_mhz=[1740, 1200],
        )  # fmt: skip

    body = _predict(client_for, member)

    assert body["gpu_model"] == "A40"
    assert (body["model_kind"], body["model_source"]) == (
        "estimated",
        "estimated from catalog resnet50@A100",
    )


def test_an_unknown_workload_is_predicted_from_the_one_it_resembles_and_called_estimated(
    client_for, member, make_node
):
    # given A100s; the catalog knows no "llama-3b"
    make_node("node-01", gpus=4)

    response = client_for(member).get(
        reverse("frontend:job-predict"), {**QUERY, "workload": "llama-3b", "resembles": "gpt2"}
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["model_kind"], body["model_source"]) == (
        "estimated",
        "estimated from catalog gpt2@A100",
    )
    gpt2 = load_catalog().get("gpt2", "A100")
    assert body["duration_s"] == pytest.approx(1000 * gpt2.iter_time_s(CFG), rel=1e-9)


def test_a_resembles_hint_outside_the_catalog_is_a_400_with_its_field(client_for, member):
    response = client_for(member).get(
        reverse("frontend:job-predict"), {**QUERY, "workload": "llama-3b", "resembles": "x"}
    )

    assert response.status_code == 400
    assert response.json()["errors"]["resembles"][0].startswith("Select a valid choice. x")


def test_the_job_form_submits_an_unknown_workload_with_its_hints(client_for, member, team):
    response = client_for(member).post(
        reverse("frontend:job-new"),
        {
            "name": "my llm", "team": team.pk, "workload": "llama-3b", "resembles": "gpt2",
            "param_count": "3000000000", "gpus": 1, "batch_size": 32, "iterations": 100,
            "priority": 0,
        },
    )  # fmt: skip

    assert response.status_code == 302, response.context["form"].errors
    job = Job.objects.get()
    assert (job.workload, job.resembles, job.param_count) == ("llama-3b", "gpt2", 3_000_000_000)


def test_the_job_form_refuses_an_absurd_parameter_count_beside_its_field(client_for, member, team):
    response = client_for(member).post(
        reverse("frontend:job-new"),
        {
            "name": "my llm", "team": team.pk, "workload": "llama-3b", "param_count": "12",
            "gpus": 1, "batch_size": 32, "iterations": 100, "priority": 0,
        },
    )  # fmt: skip

    assert response.status_code == 400
    assert response.context["form"].errors["param_count"] == [
        "Ensure this value is greater than or equal to 1000."
    ]
    assert not Job.objects.exists()


def test_the_job_list_filters_by_a_workload_the_catalog_does_not_know(
    client_for, member, team, make_job
):
    # given a llama-3b job and a resnet50 job of the member's team
    mine = make_job(owner=member, team=team, name="my llm", workload="llama-3b")
    make_job(owner=member, team=team, name="resnet")

    response = client_for(member).get(reverse("frontend:job-list"), {"workload": "llama-3b"})

    assert response.status_code == 200
    assert [j.pk for j in response.context["page_obj"]] == [mine.pk]


def test_the_prediction_of_an_unknown_workload_starts_from_the_one_nearest_its_size(
    client_for, member, make_node
):
    # given A100s; the catalog knows no "my-vgg"; vgg16 (138M parameters) is the A100
    # workload nearest 150M in size (data/perf/param_counts.csv)
    make_node("node-01", gpus=4)

    # when the prediction names its parameter count, as the rounds' prior reads it
    response = client_for(member).get(
        reverse("frontend:job-predict"),
        {**QUERY, "workload": "my-vgg", "param_count": 150_000_000},
    )

    # then it is predicted from vgg16, and called estimated
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["model_kind"], body["model_source"]) == (
        "estimated",
        "estimated from catalog vgg16@A100",
    )
    vgg16 = load_catalog().get("vgg16", "A100")
    assert body["duration_s"] == pytest.approx(1000 * vgg16.iter_time_s(CFG), rel=1e-9)


def test_a_parameter_count_below_the_minimum_is_a_400_with_its_field(client_for, member):
    response = client_for(member).get(
        reverse("frontend:job-predict"), {**QUERY, "workload": "my-vgg", "param_count": 0}
    )

    assert response.status_code == 400
    assert "param_count" in response.json()["errors"]


def test_the_prediction_refuses_a_near_miss_as_the_submit_does(client_for, member):
    # a prediction for "resnet_50" that the submit then refuses would mislead
    response = client_for(member).get(
        reverse("frontend:job-predict"), {**QUERY, "workload": "resnet_50"}
    )
    assert response.status_code == 400
    assert response.json()["errors"]["workload"] == [
        "'resnet_50' is not a catalog workload; did you mean 'resnet50'? To submit a new "
        "workload, give resembles=... (the catalog workload it is most like) or param_count."
    ]
    # and with a hint it is predicted, as an estimate
    response = client_for(member).get(
        reverse("frontend:job-predict"),
        {**QUERY, "workload": "resnet_50", "resembles": "resnet50"},
    )
    assert response.status_code == 200, response.json()


def test_the_job_form_refuses_a_near_miss_of_a_catalog_workload_beside_its_field(
    client_for, member, team
):
    form = {
        "name": "typo", "team": team.pk, "workload": "resnet_50", "gpus": 1,
        "batch_size": 32, "iterations": 100, "priority": 0,
    }  # fmt: skip

    response = client_for(member).post(reverse("frontend:job-new"), form)

    assert response.status_code == 400
    assert response.context["form"].errors["workload"] == [
        "'resnet_50' is not a catalog workload; did you mean 'resnet50'? To submit a new "
        "workload, give resembles=... (the catalog workload it is most like) or param_count."
    ]
    assert not Job.objects.exists()
    # and with a hint it is a new workload
    response = client_for(member).post(
        reverse("frontend:job-new"), {**form, "resembles": "resnet50"}
    )
    assert response.status_code == 302, response.context["form"].errors
    assert Job.objects.get().workload == "resnet_50"


def _register(node: Node, product_name: str, *, max_w: int) -> None:
    """The node's agent registers 4 GPUs NVML names ``product_name`` (the name as NVML
    gives it: the server maps it to the model key)."""
    from rest_framework.test import APIClient

    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Token {node.issue_agent_token()}")
    gpus = [
        {"uuid": f"GPU-{node.name}-{i}", "index": i, "model": product_name, "memory_mb": 40960,
         "default_power_limit_w": max_w, "min_power_limit_w": 150, "max_power_limit_w": max_w,
         "supported_sm_clocks_mhz": [1410, 1200, 1005]}
        for i in range(4)
    ]  # fmt: skip
    response = agent.post("/api/agent/register/", {"gpus": gpus}, format="json")
    assert response.status_code == 200, response.content


def test_an_a100_pcie_is_not_the_catalogs_sxm4_a100_and_is_called_estimated(client_for, member):
    # given a node of A100 PCIe boards (250 W; the catalog's A100 is the 400 W SXM4)
    node = Node.objects.create(name="pcie-01", switch_label="s1", rack_label="r1", gpu_model="x")
    _register(node, "NVIDIA A100-PCIE-40GB", max_w=250)

    body = _predict(client_for, member)

    # then they are a GPU model of their own, predicted from an estimate carried from the
    # SXM4 A100 onto their reported power range (before: keyed "A100", called "catalog")
    assert set(Gpu.objects.values_list("model", flat=True)) == {"A100-PCIe"}
    assert body["gpu_model"] == "A100-PCIe"
    assert (body["model_kind"], body["model_source"]) == (
        "estimated",
        "estimated from catalog resnet50@A100",
    )
    sxm4 = load_catalog().get("resnet50", "A100")
    assert body["power_w"] < sxm4.power_w(CFG)
    assert body["power_w"] <= 250.0


def test_the_prediction_runs_on_gpus_their_agent_still_reports(client_for, member, make_node):
    # given 8 A100s whose agent no longer reports them, beside 4 reported T4s
    make_node("node-01", gpus=8)
    Gpu.objects.update(missing_since=datetime(2026, 12, 1, tzinfo=UTC))
    node = Node.objects.create(name="t4-01", switch_label="s2", rack_label="r1", gpu_model="T4")
    for index in range(4):
        Gpu.objects.create(
            node=node, index=index, uuid=f"GPU-t4-{index}", model="T4", memory_mb=15360,
            default_power_limit_w=70, min_power_limit_w=60, max_power_limit_w=70,
        )  # fmt: skip

    body = _predict(client_for, member)

    # then the panel predicts the job on the T4s the rounds can plan on (before: on the lost
    # A100s, the larger group counted)
    assert body["gpu_model"] == "T4"
    assert body["model_source"].endswith("@T4"), body["model_source"]
