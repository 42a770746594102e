"""System checks for configuration that parses but does not make sense.

Registered from ``cluster.apps.ClusterConfig.ready``; run by ``manage.py check`` and at start-up.
"""

from urllib.parse import urlparse

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from config.env import insecure_secret_key


@register(Tags.security, deploy=False)
def check_secret_key(app_configs, **kwargs):
    reason = insecure_secret_key(settings.SECRET_KEY, settings.DEV_SECRET_KEY)
    if not settings.DEBUG and reason:
        return [
            Error(
                f"DJANGO_SECRET_KEY {reason} while DJANGO_DEBUG is off.",
                hint="Set DJANGO_SECRET_KEY to a long random string.",
                id="wattflow.E001",
            )
        ]
    return []


# Not tagged "database": Django runs database-tagged checks only when asked to, and this one
# needs no connection.
@register()
def check_database_url(app_configs, **kwargs):
    engine = settings.DATABASES["default"]["ENGINE"]
    if engine != "django.db.backends.postgresql":
        return [
            Error(
                f"DATABASE_URL must point at PostgreSQL, it selects {engine}.",
                hint="Use postgres://USER@HOST:PORT/NAME.",
                id="wattflow.E002",
            )
        ]
    return []


@register()
def check_redis_url(app_configs, **kwargs):
    scheme = urlparse(settings.REDIS_URL).scheme
    if scheme not in {"redis", "rediss", "unix"}:
        return [
            Error(
                f"REDIS_URL must use redis://, rediss:// or unix://, got {scheme or 'nothing'}.",
                hint="Example: redis://127.0.0.1:6379/0",
                id="wattflow.E003",
            )
        ]
    return []


@register(Tags.security)
def check_allowed_hosts(app_configs, **kwargs):
    if not settings.DEBUG and "*" in settings.ALLOWED_HOSTS:
        return [
            Warning(
                "DJANGO_ALLOWED_HOSTS contains '*' while DJANGO_DEBUG is off.",
                hint="List the host names the service is reached by.",
                id="wattflow.W001",
            )
        ]
    return []


@register()
def check_limits(app_configs, **kwargs):
    """Limits that parse but leave the service refusing everything (each measured against
    daphne: a body limit of -1 answered every request, GETs included, 413; a job limit of -1
    days refused every catalog job; a batch limit of 0 every sample batch), or changing the
    API's answers (a page size of 0 turned every list into an unpaginated array)."""
    limits = {
        "WATTFLOW_MAX_REQUEST_BODY_BYTES": settings.WATTFLOW_MAX_REQUEST_BODY_BYTES,
        "API_PAGE_SIZE": settings.REST_FRAMEWORK.get("PAGE_SIZE"),
        "WATTFLOW_MAX_JOB_DAYS": settings.WATTFLOW_MAX_JOB_DAYS,
        "TELEMETRY_MAX_BATCH_SAMPLES": settings.TELEMETRY_MAX_BATCH_SAMPLES,
    }
    low = [f"{name}={value}" for name, value in limits.items() if value is None or value < 1]
    if low:
        return [
            Error(
                f"{', '.join(low)}: must be at least 1.",
                hint="Leave the variable unset for its default (README, Configuration).",
                id="wattflow.E004",
            )
        ]
    return []
