"""The OpenAPI schema generates without warnings; docs, login and every admin page render."""

import pytest
from django.contrib import admin
from django.core.management import call_command
from django.urls import reverse

from cluster.models import Budget, Gpu, Job, JobAllocation, Membership, Node, Team
from scheduling.core.goodput import load_curves


def test_schema_generates_and_validates_without_warnings(db, tmp_path):
    schema_file = tmp_path / "schema.yaml"

    # --fail-on-warn turns any drf-spectacular warning or error into a SystemExit.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(schema_file))

    text = schema_file.read_text()
    for path in [
        "/api/jobs/:",
        "/api/jobs/{id}/cancel/:",
        "/api/budgets/:",
        "/api/teams/{slug}/:",
        "/api/nodes/{id}/issue-token/:",
        "/api/gpus/:",
    ]:
        assert path in text


def test_schema_and_docs_pages_are_served(client, member):
    client.force_login(member)

    assert client.get("/api/schema/").status_code == 200
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    # Swagger UI comes from our static files (drf-spectacular-sidecar), not from a CDN.
    html = docs.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn." not in html


@pytest.mark.parametrize("signed_in", [False, True])
def test_options_on_the_docs_page_is_no_server_error(client, member, signed_in):
    # DRF answered OPTIONS with the view's metadata, rendered by Swagger UI's template
    # renderer without a template: TemplateDoesNotExist, a 500 for anyone (a sixth probe;
    # the same under daphne).
    if signed_in:
        client.force_login(member)

    response = client.options("/api/docs/")

    assert response.status_code == 200
    assert response["Allow"] == "GET, HEAD, OPTIONS"


def test_login_page_logs_a_user_in(client, member):
    assert client.get(reverse("login")).status_code == 200

    response = client.post(
        reverse("login"), {"username": "vera_member", "password": "vera_member-password"}
    )

    assert response.status_code == 302
    assert client.get("/api/jobs/").status_code == 200


def test_wrong_password_does_not_log_in(client, member):
    response = client.post(reverse("login"), {"username": "vera_member", "password": "nope"})

    assert response.status_code == 200
    assert client.get("/api/jobs/").status_code == 401


@pytest.mark.parametrize("model", [Team, Membership, Node, Gpu, Job, JobAllocation, Budget])
def test_every_model_has_working_admin_pages(admin_client, model):
    assert admin.site.is_registered(model)
    opts = model._meta

    changelist = admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
    add = admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add"))

    assert changelist.status_code == 200
    # allocations are the scheduler's record (cluster.services writes them): none added
    assert add.status_code == (403 if model is JobAllocation else 200)


def test_admin_cancel_action_cancels_live_jobs_and_skips_finished(
    admin_client, make_job, member, team
):
    from cluster.choices import JobState

    live = make_job(owner=member, team=team, name="live")
    done = make_job(owner=member, team=team, name="done")
    Job.objects.filter(pk=done.pk).update(state=JobState.COMPLETED)

    response = admin_client.post(
        reverse("admin:cluster_job_changelist"),
        {"action": "cancel_jobs", "_selected_action": [live.pk, done.pk]},
        follow=True,
    )

    assert response.status_code == 200
    assert Job.objects.get(pk=live.pk).state == JobState.CANCELLED
    assert Job.objects.get(pk=done.pk).state == JobState.COMPLETED
    texts = [str(m) for m in response.context["messages"]]
    assert texts == ["Cancelled 1 job(s).", f"Already finished: #{done.pk} (completed)."]


def test_the_job_admin_shows_reported_gradient_statistics_and_the_noise_scale(
    admin_client, make_job, member, team
):
    job = make_job(owner=member, team=team, workload="gpt2")
    Job.objects.filter(pk=job.pk).update(grad_sqr=2.0, grad_var=0.5, grad_batch_size=256)
    job.refresh_from_db()
    page = admin_client.get(reverse("admin:cluster_job_change", args=[job.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    assert "Grad batch size" in body and "256" in body
    # calibrated 0.5 x 256 / 2.0, as the scheduler uses it
    assert job.noise_scale == pytest.approx(load_curves().calibration * 64.0)
    assert f"{job.noise_scale}" in body
