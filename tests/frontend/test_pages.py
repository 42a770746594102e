"""Pages and JSON endpoints through Django's test client, on the real PostgreSQL: who may see
and change what (owner/lead, member, outsider, admin), per-field errors, nothing stored on
bad input."""

import json
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from cluster import services
from cluster.choices import JobState, NodeStatus
from cluster.models import AuditEntry, Budget, Job, Node
from cluster.workloads import perf_catalog
from scheduling.core.types import J_PER_KWH, GpuConfig
from scheduling.services import run_scheduling_round
from telemetry.carbon import static_mean_g_per_kwh

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_for(client):
    def make(user):
        client.force_login(user)
        return client

    return make


@pytest.fixture
def budget(team):
    now = timezone.now()
    return Budget.objects.create(
        team=team,
        period_start=now - timedelta(days=1),
        period_end=now + timedelta(days=1),
        energy_limit_kwh=10.0,
        warn_fraction=0.8,
    )


def budget_post(team, **overrides):
    now = timezone.now()
    data = {
        "team": team.pk,
        "period_start": (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"),
        "period_end": (now + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"),
        "energy_limit_kwh": "25",
        "carbon_limit_kg": "",
        "hard_limit_action": "hold_queue",
        "warn_percent": "75",
    }
    data.update(overrides)
    return data


# --- login and navigation -------------------------------------------------------------------


def test_anonymous_visitors_are_sent_to_the_login_page(client):
    for name in ("frontend:dashboard", "frontend:job-list", "frontend:budget-list"):
        response = client.get(reverse(name))
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")


def test_navigation_offers_admin_pages_only_to_admins(client_for, member, admin_user):
    page = client_for(member).get(reverse("frontend:dashboard")).content.decode()
    assert 'href="/reports/"' not in page and 'href="/nodes/"' not in page
    assert 'data-role="member"' in page
    page = client_for(admin_user).get(reverse("frontend:dashboard")).content.decode()
    assert 'href="/reports/"' in page and 'href="/nodes/"' in page
    assert 'data-role="admin"' in page


def test_login_page_is_the_styled_one(client):
    page = client.get("/accounts/login/").content.decode()
    assert "frontend/wattflow.css" in page and 'id="id_username"' in page


@pytest.mark.parametrize("name", ["frontend:reports", "frontend:reports-csv", "frontend:nodes"])
def test_admin_pages_refuse_leads_and_members(client_for, lead, member, name):
    assert client_for(lead).get(reverse(name)).status_code == 403
    assert client_for(member).get(reverse(name)).status_code == 403


# --- jobs -----------------------------------------------------------------------------------


def test_member_submits_a_job_and_it_is_queued_for_their_team(client_for, member, team):
    response = client_for(member).post(
        reverse("frontend:job-new"),
        {
            "name": "bert-1",
            "team": team.pk,
            "workload": "bert",
            "gpus": 2,
            "max_gpus": 4,
            "batch_size": 64,
            "iterations": 500,
            # A member may rank their own work below the default, not above it (priority
            # orders every team's jobs; test_member_priority.py): this was 3 before.
            "priority": -3,
        },
    )
    job = Job.objects.get(name="bert-1")
    assert response.status_code == 302
    assert response["Location"] == reverse("frontend:job-detail", args=[job.pk])
    assert (job.owner, job.team, job.workload, job.state) == (member, team, "bert", "queued")
    assert (job.min_gpus, job.max_gpus, job.global_batch_size, job.total_iterations) == (
        2,
        4,
        64,
        500,
    )
    assert job.priority == -3


def test_a_job_for_a_team_the_user_is_not_in_is_refused_per_field(
    client_for, outsider, team, other_team
):
    response = client_for(outsider).post(
        reverse("frontend:job-new"),
        {"name": "x", "team": team.pk, "workload": "", "gpus": 0, "batch_size": 1},
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert errors["team"] == [
        "Select a valid choice. That choice is not one of the available choices."
    ]
    assert errors["workload"] == ["This field is required."]
    assert errors["gpus"] == ["Ensure this value is greater than or equal to 1."]
    assert errors["iterations"] == ["This field is required."]
    assert not Job.objects.exists()


def test_an_out_of_range_priority_is_a_field_error_and_stores_nothing(client_for, member, team):
    response = client_for(member).post(
        reverse("frontend:job-new"),
        {
            "name": "neg",
            "team": team.pk,
            "workload": "resnet50",
            "gpus": 1,
            "max_gpus": 1,
            "batch_size": 64,
            "iterations": 10,
            "priority": 101,
        },
    )
    assert response.status_code == 400
    assert response.context["form"].errors["priority"] == [
        "Ensure this value is less than or equal to 100."
    ]
    assert not Job.objects.exists()


def test_prediction_uses_the_perf_model_and_the_grid_intensity_now(client_for, member, make_node):
    make_node("node-01", gpus=4)
    response = client_for(member).get(
        reverse("frontend:job-predict"),
        {"workload": "resnet50", "gpus": 2, "batch_size": 128, "iterations": 1000},
    )
    body = response.json()
    model = perf_catalog().get("resnet50", "A100")
    cfg = GpuConfig(n_gpus=2, global_batch=128)
    energy_j = 1000 * 2 * model.power_w(cfg) * model.iter_time_s(cfg)
    ci = static_mean_g_per_kwh(settings.TELEMETRY_CARBON_ZONE)  # no stored hour: fallback
    assert response.status_code == 200
    assert (body["gpu_model"], body["gpus"], body["iterations"]) == ("A100", 2, 1000)
    assert body["duration_s"] == pytest.approx(1000 * model.iter_time_s(cfg))
    assert body["energy_j"] == pytest.approx(energy_j)
    assert body["energy_kwh"] == pytest.approx(energy_j / J_PER_KWH)
    assert (body["ci_g_per_kwh"], body["ci_estimated"]) == (pytest.approx(ci), True)
    assert body["co2_g"] == pytest.approx(energy_j / J_PER_KWH * ci)


def test_prediction_with_bad_input_is_a_400_per_field(client_for, member):
    response = client_for(member).get(
        reverse("frontend:job-predict"), {"workload": "resnet50", "gpus": "x", "iterations": 0}
    )
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "gpus": ["Enter a whole number."],
        "batch_size": ["This field is required."],
        "iterations": ["Ensure this value is greater than or equal to 1."],
    }


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"iterations": str(10**400)}, "iterations"),  # overflowed the prediction: a 500
        ({"batch_size": str(10**400)}, "batch_size"),
        ({"gpus": "4", "batch_size": "2"}, "batch_size"),
        ({"gpus": "4", "max_gpus": "1"}, "max_gpus"),
    ],
)
def test_prediction_refuses_what_the_submit_refuses_whatever_the_team(
    client_for, member, query, field
):
    base = {"workload": "resnet50", "gpus": "1", "batch_size": "256", "iterations": "100"}
    response = client_for(member).get(reverse("frontend:job-predict"), {**base, **query})
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]


def test_prediction_for_a_job_that_could_never_run_gives_the_submits_reasons(
    client_for, member, team, other_team, make_node
):
    # given a cluster of 4 A100s and the member's team
    make_node("node-01", gpus=4)
    query = {"workload": "resnet50", "gpus": 8, "batch_size": 128, "iterations": 1000}

    # when the form asks for a prediction of an 8-GPU job for that team
    response = client_for(member).get(reverse("frontend:job-predict"), {**query, "team": team.pk})

    # then it is the submit's refusal, beside the GPU field, not figures for a run that
    # cannot happen
    assert response.status_code == 400
    (message,) = response.json()["errors"]["gpus"]
    assert "The cluster has 4 GPUs" in message and "could never start" in message
    # a fitting job of the same team gets its figures
    fits = client_for(member).get(
        reverse("frontend:job-predict"), {**query, "gpus": 4, "team": team.pk}
    )
    assert fits.status_code == 200 and fits.json()["gpus"] == 4
    # a team the member cannot submit to is a field error, and says nothing of that team
    foreign = client_for(member).get(
        reverse("frontend:job-predict"), {**query, "gpus": 4, "team": other_team.pk}
    )
    assert foreign.status_code == 400
    assert list(foreign.json()["errors"]) == ["team"]


def test_job_list_shows_only_visible_jobs_and_filters(
    client_for, member, outsider, team, other_team, make_job
):
    mine = make_job(owner=member, team=team, name="vision-a")
    make_job(
        owner=member,
        team=team,
        name="vision-b",
        workload="bert",
        global_batch_size=64,
        min_batch_size=64,
        max_batch_size=64,
    )
    make_job(owner=outsider, team=other_team, name="language-a")
    client = client_for(member)
    listed = [j.name for j in client.get(reverse("frontend:job-list")).context["page_obj"]]
    assert sorted(listed) == ["vision-a", "vision-b"]
    filtered = client.get(reverse("frontend:job-list"), {"workload": "resnet50", "state": "queued"})
    assert [j.pk for j in filtered.context["page_obj"]] == [mine.pk]


@pytest.mark.parametrize(
    "query, field",
    [
        ({"state": "sleeping"}, "state"),
        ({"team": "abc"}, "team"),
        ({"workload": "never-submitted"}, "workload"),
        ({"q": "x" * 101}, "q"),
    ],
)
def test_a_filter_the_job_list_cannot_apply_is_a_400_beside_its_field(
    client_for, member, team, make_job, query, field
):
    # It was a 200 reading "No jobs match." (a bookmarked filter of a state that was renamed,
    # a team the user left): as if the filter had run and found nothing.
    make_job(owner=member, team=team, name="vision-a")
    response = client_for(member).get(reverse("frontend:job-list"), query)

    assert response.status_code == 400
    assert list(response.context["page_obj"]) == []
    assert response.context["form"].errors[field]
    page = response.content.decode()
    assert 'class="errorlist"' in page
    assert "No jobs match." not in page


def test_a_team_filter_of_another_team_lists_nothing_of_it(
    client_for, member, outsider, team, other_team, make_job
):
    make_job(owner=outsider, team=other_team, name="language-a")
    response = client_for(member).get(reverse("frontend:job-list"), {"team": other_team.pk})

    assert response.status_code == 400
    assert b"language-a" not in response.content


def test_job_detail_is_404_outside_the_users_teams(client_for, member, outsider, team, make_job):
    job = make_job(owner=member, team=team)
    assert (
        client_for(outsider).get(reverse("frontend:job-detail", args=[job.pk])).status_code == 404
    )


def test_job_detail_shows_the_hints_the_submitter_gave(client_for, member, team, make_job):
    job = make_job(owner=member, team=team, workload="my-llm")
    type(job).objects.filter(pk=job.pk).update(
        resembles="gpt2", param_count=7_000_000_000, per_gpu_batch_size=8
    )
    page = client_for(member).get(reverse("frontend:job-detail", args=[job.pk])).content.decode()
    # (the API returned them; the page showed none)
    assert '<dd id="hint-resembles">gpt2</dd>' in page
    assert '<dd id="hint-params">7,000,000,000</dd>' in page
    assert '<dd id="hint-per-gpu-batch">8</dd>' in page


def test_job_detail_shows_allocations_and_pending_reason(
    client_for, member, team, make_job, make_node
):
    node = make_node("node-01", gpus=2)
    job = make_job(owner=member, team=team, name="r")
    Job.objects.filter(pk=job.pk).update(
        pending_reason_code="no_free_block", pending_reason="Waiting for 4 GPUs."
    )
    page = client_for(member).get(reverse("frontend:job-detail", args=[job.pk]))
    assert "Waiting for 4 GPUs." in page.content.decode()
    assert page.context["timeline"] is None
    services.start_job(job, gpus=list(node.gpus.all()), batch_size=256, at=timezone.now())
    page = client_for(member).get(reverse("frontend:job-detail", args=[job.pk]))
    assert [a["gpus"] for a in page.context["allocations"]] == [2]
    assert [a["placement"] for a in page.context["allocations"]] == ["node-01: 0,1"]
    # started by hand, not by a round: the table says so rather than inventing a reason
    assert [a["why"] for a in page.context["allocations"]] == ["not made by a recorded round"]
    bars = page.context["timeline"]["data"][0]
    assert (bars["y"], bars["text"]) == (["2 GPU"], ["node-01: 0,1 · batch 256 · default clock"])


def test_an_outsider_cannot_cancel_and_the_owner_can(client_for, member, outsider, team, make_job):
    job = make_job(owner=member, team=team)
    url = reverse("frontend:job-cancel", args=[job.pk])
    assert client_for(outsider).post(url).status_code == 404
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    client_for(member).post(url)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


# --- budgets --------------------------------------------------------------------------------


def test_lead_creates_a_budget_and_the_audit_log_records_it(client_for, lead, team):
    response = client_for(lead).post(reverse("frontend:budget-new"), budget_post(team))
    assert response.status_code == 302
    budget = Budget.objects.get(team=team)
    assert (budget.energy_limit_kwh, budget.carbon_limit_kg, budget.warn_fraction) == (
        25.0,
        None,
        0.75,
    )
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.object_type, entry.object_id) == (
        lead,
        "created",
        "budget",
        str(budget.pk),
    )
    assert entry.before is None
    assert entry.after["energy_limit_kwh"] == 25.0 and entry.after["warn_fraction"] == 0.75


def test_lead_edits_a_budget_with_before_and_after_in_the_audit_log(client_for, lead, budget):
    # (the form shows the period to the minute, as a browser sends it back untouched)
    shown = {
        name: getattr(budget, name).strftime("%Y-%m-%dT%H:%M")
        for name in ("period_start", "period_end")
    }
    response = client_for(lead).post(
        reverse("frontend:budget-edit", args=[budget.pk]),
        budget_post(budget.team, energy_limit_kwh="40", carbon_limit_kg="3", **shown),
    )
    assert response.status_code == 302
    entry = AuditEntry.objects.get()
    assert entry.action == "updated"
    # the period the lead left alone keeps its seconds (it was cut to the minute)
    assert entry.changed_fields == ["carbon_limit_kg", "energy_limit_kwh", "warn_fraction"]
    stored = Budget.objects.get(pk=budget.pk)
    assert (stored.period_start, stored.period_end) == (budget.period_start, budget.period_end)
    assert (entry.before["energy_limit_kwh"], entry.after["energy_limit_kwh"]) == (10.0, 40.0)
    assert (entry.before["carbon_limit_kg"], entry.after["carbon_limit_kg"]) == (None, 3.0)


@pytest.mark.parametrize("persona", ["member", "outsider"])
def test_members_and_outsiders_cannot_edit_a_budget(client_for, personas, budget, persona):
    client = client_for(personas[persona])
    url = reverse("frontend:budget-edit", args=[budget.pk])
    response = client.post(url, budget_post(budget.team, energy_limit_kwh="999"))
    assert response.status_code == (403 if persona == "member" else 404)
    budget.refresh_from_db()
    assert budget.energy_limit_kwh == 10.0
    assert not AuditEntry.objects.exists()


def test_member_cannot_create_a_budget(client_for, member, team):
    response = client_for(member).post(reverse("frontend:budget-new"), budget_post(team))
    assert response.status_code == 403
    assert not Budget.objects.exists()


def test_a_bad_budget_shows_field_errors_and_stores_nothing(client_for, lead, team):
    response = client_for(lead).post(
        reverse("frontend:budget-new"),
        budget_post(
            team,
            energy_limit_kwh="",
            period_end=(timezone.now() - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M"),
            warn_percent="120",
        ),
    )
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert errors["warn_percent"] == ["Ensure this value is less than or equal to 100."]
    assert not Budget.objects.exists()
    response = client_for(lead).post(
        reverse("frontend:budget-new"),
        budget_post(
            team,
            energy_limit_kwh="",
            period_end=(timezone.now() - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M"),
        ),
    )
    errors = response.context["form"].errors
    assert errors["energy_limit_kwh"] == ["Set an energy limit, a carbon limit, or both."]
    assert errors["period_end"] == ["Must be after period_start."]
    assert not Budget.objects.exists() and not AuditEntry.objects.exists()


def test_budget_list_shows_progress_and_edit_links_by_role(client_for, lead, member, budget):
    rows = client_for(member).get(reverse("frontend:budget-list")).context["rows"]
    assert [(r["id"], r["can_edit"]) for r in rows] == [(budget.pk, False)]
    (limit,) = rows[0]["limits"]
    assert (limit["kind"], limit["used"], limit["limit"], limit["soft_limit"]) == (
        "energy",
        0.0,
        10.0,
        8.0,
    )
    rows = client_for(lead).get(reverse("frontend:budget-list")).context["rows"]
    assert rows[0]["can_edit"] is True


def _whatif_data(team, **fields) -> dict:
    """The what-if form for a period from an hour ago to 23 hours ahead, with ``fields``."""
    now = timezone.now()
    return {
        "team": team.pk,
        "kind": "energy",
        "limit": "50",
        "period_start": (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
        "period_end": (now + timedelta(hours=23)).strftime("%Y-%m-%dT%H:%M"),
        **fields,
    }


def test_whatif_replays_the_team_queue_and_returns_the_figure(
    client_for, lead, member, team, make_job, make_node
):
    now = timezone.now()
    node = make_node("node-01", gpus=8)
    # the what-if sees the cluster as the round does: only nodes that heart-beat recently
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
    make_job(owner=member, team=team, total_iterations=2000)
    data = _whatif_data(team, proposed="50", done=json.dumps([[25.0, None]]))
    response = client_for(lead).post(reverse("frontend:budget-whatif"), data)
    body = response.json()
    assert response.status_code == 200
    assert (body["n_jobs"], body["n_finished"], body["used"]) == (1, 1, 0.0)
    # it cannot beat the job's fastest configuration (4 GPUs, smallest batch, full clock)
    model = perf_catalog().get("resnet50", "A100")
    fastest_s = 2000 * model.iter_time_s(GpuConfig(n_gpus=4, global_batch=128))
    assert fastest_s <= body["avg_jct_s"] < 86400.0
    assert body["points"] == [[25.0, None], [50.0, body["avg_jct_s"]]]
    assert body["figure"]["data"][0]["x"] == [25.0, 50.0]
    # members may not run it (it is part of editing a budget)
    refused = client_for(member).post(reverse("frontend:budget-whatif"), data)
    assert refused.status_code == 400
    assert refused.json()["errors"]["team"][0].startswith("Select a valid choice")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("done", "[[NaN, null]]"),
        ("done", "[[1e999, 5]]"),
        ("done", "[[1" + "0" * 400 + ", 5]]"),  # an integer past any float: was a 500
        ("done", "[[10, 1" + "0" * 400 + "]]"),
        ("done", "[[10, -5]]"),
        ("done", "[[true, 5]]"),
        ("done", "[" * 50_000 + "]" * 50_000),  # RecursionError in the decoder: was a 500
        ("proposed", "nan"),
        ("proposed", "inf"),
        ("proposed", "-1"),
    ],
)
def test_whatif_refuses_a_point_or_proposal_that_is_not_a_finite_amount(
    client_for, lead, team, field, value
):
    # NaN came back as bare NaN (not JSON, the page's parser failed) and a negative
    # average JCT from the page stood in the figure for the replay's (found by probing).
    data = _whatif_data(team, **{field: value})
    response = client_for(lead).post(reverse("frontend:budget-whatif"), data)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]


@pytest.mark.parametrize(
    ("kind", "limit", "message"),
    [
        # a denormal limit answered 200 with a replay that ran nothing, for a budget that
        # could not be saved: the what-if takes the limits a budget takes, with its messages
        ("energy", "5e-324", "Must be at least 0.001 kWh (1 Wh)."),
        ("energy", "0.0009", "Must be at least 0.001 kWh (1 Wh)."),
        ("carbon", "1e-300", "Must be at least 0.001 kg CO2e (1 g)."),
        ("energy", "0", "Must be positive."),
        ("carbon", "-1", "Must be positive."),
        ("energy", "2e9", "Ensure this value is less than or equal to 1000000000.0."),
    ],
)
def test_whatif_refuses_a_limit_the_budget_could_not_have(
    client_for, lead, member, team, make_job, make_node, kind, limit, message
):
    node = make_node("node-01", gpus=8)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now())
    make_job(owner=member, team=team, total_iterations=2000)
    data = _whatif_data(team, kind=kind, limit=limit)

    response = client_for(lead).post(reverse("frontend:budget-whatif"), data)

    assert response.status_code == 400
    assert response.json() == {"errors": {"limit": [message]}}
    # the budget form says the same of the same limit
    field = "energy_limit_kwh" if kind == "energy" else "carbon_limit_kg"
    budget = Budget(team=team, period_start=timezone.now(), period_end=timezone.now())
    setattr(budget, field, float(limit))
    with pytest.raises(ValidationError) as refused:
        budget.full_clean()
    assert refused.value.message_dict[field] == [message]


def test_whatif_takes_the_smallest_limit_a_budget_takes(
    client_for, lead, member, team, make_job, make_node
):
    node = make_node("node-01", gpus=8)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now())
    make_job(owner=member, team=team, total_iterations=2000)
    data = _whatif_data(team, limit="0.001")

    body = client_for(lead).post(reverse("frontend:budget-whatif"), data).json()

    assert (body["budget"], body["n_jobs"]) == (0.001, 1)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("period_start", "0001-01-01T00:00", "Must be on or after 2000-01-01 00:00 UTC."),
        ("period_end", "9999-12-31T23:59", "Must be on or before 2100-01-01 00:00 UTC."),
    ],
)
def test_whatif_refuses_a_period_the_budget_could_not_have(
    client_for, lead, team, make_node, field, value, message
):
    # A period to year 9999 was simulated (10 s a point, six points a sweep) for a budget
    # the form refuses to save (found by probing the what-if page).
    Node.objects.filter(pk=make_node("node-01", gpus=1).pk).update(last_heartbeat_at=timezone.now())
    data = _whatif_data(team, **{field: value})

    response = client_for(lead).post(reverse("frontend:budget-whatif"), data)

    assert response.status_code == 400
    assert response.json()["errors"] == {field: [message]}
    assert not Budget.objects.exists()


def test_whatif_refuses_a_period_that_has_ended(
    client_for, lead, member, team, make_node, make_job
):
    # The replay starts now: an ended period was stretched to end 5 minutes from now, and
    # its next periods renewed at that stretched length, so a 50 kWh-a-day budget that ended
    # ten days ago was replayed as 50 kWh every eleven days (a far longer JCT than it gives).
    Node.objects.filter(pk=make_node("node-01", gpus=1).pk).update(last_heartbeat_at=timezone.now())
    make_job(owner=member, team=team)
    now = timezone.now()
    data = _whatif_data(
        team,
        period_start=(now - timedelta(days=11)).strftime("%Y-%m-%dT%H:%M"),
        period_end=(now - timedelta(days=10)).strftime("%Y-%m-%dT%H:%M"),
    )

    response = client_for(lead).post(reverse("frontend:budget-whatif"), data)

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "period_end": [
            "This period has ended: the what-if replays the queue from now, "
            "so it needs a period that has not."
        ]
    }


def test_whatif_of_a_later_period_replays_it_as_if_it_started_now(
    client_for, lead, member, team, make_node, make_job
):
    # (a day's budget a week ahead was replayed from now to its end: its limit spread over
    # eight days, renewed every eight, as if the team had an eighth of it a day)
    Node.objects.filter(pk=make_node("node-01", gpus=1).pk).update(last_heartbeat_at=timezone.now())
    make_job(owner=member, team=team, total_iterations=20_000)
    now = timezone.now()
    at = lambda t: t.strftime("%Y-%m-%dT%H:%M")  # noqa: E731
    later = _whatif_data(
        team, limit="1", period_start=at(now + timedelta(days=7)),
        period_end=at(now + timedelta(days=8)),
    )  # fmt: skip
    today = _whatif_data(
        team, limit="1", period_start=at(now), period_end=at(now + timedelta(days=1))
    )

    answer = client_for(lead).post(reverse("frontend:budget-whatif"), later).json()
    same = client_for(lead).post(reverse("frontend:budget-whatif"), today).json()

    assert answer["note"].startswith("This period starts later")
    assert same["note"] == ""
    assert answer["n_finished"] == same["n_finished"] == 1
    assert answer["raw_avg_jct_s"] == pytest.approx(same["raw_avg_jct_s"], rel=0.01)


# --- reports and nodes ----------------------------------------------------------------------


def test_report_period_errors_are_per_field(client_for, admin_user):
    response = client_for(admin_user).get(
        reverse("frontend:reports-csv"), {"start": "2026-05-02", "end": "2026-05-01"}
    )
    assert response.status_code == 400
    assert response.content.decode() == "end: Must not be before the start."
    # a date the day after which is no date (9999-12-31) was a 500, on the page and the CSV
    for name in ("frontend:reports-csv", "frontend:reports"):
        response = client_for(admin_user).get(
            reverse(name), {"start": "9999-12-01", "end": "9999-12-31"}
        )
        assert response.status_code == 400
    assert "Must lie between 2000-01-01 and 2099-12-31." in response.content.decode()
    # the end is inclusive: 366 days are allowed, 367 are not (they were)
    url = reverse("frontend:reports-csv")
    year = {"start": "2026-01-01", "end": "2027-01-01"}
    assert client_for(admin_user).get(url, year).status_code == 200
    longer = client_for(admin_user).get(url, {**year, "end": "2027-01-02"})
    assert longer.status_code == 400
    assert longer.content.decode() == "end: A report covers at most 366 days."


def test_admin_drains_and_undrains_a_node_and_both_are_audited(client_for, admin_user, make_node):
    node = make_node("node-01", gpus=1)
    client = client_for(admin_user)
    response = client.post(reverse("frontend:node-drain", args=[node.pk]), follow=True)
    assert [str(m) for m in response.context["messages"]] == ["Node node-01 is draining now."]
    node.refresh_from_db()
    assert node.status == NodeStatus.DRAINING
    # draining twice: the conditional update changes nothing and says so
    response = client.post(reverse("frontend:node-drain", args=[node.pk]), follow=True)
    assert [str(m) for m in response.context["messages"]] == [
        "node node-01 is draining, not healthy; nothing changed"
    ]
    client.post(reverse("frontend:node-undrain", args=[node.pk]))
    node.refresh_from_db()
    assert node.status == NodeStatus.HEALTHY
    assert [(e.before["status"], e.after["status"]) for e in AuditEntry.objects.order_by("id")] == [
        ("healthy", "draining"),
        ("draining", "healthy"),
    ]


def test_a_lead_cannot_drain_a_node(client_for, lead, make_node):
    node = make_node("node-01", gpus=1)
    assert client_for(lead).post(reverse("frontend:node-drain", args=[node.pk])).status_code == 403
    assert Node.objects.get(pk=node.pk).status == NodeStatus.HEALTHY
    assert not AuditEntry.objects.exists()


def test_dashboard_shows_the_latest_real_round_with_only_visible_decisions(
    client_for, member, outsider, team, other_team, make_job, make_node
):
    # given a 4-GPU node and one job per team, the larger one unable to fit
    node = make_node("node-01", gpus=4)
    mine = make_job(owner=member, team=team, name="vision-fits", min_gpus=4, max_gpus=4)
    theirs = make_job(
        owner=outsider, team=other_team, name="language-waits", min_gpus=4, max_gpus=4
    )
    now = timezone.now()  # (after the submits: a round leaves out jobs submitted after it)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
    # when the live scheduler runs a real round (FIFO: the older job starts)
    result = run_scheduling_round(now=now, policy="fifo", force=True)
    assert result.ran
    # then each user's dashboard shows that round with their own team's job only
    for user, job, action in ((member, mine, "start"), (outsider, theirs, "wait")):
        latest = client_for(user).get(reverse("frontend:dashboard-data")).json()["latest_round"]
        assert (latest["round_id"], latest["policy"]) == (result.round_id, "fifo")
        assert [(d["job_id"], d["action"]) for d in latest["decisions"]] == [(job.pk, action)]
    waiting = client_for(outsider).get(reverse("frontend:dashboard-data")).json()
    assert waiting["latest_round"]["decisions"][0]["reason_code"] != ""


def test_a_budget_changed_since_its_page_was_opened_is_not_saved_over(
    client_for, lead, admin_user, budget
):
    # given the lead's edit page, opened while the limit was 10 kWh
    url = reverse("frontend:budget-edit", args=[budget.pk])
    page = client_for(lead).get(url)
    seen = page.context["form"].initial["seen"]
    shown = {
        name: getattr(budget, name).strftime("%Y-%m-%dT%H:%M")
        for name in ("period_start", "period_end")
    }
    # when an admin raises the limit to 30 kWh, and the lead then saves the soft limit
    # with the page as it was (its 10 kWh in the form)
    services.save_budget(budget, actor=admin_user, changes={"energy_limit_kwh": 30.0})
    stale = budget_post(budget.team, energy_limit_kwh="10", warn_percent="50", seen=seen, **shown)
    response = client_for(lead).post(url, stale)

    # then nothing is saved over the admin's change, and the page says why
    assert response.status_code == 400
    assert "Someone changed this budget since you opened it" in response.content.decode()
    stored = Budget.objects.get(pk=budget.pk)
    assert (stored.energy_limit_kwh, stored.warn_fraction) == (30.0, 0.8)
    # and from the page opened afresh the save goes through
    fresh = client_for(lead).get(url).context["form"].initial["seen"]
    again = client_for(lead).post(url, {**stale, "energy_limit_kwh": "30", "seen": fresh})
    assert again.status_code == 302
    assert Budget.objects.get(pk=budget.pk).warn_fraction == 0.5


def test_budget_changes_in_the_django_admin_are_audited_too(client_for, admin_user, budget):
    client = client_for(admin_user)
    url = reverse("admin:cluster_budget_change", args=[budget.pk])
    response = client.post(
        url,
        {
            "team": budget.team.pk,
            "period_start_0": budget.period_start.strftime("%Y-%m-%d"),
            "period_start_1": budget.period_start.strftime("%H:%M:%S"),
            "period_end_0": budget.period_end.strftime("%Y-%m-%d"),
            "period_end_1": budget.period_end.strftime("%H:%M:%S"),
            "energy_limit_kwh": "11",
            "carbon_limit_kg": "",
            "warn_fraction": "0.8",
            "hard_limit_action": "hold_queue",
            "created_at_0": budget.created_at.strftime("%Y-%m-%d"),
            "created_at_1": budget.created_at.strftime("%H:%M:%S"),
        },
    )
    assert response.status_code == 302
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.changed_fields) == (
        admin_user,
        "updated",
        ["energy_limit_kwh"],  # (the period's microseconds, which the form omits, are kept)
    )
    assert (entry.before["energy_limit_kwh"], entry.after["energy_limit_kwh"]) == (10.0, 11.0)
    # the log itself cannot be edited from the admin
    change = reverse("admin:cluster_auditentry_change", args=[entry.pk])
    assert client.post(change, {"action": "deleted"}).status_code == 403
    entry.refresh_from_db()
    assert entry.action == "updated"


def test_whatif_of_a_carbon_budget_runs_greenflow(
    client_for, lead, member, team, make_job, make_node
):
    now = timezone.now()
    node = make_node("node-01", gpus=8)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
    make_job(owner=member, team=team, total_iterations=2000)
    data = _whatif_data(team, kind="carbon", limit="20")
    body = client_for(lead).post(reverse("frontend:budget-whatif"), data).json()
    assert (body["n_jobs"], body["n_finished"], body["points"][0][0]) == (1, 1, 20.0)
    assert body["figure"]["layout"]["xaxis"]["title"]["text"] == "kg CO2e"
    bad = client_for(lead).post(reverse("frontend:budget-whatif"), {**data, "kind": "water"})
    assert bad.status_code == 400
    assert bad.json()["errors"]["kind"][0].startswith("Select a valid choice.")


def test_whatif_names_a_job_that_can_never_run_and_keeps_the_curve_monotone(
    client_for, lead, member, team, make_job, make_node
):
    # given a live 4-GPU node, a silent 8-GPU one, a 2-GPU job and an 8-GPU job (only the
    # silent node could hold it, so the round can never start it now)
    now = timezone.now()
    live = make_node("node-01", gpus=4)
    make_node("node-02", gpus=8)
    Node.objects.filter(pk=live.pk).update(last_heartbeat_at=now)
    make_job(owner=member, team=team, total_iterations=2000, min_gpus=2, max_gpus=2)
    big = make_job(owner=member, team=team, name="big one", min_gpus=8, max_gpus=8)
    # an earlier point at a smaller budget that predicted a shorter JCT
    data = _whatif_data(team, proposed="50", done=json.dumps([[25.0, 60.0]]))

    # when the lead runs the what-if
    body = client_for(lead).post(reverse("frontend:budget-whatif"), data).json()

    # then the 8-GPU job is named with the core's reason, the other still gets a JCT
    assert body["never_run"] == [
        {
            "job": f"#{big.pk} big one",
            "reason": "Waiting: needs 8 GPU(s) of one model; no GPU model has that many "
            "schedulable.",
        }
    ]
    assert (body["n_jobs"], body["n_finished"]) == (1, 1)
    assert body["unfinished"] == []  # every replayed job finished within the horizon
    assert body["raw_avg_jct_s"] > 60.0
    # and more budget never predicts worse: 50 kWh shows the 25 kWh point's 60 s
    assert body["points"] == [[25.0, 60.0], [50.0, 60.0]]
    assert body["avg_jct_s"] == 60.0


def test_whatif_without_a_live_node_says_nothing_can_run(
    client_for, lead, member, team, make_job, make_node
):
    # given a node whose agent never heart-beat: the round would not place work on it
    make_node("node-01", gpus=8)
    make_job(owner=member, team=team)
    body = client_for(lead).post(reverse("frontend:budget-whatif"), _whatif_data(team)).json()
    assert (body["n_jobs"], body["schedulable_gpus"], body["n_finished"]) == (1, 0, 0)
    assert body["avg_jct_s"] is None


def test_job_detail_shows_when_the_scheduler_expects_a_waiting_job_to_start(
    client_for, member, team, make_job
):
    job = make_job(owner=member, team=team)
    until = timezone.now().replace(second=0, microsecond=0) + timedelta(hours=2)
    Job.objects.filter(pk=job.pk).update(
        pending_reason_code="no_free_block", pending_reason="Waiting for GPUs.", pending_until=until
    )
    page = client_for(member).get(reverse("frontend:job-detail", args=[job.pk])).content.decode()
    assert f'<span id="wait-until">Expected around {until:%Y-%m-%d %H:%M} UTC.</span>' in page


def test_the_budget_form_names_each_unit_once(client_for, lead, team):
    # a new user's walkthrough: "Carbon hard limit (kg CO2e):" with "kg CO2e" again below it
    page = client_for(lead).get(reverse("frontend:budget-new")).content.decode()
    assert page.count("kg CO2e") == page.count("Carbon hard limit (kg CO2e)") + page.count(
        "carbon (kg CO2e)"
    )
    assert 'id="id_carbon_limit_kg_helptext"' not in page


def test_job_detail_says_utc_beside_every_time(client_for, member, team, make_job, make_node):
    # a new user's walkthrough: "Submitted ... UTC" above "Started 2026-12-07 15:14:20"
    node = make_node("node-01", gpus=1)
    job = make_job(owner=member, team=team, min_gpus=1, max_gpus=1)
    page = client_for(member).get(reverse("frontend:job-detail", args=[job.pk])).content.decode()
    assert "<dt>Started</dt><dd>—</dd>" in page and "<dt>Finished</dt><dd>—</dd>" in page
    at = timezone.now().replace(microsecond=0)
    services.start_job(job, gpus=list(node.gpus.all()), batch_size=256, at=at)
    services.transition_job(job, to=JobState.COMPLETED, at=at + timedelta(seconds=30))
    page = client_for(member).get(reverse("frontend:job-detail", args=[job.pk])).content.decode()
    assert f"<dt>Started</dt><dd>{at:%Y-%m-%d %H:%M:%S} UTC</dd>" in page
    assert f"<dt>Finished</dt><dd>{at + timedelta(seconds=30):%Y-%m-%d %H:%M:%S} UTC</dd>" in page


def test_the_favicon_the_admin_and_swagger_pages_ask_for_is_not_a_404(client):
    # a new user's walkthrough: /api/docs/ and /admin/ logged "Failed to load resource: 404"
    response = client.get("/favicon.ico")
    assert response.status_code == 204
    assert response["Cache-Control"] == "max-age=86400"


def test_the_dashboards_last_update_reads_as_the_sites_other_times(client_for, member, team):
    # a new user's walkthrough: "Last update 2026-12-07T15:13:32 UTC"
    import re

    page = client_for(member).get("/").content.decode()
    (at,) = re.findall(r'id="kpi-at">([^<]*)<', page)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", at), at
