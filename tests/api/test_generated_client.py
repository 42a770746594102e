"""A Python client generated from ``/api/schema/`` by openapi-python-client, driven against a
live server: if the schema lies (content types, nullability, undocumented status codes, the
token endpoint's security), the generated code sends the wrong request, fails to parse a
response, or raises ``UnexpectedStatus`` (``raise_on_unexpected_status=True``).

Covers: log in via the token endpoint (and a wrong password), submit a job (and an invalid
one), list jobs with filters (a queued job's null allocation, a running job's allocation with
null clock and power), job detail, cancel (and cancelling twice), a job that is not there,
budgets listed and created (by a lead; refused to a member), the ledger with its idle rows
(null team), and a bad token.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from api_scene import PASSWORDS, build_scene

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PACKAGE = "wattflow_generated_client"


def _generator() -> list[str]:
    beside = Path(sys.executable).with_name("openapi-python-client")
    found = str(beside) if beside.exists() else shutil.which("openapi-python-client")
    assert found, "openapi-python-client is not installed (requirements-dev.txt pins it)"
    return [found]


@pytest.fixture
def generated(live_server, tmp_path):
    """Generate the client from the live server's schema and import it."""
    schema = requests.get(f"{live_server.url}/api/schema/", timeout=30)
    assert schema.status_code == 200
    schema_path = tmp_path / "schema.yaml"
    schema_path.write_bytes(schema.content)
    config = tmp_path / "generator.yaml"
    config.write_text("post_hooks: []\n")  # no formatter runs on the generated code
    done = subprocess.run(
        [
            *_generator(),
            "generate",
            "--path",
            str(schema_path),
            "--output-path",
            str(tmp_path / PACKAGE),
            "--meta",
            "none",
            "--config",
            str(config),
            "--fail-on-warning",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        package = importlib.import_module(PACKAGE)
        yield package
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def _api(name: str):
    return importlib.import_module(f"{PACKAGE}.api.{name}")


def _models():
    return importlib.import_module(f"{PACKAGE}.models")


def _login(generated, live_server, persona: str) -> str:
    models = _models()
    auth_token_create = _api("auth_token.auth_token_create")
    public = generated.Client(base_url=live_server.url, raise_on_unexpected_status=True)
    response = auth_token_create.sync_detailed(
        client=public,
        body=models.AuthTokenRequest(username=f"fuzz_{persona}", password=PASSWORDS[persona]),
    )
    assert response.status_code == 200, response.content
    assert isinstance(response.parsed, models.AuthToken)
    return response.parsed.token


def _client(generated, live_server, token: str):
    return generated.AuthenticatedClient(
        base_url=live_server.url, token=token, prefix="Token", raise_on_unexpected_status=True
    )


def test_generated_client_logs_in_submits_lists_cancels_and_budgets(generated, live_server):
    scene = build_scene()
    models = _models()
    jobs_create = _api("jobs.jobs_create")
    jobs_list = _api("jobs.jobs_list")
    jobs_retrieve = _api("jobs.jobs_retrieve")
    jobs_cancel = _api("jobs.jobs_cancel_create")
    jobs_allocations = _api("jobs.jobs_allocations_list")
    budgets_list = _api("budgets.budgets_list")
    budgets_create = _api("budgets.budgets_create")
    auth_token_create = _api("auth_token.auth_token_create")

    # A wrong password: 400 with the error body, not an exception.
    public = generated.Client(base_url=live_server.url, raise_on_unexpected_status=True)
    refused = auth_token_create.sync_detailed(
        client=public, body=models.AuthTokenRequest(username="fuzz_member", password="wrong")
    )
    assert refused.status_code == 400
    assert isinstance(refused.parsed, models.ApiError)
    assert "non_field_errors" in refused.parsed.additional_properties

    member = _client(generated, live_server, _login(generated, live_server, "member"))

    # Submit: the generated client sends JSON and parses the queued job (null allocation).
    submitted = jobs_create.sync_detailed(
        client=member,
        body=models.JobRequest(
            name="generated client job",
            team="vision",
            workload="resnet50",
            global_batch_size=256,
            total_iterations=500,
            min_gpus=1,
            max_gpus=2,
        ),
    )
    assert submitted.status_code == 201, submitted.content
    job = submitted.parsed
    assert isinstance(job, models.Job)
    assert job.state == models.StateEnum.QUEUED
    assert job.current_allocation is None
    assert job.owner == "fuzz_member"

    # Invalid input: 400, per-field messages, parsed.
    invalid = jobs_create.sync_detailed(
        client=member,
        body=models.JobRequest(
            name="bad", team="vision", workload="resnet50", global_batch_size=256,
            total_iterations=0,
        ),
    )  # fmt: skip
    assert invalid.status_code == 400
    assert "total_iterations" in invalid.parsed.additional_properties

    # List with filters: queued jobs of the team; then running ones with their allocation.
    queued = jobs_list.sync(client=member, team="vision", state=[models.JobsListStateItem.QUEUED])
    assert isinstance(queued, models.PaginatedJobList)
    queued_ids = {j.id for j in queued.results}
    assert {job.id, scene.queued.pk} <= queued_ids
    assert all(j.state == models.StateEnum.QUEUED for j in queued.results)
    running = jobs_list.sync(client=member, state=[models.JobsListStateItem.RUNNING])
    assert [j.id for j in running.results] == [scene.running.pk]
    allocation = running.results[0].current_allocation
    assert isinstance(allocation, models.JobAllocation)
    assert len(allocation.gpus) == 2
    assert allocation.sm_clock_mhz is None and allocation.ended_at is None
    everything = jobs_list.sync(client=member)
    assert everything.count == 4  # three of the scene and the one just submitted

    history = jobs_allocations.sync(client=member, id=scene.running.pk)
    assert [a.id for a in history] == [allocation.id]

    # Detail, cancel, cancel again (409), and a job that is not there (404).
    detail = jobs_retrieve.sync(client=member, id=job.id)
    assert isinstance(detail, models.Job) and detail.name == "generated client job"
    cancelled = jobs_cancel.sync_detailed(client=member, id=job.id)
    assert cancelled.status_code == 200
    assert cancelled.parsed.state == models.StateEnum.CANCELLED
    again = jobs_cancel.sync_detailed(client=member, id=job.id)
    assert again.status_code == 409
    assert again.parsed.detail
    missing = jobs_retrieve.sync_detailed(client=member, id=987654321)
    assert missing.status_code == 404
    assert isinstance(missing.parsed, models.ApiError) and missing.parsed.detail

    # Budgets: listed for the member; a lead creates one; the member may not.
    listed = budgets_list.sync(client=member, team="vision")
    assert [b.id for b in listed.results] == [scene.budget.pk]
    new_budget = models.BudgetRequest(
        team="vision",
        period_start=scene.budget.period_end,
        period_end=scene.budget.period_end.replace(year=scene.budget.period_end.year + 1),
        carbon_limit_kg=120.0,
    )
    forbidden = budgets_create.sync_detailed(client=member, body=new_budget)
    assert forbidden.status_code == 403
    assert forbidden.parsed.detail
    lead = _client(generated, live_server, _login(generated, live_server, "lead"))
    created = budgets_create.sync_detailed(client=lead, body=new_budget)
    assert created.status_code == 201, created.content
    assert created.parsed.carbon_limit_kg == 120.0
    assert created.parsed.energy_limit_kwh is None
    assert budgets_list.sync(client=lead).count == 2


def test_generated_client_reads_null_team_ledger_rows_and_refuses_bad_tokens(
    generated, live_server
):
    build_scene()
    models = _models()
    ledger_list = _api("telemetry.telemetry_ledger_list")
    ledger_totals = _api("telemetry.telemetry_ledger_totals_retrieve")
    jobs_list = _api("jobs.jobs_list")

    admin = _client(generated, live_server, _login(generated, live_server, "admin"))
    rows = ledger_list.sync(client=admin)
    assert isinstance(rows, models.PaginatedLedgerEntryList)
    assert sorted((r.team, r.job is None) for r in rows.results if r.team is not None) == [
        ("vision", False)
    ]
    assert [r.team for r in rows.results if r.job is None] == [None]
    totals = ledger_totals.sync(client=admin, team="vision")
    assert totals.energy_j == pytest.approx(900000.0)

    stranger = _client(generated, live_server, "not-a-token")
    refused = jobs_list.sync_detailed(client=stranger)
    assert refused.status_code == 401
    assert isinstance(refused.parsed, models.ApiError) and refused.parsed.detail
