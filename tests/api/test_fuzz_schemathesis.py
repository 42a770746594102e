"""Schema-driven fuzzing of the whole REST API with schemathesis, against a live server and the
real PostgreSQL, as member, lead, admin and agent (node token).

Every operation in ``/api/schema/`` is exercised with schema-valid ("positive") and
schema-invalid ("negative") requests, bounded in examples per operation and derandomized
(the same requests on every run). Operations with a path parameter run twice: with generated
ids, and with the id of a real object of the scene, so that detail, update and cancel reach
real rows. Each response is checked for:

- no 5xx (``not_a_server_error``);
- a status code the schema documents for the operation (``status_code_conformance``);
- a documented content type and a body that validates against the documented schema
  (``content_type_conformance``, ``response_schema_conformance``).

Every failing request is recorded (not just the first), the run goes on, and the test fails
at the end listing each distinct failure (persona, operation, check, status and an example
request). The figures (operations, requests, 5xx, seconds) are shown in pytest's summary
(tests/api/conftest.py); ``WATTFLOW_FUZZ_EXAMPLES``
(default 6) sets the examples per operation and generation mode. docs/reliability.md
("Fuzzing") has the command and the figures.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict

import pytest
import requests
import schemathesis
from api_scene import build_scene
from fuzz_figures import FUZZ_TALLIES, Tally
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core import NOT_SET
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

EXAMPLES = int(os.environ.get("WATTFLOW_FUZZ_EXAMPLES", "6"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
MODES = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
PERSONAS = ["member", "lead", "admin", "agent"]


def _real_ids(scene) -> dict[str, object]:
    """Path-parameter values of real objects, by path template."""
    gpu = scene.node.gpus.order_by("index").first()
    return {
        "/api/jobs/{id}/": {"id": scene.running.pk},
        "/api/jobs/{id}/allocations/": {"id": scene.running.pk},
        "/api/jobs/{id}/cancel/": {"id": scene.queued.pk},
        "/api/budgets/{id}/": {"id": scene.budget.pk},
        "/api/nodes/{id}/": {"id": scene.node.pk},
        "/api/nodes/{id}/issue-token/": {"id": scene.node.pk},
        "/api/gpus/{id}/": {"id": gpu.pk},
        "/api/teams/{slug}/": {"slug": scene.team.slug},
    }


def _describe(case, response) -> str:
    body = case.body if not isinstance(case.body, bytes | bytearray) else repr(case.body[:200])
    text = "" if body is NOT_SET else json.dumps(body, default=str)[:300]
    query = f"?{case.query}" if case.query else ""
    return f"{case.method} {case.formatted_path}{query} {text} -> {response.status_code}"


def _run_operation(operation, *, base_url, session, headers, persona, tally, path_parameters):
    label = operation.label
    tally.operations.add(label)
    # With real ids fixed, the request is checked as a valid one would be; negative cases come
    # from the generated-id variant.
    for mode in [GenerationMode.POSITIVE] if path_parameters else MODES:
        strategy = operation.as_strategy(
            generation_mode=mode,
            **({"path_parameters": path_parameters} if path_parameters else {}),
        )

        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def exercise(case):
            response = case.call(base_url=base_url, session=session, headers=headers, timeout=30)
            tally.requests += 1
            tally.statuses[response.status_code] += 1
            try:
                case.validate_response(response, checks=CHECKS)
            except (AssertionError, BaseExceptionGroup) as exc:  # Failure or FailureGroup
                failures = getattr(exc, "exceptions", None) or [exc]
                for failure in failures:
                    title = getattr(failure, "title", type(failure).__name__)
                    key = (persona, label, title)
                    count, *_ = tally.failures.get(key, (0,))
                    message = str(getattr(failure, "message", failure)).splitlines()
                    first = message[0][:200] if message else ""
                    example = _describe(case, response)
                    tally.failures[key] = (count + 1, example, first)

        try:
            exercise()
        except Unsatisfiable:
            # Nothing of this operation can be made invalid in this mode (e.g. no parameters
            # and no body): there is no such request to send.
            tally.unsatisfiable.add(f"{label} ({mode.value})")


@pytest.mark.parametrize("persona", PERSONAS)
def test_fuzz_api_as(persona, live_server):
    scene = build_scene()
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/")
    headers = {"Authorization": f"Token {scene.tokens[persona]}"}
    real = _real_ids(scene)
    tally = Tally()
    started = time.monotonic()
    session = requests.Session()
    for result in schema.get_all_operations():
        operation = result.ok()
        is_agent_op = operation.path.startswith("/api/agent/")
        # Agent tokens speak only to the agent API; users' tokens to the rest (crossing them
        # is an authorization matter, tested in tests/cluster and tests/telemetry).
        if is_agent_op != (persona == "agent"):
            continue
        variants = [None]
        if operation.path in real and operation.method.upper() != "DELETE":
            variants.append(real[operation.path])
        for path_parameters in variants:
            _run_operation(
                operation,
                base_url=live_server.url,
                session=session,
                headers=headers,
                persona=persona,
                tally=tally,
                path_parameters=path_parameters,
            )

    tally.seconds = time.monotonic() - started
    FUZZ_TALLIES[persona] = tally
    by_operation = defaultdict(list)
    for (_, label, title), (count, example, message) in sorted(tally.failures.items()):
        by_operation[label].append(f"  {title} x{count}: {message}\n    e.g. {example}")
    report = "\n".join(f"{label}\n" + "\n".join(lines) for label, lines in by_operation.items())
    assert tally.requests > 0
    assert not tally.failures, f"{persona}: {tally.line()}\n{report}"
