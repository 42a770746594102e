"""Typed readers for environment variables.

Settings come from the environment only. Each helper returns the default when the variable is
unset (or empty) and raises ``ImproperlyConfigured`` naming the variable when the value cannot
be parsed, so a typo fails at start-up instead of silently running with a wrong value.
"""

import functools
import math
import os
import sys
from collections.abc import Callable
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_str(name: str, default: str) -> str:
    value = _raw(name)
    return default if value is None else value


def env_int(name: str, default: int) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None


def env_float(name: str, default: float) -> float:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        # float() reads "nan" and "inf": TELEMETRY_MAX_CLOCK_SKEW_S=nan or
        # WATTFLOW_EXPLORATION_BUDGET=inf was taken, every comparison with it false.
        raise ImproperlyConfigured(f"{name} must be a finite number, got {value!r}")
    return number


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of true/false/1/0/yes/no, got {value!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    """Comma-separated list; blanks are dropped."""
    value = _raw(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


# Keys that are public (in this repository) and so protect nothing: the compose/.env.example
# placeholder. The development key is passed in by the settings.
PLACEHOLDER_SECRET_KEYS = frozenset({"change-me-to-a-long-random-string"})


def insecure_secret_key(key: str, dev_key: str) -> str | None:
    """Why ``key`` must not sign sessions in a deployment, or None if it may."""
    if key == dev_key:
        return "is unset, empty or the built-in development key"
    if key in PLACEHOLDER_SECRET_KEYS:
        return "is the placeholder of docker/.env.example"
    if key.startswith("django-insecure-"):
        return "is a Django development key (django-insecure-...)"
    return None


def refuse_to_start(message: str) -> None:
    """Stop the process that is loading the settings (daphne, Celery, manage.py) with one line
    on stderr and exit status 1, instead of a traceback or, worse, running."""
    sys.stderr.write(f"wattflow: {message}\n")
    raise SystemExit(1)


def at_start_up(reader: Callable[[str, T], T]) -> Callable[[str, T], T]:
    """``reader`` for what is read as a process starts (the settings, a command module's
    defaults): a value that does not parse stops the process with one line naming the
    variable (:func:`refuse_to_start`). Raised, ``ImproperlyConfigured`` stopped every
    process with Django's traceback of 31-55 lines (a seventh probe)."""

    @functools.wraps(reader)
    def read(name: str, default: T) -> T:
        try:
            return reader(name, default)
        except ImproperlyConfigured as exc:
            refuse_to_start(f"{exc}.")
            raise  # not reached: refuse_to_start exits

    return read
