"""JSON bodies nested deeper than any request needs are a 400 parse error on every endpoint,
signed in or not (a decoder's RecursionError was a 500, found by a live probe)."""

import pytest

from config.parsers import MAX_DEPTH, too_deep

DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("url", ["/api/auth-token/", "/api/jobs/", "/api/budgets/"])
def test_a_body_nested_past_the_decoder_is_a_400(api_client, member, url):
    client = api_client(member)
    response = client.post(url, DEEP, content_type="application/json")
    assert response.status_code == 400
    assert "nested" in response.json()["detail"]


def test_the_token_endpoint_refuses_it_before_signing_in(client):
    response = client.post("/api/auth-token/", DEEP, content_type="application/json")
    assert response.status_code == 400


def test_a_body_just_past_the_depth_limit_is_refused_and_one_at_it_is_parsed(api_client, member):
    client = api_client(member)
    at = '{"name": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    past = '{"name": ' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}"
    ok = client.post("/api/jobs/", at, content_type="application/json")
    assert ok.status_code == 400 and "name" in ok.json()  # parsed: a field error
    refused = client.post("/api/jobs/", past, content_type="application/json")
    assert refused.status_code == 400 and "nested" in refused.json()["detail"]


def test_depth_counts_lists_and_objects():
    assert not too_deep({"a": [1, {"b": [2]}]}, limit=4)
    assert too_deep({"a": [1, {"b": [2]}]}, limit=3)
    assert not too_deep("flat", limit=0)


# A number past any float (1e400) was parsed to infinity where NaN and Infinity are refused
# (a fifth live probe): a 500 on the GPU API's ``node`` (``int(inf)`` in the primary-key
# lookup), and a team or a GPU UUID named "inf" from a number.
@pytest.mark.parametrize("number", ["1e400", "-1e400", "1" + "0" * 400 + ".0"])
def test_a_number_past_any_float_is_a_parse_error_not_infinity(api_client, admin_user, number):
    client = api_client(admin_user)
    node = client.post(
        "/api/nodes/", {"name": "node-01", "switch_label": "s1", "gpu_model": "A100"}, format="json"
    ).json()
    gpu = (
        '{"node": %s, "index": 0, "uuid": "GPU-1", "model": "A100", "memory_mb": 1, '
        '"default_power_limit_w": 400, "min_power_limit_w": 100, "max_power_limit_w": 400}'
    )
    response = client.post("/api/gpus/", gpu % number, content_type="application/json")
    assert response.status_code == 400, response.content
    assert "out of range" in response.json()["detail"].lower()
    team = client.post(
        "/api/teams/", '{"name": ' + number + ', "slug": "x"}', content_type="application/json"
    )
    assert team.status_code == 400
    from cluster.models import Gpu, Team

    assert not Gpu.objects.exists() and not Team.objects.filter(slug="x").exists()
    ok = client.post("/api/gpus/", gpu % node["id"], content_type="application/json")
    assert ok.status_code == 201, ok.content


def test_a_key_given_twice_is_a_parse_error_not_the_last_one(api_client, admin_user, team):
    # {"name": "a", "name": "b"} was read as "b": a body two readers (a proxy's log, an
    # audit, Django) can read two ways. Refused, naming the key.
    client = api_client(admin_user)
    response = client.patch(
        f"/api/teams/{team.slug}/", '{"name": "a", "name": "b"}', content_type="application/json"
    )
    assert response.status_code == 400
    assert "'name'" in response.json()["detail"]
    team.refresh_from_db()
    assert team.name not in ("a", "b")
    inner = client.post(
        "/api/budgets/", f'{{"team": "{team.slug}", "x": {{"a": 1, "a": 2}}}}',
        content_type="application/json",
    )  # fmt: skip
    assert inner.status_code == 400 and "'a'" in inner.json()["detail"]
