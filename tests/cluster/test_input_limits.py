"""Issue 16, point 1: hostile and absurd values are refused on every input path with a 400
naming the field, and nothing is stored; the database refuses non-finite numbers itself."""

import json
import math
from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, transaction

from cluster.models import Budget, Job
from cluster.validators import (
    MAX_CARBON_LIMIT_KG,
    MAX_COMMAND_CHARS,
    MAX_ENERGY_LIMIT_KWH,
    MIN_CARBON_LIMIT_KG,
    MIN_ENERGY_LIMIT_KWH,
)
from telemetry.models import EnergyLedgerEntry

SUBMIT = {
    "name": "bert finetune",
    "team": "vision",
    "workload": "bert",
    "min_gpus": 1,
    "max_gpus": 2,
    "global_batch_size": 64,
    "total_iterations": 5000,
}
BUDGET = {
    "team": "vision",
    "period_start": "2030-04-01T00:00:00Z",
    "period_end": "2030-05-01T00:00:00Z",
    "energy_limit_kwh": 500.0,
}


@pytest.mark.parametrize("field", ["slowdown_tolerance", "base_lr", "max_lr"])
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", 1e308])
def test_a_job_with_a_non_finite_or_absurd_number_is_a_400_and_not_stored(
    api_client, member, team, field, value
):
    body = {**SUBMIT, "base_lr": 0.1, "max_lr": 0.4, field: value}

    response = api_client(member).post("/api/jobs/", body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("total_iterations", 10**20),
        ("total_iterations", 10**13),
        ("min_gpus", 1_000_000),
        ("max_gpus", 10**20),
        ("global_batch_size", 10**20),
        ("max_batch_size", 10**20),
        ("per_gpu_batch_size", 2**40),
        ("per_gpu_batch_size", 0),
        ("per_gpu_batch_size", 100_000),
    ],
)
def test_a_job_with_an_out_of_range_integer_is_a_400_and_not_stored(
    api_client, member, team, field, value
):
    response = api_client(member).post("/api/jobs/", {**SUBMIT, field: value}, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "a\x00b"),
        ("name", "tab\there"),
        ("workload", "bert\x00"),
        ("gpu_model", "A100\x1b[31m"),
        ("command", "python train.py\x00"),
        ("command", "x" * (MAX_COMMAND_CHARS + 1)),
        ("team", "vision\x00"),
        ("name", "x" * 201),
    ],
)
def test_a_job_with_control_characters_or_an_oversized_string_is_a_400(
    api_client, member, team, field, value
):
    response = api_client(member).post("/api/jobs/", {**SUBMIT, field: value}, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Job.objects.exists()


# Unicode format characters (category Cf): zero-width ones hide in a name (two teams that
# look alike), direction controls reorder what a page or log shows ("Trojan Source").
INVISIBLE = [
    ("\u200b", "U+200B"),  # zero width space
    ("\u2060", "U+2060"),  # word joiner
    ("\ufeff", "U+FEFF"),  # byte order mark
    ("\u202e", "U+202E"),  # right-to-left override
    ("\u2066", "U+2066"),  # left-to-right isolate
    ("\u200f", "U+200F"),  # right-to-left mark
    ("\u061c", "U+061C"),  # Arabic letter mark
    # Not format characters, as invisible or as line-breaking (a sixth probe stored each):
    ("\u2028", "U+2028"),  # line separator (a line break in pages' scripts and many logs)
    ("\u2029", "U+2029"),  # paragraph separator
    ("\u3164", "U+3164"),  # Hangul filler: a letter drawn as a blank
    ("\u115f", "U+115F"),  # Hangul choseong filler
    ("\uffa0", "U+FFA0"),  # halfwidth Hangul filler
    ("\u034f", "U+034F"),  # combining grapheme joiner: a mark that draws nothing
    ("\u2800", "U+2800"),  # braille pattern blank: a symbol drawn as an empty cell
    # the Mongolian vowel separator outside a Mongolian word draws nothing ("bert\u180elarge")
    ("\u180e", "U+180E"),
    ("\u1820\u180e", "U+180E"),  # after a Mongolian letter but before none
    # tag characters outside a flag's sequence draw nothing
    ("\U000e0067\U000e0062", "U+E0062"),
    ("\U0001f3f4\U000e0067\U000e0062\U000e0078\U000e0078\U000e007f", "U+E0078"),
]


@pytest.mark.parametrize("field", ["name", "workload", "gpu_model"])
@pytest.mark.parametrize(("char", "code_point"), INVISIBLE)
def test_a_job_name_with_an_invisible_or_direction_character_is_a_400_naming_it(
    api_client, member, team, field, char, code_point
):
    body = {**SUBMIT, field: f"bert{char}large"}

    response = api_client(member).post("/api/jobs/", body, format="json")

    assert response.status_code == 400, response.content
    assert any(code_point in message for message in response.json()[field])
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/teams/", {"name": "Vision\u202egnp.exe", "slug": "v2"}, "name"),
        (
            "/api/nodes/",
            {"name": "node\u200b01", "switch_label": "s1", "gpu_model": "A100"},
            "name",
        ),
        (
            "/api/nodes/",
            {"name": "n9", "switch_label": "s\u2067", "gpu_model": "A100"},
            "switch_label",
        ),
        (
            "/api/nodes/",
            {"name": "n9", "switch_label": "s1", "gpu_model": "A100\ufeff"},
            "gpu_model",
        ),
    ],
)
def test_an_admin_name_with_an_invisible_character_is_a_400(
    api_client, admin_user, path, body, field
):
    response = api_client(admin_user).post(path, body, format="json")

    assert response.status_code == 400, response.content
    assert "U+" in response.json()[field][0]


@pytest.mark.parametrize(
    "name",
    # the Persian and Devanagari ones need the zero-width non-joiner and joiner; emoji
    # (a ZWJ sequence, a variation selector, a flag of Scotland: tag characters)
    [
        "Équipe Zürich",
        "研究组",
        "فريق البحث",
        "अनुसंधान दल",
        "گروه\u200cپژوهشی",
        "क\u094d\u200dष",
        "연구팀",
        "ทีมวิจัย",
        "\U0001f469\u200d\U0001f52c lab \u2764\ufe0f",
        "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f Edinburgh",
        # Mongolian: the vowel separator sets a final a apart ("hara-a"), once after a free
        # variation selector (was refused as an invisible character)
        "\u182c\u1820\u1837\u1820\u180e\u1820 \u1826\u180b\u180e\u1821",
    ],
)
def test_names_in_any_script_are_accepted(api_client, admin_user, member, team, name):
    created = api_client(admin_user).post(
        "/api/teams/", {"name": name, "slug": "intl"}, format="json"
    )
    job = api_client(member).post("/api/jobs/", {**SUBMIT, "name": name}, format="json")

    assert created.status_code == 201, created.content
    assert job.status_code == 201, job.content
    assert Job.objects.get().name == name


def test_the_job_form_refuses_a_direction_override_in_the_name(client, member, team):
    client.force_login(member)
    form = {
        "name": "bert\u202eexe.sh",
        "team": team.pk,
        "workload": "bert",
        "gpus": 1,
        "batch_size": 64,
        "iterations": 5000,
        "priority": 0,
    }

    response = client.post("/jobs/new/", form)

    assert response.status_code == 400
    assert "U+202E" in str(response.context["form"].errors["name"])
    assert not Job.objects.exists()


def test_a_multi_line_command_within_the_limit_is_accepted(api_client, member, team):
    command = "set -e\r\n\tpython train.py --epochs 3"

    response = api_client(member).post("/api/jobs/", {**SUBMIT, "command": command}, format="json")

    assert response.status_code == 201, response.content
    assert Job.objects.get().command == command


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("energy_limit_kwh", "Infinity"),
        ("energy_limit_kwh", "NaN"),
        ("energy_limit_kwh", 1e30),
        ("energy_limit_kwh", 1e308),
        # A denormal limit: used / limit overflowed to inf and every read of the budget
        # (API, pages, /metrics) answered 500 once the team had used a joule.
        ("energy_limit_kwh", 5e-324),
        ("energy_limit_kwh", 0.0009),
        ("carbon_limit_kg", "Infinity"),
        ("carbon_limit_kg", 1e30),
        ("carbon_limit_kg", 5e-324),
        ("carbon_limit_kg", 0.0009),
        ("warn_fraction", "NaN"),
        ("team", "vision\x00"),
        ("energy_limit_kwh", True),  # float(True) is 1.0: it was stored as 1 kWh
        ("carbon_limit_kg", False),
    ],
)
def test_a_budget_with_a_non_finite_or_absurd_value_is_a_400_and_not_stored(
    api_client, lead, team, field, value
):
    response = api_client(lead).post("/api/budgets/", {**BUDGET, field: value}, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Budget.objects.exists()


def test_patching_a_budget_to_infinity_is_a_400_and_keeps_the_stored_limit(api_client, lead, team):
    created = api_client(lead).post("/api/budgets/", BUDGET, format="json")
    assert created.status_code == 201, created.content

    response = api_client(lead).patch(
        f"/api/budgets/{created.json()['id']}/", {"energy_limit_kwh": "Infinity"}, format="json"
    )

    assert response.status_code == 400
    assert "energy_limit_kwh" in response.json()
    assert Budget.objects.get().energy_limit_kwh == 500.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        # A period of years 1..9999 was stored: the scheduler paced 100 kWh over 8,000 years
        # (0.1 J a round, so every job of the team waited), or from year 1 not at all.
        ("period_start", "0001-01-01T00:00:00Z"),
        ("period_start", "1999-12-31T23:59:59Z"),
        ("period_end", "9999-12-31T23:59:59.999999Z"),
        ("period_end", "2100-01-01T00:00:01Z"),
    ],
)
def test_a_budget_period_outside_2000_to_2100_is_a_400_and_not_stored(
    api_client, lead, team, field, value
):
    response = api_client(lead).post("/api/budgets/", {**BUDGET, field: value}, format="json")

    assert response.status_code == 400, response.content
    bound = "on or after 2000-01-01" if field == "period_start" else "on or before 2100-01-01"
    assert response.json() == {field: [f"Must be {bound} 00:00 UTC."]}
    assert not Budget.objects.exists()


def test_a_budget_may_span_the_whole_range(api_client, lead, team):
    body = {**BUDGET, "period_start": "2000-01-01T00:00:00Z", "period_end": "2100-01-01T00:00:00Z"}

    response = api_client(lead).post("/api/budgets/", body, format="json")

    assert response.status_code == 201, response.content


def test_patching_a_budget_to_year_9999_is_a_400_and_keeps_the_stored_period(
    api_client, lead, team
):
    created = api_client(lead).post("/api/budgets/", BUDGET, format="json")
    assert created.status_code == 201, created.content

    response = api_client(lead).patch(
        f"/api/budgets/{created.json()['id']}/",
        {"period_end": "9999-12-31T00:00:00Z"},
        format="json",
    )

    assert response.status_code == 400
    assert "period_end" in response.json()
    assert Budget.objects.get().period_end == datetime(2030, 5, 1, tzinfo=UTC)


def test_the_budget_form_refuses_a_period_in_year_1(client, lead, team):
    client.force_login(lead)
    form = {
        "team": team.pk,
        "period_start": "0001-01-01T00:00",
        "period_end": "2030-05-01T00:00",
        "energy_limit_kwh": "100",
        "hard_limit_action": "hold_queue",
        "warn_percent": 80,
    }

    response = client.post("/budgets/new/", form)

    assert response.context["form"].errors == {
        "period_start": ["Must be on or after 2000-01-01 00:00 UTC."]
    }
    assert not Budget.objects.exists()


def test_patching_a_budget_to_a_denormal_limit_is_a_400_and_keeps_the_stored_limit(
    api_client, lead, team
):
    created = api_client(lead).post("/api/budgets/", BUDGET, format="json")
    assert created.status_code == 201, created.content

    response = api_client(lead).patch(
        f"/api/budgets/{created.json()['id']}/", {"energy_limit_kwh": 5e-324}, format="json"
    )

    assert response.status_code == 400
    assert response.json() == {"energy_limit_kwh": ["Must be at least 0.001 kWh (1 Wh)."]}
    assert Budget.objects.get().energy_limit_kwh == 500.0


@pytest.mark.parametrize(
    ("energy", "carbon"),
    [(MIN_ENERGY_LIMIT_KWH, MIN_CARBON_LIMIT_KG), (MAX_ENERGY_LIMIT_KWH, MAX_CARBON_LIMIT_KG)],
)
def test_the_smallest_and_largest_limits_are_accepted_and_their_usage_reads(
    api_client, lead, team, make_node, energy, carbon
):
    # given budgets at both ends of the range, and a team that used energy in the period
    created = api_client(lead).post(
        "/api/budgets/",
        {**BUDGET, "energy_limit_kwh": energy, "carbon_limit_kg": carbon},
        format="json",
    )
    assert created.status_code == 201, created.content
    gpu = make_node("node-01", gpus=1).gpus.get()
    EnergyLedgerEntry.objects.create(
        gpu=gpu, hour=datetime(2030, 4, 2, tzinfo=UTC), team=team, energy_j=3.6e15, co2_g=1e12,
        ci_g_per_kwh=300.0, zone="DE",
    )  # fmt: skip

    # then the budget reads with finite shares of its limits
    response = api_client(lead).get(f"/api/budgets/{created.json()['id']}/")

    assert response.status_code == 200, response.content
    assert all(math.isfinite(x["percent"]) for x in response.json()["usage"]["limits"])


def test_the_budget_form_refuses_a_limit_below_one_watt_hour(client, lead, team):
    client.force_login(lead)
    form = {
        "team": team.pk,
        "period_start": "2030-04-01T00:00",
        "period_end": "2030-05-01T00:00",
        "energy_limit_kwh": "5e-324",
        "carbon_limit_kg": "0.0001",
        "hard_limit_action": "hold_queue",
        "warn_percent": 80,
    }

    response = client.post("/budgets/new/", form)

    errors = response.context["form"].errors
    assert set(errors) == {"energy_limit_kwh", "carbon_limit_kg"}
    assert not Budget.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("base_lr", math.nan),
        ("max_lr", math.inf),
        ("slowdown_tolerance", -math.inf),
        ("completed_iterations", math.nan),
    ],
)
def test_the_database_refuses_non_finite_job_numbers(make_job, member, team, field, value):
    job = make_job(owner=member, team=team)

    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(**{field: value})


@pytest.mark.parametrize("field", ["energy_limit_kwh", "carbon_limit_kg", "warn_fraction"])
def test_the_database_refuses_non_finite_budget_numbers(lead, team, field):
    budget = Budget.objects.create(
        team=team,
        period_start="2030-04-01T00:00:00Z",
        period_end="2030-05-01T00:00:00Z",
        energy_limit_kwh=10.0,
        carbon_limit_kg=10.0,
    )

    with pytest.raises(IntegrityError), transaction.atomic():
        Budget.objects.filter(pk=budget.pk).update(**{field: math.nan})


def test_a_body_over_the_limit_is_a_413_before_it_is_parsed(api_client, member, team, settings):
    settings.WATTFLOW_MAX_REQUEST_BODY_BYTES = 1000
    body = '{"name": "' + "x" * 2000 + '"}'

    response = api_client(member).post("/api/jobs/", body, content_type="application/json")

    assert response.status_code == 413
    assert "at most 1000" in response.json()["detail"]
    assert not Job.objects.exists()


def test_a_body_within_the_limit_is_parsed(api_client, member, team, settings):
    settings.WATTFLOW_MAX_REQUEST_BODY_BYTES = 4000

    response = api_client(member).post("/api/jobs/", SUBMIT, format="json")

    assert response.status_code == 201, response.content


def test_the_job_form_refuses_absurd_iterations_with_a_field_message(client, member, team):
    client.force_login(member)
    form = {
        "name": "huge",
        "team": team.pk,
        "workload": "bert",
        "gpus": 1,
        "batch_size": 64,
        "iterations": 10**20,
        "priority": 0,
    }

    response = client.post("/jobs/new/", form)

    assert response.status_code == 400
    assert "iterations" in response.context["form"].errors
    assert not Job.objects.exists()


def test_a_refusal_that_quotes_a_broken_character_is_a_400_not_a_500(api_client, member, team):
    # "not a valid choice" quotes the input; a lone surrogate in it could not be encoded as
    # UTF-8 and the answer was a 500 (found by probing the API).
    body = json.dumps({**SUBMIT, "team": "vision"}).replace('"vision"', '"\\ud800"')
    response = api_client(member).post("/api/jobs/", body, content_type="application/json")

    assert response.status_code == 400
    assert "team" in response.json()
    assert not Job.objects.exists()


@pytest.mark.parametrize("value", [5e-324, 0.001, 0.0, 1.5])
def test_a_soft_limit_outside_1_to_100_percent_is_a_400_and_not_stored(
    api_client, lead, team, value
):
    # The form takes 1-100 %; the API took any fraction above 0, and 5e-324 warned at once.
    response = api_client(lead).post(
        "/api/budgets/", {**BUDGET, "warn_fraction": value}, format="json"
    )

    assert response.status_code == 400, response.content
    assert "1% to 100%" in response.json()["warn_fraction"][0]
    assert not Budget.objects.exists()


@pytest.mark.parametrize("value", [0.01, 1.0])
def test_a_soft_limit_of_1_or_100_percent_is_accepted(api_client, lead, team, value):
    response = api_client(lead).post(
        "/api/budgets/", {**BUDGET, "warn_fraction": value}, format="json"
    )

    assert response.status_code == 201, response.content
    assert Budget.objects.get().warn_fraction == value


def test_a_batch_smaller_than_the_jobs_gpus_is_a_400_and_not_stored(api_client, member, team):
    # given a job of batch 3 on at least 4 GPUs (each GPU needs a sample a step)
    job = {"name": "tiny-batch", "team": team.slug, "workload": "resnet50", "min_gpus": 4,
           "max_gpus": 4, "global_batch_size": 3, "total_iterations": 100}  # fmt: skip
    response = api_client(member).post("/api/jobs/", job, format="json")
    assert response.status_code == 400
    (message,) = response.json()["global_batch_size"]
    assert "A batch of 3 is smaller than the 4 GPU(s)" in message
    # and a smallest batch below the GPUs is refused on its own field
    response = api_client(member).post(
        "/api/jobs/", {**job, "global_batch_size": 64, "min_batch_size": 2}, format="json"
    )
    assert response.status_code == 400
    assert "A batch of 2 is smaller" in response.json()["min_batch_size"][0]
    assert not Job.objects.filter(name="tiny-batch").exists()
