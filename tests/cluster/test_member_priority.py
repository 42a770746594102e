"""Who may raise a job's priority (fourth probe of the live service, "Needs a decision").

``Job.priority`` orders every team's jobs, so a member's priority-100 job stopped four
running jobs of another team in a live ``tiresias`` round. Only a lead of the job's team
or an admin may now set a priority above the default; a member may set the default or
lower (``cluster.queries.priority_refusal``), through the API and the submit form alike."""

import pytest
from django.urls import reverse

from cluster.choices import Role
from cluster.models import Job, Membership


@pytest.fixture
def client_for(client):
    def make(user):
        client.force_login(user)
        return client

    return make


SUBMIT = {
    "name": "bert finetune",
    "team": "vision",
    "workload": "bert",
    "min_gpus": 1,
    "max_gpus": 2,
    "global_batch_size": 64,
    "total_iterations": 5000,
}


@pytest.mark.parametrize("priority", [1, 3, 100])
def test_a_member_may_not_raise_a_priority_over_the_api(api_client, member, team, priority):
    response = api_client(member).post(
        "/api/jobs/", {**SUBMIT, "priority": priority}, format="json"
    )
    assert response.status_code == 400
    assert list(response.json()) == ["priority"]
    assert "lead of team vision or an admin" in response.json()["priority"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize("priority", [0, -1, -100])
def test_a_member_may_rank_their_own_work_at_or_below_the_default(
    api_client, member, team, priority
):
    response = api_client(member).post(
        "/api/jobs/", {**SUBMIT, "priority": priority}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert Job.objects.get().priority == priority


def test_the_teams_lead_and_an_admin_may_raise_it(api_client, lead, admin_user, team):
    for user in (lead, admin_user):
        response = api_client(user).post(
            "/api/jobs/", {**SUBMIT, "priority": 100, "name": user.username}, format="json"
        )
        assert response.status_code == 201, response.json()
    assert sorted(Job.objects.values_list("priority", flat=True)) == [100, 100]


def test_a_lead_of_another_team_is_a_member_here(api_client, make_user, team, other_team):
    # given a lead of the language team who is a member of vision
    user = make_user("lena", team=other_team, role=Role.LEAD)
    Membership.objects.create(user=user, team=team, role=Role.MEMBER)
    client = api_client(user)
    # then vision's jobs stay at the default or below for them
    response = client.post("/api/jobs/", {**SUBMIT, "priority": 5}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["priority"]
    # and language's may go higher
    response = client.post(
        "/api/jobs/", {**SUBMIT, "team": "language", "priority": 5}, format="json"
    )
    assert response.status_code == 201


def test_no_api_path_edits_a_jobs_priority(api_client, member, make_job, team):
    job = make_job(owner=member, team=team)
    for method in ("patch", "put"):
        response = getattr(api_client(member), method)(
            f"/api/jobs/{job.pk}/", {"priority": 100}, format="json"
        )
        assert response.status_code == 405
    job.refresh_from_db()
    assert job.priority == 0


def _form(priority: int) -> dict:
    return {
        "name": "bert-1",
        "team": "",  # set by the test
        "workload": "bert",
        "gpus": 1,
        "max_gpus": 1,
        "batch_size": 64,
        "iterations": 500,
        "priority": priority,
    }


def test_the_submit_form_refuses_a_members_raised_priority(client_for, member, team):
    response = client_for(member).post(reverse("frontend:job-new"), {**_form(3), "team": team.pk})
    assert response.status_code == 400
    (message,) = response.context["form"].errors["priority"]
    assert "lead of team vision or an admin" in message
    assert not Job.objects.exists()


def test_the_submit_form_takes_a_leads_raised_priority(client_for, lead, team):
    response = client_for(lead).post(reverse("frontend:job-new"), {**_form(3), "team": team.pk})
    assert response.status_code == 302
    assert Job.objects.get().priority == 3


def test_the_schema_and_the_form_say_who_may_raise_it(client_for, member):
    schema = client_for(member).get("/api/schema/?format=json").json()
    text = schema["components"]["schemas"]["Job"]["properties"]["priority"]["description"]
    assert "Only a lead of the job's team or an admin" in text
    page = client_for(member).get(reverse("frontend:job-new")).content.decode()
    assert "only a lead of the team or an admin may set more than 0" in page
