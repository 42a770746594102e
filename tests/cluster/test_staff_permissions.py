"""A staff user acts as an admin only where Django grants them the permission the effect needs.

The admin's own actions already asked for it (``test_admin_action_permissions.py``): a staff
user allowed only to *view* nodes, GPUs and jobs gets neither "Issue new agent tokens",
"Retire" nor "Cancel selected jobs". The REST API and the site's pages asked for
``is_staff`` alone, so the same user did all of it there, and more: an eighth probe of the
live service (7 Dec 2026) had such a user issue a node's agent token (201, the token shown),
drain, undrain and delete a node, cancel another team's running job, rename a team and
create a budget for a team they are not in, each answered 200 / 201 / 204.

Reading needs the view permission too (``test_staff_read_permissions.py``): the viewer here
holds it; superusers hold every permission, so they are not affected.
"""

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from cluster.choices import JobState, NodeStatus
from cluster.models import AuditEntry, Budget, Gpu, Job, Node, Team

VIEW_ONLY = ["view_node", "view_gpu", "view_job", "view_team", "view_budget"]
PERIOD = {"period_start": "2030-01-01T00:00:00Z", "period_end": "2030-01-02T00:00:00Z"}


def _staff(make_user, username: str, codenames: list[str]):
    user = make_user(username, is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="cluster", codename__in=codenames)
    )
    return user


@pytest.fixture
def viewer(make_user):
    return _staff(make_user, "vic_viewer", VIEW_ONLY)


@pytest.fixture
def scene(make_node, make_job, member, team, other_team):
    node = make_node(gpus=2)
    job = make_job(owner=member, team=team)
    budget = Budget.objects.create(team=team, energy_limit_kwh=5, **_period())
    return {"node": node, "gpu": node.gpus.first(), "job": job, "budget": budget}


def _period():
    return {
        "period_start": datetime(2030, 1, 1, tzinfo=UTC),
        "period_end": datetime(2030, 1, 2, tzinfo=UTC),
    }


def _stored(scene) -> tuple:
    node = Node.objects.get(pk=scene["node"].pk)
    return (
        node.status,
        node.agent_token_hash,
        list(Gpu.objects.filter(node=node).values_list("pk", "retired_at", "power_limit_w")),
        Job.objects.get(pk=scene["job"].pk).state,
        list(Team.objects.order_by("pk").values_list("pk", "name", "slug")),
        list(Budget.objects.order_by("pk").values_list("pk", "team_id", "energy_limit_kwh")),
        AuditEntry.objects.count(),
    )


def _writes(scene) -> list[tuple[str, str, dict | None]]:
    node, gpu, job, budget = scene["node"], scene["gpu"], scene["job"], scene["budget"]
    return [
        ("post", f"/api/nodes/{node.pk}/issue-token/", None),
        ("patch", f"/api/nodes/{node.pk}/", {"status": NodeStatus.DRAINING}),
        ("post", "/api/nodes/", {"name": "node-x", "switch_label": "s", "gpu_model": "A100"}),
        ("delete", f"/api/nodes/{node.pk}/", None),
        ("post", f"/api/gpus/{gpu.pk}/retire/", None),
        ("patch", f"/api/gpus/{gpu.pk}/", {"power_limit_w": 200}),
        ("delete", f"/api/gpus/{gpu.pk}/", None),
        ("post", f"/api/jobs/{job.pk}/cancel/", None),
        ("patch", "/api/teams/vision/", {"name": "Renamed"}),
        ("post", "/api/teams/", {"name": "Third", "slug": "third"}),
        ("delete", "/api/teams/language/", None),
        ("post", "/api/budgets/", {"team": "language", "energy_limit_kwh": 1, **PERIOD}),
        ("patch", f"/api/budgets/{budget.pk}/", {"energy_limit_kwh": 50}),
        ("delete", f"/api/budgets/{budget.pk}/", None),
    ]


def test_a_view_only_staff_user_changes_nothing_through_the_api(api_client, viewer, scene):
    client = api_client(viewer)
    before = _stored(scene)

    answers = {
        (method, path): getattr(client, method)(path, body, format="json").status_code
        for method, path, body in _writes(scene)
    }

    assert {k: v for k, v in answers.items() if v != 403} == {}
    assert _stored(scene) == before


def test_a_view_only_staff_user_still_reads_everything(api_client, viewer, scene):
    client = api_client(viewer)

    for path in ("/api/nodes/", "/api/gpus/", "/api/jobs/", "/api/teams/", "/api/budgets/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.json()["results"], path


def test_a_view_only_staff_user_submits_only_to_their_own_teams(
    api_client, viewer, scene, other_team
):
    body = {
        "name": "x",
        "team": other_team.slug,
        "workload": "resnet50",
        "global_batch_size": 256,
        "total_iterations": 10,
    }
    response = api_client(viewer).post("/api/jobs/", body, format="json")

    assert response.status_code == 403
    assert not Job.objects.filter(team=other_team).exists()


def test_a_view_only_staff_user_changes_nothing_through_the_pages(client, viewer, scene):
    client.force_login(viewer)
    node, job = scene["node"], scene["job"]
    before = _stored(scene)

    drain = client.post(reverse("frontend:node-drain", args=[node.pk]))
    cancel = client.post(reverse("frontend:job-cancel", args=[job.pk]))
    new_budget = client.post(
        reverse("frontend:budget-new"),
        {
            "team": Team.objects.get(slug="language").pk,
            "period_start": "2030-02-01 00:00",
            "period_end": "2030-02-02 00:00",
            "energy_limit_kwh": "1",
            "hard_limit_action": "hold_queue",
            "warn_percent": "80",
        },
    )
    edit = client.post(
        reverse("frontend:budget-edit", args=[scene["budget"].pk]),
        {
            "team": scene["budget"].team_id,
            "period_start": "2030-01-01 00:00",
            "period_end": "2030-01-02 00:00",
            "energy_limit_kwh": "50",
            "hard_limit_action": "hold_queue",
            "warn_percent": "80",
        },
    )

    assert drain.status_code == 403
    assert cancel.status_code in (403, 404)
    assert new_budget.status_code in (400, 403)
    assert edit.status_code in (403, 404)
    assert _stored(scene) == before
    page = client.get(reverse("frontend:nodes"))
    assert page.status_code == 200
    assert reverse("frontend:node-drain", args=[node.pk]) not in page.content.decode()


def test_the_nodes_page_offers_drain_to_staff_who_may_change_nodes(client, make_user, scene):
    client.force_login(_staff(make_user, "sam_staff", ["view_node", "change_node"]))

    page = client.get(reverse("frontend:nodes"))

    assert reverse("frontend:node-drain", args=[scene["node"].pk]) in page.content.decode()


@pytest.mark.parametrize(
    ("codenames", "method", "path", "body", "expected"),
    [
        (["view_node", "change_node"], "post", "issue-token", None, 201),
        (["view_node", "change_node"], "patch", "node", {"status": NodeStatus.DRAINING}, 200),
        (["view_gpu", "change_gpu"], "post", "retire", None, 200),
        (["view_job", "change_job"], "post", "cancel", None, 200),
        (["view_team", "change_team"], "patch", "team", {"name": "Renamed"}, 200),
        (["view_budget", "change_budget"], "patch", "budget", {"energy_limit_kwh": 50}, 200),
        (["view_budget", "delete_budget"], "delete", "budget", None, 204),
    ],
)
def test_staff_holding_the_permission_may(
    api_client, make_user, scene, codenames, method, path, body, expected
):
    url = {
        "issue-token": f"/api/nodes/{scene['node'].pk}/issue-token/",
        "node": f"/api/nodes/{scene['node'].pk}/",
        "retire": f"/api/gpus/{scene['gpu'].pk}/retire/",
        "cancel": f"/api/jobs/{scene['job'].pk}/cancel/",
        "team": "/api/teams/vision/",
        "budget": f"/api/budgets/{scene['budget'].pk}/",
    }[path]
    client = api_client(_staff(make_user, "sam_staff", codenames))

    response = getattr(client, method)(url, body, format="json")

    assert response.status_code == expected, response.content
    if path == "cancel":
        assert Job.objects.get(pk=scene["job"].pk).state == JobState.CANCELLED


@pytest.mark.parametrize(
    ("codenames", "path", "body"),
    [
        (
            ["add_job", "view_job"], "/api/jobs/",
            {"name": "x", "workload": "resnet50", "global_batch_size": 256,
             "total_iterations": 10},
        ),
        (["add_budget", "view_budget"], "/api/budgets/", {"energy_limit_kwh": 1, **PERIOD}),
    ],
    ids=["a job", "a budget"],
)  # fmt: skip
def test_staff_who_may_add_for_any_team_but_not_view_teams_may_name_another_team(
    api_client, make_user, scene, other_team, codenames, path, body
):
    # (the API's team field knew only the teams the user may view: such a user was told
    # "Object with slug=language does not exist." (400) while the job and budget pages, which
    # offer every team to them, and the Django admin let them do it)
    client = api_client(_staff(make_user, "ada_adder", codenames))

    response = client.post(path, {**body, "team": other_team.slug}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["team"] == other_team.slug
    # and a team nobody uses is still one that does not exist
    missing = client.post(path, {**body, "team": "no-such-team"}, format="json")
    assert missing.status_code == 400 and "does not exist" in str(missing.json()["team"])


def test_a_staff_user_who_may_add_jobs_but_not_view_them_reads_the_job_they_submitted(
    api_client, client, make_user, scene, other_team
):
    # (submitted to a team they are not in, as add_job lets them: the API's answer named the
    # job, then its page, its API row and its cancel answered 404 to its own owner)
    user = _staff(make_user, "ada_adder", ["add_job"])
    body = {"name": "x", "team": other_team.slug, "workload": "resnet50",
            "global_batch_size": 256, "total_iterations": 10}  # fmt: skip
    created = api_client(user).post("/api/jobs/", body, format="json")
    assert created.status_code == 201, created.content
    job_id = created.json()["id"]

    assert api_client(user).get(f"/api/jobs/{job_id}/").status_code == 200
    client.force_login(user)
    assert client.get(reverse("frontend:job-detail", args=[job_id])).status_code == 200
    # another team's job they did not submit stays unseen
    assert api_client(user).get(f"/api/jobs/{scene['job'].pk}/").status_code == 404
    assert api_client(user).post(f"/api/jobs/{job_id}/cancel/").status_code == 200
    assert Job.objects.get(pk=job_id).state == JobState.CANCELLED
