"""Issue 12 point 8: submit validation, the rounds, the prediction and the budget what-if size
a job by one lookup (``scheduling.perf_lookup.model_for``), so they agree on every kind of
model: measured (catalog), learned (a workload profile) and estimated (another workload's or
GPU model's)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster.models import Gpu, Job, Node
from frontend.predictions import cluster_gpu_model_for, predict_job, whatif_average_jct_s
from scheduling import adapters, perf_lookup
from scheduling.choices import PerfModelKind
from scheduling.core.context import PerfCache
from scheduling.core.perf_models import FittedPerfModel, load_catalog
from scheduling.core.types import GpuConfig
from scheduling.models import WorkloadProfile
from scheduling.workload_profiles import JobHints, model_to_params

pytestmark = pytest.mark.django_db

CATALOG = load_catalog()
CFG = GpuConfig(n_gpus=2, global_batch=128)


def _node(name: str, model: str, *, gpus: int = 4, max_w: int = 400) -> Node:
    node = Node.objects.create(
        name=name,
        switch_label="s1",
        rack_label="r1",
        gpu_model=model,
        last_heartbeat_at=timezone.now(),
    )
    for index in range(gpus):
        Gpu.objects.create(
            node=node, index=index, uuid=f"GPU-{name}-{index}", model=model, memory_mb=40960,
            default_power_limit_w=max_w, min_power_limit_w=100, max_power_limit_w=max_w,
            supported_sm_clocks_mhz=[1410, 1200],
        )  # fmt: skip
    return node


def _learned_bert_profile() -> FittedPerfModel:
    """A bert profile on A100 that learned the job runs 1.5x slower than the catalog says."""
    base = CATALOG.get("bert", "A100")
    tp = base.throughput
    slow = replace(tp, alpha_c_s=1.5 * tp.alpha_c_s, beta_c_s=1.5 * tp.beta_c_s)
    learned = FittedPerfModel(
        workload="bert", gpu=base.gpu, batch_sizes=base.batch_sizes, throughput=slow,
        power=base.power,
    )  # fmt: skip
    WorkloadProfile.objects.create(
        workload="bert", gpu_model="A100", version=1, prior="catalog bert@A100",
        params=model_to_params(learned), n_observations=9, jobs=1, created_at=timezone.now(),
    )  # fmt: skip
    return learned


@pytest.mark.parametrize(
    ("workload", "gpu_model", "kind", "source"),
    [
        ("resnet50", "A100", PerfModelKind.CATALOG, "catalog resnet50@A100"),
        ("bert", "A100", PerfModelKind.LEARNED, "profile v1"),
        # the catalog has cifar10 on T4 only: another workload's A100 model is its prior
        ("cifar10", "A100", PerfModelKind.ESTIMATED, "estimated from catalog bert@A100"),
        # the catalog has no A40: resnet50's model on the nearest catalog GPU, carried over
        ("resnet50", "A40", PerfModelKind.ESTIMATED, "estimated from catalog resnet50@A100"),
    ],
)
def test_submit_rounds_prediction_and_whatif_size_a_job_by_the_same_model(
    api_client, member, team, workload, gpu_model, kind, source
):
    # given A100 and A40 nodes, a learned bert profile on A100
    _node("a100-01", "A100")
    _node("a40-01", "A40", max_w=300)
    learned = _learned_bert_profile()

    # when a job of the pair is submitted through the API
    response = api_client(member).post(
        "/api/jobs/",
        {
            "name": "lookup", "team": "vision", "workload": workload, "gpu_model": gpu_model,
            "min_gpus": 2, "max_gpus": 2, "global_batch_size": 128, "total_iterations": 1000,
        },
        format="json",
    )  # fmt: skip

    # then submit accepted it, and the lookup gives the expected kind of model
    assert response.status_code == 201, response.content
    found = perf_lookup.model_for(
        workload, gpu_model, nvml=perf_lookup.nvml_by_model().get(gpu_model)
    )
    assert (found.kind, found.source) == (kind, source)
    if kind == PerfModelKind.LEARNED:
        assert found.model.iter_time_s(CFG) == pytest.approx(learned.iter_time_s(CFG), rel=1e-12)
    expected = found.model.iter_time_s(CFG)

    # the round sizes the job by the same model
    snap = adapters.build_snapshot(now=timezone.now(), round_length_s=60.0).snapshot
    (core_job,) = snap.jobs
    in_round = PerfCache(snap.perf, snap.job_perf).model_for(core_job, gpu_model)
    assert in_round.iter_time_s(CFG) == pytest.approx(expected, rel=1e-12)

    # the prediction says so, with the kind
    prediction = predict_job(
        workload=workload, gpus=2, batch_size=128, iterations=1000, now=timezone.now(),
        gpu_model=gpu_model,
    )  # fmt: skip
    assert (prediction.model_kind, prediction.model_source) == (kind.value, source)
    assert prediction.iter_time_s == pytest.approx(expected, rel=1e-12)

    # the what-if replays it with the same model: it runs (nothing "never runs")
    whatif = perf_lookup.LookupCatalog(perf_lookup.current_catalog(), perf_lookup.nvml_by_model())
    assert whatif.get(workload, gpu_model).iter_time_s(CFG) == pytest.approx(expected, rel=1e-12)
    now = timezone.now()
    replay = whatif_average_jct_s(
        team=team, kind="energy", limit=1e6, period_end=now + timedelta(days=7), now=now, used=0.0
    )
    assert (replay.n_jobs, replay.n_finished, replay.never_run) == (1, 1, ())


def test_a_job_the_round_would_run_from_an_estimate_is_not_refused_at_submit(
    api_client, member, team
):
    # given a cluster of A100s only; the catalog has cifar10 on T4 only
    _node("a100-01", "A100")
    assert not CATALOG.has("cifar10", "A100")

    # when a cifar10 job that names no GPU model is submitted
    response = api_client(member).post(
        "/api/jobs/",
        {
            "name": "cifar", "team": "vision", "workload": "cifar10",
            "min_gpus": 4, "max_gpus": 4, "global_batch_size": 128, "total_iterations": 1000,
        },
        format="json",
    )  # fmt: skip

    # then it is accepted (submit asked the same lookup as the round), the round sizes it on
    # the A100s, and the prediction picks the A100 too
    assert response.status_code == 201, response.content
    job = Job.objects.get()
    snap = adapters.build_snapshot(now=timezone.now(), round_length_s=60.0).snapshot
    assert PerfCache(snap.perf, snap.job_perf).model_for(snap.jobs[0], "A100") is not None
    assert cluster_gpu_model_for(job.workload) == "A100"


def test_more_gpus_than_the_cluster_has_of_any_model_with_a_model_is_still_refused(
    api_client, member, team
):
    # given four A100s
    _node("a100-01", "A100")

    # when a cifar10 job asks for five
    response = api_client(member).post(
        "/api/jobs/",
        {
            "name": "cifar", "team": "vision", "workload": "cifar10",
            "min_gpus": 5, "max_gpus": 5, "global_batch_size": 128, "total_iterations": 1000,
        },
        format="json",
    )  # fmt: skip

    # then it is refused with the count, and nothing is stored
    assert response.status_code == 400, response.content
    assert "4 GPUs that can run cifar10" in response.json()["min_gpus"][0]
    assert not Job.objects.exists()


# --- issue 12 point 1: any workload name, with hints ------------------------------------------


def _submit_unknown(api_client, member, **hints):
    return api_client(member).post(
        "/api/jobs/",
        {
            "name": "my llm", "team": "vision", "workload": "llama-3b", "min_gpus": 2,
            "max_gpus": 2, "global_batch_size": 128, "total_iterations": 1000, **hints,
        },
        format="json",
    )  # fmt: skip


def test_an_unknown_workload_is_accepted_with_its_hints_and_sized_from_the_resembled_one(
    api_client, member, team
):
    # given A100s; the catalog knows no "llama-3b"
    _node("a100-01", "A100")
    assert "llama-3b" not in CATALOG.workloads()

    # when a job of it is submitted, resembling gpt2, with its parameter count
    response = _submit_unknown(api_client, member, resembles="gpt2", param_count=3_000_000_000)

    # then it is stored with its hints, and the round, the prediction and the what-if all size
    # it by gpt2's A100 model, called an estimate
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["workload"], body["resembles"], body["param_count"]) == (
        "llama-3b",
        "gpt2",
        3_000_000_000,
    )
    expected = CATALOG.get("gpt2", "A100").iter_time_s(CFG)
    snap = adapters.build_snapshot(now=timezone.now(), round_length_s=60.0).snapshot
    in_round = PerfCache(snap.perf, snap.job_perf).model_for(snap.jobs[0], "A100")
    assert in_round.iter_time_s(CFG) == pytest.approx(expected, rel=1e-12)
    prediction = predict_job(
        workload="llama-3b", gpus=2, batch_size=128, iterations=1000, now=timezone.now(),
        hints=JobHints(resembles="gpt2"),
    )  # fmt: skip
    assert (prediction.model_kind, prediction.model_source) == (
        "estimated",
        "estimated from catalog gpt2@A100",
    )
    assert prediction.iter_time_s == pytest.approx(expected, rel=1e-12)
    now = timezone.now()
    replay = whatif_average_jct_s(
        team=team, kind="energy", limit=1e6, period_end=now + timedelta(days=7), now=now, used=0.0
    )
    assert (replay.n_jobs, replay.n_finished, replay.never_run) == (1, 1, ())


def test_an_unknown_workload_without_hints_starts_from_the_first_catalog_workload_on_its_gpu(
    api_client, member, team
):
    _node("a100-01", "A100")

    response = _submit_unknown(api_client, member)

    assert response.status_code == 201, response.content
    found = perf_lookup.model_for("llama-3b", "A100")
    assert (found.kind, found.source) == (
        PerfModelKind.ESTIMATED,
        "estimated from catalog bert@A100",
    )


def test_a_hint_that_is_not_a_catalog_workload_is_a_field_error_and_stores_nothing(
    api_client, member, team
):
    _node("a100-01", "A100")

    response = _submit_unknown(api_client, member, resembles="llama-7b")

    assert response.status_code == 400
    known = ", ".join(CATALOG.workloads())
    assert response.json() == {
        "resembles": [f"Not a catalog workload: 'llama-7b'; known: {known}."]
    }
    assert not Job.objects.exists()


def test_a_job_that_names_only_its_size_is_sized_alike_by_the_round_and_the_what_if(
    api_client, member, team
):
    # given A100s and a job of an unknown workload that gives only its parameter count,
    # nearest in published size to vgg16 (138M)
    _node("a100-01", "A100")
    response = _submit_unknown(api_client, member, param_count=150_000_000)
    assert response.status_code == 201, response.content
    job = Job.objects.get()
    now = timezone.now()

    def whatif_jct_s() -> float:
        return whatif_average_jct_s(
            team=team, kind="energy", limit=1e6, period_end=now + timedelta(days=7), now=now,
            used=0.0,
        ).avg_jct_s  # fmt: skip

    def in_round_s() -> float:
        snap = adapters.build_snapshot(now=now, round_length_s=60.0).snapshot
        return PerfCache(snap.perf, snap.job_perf).model_for(snap.jobs[0], "A100").iter_time_s(CFG)

    # when the round and the what-if size it, and again had it named vgg16 instead, or nothing
    by_size = in_round_s(), whatif_jct_s()
    Job.objects.filter(pk=job.pk).update(param_count=None, resembles="vgg16")
    by_name = in_round_s(), whatif_jct_s()
    Job.objects.filter(pk=job.pk).update(resembles="")
    unhinted = in_round_s(), whatif_jct_s()

    # then both size it as had it named vgg16 (the nearest in size), not as a job with no hint
    # (bert's model, the first on the A100)
    assert by_size == pytest.approx(by_name, rel=1e-12)
    assert unhinted[0] != pytest.approx(by_size[0], rel=1e-3)
    assert unhinted[1] != pytest.approx(by_size[1], rel=1e-3)


def test_nvml_figures_come_from_a_gpu_in_service_before_a_retired_one(db):
    from cluster.services import retire_gpu

    # given an A40 registered first and retired (an older board: another power range and
    # clocks), and the A40 in service that replaced it
    old = _node("a40-01", "A40", gpus=1, max_w=250).gpus.get()
    Gpu.objects.filter(pk=old.pk).update(supported_sm_clocks_mhz=[1500, 900])
    retire_gpu(old, actor=None)
    _node("a40-02", "A40", gpus=1, max_w=300)
    # and an L40S known only from retired GPUs: the one retired last is the newer evidence
    now = timezone.now()
    first = _node("l40s-01", "L40S", gpus=1, max_w=300).gpus.get()
    retire_gpu(_node("l40s-02", "L40S", gpus=1, max_w=350).gpus.get(), actor=None, at=now)
    retire_gpu(first, actor=None, at=now - timedelta(days=30))

    nvml = perf_lookup.nvml_by_model()

    # then the A40's figures are the GPU in service's
    a40 = nvml["A40"]
    assert (a40.max_power_limit_w, a40.clocks_mhz) == (300.0, (1410, 1200))
    # and the L40S, with none in service, still has its retired GPU's (its jobs get a prior)
    assert nvml["L40S"].max_power_limit_w == 350.0
    assert perf_lookup.nvml_by_model(["A40"]).keys() == {"A40"}
