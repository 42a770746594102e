"""Issue 16, point 2: a job that could never run is refused at submit with a message that
says why (too many GPUs for one placement, more energy or carbon than its team's budgets
allow, absurdly long), and a job that could run is never refused by these rules."""

import math
from datetime import timedelta

import pytest
from django.utils import timezone

from cluster.choices import HardLimitAction
from cluster.models import Budget, Job
from scheduling.core.types import J_PER_KWH
from scheduling.feasibility import lower_bounds
from telemetry.models import CarbonIntensity

SUBMIT = {
    "name": "bert finetune",
    "team": "vision",
    "workload": "bert",
    "min_gpus": 1,
    "max_gpus": 1,
    "global_batch_size": 64,
}


def _least_kwh_per_iteration(**gpus_by_model) -> float:
    bounds = lower_bounds(
        workload="bert",
        gpus_by_model=gpus_by_model or {"A100": None, "T4": None},
        min_gpus=1,
        max_gpus=1,
        batch=64,
        iters=1_000_000,
    )
    return bounds.energy_j / J_PER_KWH / 1_000_000


def _iterations_for(kwh: float, **gpus_by_model) -> int:
    return math.ceil(kwh / _least_kwh_per_iteration(**gpus_by_model))


def _budget(team, *, start, days=30, **limits) -> Budget:
    return Budget.objects.create(
        team=team, period_start=start, period_end=start + timedelta(days=days), **limits
    )


def _post(api_client, user, **fields):
    return api_client(user).post("/api/jobs/", {**SUBMIT, **fields}, format="json")


def test_more_gpus_than_one_gpu_model_offers_is_refused_with_the_count(
    api_client, member, team, make_node
):
    make_node("node-01", gpus=8)
    make_node("node-02", gpus=8)

    refused = _post(api_client, member, min_gpus=17, max_gpus=17, total_iterations=100)
    accepted = _post(api_client, member, min_gpus=16, max_gpus=16, total_iterations=100)

    assert refused.status_code == 400, refused.content
    message = refused.json()["min_gpus"][0]
    assert "16" in message and "17" in message, message
    assert accepted.status_code == 201, accepted.content
    assert list(Job.objects.values_list("min_gpus", flat=True)) == [16]


def test_a_job_pinned_to_a_gpu_model_the_cluster_lacks_is_refused(
    api_client, member, team, make_node
):
    make_node("node-01", gpus=8)  # A100s

    response = _post(api_client, member, gpu_model="T4", total_iterations=100)

    assert response.status_code == 400, response.content
    assert "0 T4 GPUs" in response.json()["min_gpus"][0]
    assert not Job.objects.exists()


def test_before_any_gpu_registers_the_gpu_rule_waits_for_the_hardware(api_client, member, team):
    response = _post(
        api_client, member, min_gpus=1024, max_gpus=1024, global_batch_size=1024,
        total_iterations=100_000,
    )  # fmt: skip

    assert response.status_code == 201, response.content


def test_more_energy_than_the_whole_budget_is_refused_and_less_is_accepted(
    api_client, member, team
):
    now = timezone.now()
    _budget(team, start=now - timedelta(days=1), energy_limit_kwh=1.0)

    refused = _post(api_client, member, name="big", total_iterations=_iterations_for(2.0))
    accepted = _post(api_client, member, name="small", total_iterations=_iterations_for(0.5))

    assert refused.status_code == 400, refused.content
    message = refused.json()["total_iterations"][0]
    assert "allow (1 kWh)" in message and team.name in message, message
    assert accepted.status_code == 201, accepted.content
    assert list(Job.objects.values_list("name", flat=True)) == ["small"]


def test_the_energy_rule_uses_only_the_gpu_models_the_cluster_has(
    api_client, member, team, make_node
):
    # bert needs less energy per iteration on an A100 than on a T4; on a T4-only cluster the
    # job needs the T4's energy.
    node = make_node("node-01", gpus=2)
    node.gpus.update(model="T4")
    t4 = _least_kwh_per_iteration(T4=2)
    a100 = _least_kwh_per_iteration(A100=2)
    assert t4 > a100
    _budget(team, start=timezone.now() - timedelta(days=1), energy_limit_kwh=1.0)

    response = _post(api_client, member, total_iterations=math.ceil(1.2 / t4))

    assert response.status_code == 400, response.content
    assert 1.2 / t4 * a100 < 1.0  # the same job would fit on the A100s it cannot use


def test_a_budget_that_follows_without_a_gap_adds_to_what_the_job_may_spend(
    api_client, member, team
):
    now = timezone.now()
    first = _budget(team, start=now - timedelta(days=1), energy_limit_kwh=1.0)
    _budget(team, start=first.period_end, energy_limit_kwh=1.0)

    fits_both = _post(api_client, member, name="both", total_iterations=_iterations_for(1.5))
    too_big = _post(api_client, member, name="huge", total_iterations=_iterations_for(3.0))

    assert fits_both.status_code == 201, fits_both.content
    assert too_big.status_code == 400, too_big.content
    assert "allow (2 kWh)" in too_big.json()["total_iterations"][0]


def test_unbudgeted_time_or_a_notify_only_budget_refuses_nothing(api_client, member, team):
    now = timezone.now()
    first = _budget(team, start=now - timedelta(days=1), energy_limit_kwh=1.0)
    later = _budget(team, start=first.period_end + timedelta(days=1), energy_limit_kwh=1.0)

    gap = _post(api_client, member, name="gap", total_iterations=_iterations_for(3.0))
    Budget.objects.filter(pk=later.pk).delete()
    Budget.objects.filter(pk=first.pk).update(hard_limit_action=HardLimitAction.NOTIFY_ONLY)
    notify = _post(api_client, member, name="notify", total_iterations=_iterations_for(3.0))

    assert gap.status_code == 201, gap.content
    assert notify.status_code == 201, notify.content


def test_more_carbon_than_the_whole_budget_at_the_lowest_intensity_is_refused(
    api_client, member, team, settings
):
    now = timezone.now()
    budget = _budget(team, start=now - timedelta(days=1), days=3, carbon_limit_kg=1.0)
    hour = budget.period_start.replace(minute=0, second=0, microsecond=0)
    for offset, intensity in enumerate([400.0, 100.0, 250.0]):
        CarbonIntensity.objects.create(
            zone=settings.TELEMETRY_CARBON_ZONE,
            hour=hour + timedelta(hours=offset),
            ci_g_per_kwh=intensity,
            source="imported",
        )
    # 1 kg at the lowest stored intensity (100 g/kWh) is 10 kWh.
    refused = _post(api_client, member, name="dirty", total_iterations=_iterations_for(12.0))
    accepted = _post(api_client, member, name="clean", total_iterations=_iterations_for(8.0))

    assert refused.status_code == 400, refused.content
    assert "kg CO2e" in refused.json()["total_iterations"][0]
    assert accepted.status_code == 201, accepted.content


def test_iterations_that_would_take_millennia_are_refused_without_any_budget(
    api_client, member, team
):
    response = _post(api_client, member, total_iterations=10**12)

    assert response.status_code == 400, response.content
    assert "WATTFLOW_MAX_JOB_DAYS" in response.json()["total_iterations"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize("name", ["BERT", " Bert "])
def test_a_catalog_workload_in_another_case_is_that_workload(api_client, member, team, name):
    # read as a new workload, it skipped the checks above (a live probe: VGG16 with 10^12
    # iterations was accepted where vgg16 was refused)
    refused = _post(api_client, member, workload=name, total_iterations=10**12)
    assert refused.status_code == 400, refused.content
    assert "WATTFLOW_MAX_JOB_DAYS" in refused.json()["total_iterations"][0]
    accepted = _post(api_client, member, workload=name, total_iterations=1000)
    assert accepted.status_code == 201, accepted.content
    assert Job.objects.get().workload == "bert"


def test_the_job_form_shows_the_refusal_beside_its_field(client, member, team, make_node):
    make_node("node-01", gpus=4)
    client.force_login(member)
    form = {
        "name": "wide",
        "team": team.pk,
        "workload": "bert",
        "gpus": 8,
        "batch_size": 64,
        "iterations": 100,
        "priority": 0,
    }

    response = client.post("/jobs/new/", form)

    assert response.status_code == 400
    assert "could never start" in " ".join(response.context["form"].errors["gpus"])
    assert not Job.objects.exists()


@pytest.mark.parametrize("team_budget_kwh", [None, 2303.0])
def test_an_ordinary_job_passes(api_client, member, team, make_node, team_budget_kwh):
    make_node("node-01", gpus=8)
    if team_budget_kwh:
        _budget(team, start=timezone.now() - timedelta(days=1), energy_limit_kwh=team_budget_kwh)

    response = _post(api_client, member, min_gpus=1, max_gpus=8, total_iterations=50_000)

    assert response.status_code == 201, response.content


def test_gpus_their_agent_no_longer_reports_are_not_offered(api_client, member, team, make_node):
    # given 16 A100s, 4 of which node-02's agent registered without (lost: the rounds do
    # not plan on them until reported again)
    make_node("node-01", gpus=8)
    node2 = make_node("node-02", gpus=8)
    node2.gpus.filter(index__gte=4).update(missing_since=timezone.now())

    refused = _post(api_client, member, min_gpus=13, max_gpus=13, total_iterations=100)
    accepted = _post(api_client, member, min_gpus=12, max_gpus=12, total_iterations=100)

    # then a job needs the 12 reported ones (before: 16 counted, a 16-GPU job accepted to
    # wait), and the message says where the other 4 are
    assert refused.status_code == 400, refused.content
    message = refused.json()["min_gpus"][0]
    assert message.startswith("The cluster has 12 GPUs that can run bert together"), message
    assert "4 more are registered but not reported by their node's agent" in message, message
    assert accepted.status_code == 201, accepted.content
    assert list(Job.objects.values_list("min_gpus", flat=True)) == [12]


def test_a_cluster_whose_every_gpu_is_lost_offers_none_rather_than_any(
    api_client, member, team, make_node
):
    # given 8 A100s, all of which the node's agent registered without (restarted seeing
    # none: lost, the rounds plan on none of them until reported again)
    node = make_node("node-01", gpus=8)
    node.gpus.update(missing_since=timezone.now())

    # when a job asks for 64 of them at least
    response = _post(api_client, member, min_gpus=64, max_gpus=64, total_iterations=100)

    # then it is refused as with some GPUs reported (the GPUs are registered: not the
    # cluster whose agents have not started, for which the rule waits), and says where the 8
    # are (before: no GPU reported counted as none registered, and any job was accepted)
    assert response.status_code == 400, response.content
    message = response.json()["min_gpus"][0]
    assert message.startswith("The cluster has 0 GPUs that can run bert together"), message
    assert "8 more are registered but not reported by their node's agent" in message, message
    assert not Job.objects.exists()
