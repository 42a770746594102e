"""The compose file is accepted by docker compose, and every setting read from the environment
is documented in docker/.env.example and the README's configuration table."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ENV_READ = re.compile(r"env_(?:str|int|float|bool|list)\(\s*\"([A-Z0-9_]+)\"")


def _settings_variables() -> set[str]:
    return set(ENV_READ.findall((ROOT / "config" / "settings.py").read_text()))


def _compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_compose_file_has_the_documented_services():
    compose = yaml.safe_load((ROOT / "docker" / "compose.yml").read_text())

    assert set(compose["services"]) == {
        "postgres",
        "redis",
        "setup",
        "web",
        "worker",
        "beat",
        "agent",
        "proxy",
    }
    assert "--simulate" in " ".join(compose["services"]["agent"]["command"])


def test_docker_compose_config_accepts_the_file():
    command = _compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")

    result = subprocess.run(
        [*command, "-f", str(ROOT / "docker" / "compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr


def test_every_setting_from_the_environment_is_documented():
    variables = _settings_variables()
    example = (ROOT / "docker" / ".env.example").read_text()
    readme = (ROOT / "README.md").read_text()

    assert {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"} <= variables
    assert sorted(v for v in variables if f"\n{v}=" not in example) == []
    assert sorted(v for v in variables if f"`{v}`" not in readme) == []
