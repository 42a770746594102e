"""The admin cannot edit a job into something it did not ask for: once started, its spec is
read-only (a running job edited to 2 total iterations was completed at 905 of 2), and its
owner and team are fixed from submission; allocations are the scheduler's record only."""

from datetime import UTC, datetime

from django.urls import reverse
from django.utils import timezone

from cluster.choices import JobState
from cluster.models import Job, JobAllocation
from cluster.services import set_allocation, transition_job

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _change(client, job, **fields):
    url = reverse("admin:cluster_job_change", args=[job.pk])
    page = client.get(url)
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {}
    for name in form.fields:
        value = form.initial.get(name)
        if isinstance(value, datetime):  # the admin's split date and time widget
            local = timezone.localtime(value)
            data[f"{name}_0"], data[f"{name}_1"] = f"{local:%Y-%m-%d}", f"{local:%H:%M:%S}"
        elif value is not None:
            data[name] = value.pk if hasattr(value, "pk") else value
    data.update(fields)
    data.update(
        {
            "allocations-TOTAL_FORMS": "0",
            "allocations-INITIAL_FORMS": "0",
            "allocations-MIN_NUM_FORMS": "0",
            "allocations-MAX_NUM_FORMS": "1000",
        }
    )
    return client.post(url, data)


def test_a_running_jobs_spec_is_read_only_in_the_admin(
    client, admin_user, make_job, make_node, member, team
):
    job = make_job(owner=member, team=team, total_iterations=1000)
    gpus = list(make_node(gpus=2).gpus.order_by("index"))
    transition_job(job, to=JobState.RUNNING, at=AT)
    set_allocation(job, gpus=gpus[:1], batch_size=job.global_batch_size, at=AT)
    client.force_login(admin_user)
    response = _change(client, job, total_iterations=2, min_gpus=8, max_gpus=8, name="renamed")
    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Job.objects.get(pk=job.pk)
    spec = (stored.total_iterations, stored.min_gpus, stored.name)
    assert spec == (1000, job.min_gpus, "renamed")


def test_a_queued_jobs_owner_and_team_stay_as_submitted(
    client, admin_user, make_job, member, team, other_team
):
    job = make_job(owner=member, team=team, total_iterations=1000)
    client.force_login(admin_user)
    response = _change(client, job, team=other_team.pk, total_iterations=2000)
    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Job.objects.get(pk=job.pk)
    assert (stored.team_id, stored.total_iterations) == (team.pk, 2000)


def test_allocations_cannot_be_added_changed_or_deleted_in_the_admin(
    client, admin_user, make_job, make_node, member, team
):
    job = make_job(owner=member, team=team)
    gpus = list(make_node(gpus=1).gpus.all())
    transition_job(job, to=JobState.RUNNING, at=AT)
    allocation = set_allocation(job, gpus=gpus, batch_size=job.global_batch_size, at=AT)
    client.force_login(admin_user)
    url = reverse("admin:cluster_joballocation_change", args=[allocation.pk])
    assert client.get(url).status_code == 200  # shown
    client.post(url, {"ended_at_0": "2026-03-01", "ended_at_1": "13:00:00"})
    assert JobAllocation.objects.get(pk=allocation.pk).ended_at is None
    delete = reverse("admin:cluster_joballocation_delete", args=[allocation.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert client.get(reverse("admin:cluster_joballocation_add")).status_code == 403


def test_a_job_queued_again_after_running_keeps_its_spec(
    client, admin_user, make_job, make_node, member, team
):
    # a lost node hands a running job back to the queue with its iterations done
    job = make_job(owner=member, team=team, total_iterations=1000)
    gpus = list(make_node(gpus=1).gpus.all())
    transition_job(job, to=JobState.RUNNING, at=AT)
    set_allocation(job, gpus=gpus, batch_size=job.global_batch_size, at=AT)
    Job.objects.filter(pk=job.pk).update(completed_iterations=905.0)
    transition_job(Job.objects.get(pk=job.pk), to=JobState.QUEUED, at=AT)
    client.force_login(admin_user)
    response = _change(client, Job.objects.get(pk=job.pk), total_iterations=2)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Job.objects.get(pk=job.pk).total_iterations == 1000


def test_an_admin_save_writes_only_what_the_form_changed(
    client, admin_user, make_job, member, team, monkeypatch
):
    from cluster.admin import JobAdmin

    job = make_job(owner=member, team=team, total_iterations=1000)
    client.force_login(admin_user)
    real = JobAdmin.save_model

    def a_round_cancels_it_meanwhile(self, request, obj, form, change):
        Job.objects.filter(pk=obj.pk).update(state=JobState.CANCELLED)
        return real(self, request, obj, form, change)

    monkeypatch.setattr(JobAdmin, "save_model", a_round_cancels_it_meanwhile)
    response = _change(client, job, name="renamed")
    assert response.status_code == 302
    stored = Job.objects.get(pk=job.pk)
    assert (stored.name, stored.state) == ("renamed", JobState.CANCELLED)


def test_a_queued_jobs_workload_changed_to_a_near_miss_is_refused(
    client, admin_user, make_job, member, team
):
    job = make_job(owner=member, team=team, workload="resnet50", total_iterations=1000)
    client.force_login(admin_user)

    response = _change(client, job, workload="resnet_50")

    assert response.status_code == 200  # the form again, with the error
    assert (
        response.context["adminform"]
        .form.errors["workload"][0]
        .startswith("'resnet_50' is not a catalog workload; did you mean 'resnet50'?")
    )
    assert Job.objects.get(pk=job.pk).workload == "resnet50"
    # a new workload far from every key is accepted, as at submit
    response = _change(client, job, workload="llama-3b")
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Job.objects.get(pk=job.pk).workload == "llama-3b"


def test_a_queued_jobs_gpu_model_and_workload_edited_in_the_admin_are_read_as_submits_read_them(
    client, admin_user, make_job, member, team
):
    # as the API and the job form store them (``gpu_model_spelling``, ``catalog_name``):
    # the admin stored "a100" as typed, a model no GPU is registered as (the catalog's is
    # A100; the job waited for good), and "ＲｅｓＮｅｔ５０" as a workload of its own
    job = make_job(owner=member, team=team, total_iterations=1000)
    client.force_login(admin_user)
    response = _change(
        client, job, gpu_model="a100", workload="\uff32\uff45\uff53\uff2e\uff45\uff54\uff15\uff10"
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Job.objects.get(pk=job.pk)
    assert (stored.gpu_model, stored.workload) == ("A100", "resnet50")
