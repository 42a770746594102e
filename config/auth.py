"""Who may log in, how often, and for how long a token holds.

- Login throttling is django-axes: ``LoginThrottleBackend`` (first in
  ``AUTHENTICATION_BACKENDS``) refuses a username+address that failed
  ``WATTFLOW_LOGIN_FAILURE_LIMIT`` times until ``WATTFLOW_LOGIN_COOLOFF_S`` has passed. It
  guards every HTTP login: the login page, the admin's, and ``POST /api/auth-token/``.
- ``ExpiringTokenAuthentication`` refuses an API token older than ``WATTFLOW_API_TOKEN_TTL_S``
  (0 = never) with 401; ``POST /api/auth-token/`` then issues a fresh one. Node agents' tokens
  are a different scheme (``telemetry/api/authentication.py``) and are not affected.
"""

from __future__ import annotations

import ipaddress
from datetime import timedelta

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_cool_off
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.db import transaction
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' lockout check for every login that comes with a request.

    ``authenticate()`` without a request is no HTTP login (the test client's ``login()``, a
    shell): there is no address to count failures by, so it is left to the next backend instead
    of failing with axes' "request required" error."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


def client_address(request) -> str | None:
    """The address failed logins are counted by (``AXES_CLIENT_IP_CALLABLE``).

    The connection's address, unless ``WATTFLOW_TRUSTED_PROXY_COUNT`` reverse proxies stand in
    front (compose: 1, its Caddy): then the entry that many from the right of
    ``X-Forwarded-For``, the one the nearest trusted proxy wrote. Entries further left are the
    client's to invent and never used. Pinned here rather than left to axes' default, which
    would start trusting the header if django-ipware were ever installed."""
    remote = request.META.get("REMOTE_ADDR")
    count = settings.WATTFLOW_TRUSTED_PROXY_COUNT
    if count <= 0:
        return remote
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    hops = [h for h in hops if h]
    if len(hops) < count:
        return remote
    try:
        return str(ipaddress.ip_address(hops[-count]))
    except ValueError:
        return remote


# The length of the username axes stores with each failed login (``AccessAttempt.username``).
AXES_USERNAME_LENGTH = 255


def client_username(request, credentials=None) -> str | None:
    """The username failed logins are counted by (``AXES_USERNAME_CALLABLE``): axes' own
    choice (the credentials, else the posted ``username``), cut to the length its records
    hold. A longer one (no user has one: usernames are at most 150 characters) failed the
    record's insert, and every login path answered 500."""
    if credentials:
        username = credentials.get("username")
    else:
        data = getattr(request, "data", request.POST)
        username = data.get("username") if hasattr(data, "get") else None
    return username[:AXES_USERNAME_LENGTH] if isinstance(username, str) else username


def lockout_message(request) -> str:
    cool_off = get_cool_off(request)
    minutes = max(1, round(cool_off.total_seconds() / 60)) if cool_off else None
    wait = (
        f"try again in {minutes} minute{'s' if minutes != 1 else ''}" if minutes else "ask an admin"
    )
    return f"Too many failed logins for this username from this address; {wait}."


def lockout_response(request, original_response=None, credentials=None) -> HttpResponse:
    """What a locked-out login gets (``AXES_LOCKOUT_CALLABLE``): 429 with a JSON ``detail``
    on the API, the login page with the reason otherwise."""
    message = lockout_message(request)
    cool_off = get_cool_off(request)
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": message}, status=429)
    else:
        context = {"form": AuthenticationForm(request), "lockout_message": message}
        response = render(request, "registration/login.html", context, status=429)
    if cool_off:
        response["Retry-After"] = str(int(cool_off.total_seconds()))
    return response


def token_expired(token: Token, now=None) -> bool:
    ttl_s = settings.WATTFLOW_API_TOKEN_TTL_S
    if ttl_s <= 0:
        return False
    return token.created + timedelta(seconds=ttl_s) <= (now or timezone.now())


def fresh_token(user) -> Token:
    """The user's API token, replaced by a new one if it has expired."""
    with transaction.atomic():
        token, created = Token.objects.select_for_update().get_or_create(user=user)
        if not created and token_expired(token):
            token.delete()
            token = Token.objects.create(user=user)
    return token


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF's token scheme (``Authorization: Token <key>``) with an optional lifetime."""

    def authenticate_credentials(self, key):
        if "\x00" in key:
            # PostgreSQL refuses NUL in text: the lookup was a DataError, a 500. No key has one.
            raise exceptions.AuthenticationFailed("Invalid token.")
        user, token = super().authenticate_credentials(key)
        if token_expired(token):
            raise exceptions.AuthenticationFailed(
                "Token expired; trade your username and password for a new one at "
                "POST /api/auth-token/."
            )
        return user, token
