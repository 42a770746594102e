"""Every model of the project's apps has an admin, and every registered admin's list renders
for a superuser through the real test client, with rows in it (so each ``list_display``
column is evaluated, not only the empty table). The rows come from the services that write
them in production (a scheduling round, ingestion, accounting) where there is one."""

from datetime import timedelta
from uuid import uuid4

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from cluster.choices import AuditAction
from cluster.models import Budget, BudgetAlert, Gpu, JobAllocation, Node
from cluster.services import record_audit
from scheduling import services as scheduling_services
from scheduling.core.perf_models import load_catalog
from scheduling.models import (
    JobSchedulingState,
    PerfProfile,
    SchedulerSettings,
    SlurmJob,
    WorkloadProfile,
)
from scheduling.workload_profiles import model_to_params
from telemetry.accounting import process_dirty_hours
from telemetry.choices import CarbonSource, JobEventKind
from telemetry.ingest import ingest_batch
from telemetry.models import CarbonIntensity, GpuSample, JobEvent, RefusedEnergyStep

PROJECT_APPS = ("cluster", "scheduling", "telemetry")
# Django's admin refuses models with a composite primary key; the GPU's page shows its samples.
NO_ADMIN = {GpuSample}


def _samples(gpu: Gpu, start, seconds: int) -> list[dict]:
    return [
        {"gpu_uuid": gpu.uuid, "ts": (start + timedelta(seconds=s)).isoformat(), "power_w": 250.0,
         "energy_j": None, "util_pct": 90.0, "mem_used_mib": 2048.0, "temp_c": 60.0,
         "sm_clock_mhz": 1410, "power_limit_w": 400.0}
        for s in range(seconds)
    ]  # fmt: skip


@pytest.fixture
def every_model_has_a_row(make_node, make_job, member, lead, team, admin_user):
    """At least one row of every model of the project's apps."""
    now = timezone.now().replace(microsecond=0)
    node = make_node("node-01", gpus=2)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
    config = SchedulerSettings.load()
    config.policy = "fifo"
    config.save()
    job = make_job(owner=member, team=team, min_gpus=1, max_gpus=1, at=now - timedelta(minutes=5))
    # a round starts the job: round, decision, allocation and the job's scheduling state
    assert scheduling_services.run_scheduling_round(now=now, force=True).applied == 1
    JobSchedulingState.objects.get_or_create(job=job)
    allocation = JobAllocation.objects.get(job=job)
    gpu = allocation.gpus.get()
    # telemetry: samples of an hour that is accounted (rollups, ledger), then a newer batch
    # whose hour is left marked dirty
    hour = (now - timedelta(hours=2)).replace(minute=0, second=0)
    ingest_batch(node, {"samples": _samples(gpu, hour, 61)}, now=now)
    while process_dirty_hours():
        pass
    ingest_batch(node, {"samples": _samples(gpu, now - timedelta(minutes=1), 5)}, now=now)
    JobEvent.objects.create(
        event_id=uuid4(), node=node, job=job, allocation_id=allocation.pk,
        kind=JobEventKind.STARTED, ts=now, received_at=now,
    )  # fmt: skip
    CarbonIntensity.objects.create(
        zone="ES", hour=hour, ci_g_per_kwh=150.0, source=CarbonSource.IMPORTED
    )
    RefusedEnergyStep.objects.create(
        gpu=gpu, ts=now, previous_ts=now - timedelta(seconds=1), previous_energy_j=0.0,
        energy_j=1e9, allowed_j=800.0, charged_j=250.0, detected_at=now,
    )  # fmt: skip
    SlurmJob.objects.create(
        slurm_job_id=4242, job=job, allocation=allocation, nodes="node-01", gpus_per_node=1,
        submitted_at=now,
    )  # fmt: skip
    PerfProfile.objects.create(
        workload="resnet50", gpu_model="A100", version="test", params={}, fitted_at=now
    )
    WorkloadProfile.objects.create(
        workload="resnet50", gpu_model="A100", version=1, prior="catalog resnet50@A100",
        params=model_to_params(load_catalog().get("resnet50", "A100")), n_observations=3,
        jobs=1, created_at=now,
    )  # fmt: skip
    budget = Budget.objects.create(
        team=team, period_start=now - timedelta(days=1), period_end=now + timedelta(days=1),
        energy_limit_kwh=100.0,
    )  # fmt: skip
    BudgetAlert.objects.create(
        budget=budget, team=team, at=now, action=budget.hard_limit_action,
        energy_used_kwh=100.0, energy_limit_kwh=100.0, carbon_used_kg=12.0,
    )  # fmt: skip
    record_audit(actor=admin_user, action=AuditAction.UPDATED, object_type="scheduling_policy")
    Group.objects.create(name="operators")


def _project_models():
    return [m for app in PROJECT_APPS for m in apps.get_app_config(app).get_models()]


def test_every_model_of_the_project_has_an_admin():
    missing = [
        m._meta.label
        for m in _project_models()
        if m not in NO_ADMIN and not admin.site.is_registered(m)
    ]
    assert missing == []


def test_every_registered_changelist_renders_with_rows_for_a_superuser(
    admin_client, every_model_has_a_row
):
    for model in _project_models():
        assert model.objects.exists(), f"the scene has no {model._meta.label}"
    for model in admin.site._registry:
        opts = model._meta
        response = admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
        assert response.status_code == 200, opts.label
        if opts.app_label in PROJECT_APPS:
            assert response.context["cl"].result_count >= 1, opts.label
            # and the first row's page renders (read-only where the data is telemetry)
            first = response.context["cl"].result_list[0]
            page = admin_client.get(
                reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[first.pk])
            )
            assert page.status_code == 200, opts.label


@pytest.mark.parametrize(
    "model_name", ["gpuhour", "gpuminute", "energyledgerentry", "jobevent", "dirtyhour",
                   "carbonintensity"],
)  # fmt: skip
def test_telemetry_data_cannot_be_added_changed_or_deleted_in_the_admin(
    admin_client, every_model_has_a_row, model_name
):
    model = apps.get_model("telemetry", model_name)
    model_admin = admin.site._registry[model]
    request = admin_client.get(reverse(f"admin:telemetry_{model_name}_changelist")).wsgi_request
    first = model.objects.first()
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request, first)
    assert not model_admin.has_delete_permission(request, first)
    assert admin_client.get(reverse(f"admin:telemetry_{model_name}_add")).status_code == 403


def test_the_gpu_page_shows_its_latest_samples(admin_client, every_model_has_a_row):
    gpu = GpuSample.objects.order_by("-ts").first().gpu
    page = admin_client.get(reverse("admin:cluster_gpu_change", args=[gpu.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "Latest 10 samples" in html
    newest = GpuSample.objects.filter(gpu=gpu).order_by("-ts").first()
    assert newest.ts.isoformat(timespec="seconds") in html


@pytest.mark.parametrize(
    ("field", "value"),
    [("min_power_limit_w", ""), ("default_power_limit_w", "abc"), ("max_power_limit_w", "-5")],
)
def test_a_gpu_added_with_a_power_limit_missing_or_refused_is_a_form_error(
    admin_client, field, value
):
    # (clean() compared the missing limit, None, with the others: a TypeError, a 500)
    node = Node.objects.create(name="node-09", switch_label="switch-1", gpu_model="A100")
    data = {
        "node": node.pk, "index": "0", "uuid": "GPU-added", "model": "A100", "memory_mb": "40960",
        "default_power_limit_w": "300", "min_power_limit_w": "100", "max_power_limit_w": "400",
        "power_limit_w": "250", "supported_sm_clocks_mhz": "", "sm_clock_mhz": "",
    }  # fmt: skip

    response = admin_client.post(reverse("admin:cluster_gpu_add"), {**data, field: value})

    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    assert not Gpu.objects.filter(uuid="GPU-added").exists()


def test_the_admin_index_spells_every_models_plural(admin_client):
    # a new user's walkthrough: "Carbon intensitys", "Energy ledger entrys" on /admin/
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert "Carbon intensities" in page and "Energy ledger entries" in page
    assert "ys<" not in page


@pytest.mark.parametrize(
    ("typed", "stored"),
    [("a100", "A100"), ("NVIDIA A100-SXM4-40GB", "A100"), ("nvidia tesla t4", "T4")],
)
def test_a_gpu_added_in_the_admin_is_stored_under_the_catalogs_model_key(
    admin_client, typed, stored
):
    # as the agents' registration and the admin GPU API store it: an "a100" typed here was
    # a GPU model of its own beside the catalog's A100 (estimated, never given A100 jobs)
    node = Node.objects.create(name="node-09", switch_label="switch-1", gpu_model="A100")
    data = {
        "node": node.pk, "index": "0", "uuid": "GPU-added", "model": typed, "memory_mb": "40960",
        "default_power_limit_w": "70", "min_power_limit_w": "60", "max_power_limit_w": "70",
        "power_limit_w": "", "supported_sm_clocks_mhz": "", "sm_clock_mhz": "",
    }  # fmt: skip

    response = admin_client.post(reverse("admin:cluster_gpu_add"), data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Gpu.objects.get(uuid="GPU-added").model == stored


def test_a_gpu_edited_on_its_nodes_admin_page_is_stored_under_the_catalogs_model_key(
    admin_client, make_node
):
    # a GPU with no history yet may change model; its node's page stored it as typed
    node = make_node("node-09", gpus=1)
    gpu = node.gpus.get()
    data = {
        "name": node.name, "switch_label": node.switch_label, "rack_label": node.rack_label,
        "gpu_model": node.gpu_model, "status": node.status,
        "gpus-TOTAL_FORMS": "1", "gpus-INITIAL_FORMS": "1",
        "gpus-MIN_NUM_FORMS": "0", "gpus-MAX_NUM_FORMS": "1000",
        "gpus-0-id": gpu.pk, "gpus-0-node": node.pk, "gpus-0-index": gpu.index,
        "gpus-0-uuid": gpu.uuid, "gpus-0-model": "nvidia tesla t4",
        "gpus-0-memory_mb": gpu.memory_mb, "gpus-0-power_limit_w": "", "gpus-0-sm_clock_mhz": "",
    }  # fmt: skip

    response = admin_client.post(reverse("admin:cluster_node_change", args=[node.pk]), data)

    assert response.status_code == 302, response.content.decode()[-2000:]
    gpu.refresh_from_db()
    assert gpu.model == "T4"


@pytest.mark.parametrize(
    ("url_name", "query"),
    [
        ("admin:cluster_team_changelist", "created_at__year=0"),
        ("admin:cluster_team_changelist", "created_at__year=99999"),
        ("admin:cluster_job_changelist", "submitted_at__iso_year=0"),
        ("admin:cluster_budget_changelist", "period_start__year__gte=0"),
        ("admin:telemetry_gpuminute_changelist", "minute__year__lt=99999"),
        ("admin:auth_user_changelist", "date_joined__year=10000"),
    ],
)
def test_a_year_outside_1_to_9999_in_an_admin_list_is_a_bad_lookup_not_a_500(
    admin_client, every_model_has_a_row, url_name, query
):
    # A year no datetime has raised ValueError while the list counted its rows: a 500 on
    # every list, the project's and Django's own (a live probe). It is answered as Django
    # answers any lookup it cannot use: back to the list without it, flagged ``?e=1``.
    url = reverse(url_name)
    response = admin_client.get(f"{url}?{query}")
    assert response.status_code == 302
    assert response.url == f"{url}?e=1"
    assert admin_client.get(response.url).status_code == 200


@pytest.mark.parametrize(
    ("url_name", "query"),
    [
        ("admin:cluster_job_add", "team=x"),
        ("admin:cluster_job_add", "owner=x"),
        ("admin:cluster_membership_add", "user=x"),
        ("admin:cluster_budget_add", "period_start=x"),
        ("admin:cluster_budget_add", "period_start=2026-01-01%2000:00"),
    ],
)
def test_an_add_page_prefilled_from_its_query_with_a_value_its_field_cannot_read_renders(
    admin_client, every_model_has_a_row, url_name, query
):
    # The admin fills an add form from the query string (?team=3); a value the field cannot
    # read (a team "x", a period start "x" or given as text) raised while the page rendered:
    # a 500 (a live probe). Such a value is left out; one the field reads is kept.
    response = admin_client.get(f"{reverse(url_name)}?{query}")
    assert response.status_code == 200
    field, _, value = query.partition("=")
    initial = response.context["adminform"].form.initial
    if value == "x":
        assert field not in initial
    else:
        assert initial[field].isoformat() == "2026-01-01T00:00:00"  # read as a time


@pytest.mark.parametrize(
    ("url_name", "action"),
    [
        ("admin:cluster_job_changelist", "cancel_jobs"),
        ("admin:cluster_node_changelist", "issue_agent_tokens"),
        ("admin:cluster_gpu_changelist", "retire"),
        ("admin:cluster_team_changelist", "delete_selected"),
        ("admin:auth_user_changelist", "delete_selected"),
    ],
)
def test_an_admin_action_on_ids_that_are_not_ids_does_nothing_and_says_so(
    admin_client, every_model_has_a_row, url_name, action
):
    # A forged or mangled selection (``_selected_action=x``, beside a real id or alone)
    # raised ValueError while the action read its rows: a 500 (a live probe). It is refused
    # as a selection of nothing is: back to the list with a warning, nothing done.
    url = reverse(url_name)
    model = admin_client.get(url).context["cl"].model
    first = model.objects.order_by("pk").first()
    before = model.objects.count()
    response = admin_client.post(
        url, {"action": action, "_selected_action": [str(first.pk), "x"], "index": "0"}
    )
    assert response.status_code == 302
    assert model.objects.count() == before
    shown = [str(m) for m in admin_client.get(response.url).context["messages"]]
    assert any("not ids" in m for m in shown), shown


@pytest.mark.parametrize(
    ("url_name", "data"),
    [
        ("admin:cluster_membership_add", {"user": "x", "team": "x", "role": "member"}),
        ("admin:cluster_job_add", {"owner": "x", "team": "1e400", "name": "j"}),
    ],
)
def test_an_add_form_posted_with_text_in_an_autocomplete_field_shows_its_errors(
    admin_client, every_model_has_a_row, url_name, data
):
    # The form is invalid and shown again; its autocomplete widget looked the posted "x"
    # up as an id while the page rendered: ValueError, a 500 (a live probe).
    response = admin_client.post(reverse(url_name), data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "team" in errors
