"""The OpenAPI schema says what the API does (config/openapi.py), checked on the generated
document and against real responses; and the query-string and URL edges the fuzzer found
answer 4xx, not 500 (cluster/api/filter_backend.py, config/views.py)."""

from __future__ import annotations

import pytest
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator

from cluster import services

METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.fixture(scope="module")
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def _operations(schema):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield path, method, operation


def _nullable(schema, component: str, field: str) -> bool:
    return bool(schema["components"]["schemas"][component]["properties"][field].get("nullable"))


def test_request_bodies_are_json_only(schema):
    bodies = [(p, m, op["requestBody"]) for p, m, op in _operations(schema) if "requestBody" in op]
    assert bodies
    for path, method, body in bodies:
        assert list(body["content"]) == ["application/json"], (method, path)


def test_the_token_endpoint_needs_no_authentication(schema):
    operation = schema["paths"]["/api/auth-token/"]["post"]
    assert not operation.get("security")
    assert {"200", "400"} <= set(operation["responses"])


def test_every_operation_documents_its_errors_with_the_error_body(schema):
    error_ref = "#/components/schemas/ApiError"
    assert schema["components"]["schemas"]["ApiError"]["properties"]["detail"]["type"] == "string"
    for path, method, operation in _operations(schema):
        responses = operation["responses"]
        where = f"{method.upper()} {path}"
        assert {"401", "403"} <= set(responses), where
        if path != "/api/auth-token/":
            assert operation["security"], where
        if "{" in path:
            assert "404" in responses, where
        if "requestBody" in operation:
            assert {"400", "415"} <= set(responses), where
        for code, response in responses.items():
            if code.startswith("4"):
                content = response["content"]["application/json"]["schema"]
                assert content["$ref"] in (error_ref, "#/components/schemas/Error"), where


def test_paginated_and_filtered_lists_document_404_and_400(schema):
    jobs = schema["paths"]["/api/jobs/"]["get"]["responses"]
    assert {"200", "400", "401", "403", "404"} <= set(jobs)
    totals = schema["paths"]["/api/telemetry/ledger/totals/"]["get"]
    assert {p["name"] for p in totals["parameters"]} >= {"team", "job", "hour_after"}


def test_fields_that_can_be_null_are_nullable(schema):
    assert _nullable(schema, "Job", "current_allocation")
    assert _nullable(schema, "LedgerEntry", "team")
    assert _nullable(schema, "LedgerEntry", "job")
    assert _nullable(schema, "JobAllocation", "ended_at")
    assert not _nullable(schema, "Job", "team")


def test_the_batch_probe_on_the_exploration_record_is_documented_and_nullable(schema):
    # (exploration.BATCH_PROBE keeps it on the record; the API left it out)
    assert _nullable(schema, "Exploration", "other_batch")
    ref = schema["components"]["schemas"]["Exploration"]["properties"]["other_batch"]["allOf"]
    probe = ref[0]["$ref"].rsplit("/", 1)[-1]
    fields = schema["components"]["schemas"][probe]["properties"]
    assert set(fields) >= {"batch", "from_batch", "n_gpus", "limit_w", "since_s", "seconds",
                           "cost_s", "energy_j", "runnable", "reason"}  # fmt: skip
    assert _nullable(schema, probe, "runnable") and _nullable(schema, probe, "energy_j")
    assert not _nullable(schema, probe, "batch")


def test_a_queued_job_and_an_idle_ledger_row_answer_null(
    api_client, member, admin_user, team, make_job, make_node
):
    """The nullable fields above are null in real responses."""
    from telemetry.models import EnergyLedgerEntry

    job = make_job(owner=member, team=team)
    body = api_client(member).get(f"/api/jobs/{job.pk}/").json()
    assert body["current_allocation"] is None
    gpu = make_node("node-09", gpus=1).gpus.get()
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    EnergyLedgerEntry.objects.create(
        gpu=gpu, hour=hour, job=None, team=None, energy_j=1.0, co2_g=0.1, ci_g_per_kwh=360.0,
        zone="ES",
    )  # fmt: skip
    rows = api_client(admin_user).get("/api/telemetry/ledger/").json()["results"]
    assert [r["team"] for r in rows] == [None]


@pytest.mark.parametrize(
    "url",
    [
        "/api/jobs/?owner=a%00b",
        "/api/jobs/?team=%01",
        "/api/budgets/?team=x%00",
        "/api/telemetry/ledger/?team=%00",
        "/api/telemetry/gpu-minutes/?node=%1f",
    ],
)
def test_control_characters_in_query_strings_answer_400(api_client, admin_user, url):
    response = api_client(admin_user).get(url)
    assert response.status_code == 400
    assert any("Control characters" in m for m in sum(response.json().values(), []))


def test_utc_offsets_postgres_cannot_store_are_compared_in_utc(api_client, member, team, make_job):
    job = make_job(owner=member, team=team)
    client = api_client(member)
    later = client.get("/api/jobs/", {"submitted_after": "2000-01-01T00:00:00-18:14"})
    assert later.status_code == 200
    assert [j["id"] for j in later.json()["results"]] == [job.pk]
    early = client.get("/api/jobs/", {"submitted_before": "0727-05-30T06:58:36-18:14"})
    assert early.status_code == 200 and early.json()["count"] == 0
    nowhere = client.get("/api/jobs/", {"submitted_before": "0001-01-01T00:00:00+05:00"})
    assert nowhere.status_code == 400
    assert list(nowhere.json()) == ["submitted_before"]
    garbled = client.get("/api/jobs/", {"submitted_after": "yesterday"})
    assert garbled.status_code == 400
    assert list(garbled.json()) == ["submitted_after"]


@pytest.mark.parametrize("url", ["/api/jobs/1.5/", "/api/teams/%00/", "/api/no-such-thing/"])
def test_unknown_api_urls_answer_json_404(api_client, admin_user, team, url):
    response = api_client(admin_user).get(url)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["detail"]


def test_unknown_pages_outside_the_api_stay_html(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_cancel_of_a_finished_job_is_a_documented_409(api_client, member, team, make_job):
    job = make_job(owner=member, team=team)
    services.cancel_job(job)
    response = api_client(member).post(f"/api/jobs/{job.pk}/cancel/")
    assert response.status_code == 409
    assert response.json()["detail"]


@pytest.mark.parametrize("page", ["-1", "0", "000", "abc", "1.5", "٣"])
def test_malformed_page_numbers_answer_400(api_client, member, team, make_job, page):
    make_job(owner=member, team=team)
    response = api_client(member).get("/api/jobs/", {"page": page})
    assert response.status_code == 400
    assert list(response.json()) == ["page"]


def test_pages_past_the_last_stay_404_and_last_works(api_client, member, team, make_job):
    job = make_job(owner=member, team=team)
    client = api_client(member)
    assert client.get("/api/jobs/", {"page": "2"}).status_code == 404
    last = client.get("/api/jobs/", {"page": "last"})
    assert last.status_code == 200
    assert [j["id"] for j in last.json()["results"]] == [job.pk]


@pytest.mark.parametrize("url", ["/api/jobs/", "/api/budgets/"])
def test_a_page_number_of_thousands_of_digits_is_past_the_last_page(api_client, member, url):
    # (more than Python's 4,300-digit limit on converting integer strings: it was a 500)
    response = api_client(member).get(url, {"page": "1" * 4400})
    assert response.status_code == 404
    assert response.json() == {"detail": "Invalid page."}


def test_the_ledger_pages_by_cursor_and_refuses_one_it_did_not_give(api_client, member, schema):
    # (the ledger has no page numbers: counted and sorted per page, they cost ~1 s on a
    # 100,000-job database; tests/telemetry/test_ledger_pages.py)
    operation = schema["paths"]["/api/telemetry/ledger/"]["get"]
    assert "cursor" in {p["name"] for p in operation["parameters"]}
    assert "page" not in {p["name"] for p in operation["parameters"]}
    response = api_client(member).get("/api/telemetry/ledger/", {"cursor": "1" * 4400})
    assert response.status_code == 400
    assert list(response.json()) == ["cursor"]


@pytest.mark.parametrize("url", ["/api/no-such-thing/", "/api/jobs/1/nope/"])
def test_unknown_api_urls_answer_json_404_with_debug_on_too(api_client, admin_user, settings, url):
    # DEBUG is on by default (``make run``, a developer's runserver), where Django answers a
    # path no route matches with its HTML debug page, not ``handler404``: a client that
    # reads the documented error body got HTML.
    settings.DEBUG = True
    response = api_client(admin_user).get(url)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found."}


@pytest.mark.parametrize(
    ("path", "operation"),
    [
        ("/api/teams/{slug}/", "delete"),
        ("/api/nodes/{id}/", "delete"),
        ("/api/gpus/{id}/", "delete"),
    ],
)
def test_deletes_refused_for_what_history_names_document_409(schema, path, operation):
    # A team with jobs, a node or GPU with allocations or energy answer 409: a generated
    # client that raises on undocumented statuses broke on it.
    responses = schema["paths"][path][operation]["responses"]
    assert "409" in responses
    body = responses["409"]["content"]["application/json"]["schema"]
    assert body["$ref"] in ("#/components/schemas/ApiError", "#/components/schemas/Error")


def test_a_refused_team_delete_answers_a_status_the_schema_documents(
    schema, api_client, admin_user, member, team, make_job
):
    make_job(owner=member, team=team)
    response = api_client(admin_user).delete(f"/api/teams/{team.slug}/")
    assert response.status_code == 409
    assert str(response.status_code) in schema["paths"]["/api/teams/{slug}/"]["delete"]["responses"]
    assert response.json()["detail"]


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("/api/telemetry/ledger/", "hour_after"),
        ("/api/telemetry/ledger/", "hour_before"),
        ("/api/telemetry/ledger/totals/", "hour_after"),
        ("/api/telemetry/ledger/totals/", "hour_before"),
        ("/api/telemetry/gpu-hours/", "hour_after"),
        ("/api/telemetry/gpu-minutes/", "minute_after"),
        ("/api/telemetry/gpu-minutes/", "minute_before"),
    ],
)
def test_a_bad_time_filter_is_refused_under_the_parameter_sent(
    schema, api_client, member, path, param
):
    # The errors were keyed by the range's own name ("hour"), a parameter the schema does
    # not have, so a client could not tell which of its two values was wrong.
    assert param in {p["name"] for p in schema["paths"][path]["get"]["parameters"]}
    response = api_client(member).get(path, {param: "yesterday"})
    assert response.status_code == 400
    assert list(response.json()) == [param]


@pytest.mark.parametrize("component", ["Job", "JobRequest", "Budget", "PatchedBudgetRequest"])
def test_components_describe_the_resource_not_the_serializer_base(schema, component):
    # Job and Budget inherited the docstring of their serializers' base class, so the
    # schema (and Swagger UI) described a job as "A ModelSerializer whose model float
    # fields refuse booleans."
    description = schema["components"]["schemas"][component]["description"]
    assert "Serializer" not in description


def test_the_gradient_statistics_bounds_are_in_the_schema(schema):
    # (the schema said only "minimum: 0", and a generated client's grad_sqr of 0 got a 400)
    component = next(
        c for name, c in schema["components"]["schemas"].items()
        if name.endswith("Request") and "grad_sqr" in c.get("properties", {})
    )  # fmt: skip
    text = component["properties"]["grad_sqr"]["description"]
    assert "above 0" in text and "1e+12" in text


def test_a_samples_unreadable_values_may_be_left_out_as_the_server_takes_them(schema):
    # (the schema required every nullable reading, while ingest takes a sample without them)
    component = schema["components"]["schemas"]["SampleRequest"]
    assert sorted(component["required"]) == ["gpu_uuid", "power_w", "ts"]
