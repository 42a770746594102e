"""A GPU model reported in another case than the catalog's or the cluster's spelling of it
(an agent's own backend, a product name lower-cased: ``nvidia a100-sxm4-40gb``, or the key
``a100``) is that model, not a new one: stored as a model of its own, its GPUs were
estimated from the nearest catalog GPU instead of the A100's measured models, and a job
asking for ``A100`` could never be placed on them (a live probe, 7 Dec 2026)."""

import copy
from datetime import UTC, datetime, timedelta

import pytest
from support.nodes import registered_gpu

from cluster.choices import JobState
from cluster.models import Gpu, Job
from scheduling import perf_lookup
from scheduling import workload_profiles as wp
from scheduling.core.online_model import Observation, config_of
from scheduling.core.perf_models import load_catalog
from scheduling.models import JobSchedulingState, WorkloadProfile


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


# --- what was learned under the old spelling follows a GPU re-keyed at registration ------

T0 = datetime(2026, 12, 7, 18, 0, tzinfo=UTC)
CATALOG = load_catalog()


def _learned(workload: str, gpu_model: str, versions: int) -> list[WorkloadProfile]:
    """``versions`` profile versions of ``workload`` on ``gpu_model``, each the catalog's
    A100 model of it (what a fold stores)."""
    params = wp.model_to_params(CATALOG.get(workload, "A100"))
    return [
        WorkloadProfile.objects.create(
            workload=workload,
            gpu_model=gpu_model,
            version=v,
            prior=f"catalog {workload}@A100",
            params=params,
            n_observations=4.0,
            jobs=v,
            created_at=T0,
        )  # fmt: skip
        for v in range(1, versions + 1)
    ]


def _finished_with_a100_fit(make_job, member, team) -> Job:
    """A finished resnet50 job, not yet folded, whose online model was learned on GPUs then
    stored as "a100" (its per-model fits under that key)."""
    job = make_job(owner=member, team=team, workload="resnet50")
    state = JobSchedulingState.objects.create(job=job)
    prior = CATALOG.get("resnet50", "A100")
    cfg = config_of(2, 1, 128.0)
    obs = Observation(
        n_gpus=2, n_nodes=1, local_batch=128.0, iter_time_s=prior.iter_time_s(cfg) * 2.0,
        power_w=prior.power_w(cfg), weight=1.0,
    )  # fmt: skip
    wp.record_observations(
        job, state, gpu_model="A100", observations=[obs], until=T0, catalog=CATALOG
    )
    state.refresh_from_db()
    JobSchedulingState.objects.filter(pk=job.pk).update(
        observations={"a100": state.observations["A100"]},
        online_params={"a100": state.online_params["A100"]},
    )
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    return job


def test_profiles_and_fits_learned_under_the_old_spelling_follow_a_rekeyed_gpu(
    agent_node, agent_client, make_job, member, team
):
    # given GPUs stored as "a100" (before the spelling was the catalog's), what rounds
    # learned on them under that key: bert's profile (two versions), resnet50's (under both
    # spellings: a job ran on GPUs stored each way), a queued job pinned to "a100" with its
    # per-model fits under both spellings, and a finished job not yet folded
    node, token = agent_node
    Gpu.objects.filter(node=node).update(model="a100")
    bert = _learned("bert", "a100", 2)
    resnet_old = _learned("resnet50", "a100", 1)
    resnet_new = _learned("resnet50", "A100", 3)
    queued = make_job(owner=member, team=team)
    Job.objects.filter(pk=queued.pk).update(gpu_model="a100")
    JobSchedulingState.objects.create(
        job=queued,
        observations={"a100": [{"w": 1}], "A100": [{"w": 2}], "V100": [{"w": 3}]},
        online_params={"a100": {"params": "old"}, "A100": {"params": "new"}},
    )
    finished = _finished_with_a100_fit(make_job, member, team)
    body = {
        "gpus": [registered_gpu(g.uuid, g.index, "a100") for g in Gpu.objects.filter(node=node)]
    }

    # when its agent registers again, and its GPUs are stored as the catalog's "A100"
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    assert response.status_code == 200, response.json()
    assert set(Gpu.objects.filter(node=node).values_list("model", flat=True)) == {"A100"}

    # then bert's learned versions are found on "A100" (they were left on "a100", and its
    # jobs started from the catalog's model again)
    assert perf_lookup.model_for("bert", "A100").source == "profile v2"
    assert {p.gpu_model for p in WorkloadProfile.objects.filter(pk__in=[p.pk for p in bert])} == {
        "A100"
    }
    # resnet50 keeps its versions under "A100"; those under "a100" stay as they were
    assert WorkloadProfile.objects.get(pk=resnet_old[0].pk).gpu_model == "a100"
    assert wp.latest_profile("resnet50", "A100").pk == resnet_new[-1].pk
    # the queued job asks for "A100" and its fits are under it (observations pooled, the
    # new spelling's parameters kept)
    assert Job.objects.get(pk=queued.pk).gpu_model == "A100"
    state = JobSchedulingState.objects.get(pk=queued.pk)
    assert state.observations == {"A100": [{"w": 2}, {"w": 1}], "V100": [{"w": 3}]}
    assert state.online_params == {"A100": {"params": "new"}}
    # and the finished job folds into resnet50's profile on "A100", not a v1 of its own
    assert JobSchedulingState.objects.get(pk=finished.pk).online_params.keys() == {"A100"}
    assert wp.fold_finished_jobs(now=T0 + timedelta(minutes=5)) == 1
    assert wp.latest_profile("resnet50", "A100").version == 4
    assert not WorkloadProfile.objects.filter(gpu_model="a100", version__gt=1).exists()


def test_what_was_learned_moves_once_no_gpu_in_service_keeps_the_old_spelling(
    agent_node, other_node, agent_client, make_job, member, team
):
    # given two nodes of GPUs stored as "a100", bert's profile learned on them, and a job
    # pinned to "a100"
    (first, first_token), (second, second_token) = agent_node, other_node
    Gpu.objects.update(model="a100")
    (profile,) = _learned("bert", "a100", 1)
    job = make_job(owner=member, team=team, workload="bert")
    Job.objects.filter(pk=job.pk).update(gpu_model="a100")

    def register(node, token):
        body = {
            "gpus": [registered_gpu(g.uuid, g.index, "a100") for g in Gpu.objects.filter(node=node)]
        }
        response = agent_client(token).post("/api/agent/register/", body, format="json")
        assert response.status_code == 200, response.json()

    # when the first node's agent registers again: the second's GPUs are still "a100", and
    # the job pinned to them keeps what it learned there, as the job keeps asking for them
    register(first, first_token)
    assert WorkloadProfile.objects.get(pk=profile.pk).gpu_model == "a100"
    assert Job.objects.get(pk=job.pk).gpu_model == "a100"

    # when the second's registers again too: job and profile move together
    register(second, second_token)
    assert Job.objects.get(pk=job.pk).gpu_model == "A100"
    assert WorkloadProfile.objects.get(pk=profile.pk).gpu_model == "A100"
    assert perf_lookup.model_for("bert", "A100").source == "profile v1"


def test_a_board_split_leaves_what_was_learned_on_the_bare_key(make_node, agent_client):
    # given a GPU registered under the bare key "A100" and bert's profile learned there
    node = make_node("node-09", gpus=0)
    client = agent_client(node.issue_agent_token())
    first = client.post(
        "/api/agent/register/", {"gpus": [registered_gpu("GPU-x0", 0, "A100")]}, format="json"
    )
    assert first.status_code == 200, first.json()
    (profile,) = _learned("bert", "A100", 1)

    # when it reports its board of its own: another model than the bare key's, not a spelling
    again = client.post(
        "/api/agent/register/",
        {"gpus": [registered_gpu("GPU-x0", 0, "NVIDIA A100-PCIE-40GB")]},
        format="json",
    )

    # then the profile stays the A100's (the SXM boards' model)
    assert again.status_code == 200, again.json()
    assert Gpu.objects.get(uuid="GPU-x0").model == "A100-PCIe"
    assert WorkloadProfile.objects.get(pk=profile.pk).gpu_model == "A100"


def _params_on(workload: str, gpu_model: str) -> dict:
    """A profile version's params as a fold on GPUs stored as ``gpu_model`` writes them:
    the model, and the base it was fitted from, name that key."""
    params = wp.model_to_params(CATALOG.get(workload, "A100"))
    params["model"]["gpu_model"] = gpu_model
    params["fit"] = {
        "base": copy.deepcopy(params),
        "params": [],
        "observations": [],
        "fitted_weight": 0.0,
    }
    return params


def test_a_profile_moved_to_a_rekeyed_gpu_names_the_new_key_in_its_params(
    agent_node, agent_client, make_job, member, team
):
    # given GPUs stored as "a100", bert's profile learned on them (its params name "a100"),
    # and a queued job whose per-model fit was made against a prior on "a100"
    node, token = agent_node
    Gpu.objects.filter(node=node).update(model="a100")
    profile = WorkloadProfile.objects.create(
        workload="bert", gpu_model="a100", version=1, prior="catalog bert@A100",
        params=_params_on("bert", "a100"), n_observations=4.0, jobs=1, created_at=T0,
    )  # fmt: skip
    queued = make_job(owner=member, team=team, workload="bert")
    Job.objects.filter(pk=queued.pk).update(gpu_model="a100")
    prior = wp.model_to_params(CATALOG.get("bert", "A100"))
    prior["model"]["gpu_model"] = "a100"
    JobSchedulingState.objects.create(
        job=queued, online_params={"a100": {"params": [0.0], "prior_params": prior}}
    )
    body = {
        "gpus": [registered_gpu(g.uuid, g.index, "a100") for g in Gpu.objects.filter(node=node)]
    }

    # when its agent registers again, and its GPUs are stored as the catalog's "A100"
    response = agent_client(token).post("/api/agent/register/", body, format="json")
    assert response.status_code == 200, response.json()

    # then the moved profile's params name "A100", its model and the base it was fitted
    # from (they kept "a100": the model read back from it was an "a100" model on an "A100"
    # row), and so does the job's prior under its moved fit
    params = WorkloadProfile.objects.get(pk=profile.pk).params
    assert params["model"]["gpu_model"] == "A100"
    assert params["fit"]["base"]["model"]["gpu_model"] == "A100"
    assert perf_lookup.model_for("bert", "A100").model.gpu_model == "A100"
    entry = JobSchedulingState.objects.get(pk=queued.pk).online_params["A100"]
    assert entry["prior_params"]["model"]["gpu_model"] == "A100"
    assert wp.stored_prior(entry).gpu_model == "A100"
    # and the rest of the params is as it was
    params["model"]["gpu_model"] = params["fit"]["base"]["model"]["gpu_model"] = "a100"
    assert params == _params_on("bert", "a100")
