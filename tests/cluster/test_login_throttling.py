"""Login throttling (django-axes, config/auth.py) on the login page, the admin's login and
POST /api/auth-token/, and optional API token expiry (WATTFLOW_API_TOKEN_TTL_S)."""

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

RIGHT = "vera_member-password"


def login_page(client: Client, password: str, username: str = "vera_member"):
    return client.post("/accounts/login/", {"username": username, "password": password})


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def token_endpoint(client: APIClient, password: str, username: str = "vera_member"):
    return client.post("/api/auth-token/", {"username": username, "password": password})


def test_thirty_wrong_passwords_then_the_right_one_do_not_sign_in_on_the_login_page(
    member, settings
):
    client = Client()
    statuses = [login_page(client, f"guess-{i}").status_code for i in range(30)]

    response = login_page(client, RIGHT)

    # Wrong passwords re-show the form (200) until the limit, then the pair is locked (429).
    limit = settings.AXES_FAILURE_LIMIT
    assert statuses[: limit - 1] == [200] * (limit - 1)
    assert set(statuses[limit:]) == {429}
    assert response.status_code == 429
    assert not signed_in(client)
    assert "Too many failed logins" in response.content.decode()
    assert int(response["Retry-After"]) == settings.AXES_COOLOFF_TIME.total_seconds()


def test_thirty_wrong_passwords_then_the_right_one_get_no_api_token(member):
    client = APIClient()
    statuses = [token_endpoint(client, f"guess-{i}").status_code for i in range(30)]

    response = token_endpoint(client, RIGHT)

    assert 400 in statuses and statuses[-1] == 429
    assert response.status_code == 429
    assert response.json()["detail"].startswith("Too many failed logins")
    assert "token" not in response.json()
    assert not Token.objects.filter(user=member).exists()


def test_failures_on_one_path_lock_the_other(member):
    for i in range(10):
        token_endpoint(APIClient(), f"guess-{i}")

    client = Client()
    assert login_page(client, RIGHT).status_code == 429
    assert not signed_in(client)
    assert (
        Client().post("/admin/login/", {"username": "vera_member", "password": RIGHT}).status_code
        == 429
    )


def test_a_username_longer_than_axes_stores_is_a_failed_login_and_counted(db, settings):
    # (axes stores 255 characters of the username: a longer one failed its insert, a 500
    # on all three paths)
    long_name = "u" * 1000
    assert login_page(Client(), "x", username=long_name).status_code == 200
    assert token_endpoint(APIClient(), "x", username=long_name).status_code == 400
    admin = Client().post("/admin/login/", {"username": long_name, "password": "x"})
    assert admin.status_code == 200

    # and it is counted like any other: the pair is locked at the limit
    for _ in range(settings.AXES_FAILURE_LIMIT):
        token_endpoint(APIClient(), "x", username=long_name)
    assert token_endpoint(APIClient(), "x", username=long_name).status_code == 429


def test_the_lock_is_per_username_and_address(member, make_user, team):
    make_user("walt_member", team=team)
    for i in range(10):
        login_page(Client(), f"guess-{i}")

    # Another user from the same address, and the same user from another address, sign in.
    other_user = Client()
    assert login_page(other_user, "walt_member-password", "walt_member").status_code == 302
    assert signed_in(other_user)
    elsewhere = Client(REMOTE_ADDR="10.1.2.3")
    assert login_page(elsewhere, RIGHT).status_code == 302
    assert signed_in(elsewhere)


def test_fewer_failures_than_the_limit_still_sign_in_and_reset_the_count(member, settings):
    client = Client()
    for _ in range(2):
        for i in range(settings.AXES_FAILURE_LIMIT - 1):
            assert login_page(client, f"guess-{i}").status_code == 200
        assert login_page(client, RIGHT).status_code == 302
        assert signed_in(client)
        client.logout()


def test_the_lock_lifts_once_a_cool_off_passes_without_another_attempt(member, settings):
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        for i in range(10):
            login_page(Client(), f"guess-{i}")
        assert login_page(Client(), RIGHT).status_code == 429

    cool_off = settings.AXES_COOLOFF_TIME
    retry = start + cool_off - timedelta(seconds=5)
    with time_machine.travel(retry, tick=False):
        assert token_endpoint(APIClient(), RIGHT).status_code == 429
    # That attempt during the lock started the cool-off again.
    with time_machine.travel(start + cool_off + timedelta(seconds=5), tick=False):
        assert token_endpoint(APIClient(), RIGHT).status_code == 429
    with time_machine.travel(start + 2 * cool_off + timedelta(seconds=30), tick=False):
        client = Client()
        assert login_page(client, RIGHT).status_code == 302
        assert signed_in(client)


# --- token expiry ----------------------------------------------------------------------------


def _with_token(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_tokens_never_expire_by_default(member, settings):
    assert settings.WATTFLOW_API_TOKEN_TTL_S == 0
    token = Token.objects.create(user=member)

    with time_machine.travel(timezone.now() + timedelta(days=3650)):
        assert _with_token(token.key).get("/api/jobs/").status_code == 200


@pytest.mark.parametrize("ttl_s", [60, 86400])
def test_an_expired_token_is_refused_and_a_fresh_one_is_issued(member, settings, ttl_s):
    settings.WATTFLOW_API_TOKEN_TTL_S = ttl_s
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        old = token_endpoint(APIClient(), RIGHT).json()["token"]
        assert _with_token(old).get("/api/jobs/").status_code == 200

    with time_machine.travel(start + timedelta(seconds=ttl_s - 1), tick=False):
        assert _with_token(old).get("/api/jobs/").status_code == 200
        # Asking again before expiry hands back the same token.
        assert token_endpoint(APIClient(), RIGHT).json()["token"] == old

    with time_machine.travel(start + timedelta(seconds=ttl_s), tick=False):
        refused = _with_token(old).get("/api/jobs/")
        assert refused.status_code == 401
        assert "Token expired" in refused.json()["detail"]
        assert refused["WWW-Authenticate"] == "Token"

        new = token_endpoint(APIClient(), RIGHT).json()["token"]
        assert new != old
        assert _with_token(new).get("/api/jobs/").status_code == 200
        assert _with_token(old).get("/api/jobs/").status_code == 401
        assert list(Token.objects.filter(user=member).values_list("key", flat=True)) == [new]


# --- the address failures are counted by ------------------------------------------------------


def test_without_a_trusted_proxy_a_forged_forwarded_for_does_not_escape_the_lock(member):
    for i in range(10):
        login_page(Client(HTTP_X_FORWARDED_FOR=f"198.51.100.{i}"), f"guess-{i}")

    client = Client(HTTP_X_FORWARDED_FOR="198.51.100.200")
    assert login_page(client, RIGHT).status_code == 429
    assert not signed_in(client)


def test_behind_one_trusted_proxy_the_forwarded_client_is_counted(member, settings):
    settings.WATTFLOW_TRUSTED_PROXY_COUNT = 1
    # All requests come from the proxy (REMOTE_ADDR 127.0.0.1); the client invents a left-most
    # entry, the proxy appends the real one.
    for i in range(10):
        attacker = Client(HTTP_X_FORWARDED_FOR=f"10.9.9.{i}, 203.0.113.66")
        login_page(attacker, f"guess-{i}")
    locked = Client(HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.66")
    assert login_page(locked, RIGHT).status_code == 429

    # The same user from another real client behind the same proxy is not locked out.
    colleague = Client(HTTP_X_FORWARDED_FOR="203.0.113.77")
    assert login_page(colleague, RIGHT).status_code == 302
    assert signed_in(colleague)


def test_the_schema_documents_the_token_endpoint_as_open_and_throttled(db):
    from drf_spectacular.generators import SchemaGenerator

    operation = SchemaGenerator().get_schema(request=None, public=True)["paths"][
        "/api/auth-token/"
    ]["post"]

    assert not operation.get("security")  # no requirement: anyone may ask
    assert {"200", "400", "429"} <= set(operation["responses"])
    token_schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert token_schema == {"$ref": "#/components/schemas/AuthToken"}
