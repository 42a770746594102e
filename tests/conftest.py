"""Shared fixtures: teams, the personas, an authenticated API client, job and node factories.

Personas (healthchecks-style, one per permission level):
- ``member``: member of ``team`` (vision)
- ``lead``: lead of ``team``
- ``outsider``: member of ``other_team`` (language) only
- ``admin_user``: staff superuser in no team (pytest-django's fixture)
Django tests run against the real PostgreSQL named by DATABASE_URL (pytest-django creates and
drops ``test_<name>``); nothing here fakes the database.
"""

import threading
from collections.abc import Callable

import pytest
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from cluster import services
from cluster.choices import Role
from cluster.models import Gpu, Job, Membership, Node, Team


@pytest.fixture(scope="session", autouse=True)
def _live_server_sends_without_delay():
    """The live server (``live_server``) answers with TCP_NODELAY set. Its handler writes
    the headers and the body in separate sends; with Nagle on, the body waited for the
    client's delayed ACK, about 40 ms a request on loopback (64 -> 20 ms a request measured
    on the 2-core machine), which is most of the schemathesis fuzz's 2,100 requests' time.
    The bytes sent are the same; the live server is a test-only server (production serves
    with daphne)."""
    from django.test.testcases import QuietWSGIRequestHandler

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(QuietWSGIRequestHandler, "disable_nagle_algorithm", True)
        yield


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2's deliberate slowness costs seconds per test on a 2-core machine; what is tested
    # is who may log in, not the hash's strength.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def team(db) -> Team:
    return Team.objects.create(name="Vision", slug="vision")


@pytest.fixture
def other_team(db) -> Team:
    return Team.objects.create(name="Language", slug="language")


@pytest.fixture
def make_user(db, django_user_model) -> Callable:
    def make(username: str, *, team: Team | None = None, role: Role = Role.MEMBER, **extra):
        user = django_user_model.objects.create_user(
            username=username, password=f"{username}-password", **extra
        )
        if team is not None:
            Membership.objects.create(user=user, team=team, role=role)
        return user

    return make


@pytest.fixture
def member(make_user, team):
    return make_user("vera_member", team=team, role=Role.MEMBER)


@pytest.fixture
def lead(make_user, team):
    return make_user("liam_lead", team=team, role=Role.LEAD)


@pytest.fixture
def outsider(make_user, other_team):
    return make_user("otto_outsider", team=other_team, role=Role.MEMBER)


@pytest.fixture
def personas(member, lead, outsider, admin_user) -> dict:
    return {"member": member, "lead": lead, "outsider": outsider, "admin": admin_user}


@pytest.fixture
def api_client(db) -> Callable[..., APIClient]:
    """``api_client(user)``: a client authenticated the real way, with a DRF token header;
    ``api_client()`` is anonymous."""

    def make(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            token, _ = Token.objects.get_or_create(user=user)
            client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return make


@pytest.fixture
def make_job(db) -> Callable[..., Job]:
    """Submit a job through the real service; keyword arguments override the defaults."""

    def make(*, owner, team: Team, **overrides) -> Job:
        values = {
            "name": "resnet50 baseline",
            "workload": "resnet50",
            "total_iterations": 1000,
            "global_batch_size": 256,
            "min_gpus": 1,
            "max_gpus": 4,
            "min_batch_size": 128,
            "max_batch_size": 512,
        }
        values.update(overrides)
        return services.submit_job(owner=owner, team=team, **values)

    return make


@pytest.fixture
def make_node(db) -> Callable[..., Node]:
    """A node with ``gpus`` A100-like GPUs (power 100..400 W, clocks 1410/1200/1005 MHz)."""

    def make(name: str = "node-01", *, gpus: int = 8, switch_label: str = "switch-1") -> Node:
        node = Node.objects.create(
            name=name, switch_label=switch_label, rack_label="rack-1", gpu_model="A100"
        )
        for index in range(gpus):
            Gpu.objects.create(
                node=node,
                index=index,
                uuid=f"GPU-{name}-{index}",
                model="A100",
                memory_mb=40960,
                default_power_limit_w=400,
                min_power_limit_w=100,
                max_power_limit_w=400,
                supported_sm_clocks_mhz=[1410, 1200, 1005],
            )
        return node

    return make


def _race(*calls) -> list[object]:
    """Run each call in its own thread (own DB connection), released together; return what
    each returned or raised."""
    barrier = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)

    def run(index, call):
        try:
            barrier.wait(timeout=10)
            results[index] = call()
        except Exception as exc:  # the outcome under test, inspected by the caller
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


@pytest.fixture
def race() -> Callable[..., list[object]]:
    """Runs each given call in its own thread (own DB connection), released together by a
    barrier, and returns what each returned or raised: for tests of concurrent writers."""
    return _race


@pytest.fixture
def scheduler_settings(db) -> Callable[..., object]:
    """Set the live rounds' policy and interval (``SchedulerSettings``); returns the row."""
    from scheduling.models import SchedulerSettings

    def configure(policy: str, *, round_interval_s: int = 60):
        config = SchedulerSettings.load()
        config.policy, config.round_interval_s = policy, round_interval_s
        config.save()
        return config

    return configure
