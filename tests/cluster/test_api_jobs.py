"""Jobs over REST: who sees, submits and cancels what, and per-field validation errors."""

from datetime import UTC, datetime

import pytest

from cluster.choices import JobState
from cluster.models import Job
from cluster.workloads import perf_catalog

KNOWN_WORKLOADS = perf_catalog().workloads()

SUBMIT = {
    "name": "bert finetune",
    "team": "vision",
    "workload": "bert",
    "min_gpus": 1,
    "max_gpus": 2,
    "global_batch_size": 64,
    "total_iterations": 5000,
}


@pytest.fixture
def jobs(make_job, member, lead, outsider, team, other_team):
    return {
        "member": make_job(owner=member, team=team, name="member's"),
        "lead": make_job(owner=lead, team=team, name="lead's"),
        "outsider": make_job(owner=outsider, team=other_team, name="outsider's"),
    }


def _ids(response) -> set[int]:
    return {row["id"] for row in response.json()["results"]}


def test_anonymous_requests_are_refused(api_client, jobs):
    response = api_client().get("/api/jobs/")

    assert response.status_code == 401


@pytest.mark.parametrize(
    ("persona", "visible"),
    [
        ("member", {"member", "lead"}),
        ("lead", {"member", "lead"}),
        ("outsider", {"outsider"}),
        ("admin", {"member", "lead", "outsider"}),
    ],
)
def test_job_list_shows_only_the_users_teams(api_client, personas, jobs, persona, visible):
    response = api_client(personas[persona]).get("/api/jobs/")

    assert response.status_code == 200
    assert _ids(response) == {jobs[name].pk for name in visible}


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("member", 200), ("lead", 200), ("outsider", 404), ("admin", 200)],
)
def test_job_detail_is_hidden_from_other_teams(api_client, personas, jobs, persona, expected):
    response = api_client(personas[persona]).get(f"/api/jobs/{jobs['member'].pk}/")

    assert response.status_code == expected
    if expected == 200:
        body = response.json()
        assert body["name"] == "member's"
        assert body["owner"] == "vera_member"
        assert body["team"] == "vision"
        assert body["state"] == "queued"
        assert body["state_colour"] == "slategray"
        assert body["current_allocation"] is None


def test_member_submits_a_job_to_their_team(api_client, member, team):
    response = api_client(member).post("/api/jobs/", SUBMIT, format="json")

    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert response.json()["id"] == job.pk
    assert (job.owner, job.team, job.state) == (member, team, JobState.QUEUED)
    assert (job.min_gpus, job.max_gpus, job.total_iterations) == (1, 2, 5000)
    assert (job.min_batch_size, job.global_batch_size, job.max_batch_size) == (64, 64, 64)


def test_known_workloads_include_the_measured_a100_models():
    assert {"bert", "gpt2", "resnet50", "vgg16"} <= set(KNOWN_WORKLOADS)
    assert "A100" in perf_catalog().gpu_models_for("resnet50")


def test_submission_with_a_known_gpu_model_is_accepted(api_client, member, team):
    response = api_client(member).post("/api/jobs/", {**SUBMIT, "gpu_model": "A100"}, format="json")

    assert response.status_code == 201
    assert Job.objects.get().gpu_model == "A100"


@pytest.mark.parametrize(("given", "stored"), [("NVIDIA A100-SXM4-80GB", "A100"), ("  ", "")])
def test_a_gpu_model_named_as_nvidia_smi_names_it_asks_for_its_key(
    api_client, member, team, given, stored
):
    # the name nvidia-smi prints is the one GPUs are registered under (their key): a job
    # asking for it by the product name could never have run
    body = {**SUBMIT, "gpu_model": given}
    response = api_client(member).post("/api/jobs/", body, format="json")

    assert response.status_code == 201, response.json()
    assert Job.objects.get().gpu_model == stored


@pytest.mark.parametrize("given", ["a100", "nvidia a100-sxm4-80gb"])
def test_a_gpu_model_in_another_case_asks_for_the_registered_one(
    api_client, member, team, make_node, given
):
    # a live probe: "l40s" was refused on a cluster of L40S GPUs
    make_node(gpus=1)
    body = {**SUBMIT, "gpu_model": given}
    response = api_client(member).post("/api/jobs/", body, format="json")

    assert response.status_code == 201, response.json()
    assert Job.objects.get().gpu_model == "A100"


def test_submission_for_a_gpu_model_without_catalog_entry_is_accepted(api_client, member, team):
    # the catalog measured bert on A100 and T4 only; an A40 job starts from an estimate
    assert "A40" not in perf_catalog().gpu_models_for("bert")
    body = {**SUBMIT, "workload": "bert", "gpu_model": "A40"}
    response = api_client(member).post("/api/jobs/", body, format="json")

    assert response.status_code == 201, response.json()
    assert Job.objects.get().gpu_model == "A40"


def test_admin_submits_to_any_team(api_client, admin_user, other_team):
    response = api_client(admin_user).post(
        "/api/jobs/", {**SUBMIT, "team": "language"}, format="json"
    )

    assert response.status_code == 201
    assert Job.objects.get().team == other_team


@pytest.mark.parametrize(
    ("change", "errors"),
    [
        # another team's name reads as a name nobody uses
        ({"team": "language"}, {"team": ["Object with slug=language does not exist."]}),
        ({"team": "nope"}, {"team": ["Object with slug=nope does not exist."]}),
        ({"min_gpus": 4, "max_gpus": 2}, {"max_gpus": ["Must be at least min_gpus."]}),
        (
            {"total_iterations": -5},
            {"total_iterations": ["Ensure this value is greater than or equal to 1."]},
        ),
        ({"min_gpus": 0}, {"min_gpus": ["Ensure this value is greater than or equal to 1."]}),
        (
            {"min_batch_size": 128},
            {"min_batch_size": ["Must not exceed global_batch_size."]},
        ),
        (
            {"max_batch_size": 32},
            {"max_batch_size": ["Must be at least global_batch_size."]},
        ),
        ({"base_lr": 0.1, "max_lr": 0.01}, {"max_lr": ["Must be at least base_lr."]}),
        ({"name": ""}, {"name": ["This field may not be blank."]}),
        (
            {"workload": "alexnet", "resembles": "alexnet"},
            {
                # the list follows the shipped perf catalog, which its owner may extend
                "resembles": [
                    f"Not a catalog workload: 'alexnet'; known: {', '.join(KNOWN_WORKLOADS)}."
                ]
            },
        ),
        (
            {"workload": "llama-3b", "param_count": 999},
            {"param_count": ["Ensure this value is greater than or equal to 1000."]},
        ),
        (
            {"workload": "llama-3b", "param_count": 10**15},
            {"param_count": ["Ensure this value is less than or equal to 100000000000000."]},
        ),
        (
            {"workload": "llama-3b", "param_count": "3e9"},
            {"param_count": ["A valid integer is required."]},
        ),
        (
            {"slowdown_tolerance": -0.1},
            {"slowdown_tolerance": ["Ensure this value is greater than or equal to 0.0."]},
        ),
    ],
)
def test_bad_submission_gets_400_with_field_errors_and_stores_nothing(
    api_client, member, other_team, change, errors
):
    response = api_client(member).post("/api/jobs/", {**SUBMIT, **change}, format="json")

    assert response.status_code == 400
    assert response.json() == errors
    assert Job.objects.count() == 0


def test_submission_missing_required_fields_names_each(api_client, member, team):
    response = api_client(member).post("/api/jobs/", {"team": "vision"}, format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"name", "workload", "global_batch_size", "total_iterations"}
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("persona", "job", "expected"),
    [
        ("member", "member", 200),  # owner
        ("member", "lead", 403),  # same team, not owner, not lead
        ("lead", "member", 200),  # lead of the job's team
        ("outsider", "member", 404),  # cannot even see it
        ("admin", "outsider", 200),
    ],
)
def test_cancel_permissions(api_client, personas, jobs, persona, job, expected):
    target = jobs[job]

    response = api_client(personas[persona]).post(f"/api/jobs/{target.pk}/cancel/")

    assert response.status_code == expected
    row = Job.objects.get(pk=target.pk)
    if expected == 200:
        assert response.json()["state"] == "cancelled"
        assert row.state == JobState.CANCELLED
        assert row.finished_at is not None
    else:
        assert row.state == JobState.QUEUED
        assert row.finished_at is None


def test_cancel_of_a_finished_job_is_a_conflict(api_client, member, jobs):
    finished_at = datetime(2026, 3, 1, tzinfo=UTC)
    Job.objects.filter(pk=jobs["member"].pk).update(
        state=JobState.COMPLETED, finished_at=finished_at
    )

    response = api_client(member).post(f"/api/jobs/{jobs['member'].pk}/cancel/")

    assert response.status_code == 409
    assert "cannot go from completed to cancelled" in response.json()["detail"]
    row = Job.objects.get(pk=jobs["member"].pk)
    assert (row.state, row.finished_at) == (JobState.COMPLETED, finished_at)


def test_jobs_cannot_be_edited_or_deleted_over_rest(api_client, admin_user, jobs):
    client = api_client(admin_user)
    url = f"/api/jobs/{jobs['member'].pk}/"

    assert client.patch(url, {"name": "renamed"}, format="json").status_code == 405
    assert client.delete(url).status_code == 405
    assert Job.objects.get(pk=jobs["member"].pk).name == "member's"


def test_job_list_filters(api_client, admin_user, make_job, member, lead, team, other_team):
    # given jobs differing in state, team, workload, owner and submit time
    early = make_job(owner=member, team=team, at=datetime(2026, 1, 1, tzinfo=UTC))
    late = make_job(owner=lead, team=team, workload="gpt2", at=datetime(2026, 2, 1, tzinfo=UTC))
    Job.objects.filter(pk=late.pk).update(state=JobState.RUNNING)
    client = api_client(admin_user)

    def ids(query: str) -> set[int]:
        response = client.get(f"/api/jobs/?{query}")
        assert response.status_code == 200, response.json()
        return _ids(response)

    assert ids("state=running") == {late.pk}
    assert ids("state=running&state=queued") == {early.pk, late.pk}
    assert ids("team=vision") == {early.pk, late.pk}
    assert ids("team=language") == set()
    assert ids("workload=gpt2") == {late.pk}
    assert ids("owner=vera_member") == {early.pk}
    assert ids("submitted_after=2026-01-15T00:00:00Z") == {late.pk}
    assert ids("submitted_before=2026-01-15T00:00:00Z") == {early.pk}


def test_unknown_state_filter_is_a_400(api_client, admin_user):
    response = api_client(admin_user).get("/api/jobs/?state=sleeping")

    assert response.status_code == 400
    assert list(response.json()) == ["state"]


def test_allocation_history_endpoint(api_client, make_job, make_node, member, team):
    from cluster.services import set_allocation, start_job

    gpus = list(make_node().gpus.order_by("index"))
    job = make_job(owner=member, team=team)
    t0, t1 = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC)
    start_job(job, gpus=gpus[:1], batch_size=256, at=t0)
    set_allocation(job, gpus=gpus[:2], batch_size=256, sm_clock_mhz=1200, at=t1)

    response = api_client(member).get(f"/api/jobs/{job.pk}/allocations/")

    assert response.status_code == 200
    assert [
        (row["gpus"], row["sm_clock_mhz"], row["started_at"], row["ended_at"])
        for row in response.json()
    ] == [
        ([gpus[0].pk], None, "2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z"),
        ([gpus[0].pk, gpus[1].pk], 1200, "2026-03-02T00:00:00Z", None),
    ]


def _near_miss(typed: str, meant: str) -> str:
    return (
        f"{typed!r} is not a catalog workload; did you mean {meant!r}? To submit a new "
        "workload, give resembles=... (the catalog workload it is most like) or param_count."
    )


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("resnet_50", "resnet50"),  # the probe's: separators
        ("ResNet-50", "resnet50"),
        ("yolo v3", "yolov3"),
        ("resnt50", "resnet50"),  # a letter dropped: a close match
        ("imagnet", "imagenet"),
        ("resnett50", "resnet50"),  # a letter struck twice
        ("berrt", "bert"),
        # a catalog key under combining marks (a look-alike; a live probe, 7 Dec 2026)
        ("bert\u0301", "bert"),
        ("re\u0301snet50", "resnet50"),
    ],
)
def test_a_near_miss_of_a_catalog_workload_without_hints_is_a_400_naming_it(
    api_client, member, team, typed, meant
):
    response = api_client(member).post("/api/jobs/", {**SUBMIT, "workload": typed}, format="json")

    assert response.status_code == 400
    assert response.json() == {"workload": [_near_miss(typed, meant)]}
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("change", "stored"),
    [
        # new names far from every catalog key, or another size/version of one
        ({"workload": "llama-3b"}, "llama-3b"),
        ({"workload": "resnet18"}, "resnet18"),
        ({"workload": "vgg19"}, "vgg19"),
        ({"workload": "bart"}, "bart"),
        # letters added to a catalog key: a model of its own, not a typo
        ({"workload": "resnext50"}, "resnext50"),
        ({"workload": "se-resnet50"}, "se-resnet50"),
        ({"workload": "resnet50d"}, "resnet50d"),
        ({"workload": "yolov3s"}, "yolov3s"),
        ({"workload": "gpt2_l"}, "gpt2_l"),
        ({"workload": "xbert"}, "xbert"),
        # a near miss that says what it is like, or how large it is, is a new workload
        ({"workload": "resnet_50", "resembles": "resnet50"}, "resnet_50"),
        ({"workload": "resnet_50", "param_count": 25_000_000}, "resnet_50"),
        # a catalog key in another case is that key, as before
        ({"workload": "ResNet50"}, "resnet50"),
        # and in fullwidth (compatibility) forms: was a new workload "ｒｅｓｎｅｔ５０" that
        # skipped every submit check a catalog workload gets (a live probe, 7 Dec 2026)
        ({"workload": "\uff52\uff45\uff53\uff4e\uff45\uff54\uff15\uff10"}, "resnet50"),
        ({"workload": "resnet\uff15\uff10"}, "resnet50"),
        ({"workload": "\uff22\uff25\uff32\uff34"}, "bert"),
    ],
)
def test_a_new_workload_or_a_hinted_near_miss_is_accepted(api_client, member, team, change, stored):
    response = api_client(member).post("/api/jobs/", {**SUBMIT, **change}, format="json")

    assert response.status_code == 201, response.json()
    assert Job.objects.get().workload == stored


def test_a_near_miss_the_cluster_has_learned_a_model_for_is_accepted(api_client, member, team):
    # given earlier (hinted) jobs taught the cluster a model of "resnet_50" on A100
    from django.utils import timezone

    from scheduling.models import WorkloadProfile
    from scheduling.workload_profiles import model_to_params

    WorkloadProfile.objects.create(
        workload="resnet_50", gpu_model="A100", version=1, prior="catalog resnet50@A100",
        params=model_to_params(perf_catalog().get("resnet50", "A100")), n_observations=9,
        jobs=1, created_at=timezone.now(),
    )  # fmt: skip

    # then it is a workload of its own, checked by its learned model, hints or not
    response = api_client(member).post(
        "/api/jobs/", {**SUBMIT, "workload": "resnet_50"}, format="json"
    )

    assert response.status_code == 201, response.json()


def test_a_catalog_workload_in_fullwidth_gets_the_catalog_workloads_submit_checks(
    api_client, member, team
):
    # given a job of 10^9 iterations: too long for the catalog's bert, as its check says
    body = {**SUBMIT, "total_iterations": 10**9}
    plain = api_client(member).post("/api/jobs/", body, format="json")
    assert plain.status_code == 400
    assert list(plain.json()) == ["total_iterations"]
    # when the same job names bert in fullwidth letters
    wide = {**body, "workload": "\uff42\uff45\uff52\uff54"}
    response = api_client(member).post("/api/jobs/", wide, format="json")
    # then it is refused the same way (it was stored as a new workload, checked by nothing)
    assert response.status_code == 400
    assert response.json() == plain.json()
    assert Job.objects.count() == 0


@pytest.mark.parametrize("typed", ["mynet", "MYNET", "\uff4d\uff59\uff4e\uff45\uff54"])
def test_a_learned_workload_in_another_case_is_that_workload(api_client, member, team, typed):
    # given earlier jobs taught the cluster a model of "MyNet" on A100
    from django.utils import timezone

    from scheduling.models import WorkloadProfile
    from scheduling.workload_profiles import model_to_params

    WorkloadProfile.objects.create(
        workload="MyNet", gpu_model="A100", version=1, prior="catalog resnet50@A100",
        params=model_to_params(perf_catalog().get("resnet50", "A100")), n_observations=9,
        jobs=1, created_at=timezone.now(),
    )  # fmt: skip
    # when a job names it in another case (it was a new workload, its own estimate)
    body = {**SUBMIT, "workload": typed, "param_count": 25_000_000}
    response = api_client(member).post("/api/jobs/", body, format="json")
    # then it is a job of MyNet, which the learned model predicts
    assert response.status_code == 201, response.json()
    assert Job.objects.get().workload == "MyNet"


@pytest.mark.parametrize(
    ("learned", "typed"),
    [
        ("Stra\u00dfeNet", "STRASSENET"),  # sharp s against its full case folding
        ("STRASSENET", "stra\u00dfenet"),
        ("\u1e9eNet", "ssnet"),  # capital sharp s
        ("Gro\u00dfNet", "GROSSNET"),
    ],
)
def test_a_learned_workload_under_a_full_case_folding_is_that_workload(
    api_client, member, team, learned, typed
):
    # given earlier jobs taught the cluster a model of a workload whose name folds to the
    # typed one only by a full case folding ("\u00df" is "ss"): the database's filter
    # (PostgreSQL's upper, which keeps "\u00df") and the comparison (Python's casefold)
    # disagreed, so the lookup found nothing and the job was a new workload of its own
    from django.utils import timezone

    from scheduling.models import WorkloadProfile
    from scheduling.workload_profiles import model_to_params

    WorkloadProfile.objects.create(
        workload=learned, gpu_model="A100", version=1, prior="catalog resnet50@A100",
        params=model_to_params(perf_catalog().get("resnet50", "A100")), n_observations=9,
        jobs=1, created_at=timezone.now(),
    )  # fmt: skip
    # when a job names it so
    body = {**SUBMIT, "workload": typed, "param_count": 25_000_000}
    response = api_client(member).post("/api/jobs/", body, format="json")
    # then it is a job of the learned workload
    assert response.status_code == 201, response.json()
    assert Job.objects.get().workload == learned


def test_a_name_only_an_uppercasing_merges_is_not_a_learned_workload(api_client, member, team):
    # given a workload learned under a dotless i ("\u0131"), which PostgreSQL's upper makes
    # "I" but Python's casefold keeps apart from "i"
    from django.utils import timezone

    from scheduling.models import WorkloadProfile
    from scheduling.workload_profiles import model_to_params

    WorkloadProfile.objects.create(
        workload="B\u0131tNet", gpu_model="A100", version=1, prior="catalog resnet50@A100",
        params=model_to_params(perf_catalog().get("resnet50", "A100")), n_observations=9,
        jobs=1, created_at=timezone.now(),
    )  # fmt: skip
    # when a job names "bitnet"
    body = {**SUBMIT, "workload": "bitnet", "param_count": 25_000_000}
    response = api_client(member).post("/api/jobs/", body, format="json")
    # then it is a workload of its own, stored as typed
    assert response.status_code == 201, response.json()
    assert Job.objects.get().workload == "bitnet"


def test_a_workload_learned_under_a_fullwidth_name_is_that_workload_in_ascii(
    api_client, member, team
):
    # given earlier jobs taught the cluster a model of a workload named in fullwidth forms
    # (a name the catalog lacks is stored as typed, so its profile is learned so)
    from django.utils import timezone

    from scheduling.models import WorkloadProfile
    from scheduling.workload_profiles import model_to_params

    learned = "\uff2d\uff59\uff2e\uff45\uff54"  # "MyNet" in fullwidth
    WorkloadProfile.objects.create(
        workload=learned, gpu_model="A100", version=1, prior="catalog resnet50@A100",
        params=model_to_params(perf_catalog().get("resnet50", "A100")), n_observations=9,
        jobs=1, created_at=timezone.now(),
    )  # fmt: skip
    # when a job names it in ASCII (the database's filter compared "MYNET" with the stored
    # name's fullwidth capitals, found nothing, and the job was a new workload of its own)
    body = {**SUBMIT, "workload": "mynet", "param_count": 25_000_000}
    response = api_client(member).post("/api/jobs/", body, format="json")
    # then it is a job of the learned workload, as the reverse order already was
    assert response.status_code == 201, response.json()
    assert Job.objects.get().workload == learned
