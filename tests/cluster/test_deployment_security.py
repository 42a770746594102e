"""Deployment defaults, checked in real processes: every entry point refuses DEBUG off with a
development key, pages and static files work with DEBUG off after `make run`'s collectstatic,
and `manage.py check --deploy` is clean with the compose file's environment."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
DEV_KEY = "wattflow-insecure-development-key-do-not-use-in-production"
GOOD_KEY = secrets.token_urlsafe(50)


def run(args, env_overrides, timeout=60):
    """Run ``args`` in the repository with the environment changed (None removes a name)."""
    env = {**os.environ, **env_overrides}
    env = {name: value for name, value in env.items() if value is not None}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


ENTRY_POINTS = {
    "manage.py": [sys.executable, "manage.py", "check"],
    # the web process as Procfile.dev and the image start it (daphne, bounded)
    "daphne": [sys.executable, "-m", "config.serve", "-p", "0", "config.asgi:application"],
    "celery": [str(VENV_BIN / "celery"), "-A", "config", "worker", "--loglevel=ERROR"],
}


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (None, "is unset, empty or the built-in development key"),
        ("", "is unset, empty or the built-in development key"),
        (DEV_KEY, "is unset, empty or the built-in development key"),
        ("change-me-to-a-long-random-string", "is the placeholder of docker/.env.example"),
        ("django-insecure-" + "x" * 40, "is a Django development key"),
    ],
)
def test_debug_off_with_a_development_key_refuses_to_start(entry_point, key, reason):
    result = run(ENTRY_POINTS[entry_point], {"DJANGO_DEBUG": "false", "DJANGO_SECRET_KEY": key})

    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith(f"wattflow: DJANGO_SECRET_KEY {reason}"), result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_metrics_network_refuses_to_start():
    result = run(
        [sys.executable, "manage.py", "check"],
        {"WATTFLOW_METRICS_ALLOWED_NETWORKS": "10.0.0.0/8,not-a-net"},
    )

    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "wattflow: WATTFLOW_METRICS_ALLOWED_NETWORKS: 'not-a-net' is not a network (CIDR)."
    )


def _make_run_collectstatic() -> list[str]:
    """The collectstatic line of the Makefile's `run` recipe, as argv."""
    recipe = (ROOT / "Makefile").read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    lines = [line.strip() for line in recipe.splitlines() if "collectstatic" in line]
    assert len(lines) == 1, recipe
    argv = lines[0].split()
    assert argv[0] == ".venv/bin/python"
    return [sys.executable, *argv[1:]]


def _dockerfile_collectstatic() -> str:
    text = (ROOT / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    return next(
        line for line in text.splitlines() if line.startswith("RUN") and "collectstatic" in line
    )


PAGE_AND_ASSET = """
import os, re, django
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
django.setup()
from django.conf import settings
from django.test import Client
assert settings.DEBUG is False
client = Client()
page = client.get("/accounts/login/")
css = re.search(r'href="(/static/frontend/wattflow\\.[0-9a-f]{12}\\.css)"', page.content.decode())
asset = client.get(css.group(1))
home = client.get("/")
print(page.status_code, asset.status_code, home.status_code, asset["Content-Type"], sep="|")
"""


def test_pages_and_static_files_work_with_debug_off_after_make_runs_collectstatic(tmp_path):
    env = {
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": GOOD_KEY,
        "DJANGO_STATIC_ROOT": str(tmp_path / "static"),
    }
    collected = run(_make_run_collectstatic(), env, timeout=300)
    assert collected.returncode == 0, collected.stderr
    assert (tmp_path / "static" / "staticfiles.json").exists()

    served = run([sys.executable, "-c", PAGE_AND_ASSET], env)

    assert served.returncode == 0, served.stderr
    page, asset, home, content_type = served.stdout.strip().splitlines()[-1].split("|")
    assert (page, asset, home) == ("200", "200", "302")
    assert content_type.startswith("text/css")
    # The image collects the same way, with DEBUG off.
    assert "DJANGO_DEBUG=false" in _dockerfile_collectstatic()


def test_without_collectstatic_debug_off_pages_fail(tmp_path):
    # What the collectstatic line prevents: the manifest storage has nothing to look up.
    env = {
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": GOOD_KEY,
        "DJANGO_STATIC_ROOT": str(tmp_path / "empty"),
    }
    served = run([sys.executable, "-c", PAGE_AND_ASSET], env)
    assert served.returncode != 0


_INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(?::-([^}]*))?\}")


def compose_environment() -> dict[str, str]:
    """The web service's environment as `docker compose` builds it from compose.yml and a
    docker/.env copied from docker/.env.example."""
    example = {}
    for line in (ROOT / "docker" / ".env.example").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            name, value = line.split("=", 1)
            example[name] = value
    compose = yaml.safe_load((ROOT / "docker" / "compose.yml").read_text())
    raw = compose["services"]["web"]["environment"]

    def value_of(match):
        name, default = match.group(1), match.group(2) or ""
        return example.get(name) or default

    return {
        name: _INTERPOLATION.sub(value_of, str(value)).replace("$$", "$")
        for name, value in raw.items()
    }


def test_compose_turns_on_https_only_settings():
    env = compose_environment()

    assert env["DJANGO_DEBUG"] == "false"
    assert env["DJANGO_SECURE_SSL_REDIRECT"] == "true"
    assert env["DJANGO_SECURE_COOKIES"] == "true"
    assert int(env["DJANGO_SECURE_HSTS_SECONDS"]) >= 31536000
    assert env["DJANGO_SECURE_PROXY_SSL_HEADER"] == "HTTP_X_FORWARDED_PROTO=https"
    compose = yaml.safe_load((ROOT / "docker" / "compose.yml").read_text())
    # Only the proxy is published, so nobody can forge X-Forwarded-Proto past it.
    published = {name for name, svc in compose["services"].items() if svc.get("ports")}
    assert published == {"proxy"}


def test_check_deploy_is_clean_with_the_compose_environment():
    env = compose_environment()
    # The placeholder key is refused on purpose (test above); a deployment sets its own.
    assert env["DJANGO_SECRET_KEY"] == "change-me-to-a-long-random-string"
    env["DJANGO_SECRET_KEY"] = GOOD_KEY
    # Where PostgreSQL and Redis are is the test machine's business, not a security setting.
    env["DATABASE_URL"] = os.environ.get("DATABASE_URL", env["DATABASE_URL"])
    env["REDIS_URL"] = os.environ.get("REDIS_URL", env["REDIS_URL"])

    result = run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)

    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_warns_with_the_development_defaults():
    # The same command is not silently clean with `make run`'s defaults (DEBUG off, no HTTPS).
    result = run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        {"DJANGO_DEBUG": "false", "DJANGO_SECRET_KEY": GOOD_KEY},
    )

    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr
