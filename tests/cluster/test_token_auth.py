"""API tokens: issued by `manage.py drf_create_token` or POST /api/auth-token/, and accepted
in the Authorization header."""

import io

from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient


def test_drf_create_token_command_issues_a_working_token(member):
    out = io.StringIO()

    call_command("drf_create_token", "vera_member", stdout=out)

    token = Token.objects.get(user=member)
    assert token.key in out.getvalue()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert client.get("/api/jobs/").status_code == 200


def test_auth_token_endpoint_trades_a_password_for_a_token(member):
    response = APIClient().post(
        "/api/auth-token/", {"username": "vera_member", "password": "vera_member-password"}
    )

    assert response.status_code == 200
    assert response.json() == {"token": Token.objects.get(user=member).key}


def test_auth_token_endpoint_refuses_a_wrong_password(member):
    response = APIClient().post(
        "/api/auth-token/", {"username": "vera_member", "password": "wrong"}
    )

    assert response.status_code == 400
    assert list(response.json()) == ["non_field_errors"]
    assert not Token.objects.filter(user=member).exists()


def test_an_unknown_token_is_refused(db):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef0123456789abcdef01234567")

    response = client.get("/api/jobs/")

    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid token."}


def test_a_token_with_a_nul_is_refused_as_unknown(db):
    # The key went to PostgreSQL, which refuses NUL in text: a DataError, a 500 on every
    # API endpoint (a sixth probe, through the test client; daphne itself answers 400 to a
    # header with a NUL, so this guards the view behind any other server).
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef\x00")

    response = client.get("/api/jobs/")

    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid token."}
