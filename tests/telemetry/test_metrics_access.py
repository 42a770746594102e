"""/metrics answers only the allowed networks (default loopback) or a bearer token."""

import pytest
from django.test import Client

from cluster.models import Team

ELSEWHERE = "203.0.113.5"


@pytest.fixture
def secret_team(db):
    return Team.objects.create(name="Secret Project", slug="secret-project")


def scrape(remote_addr="127.0.0.1", token=None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    return Client(REMOTE_ADDR=remote_addr).get("/metrics", **headers)


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.9", "::1", "::ffff:127.0.0.1"])
def test_the_default_lets_loopback_scrape(secret_team, address):
    response = scrape(address)

    assert response.status_code == 200
    assert b"wattflow_node_power_watts" in response.content


def test_the_default_refuses_everyone_else_without_showing_anything(secret_team, settings):
    assert settings.WATTFLOW_METRICS_TOKEN == ""

    response = scrape(ELSEWHERE)

    assert response.status_code == 403
    assert b"wattflow_" not in response.content and b"secret" not in response.content


def test_a_configured_token_lets_a_scraper_in_from_anywhere(secret_team, settings):
    settings.WATTFLOW_METRICS_TOKEN = "s3cret-scrape-token"

    assert scrape(ELSEWHERE, token="s3cret-scrape-token").status_code == 200
    for wrong in (None, "", "s3cret-scrape-token-x", "S3CRET-SCRAPE-TOKEN"):
        refused = scrape(ELSEWHERE, token=wrong)
        assert refused.status_code == 401, wrong
        assert refused["WWW-Authenticate"] == 'Bearer realm="metrics"'
        assert b"wattflow_" not in refused.content
    # "Token" is the API's scheme, not the scraper's.
    other_scheme = Client(REMOTE_ADDR=ELSEWHERE).get(
        "/metrics", HTTP_AUTHORIZATION="Token s3cret-scrape-token"
    )
    assert other_scheme.status_code == 401


def test_the_allowed_networks_replace_the_default(secret_team, settings):
    settings.WATTFLOW_METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8", "2001:db8::/32"]

    assert scrape("10.20.30.40").status_code == 200
    assert scrape("2001:db8::7").status_code == 200
    assert scrape("127.0.0.1").status_code == 403
    assert scrape("11.0.0.1").status_code == 403


def test_no_network_and_a_token_means_the_token_only(secret_team, settings):
    settings.WATTFLOW_METRICS_ALLOWED_NETWORKS = []
    settings.WATTFLOW_METRICS_TOKEN = "t"

    assert scrape("127.0.0.1").status_code == 401
    assert scrape("127.0.0.1", token="t").status_code == 200
