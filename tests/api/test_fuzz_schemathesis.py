"""Schema-driven fuzzing of the whole REST API with schemathesis, against a live server and the
real PostgreSQL, as member, lead, admin and agent (node token).

Every operation in ``/api/schema/`` is exercised with schema-valid ("positive") and
schema-invalid ("negative") requests, bounded in examples per operation and derandomized
(the same requests on every run). Operations with a path parameter run twice: with generated
ids, and with the id of a real object of the scene, so that detail, update and cancel reach
real rows. Then every body-taking operation gets a valid body with each of its fields, one
at a time, replaced by a hand-picked hostile value (``HOSTILE``: "NaN", "Infinity", 10**20,
NUL, control characters, 100 kB, wrong shapes), which random generation rarely produces.
Each response is checked for:

- no 5xx (``not_a_server_error``);
- a status code the schema documents for the operation (``status_code_conformance``);
- a documented content type and a body that validates against the documented schema
  (``content_type_conformance``, ``response_schema_conformance``).

Every failing request is recorded (not just the first), the run goes on, and the test fails
at the end listing each distinct failure (persona, operation, check, hostile field, an
example request). The figures (operations, requests, 5xx, seconds) are shown in pytest's
summary (tests/api/conftest.py). ``WATTFLOW_FUZZ_EXAMPLES`` (default 5) sets the examples
per operation and generation mode. docs/reliability.md ("Fuzzing") has the command and the
figures.
"""

from __future__ import annotations

import copy
import json
import os
import time
import uuid
from collections import defaultdict
from datetime import timedelta

import pytest
import requests
import schemathesis
from api_scene import build_scene
from django.utils import timezone
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

EXAMPLES = int(os.environ.get("WATTFLOW_FUZZ_EXAMPLES", "5"))
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


# Values a careful tester types by hand, which random generation rarely hits: non-finite
# numbers as DRF's float fields parse them from strings, integers past 64 bits, NUL and
# control characters, a 100 kB string, wrong shapes. Each replaces, one at a time, each leaf
# of a valid body (the first item of a list standing for all), so that nothing but the
# hostile value can make the request fail.
HOSTILE = ["NaN", "Infinity", "-Infinity", 1e308, 10**20, -(10**20), "\x00", "a\x07b",
           "x" * 100_000, [], {}]  # fmt: skip


def _valid_bodies(scene) -> dict[str, dict[tuple[str, str], dict]]:
    """Per persona, (method, path) -> a body the API accepts as it is."""
    now = timezone.now()
    gpu = scene.node.gpus.order_by("index").first()
    far = now.replace(microsecond=0) + timedelta(days=3650)
    job = {
        "name": "hostile", "team": scene.team.slug, "workload": "resnet50",
        "global_batch_size": 256, "total_iterations": 1000, "min_gpus": 1, "max_gpus": 2,
        "min_batch_size": 128, "max_batch_size": 512, "base_lr": 0.1, "max_lr": 0.4,
        "slowdown_tolerance": 0.1, "priority": 0, "command": "python train.py",
    }  # fmt: skip
    budget = {
        "team": scene.team.slug, "period_start": far.isoformat(),
        "period_end": (far + timedelta(days=30)).isoformat(), "energy_limit_kwh": 100.0,
        "carbon_limit_kg": 50.0, "warn_fraction": 0.8, "hard_limit_action": "hold_queue",
    }  # fmt: skip
    return {
        "lead": {
            ("POST", "/api/jobs/"): job,
            ("POST", "/api/budgets/"): budget,
            # Another period than the POST's: budgets of one team may not overlap.
            ("PATCH", "/api/budgets/{id}/"): {
                **budget,
                "period_start": (far + timedelta(days=60)).isoformat(),
                "period_end": (far + timedelta(days=90)).isoformat(),
            },
        },
        "admin": {
            ("POST", "/api/teams/"): {"name": "Hostile", "slug": "hostile"},
            ("POST", "/api/nodes/"): {
                "name": "hostile-node",
                "switch_label": "s",
                "rack_label": "r",
                "gpu_model": "A100",
                "status": "healthy",
            },  # fmt: skip
            ("POST", "/api/gpus/"): {
                "node": scene.node.pk,
                "index": 9,
                "uuid": "GPU-hostile",
                "model": "A100",
                "memory_mb": 40960,
                "default_power_limit_w": 400,
                "min_power_limit_w": 100,
                "max_power_limit_w": 400,
                "supported_sm_clocks_mhz": [1410, 1200],
            },  # fmt: skip
        },
        "agent": {
            ("POST", "/api/agent/heartbeat/"): {"ts": now.isoformat()},
            ("POST", "/api/agent/samples/"): {
                "samples": [
                    {
                        "gpu_uuid": gpu.uuid,
                        "ts": now.isoformat(),
                        "power_w": 250.0,
                        "energy_j": 1000.0,
                        "util_pct": 50.0,
                        "mem_used_mib": 1000.0,
                        "temp_c": 60.0,
                        "sm_clock_mhz": 1410,
                        "power_limit_w": 400.0,
                    }
                ]
            },  # fmt: skip
            ("POST", "/api/agent/job-events/"): {
                "events": [
                    {
                        "event_id": str(uuid.uuid4()),
                        "job_id": scene.running.pk,
                        "allocation_id": scene.running.current_allocation_id,
                        "kind": "progress",
                        "ts": now.isoformat(),
                        "iterations": 20.0,
                    }
                ]
            },  # fmt: skip
            ("POST", "/api/agent/register/"): {
                "name": scene.node.name,
                "gpus": [
                    {
                        "uuid": gpu.uuid,
                        "index": gpu.index,
                        "model": "A100",
                        "memory_mb": 40960,
                        "default_power_limit_w": 400.0,
                        "min_power_limit_w": 100.0,
                        "max_power_limit_w": 400.0,
                        "max_sm_clock_mhz": 1410,
                    }
                ],
            },  # fmt: skip
        },
    }


def _leaves(body, prefix=()):
    """Paths to the scalar leaves of a JSON body (first item of each list)."""
    if isinstance(body, dict):
        for key, value in body.items():
            yield from _leaves(value, (*prefix, key))
    elif isinstance(body, list) and body:
        yield from _leaves(body[0], (*prefix, 0))
    else:
        yield prefix


def _replaced(body, path, value):
    body = copy.deepcopy(body)
    target = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    for event in body.get("events", []) if isinstance(body, dict) else []:
        if path[-1] != "event_id" and isinstance(event, dict):
            event["event_id"] = str(uuid.uuid4())  # a fresh event, not a replay
    return body


def _run_hostile(operation, body, *, path_parameters, base_url, session, headers, persona, tally):
    def case(payload):
        return operation.Case(
            body=payload, media_type="application/json", path_parameters=path_parameters
        )

    baseline = case(body).call(base_url=base_url, session=session, headers=headers, timeout=60)
    tally.requests += 1
    tally.statuses[baseline.status_code] += 1
    assert baseline.status_code < 300, (
        f"the valid body of {operation.label} is refused: {baseline.status_code} "
        f"{baseline.text[:300]}"
    )
    for path in _leaves(body):
        for value in HOSTILE:
            _send(
                case(_replaced(body, path, value)),
                base_url=base_url,
                session=session,
                headers=headers,
                persona=persona,
                tally=tally,
                kind=f" [hostile {'.'.join(map(str, path))}]",
            )


def _send(case, *, base_url, session, headers, persona, tally, kind="") -> None:
    """Send one case, count it, and record each check it fails under (persona, operation,
    failure title)."""
    response = case.call(base_url=base_url, session=session, headers=headers, timeout=60)
    tally.requests += 1
    tally.statuses[response.status_code] += 1
    try:
        case.validate_response(response, checks=CHECKS)
    except (AssertionError, BaseExceptionGroup) as exc:  # Failure or FailureGroup
        for failure in getattr(exc, "exceptions", None) or [exc]:
            title = getattr(failure, "title", type(failure).__name__) + kind
            key = (persona, case.operation.label, title)
            count, *_ = tally.failures.get(key, (0,))
            message = str(getattr(failure, "message", failure)).splitlines()
            first = message[0][:200] if message else ""
            tally.failures[key] = (count + 1, _describe(case, response), first)


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
            _send(case, base_url=base_url, session=session, headers=headers, persona=persona,
                  tally=tally)  # fmt: skip

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
    # Hostile values first, while the scene is as built (valid bodies stay valid).
    bodies = _valid_bodies(scene).get(persona, {})
    for result in schema.get_all_operations():
        operation = result.ok()
        body = bodies.get((operation.method.upper(), operation.path))
        if body is not None:
            _run_hostile(
                operation,
                body,
                path_parameters=real.get(operation.path),
                base_url=live_server.url,
                session=session,
                headers=headers,
                persona=persona,
                tally=tally,
            )
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
