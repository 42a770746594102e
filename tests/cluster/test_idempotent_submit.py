"""A submit retried with the same key queues one job: the API's ``Idempotency-Key`` header
and the submit form's hidden key, with racing retries and keys reused for another job."""

import pytest
from django.db import connection
from django.urls import reverse
from rest_framework.test import APIClient

from cluster import services
from cluster.models import Job

SUBMIT = {
    "team": "vision",
    "name": "resnet sweep",
    "workload": "resnet50",
    "total_iterations": 5000,
    "global_batch_size": 64,
    "min_gpus": 1,
    "max_gpus": 2,
}


def post(client, body, key=None, **extra):
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return client.post("/api/jobs/", body, format="json", **headers, **extra)


@pytest.fixture
def body(team):
    return {**SUBMIT, "team": team.slug}


def test_a_retried_submit_answers_with_the_first_job(api_client, member, body):
    client = api_client(member)
    first = post(client, body, key="sweep-7f3a")
    again = post(client, dict(reversed(list(body.items()))), key="sweep-7f3a")

    assert first.status_code == again.status_code == 201, (first.json(), again.json())
    assert again.json()["id"] == first.json()["id"] == Job.objects.get().pk
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"


def test_another_key_or_no_key_queues_another_job(api_client, member, body):
    client = api_client(member)
    post(client, body, key="a")
    post(client, body, key="b")
    post(client, body)
    post(client, body)
    assert Job.objects.count() == 4


def test_a_key_reused_for_another_request_is_refused_and_changes_nothing(api_client, member, body):
    client = api_client(member)
    first = post(client, body, key="k1")
    other = post(client, {**body, "total_iterations": 9000}, key="k1")

    assert other.status_code == 422
    assert f"#{first.json()['id']}" in other.json()["detail"]
    job = Job.objects.get()
    assert job.total_iterations == 5000


def test_keys_are_per_owner(api_client, member, lead, body):
    post(api_client(member), body, key="same")
    second = post(api_client(lead), body, key="same")
    assert second.status_code == 201 and "Idempotent-Replayed" not in second.headers
    assert Job.objects.count() == 2


@pytest.mark.parametrize("key", ["", "with space", "x" * 129, "tab\there"])
def test_a_malformed_key_is_a_400_naming_the_header(api_client, member, body, key):
    response = post(api_client(member), body, key=key)
    assert response.status_code == 400
    assert list(response.json()) == ["Idempotency-Key"]
    assert not Job.objects.exists()


def test_a_retry_is_answered_even_when_its_fields_would_now_be_refused(
    api_client, member, team, body, settings
):
    client = api_client(member)
    first = post(client, body, key="k2")
    Job.objects.filter(pk=first.json()["id"]).update(state="completed")
    # the same submit would now be refused (its workload no longer known)
    refused = post(client, {**body, "workload": "no-such", "resembles": "nothing"})
    assert refused.status_code == 400
    again = post(client, body, key="k2")
    assert again.status_code == 201 and again.json()["id"] == first.json()["id"]
    assert again.json()["state"] == "completed"


def test_bad_fields_with_a_new_key_store_nothing_and_leave_the_key_free(api_client, member, body):
    client = api_client(member)
    bad = post(client, {**body, "total_iterations": 0}, key="k3")
    assert bad.status_code == 400 and "total_iterations" in bad.json()
    good = post(client, body, key="k3")
    assert good.status_code == 201 and "Idempotent-Replayed" not in good.headers


def test_the_key_after_leaving_the_team_is_a_conflict(api_client, member, team, body):
    client = api_client(member)
    first = post(client, body, key="k4")
    team.memberships.filter(user=member).delete()
    again = post(client, body, key="k4")
    assert again.status_code == 409
    assert f"#{first.json()['id']}" in again.json()["detail"]
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(3))
def test_racing_retries_with_one_key_queue_one_job(race, member, team, attempt):
    def submit():
        client = APIClient()
        client.force_authenticate(member)
        try:
            return post(client, {**SUBMIT, "team": team.slug}, key="race")
        finally:
            connection.close()

    results = race(submit, submit)
    codes = sorted(r.status_code for r in results)
    assert codes == [201, 201], results
    assert len({r.json()["id"] for r in results}) == 1
    assert sum("Idempotent-Replayed" in r.headers for r in results) == 1
    assert Job.objects.count() == 1


def test_the_service_refuses_a_missing_key(member, team):
    with pytest.raises(ValueError):
        services.submit_job_once(
            owner=member,
            idempotency_key="",
            request_digest="",
            team=team,
            name="n",
            workload="resnet50",
            total_iterations=10,
            global_batch_size=64,
        )


# --- the submit form ------------------------------------------------------------------


@pytest.fixture
def form_body(team):
    return {
        "name": "bert-1",
        "team": team.pk,
        "workload": "bert",
        "gpus": 2,
        "max_gpus": 4,
        "batch_size": 64,
        "iterations": 500,
        "priority": 0,
    }


def _drawn_key(client) -> str:
    import re

    page = client.get(reverse("frontend:job-new")).content.decode()
    match = re.search(r'name="submission_key" value="([0-9a-f]{32})"', page)
    assert match, "the form carries a hidden submission key"
    return match.group(1)


def test_the_form_posted_twice_queues_one_job(client, member, form_body):
    client.force_login(member)
    key = _drawn_key(client)
    assert _drawn_key(client) != key  # each showing of the form draws its own
    first = client.post(reverse("frontend:job-new"), {**form_body, "submission_key": key})
    again = client.post(reverse("frontend:job-new"), {**form_body, "submission_key": key})
    job = Job.objects.get()
    assert first.status_code == again.status_code == 302
    assert first["Location"] == again["Location"] == reverse("frontend:job-detail", args=[job.pk])
    shown = client.get(again["Location"]).content.decode()
    assert "already submitted" in shown


def test_the_form_edited_after_posting_queues_the_edited_job(client, member, form_body):
    client.force_login(member)
    key = _drawn_key(client)
    client.post(reverse("frontend:job-new"), {**form_body, "submission_key": key})
    edited = {**form_body, "submission_key": key, "iterations": 900}
    response = client.post(reverse("frontend:job-new"), edited)
    assert response.status_code == 302
    assert sorted(Job.objects.values_list("total_iterations", flat=True)) == [500, 900]


def test_a_tampered_form_key_is_refused_and_stores_nothing(client, member, form_body):
    client.force_login(member)
    response = client.post(reverse("frontend:job-new"), {**form_body, "submission_key": "bad key"})
    assert response.status_code == 400
    assert "submission_key" in response.context["form"].errors
    assert not Job.objects.exists()


def test_the_edited_form_posted_twice_queues_one_more_job(client, member, form_body):
    client.force_login(member)
    key = _drawn_key(client)
    client.post(reverse("frontend:job-new"), {**form_body, "submission_key": key})
    edited = {**form_body, "submission_key": key, "iterations": 900}
    client.post(reverse("frontend:job-new"), edited)
    client.post(reverse("frontend:job-new"), edited)  # a double click on the edited form
    assert sorted(Job.objects.values_list("total_iterations", flat=True)) == [500, 900]
