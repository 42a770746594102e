"""Wattflow settings: read from the environment only (see docker/.env.example).

Every value has a default that works on a developer machine with PostgreSQL and Redis on
localhost. A value that does not parse stops the process at import time with one line
naming the variable; inconsistent combinations are reported by the system checks in
``config/checks.py`` (IDs ``wattflow.E0xx`` / ``wattflow.W0xx``).
"""

import ipaddress
from datetime import timedelta
from pathlib import Path

import dj_database_url

from config import env
from config.env import env_list, env_str, insecure_secret_key, refuse_to_start

# A value that does not parse stops the process with one line naming the variable.
env_bool = env.at_start_up(env.env_bool)
env_float = env.at_start_up(env.env_float)
env_int = env.at_start_up(env.env_int)

BASE_DIR = Path(__file__).resolve().parent.parent

# A fixed, clearly marked development key. With DEBUG off the settings refuse it (and an empty
# key, which reads as this default, and the placeholder of docker/.env.example): every process
# (daphne, Celery, manage.py) stops at start-up with one line; check wattflow.E001 says the same.
DEV_SECRET_KEY = "wattflow-insecure-development-key-do-not-use-in-production"
SECRET_KEY = env_str("DJANGO_SECRET_KEY", DEV_SECRET_KEY)
DEBUG = env_bool("DJANGO_DEBUG", True)
if not DEBUG and (reason := insecure_secret_key(SECRET_KEY, DEV_SECRET_KEY)):
    refuse_to_start(
        f"DJANGO_SECRET_KEY {reason} while DJANGO_DEBUG is off; set it to a long random string."
    )
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

# --- HTTPS and cookies ----------------------------------------------------------------------
# Off by default (`make run` serves plain HTTP on 127.0.0.1); the compose deployment, which
# terminates TLS in its proxy, turns them on so `manage.py check --deploy` is clean there.
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
# Path regexes (no leading slash) served over plain HTTP even with the redirect on: compose's
# node agents talk to web:8000 inside the container network.
SECURE_REDIRECT_EXEMPT = env_list("DJANGO_SECURE_REDIRECT_EXEMPT", [])
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
# Session and CSRF cookies only over HTTPS.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", False)
# "HEADER=value" a TLS-terminating proxy sets on HTTPS requests, e.g.
# HTTP_X_FORWARDED_PROTO=https; empty = no proxy is trusted.
_proxy_ssl_header = env_str("DJANGO_SECURE_PROXY_SSL_HEADER", "")
if _proxy_ssl_header:
    _header, _sep, _value = _proxy_ssl_header.partition("=")
    if not (_header and _sep and _value):
        refuse_to_start(
            "DJANGO_SECURE_PROXY_SSL_HEADER must look like HTTP_X_FORWARDED_PROTO=https, "
            f"got {_proxy_ssl_header!r}."
        )
    SECURE_PROXY_SSL_HEADER = (_header.strip(), _value.strip())

INSTALLED_APPS = [
    # daphne first: it replaces runserver with an ASGI one.
    "daphne",
    # Django's admin, its site bounding every list's lookups (config/admin_site.py)
    "config.admin_apps.WattflowAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # whitenoise.runserver_nostatic: the dev server serves static files the same way as prod.
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "channels",
    "rest_framework",
    "rest_framework.authtoken",
    # Login throttling (config/auth.py): failed logins per username+address, with a cool-off.
    "axes",
    "drf_spectacular",
    # Swagger UI served from our own static files: the docs page works without a CDN.
    "drf_spectacular_sidecar",
    "django_filters",
    # frontend before cluster so its templates (registration/login.html) override the plain one.
    "frontend",
    "cluster",
    "scheduling",
    "telemetry",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before anything reads the body: a 100 MB JSON body is refused unread (413).
    "config.middleware.RequestBodyLimitMiddleware",
    # A NUL in a query string is a 400 for every page (PostgreSQL cannot hold it).
    "config.middleware.QueryStringNulMiddleware",
    # A path under /api/ that no route matches: the API's JSON 404, with DEBUG on too.
    "config.middleware.ApiNotFoundMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as axes asks: turns a locked-out login into config.auth.lockout_response.
    "axes.middleware.AxesMiddleware",
]

# The largest request body accepted (bytes): an agent's biggest sample batch
# (TELEMETRY_MAX_BATCH_SAMPLES samples of ~220 bytes) fits with room to spare.
WATTFLOW_MAX_REQUEST_BODY_BYTES = env_int("WATTFLOW_MAX_REQUEST_BODY_BYTES", 8 * 1024 * 1024)
# Seconds a request may take to arrive whole, head and body, from its first line; then 408
# and the connection is closed (``config.serve``; Twisted's own idle timeout is 12 hours).
# 60 s carries the largest body (8 MiB) at about 1.1 Mbit/s.
WATTFLOW_REQUEST_READ_TIMEOUT_S = env_float("WATTFLOW_REQUEST_READ_TIMEOUT_S", 60.0)
if WATTFLOW_REQUEST_READ_TIMEOUT_S <= 0:
    refuse_to_start("WATTFLOW_REQUEST_READ_TIMEOUT_S must be more than 0 seconds.")
# Seconds a connection may stay open without a byte while no request is being read or
# answered (before its first request, or kept alive between two); then it is closed
# (``config.serve``). Twisted's default, which daphne keeps, is 12 hours: a client that
# connected and sent nothing was never reached by the read timeout above.
WATTFLOW_IDLE_CONNECTION_TIMEOUT_S = env_float("WATTFLOW_IDLE_CONNECTION_TIMEOUT_S", 75.0)
if WATTFLOW_IDLE_CONNECTION_TIMEOUT_S <= 0:
    refuse_to_start("WATTFLOW_IDLE_CONNECTION_TIMEOUT_S must be more than 0 seconds.")
# A job whose fastest configuration on this cluster would run longer than this is refused at
# submit (scheduling/feasibility.py).
WATTFLOW_MAX_JOB_DAYS = env_int("WATTFLOW_MAX_JOB_DAYS", 365)

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/wattflow")
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL,
        # 0 by default: under ASGI every request runs in its own thread, and Django's docs
        # advise against persistent connections there (see DATABASE_POOL_MAX_SIZE below).
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE_S", 0),
        conn_health_checks=True,
    )
}

# Optional per-process psycopg pool (0 = off). Under daphne each request runs its sync view in
# a fresh thread, so persistent per-thread connections (CONN_MAX_AGE > 0) pile up until
# PostgreSQL refuses clients; a pool shared by the process's threads bounds them (Django
# requires CONN_MAX_AGE = 0 with a pool). Needs psycopg-pool (requirements.txt).
DATABASE_POOL_MAX_SIZE = env_int("DATABASE_POOL_MAX_SIZE", 0)
if DATABASE_POOL_MAX_SIZE > 0:
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DATABASE_POOL_MAX_SIZE,
        "timeout": 30,
    }

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

# --- E-mail: a spent budget is mailed to its team's leads (scheduling/budget_alerts.py) -------
# The console backend (the default) writes mail to the log, so development needs no mail
# server; set django.core.mail.backends.smtp.EmailBackend and the EMAIL_* values to send.
EMAIL_BACKEND = env_str("DJANGO_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("DJANGO_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("DJANGO_EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("DJANGO_EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("DJANGO_EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("DJANGO_EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = 10  # seconds: a dead mail server holds up no worker for long
DEFAULT_FROM_EMAIL = env_str("DJANGO_DEFAULT_FROM_EMAIL", "wattflow@localhost")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# --- Login throttling and API tokens (config/auth.py) ----------------------------------------
AUTHENTICATION_BACKENDS = [
    "config.auth.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# After this many failed logins for one username from one address, logins for that pair are
# refused (429) until WATTFLOW_LOGIN_COOLOFF_S has passed without another failure.
AXES_FAILURE_LIMIT = env_int("WATTFLOW_LOGIN_FAILURE_LIMIT", 5)
_login_cooloff_s = env_int("WATTFLOW_LOGIN_COOLOFF_S", 900)
if AXES_FAILURE_LIMIT < 1 or _login_cooloff_s < 1:
    refuse_to_start("WATTFLOW_LOGIN_FAILURE_LIMIT and WATTFLOW_LOGIN_COOLOFF_S must be at least 1.")
AXES_COOLOFF_TIME = timedelta(seconds=_login_cooloff_s)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "config.auth.lockout_response"
AXES_CLIENT_IP_CALLABLE = "config.auth.client_address"
AXES_USERNAME_CALLABLE = "config.auth.client_username"
# Reverse proxies in front of the web server whose X-Forwarded-For entry is trusted for the
# login throttle's address (0 = none: the connection's address; compose: 1).
WATTFLOW_TRUSTED_PROXY_COUNT = env_int("WATTFLOW_TRUSTED_PROXY_COUNT", 0)
# Seconds an API token (POST /api/auth-token/) is accepted after it was issued; 0 = no limit.
WATTFLOW_API_TOKEN_TTL_S = env_int("WATTFLOW_API_TOKEN_TTL_S", 0)
if WATTFLOW_API_TOKEN_TTL_S < 0:
    # (-1 was taken as "no expiry", as 0 is: an operator meaning "expire at once" got none)
    refuse_to_start(
        "WATTFLOW_API_TOKEN_TTL_S must be 0 (no expiry) or more seconds, "
        f"got {WATTFLOW_API_TOKEN_TTL_S}."
    )

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("DJANGO_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        # Manifest storage needs collectstatic; with DEBUG on, serve the plain files instead.
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# The frontend's finder serves Plotly.js from the installed plotly package (no CDN).
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "frontend.staticfinders.PlotlyFinder",
]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- REST API -------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header turns anonymous API calls into 401, not 403.
        "config.auth.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # django-filter, refusing control characters and comparing datetimes in UTC (400, not 500).
    "DEFAULT_FILTER_BACKENDS": ["cluster.api.filter_backend.StrictDjangoFilterBackend"],
    # DRF's parsers, with JSON refusing bodies nested too deep to parse (400, not 500).
    "DEFAULT_PARSER_CLASSES": [
        "config.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "cluster.api.pagination.StrictPageNumberPagination",
    "PAGE_SIZE": env_int("API_PAGE_SIZE", 50),
    "DEFAULT_SCHEMA_CLASS": "config.openapi.WattflowAutoSchema",
    # JSON answers escape non-ASCII: a refusal that quotes the client's input (a choice
    # field's "not a valid choice") held a lone surrogate that UTF-8 cannot encode, a 500.
    "UNICODE_JSON": False,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Wattflow API",
    "DESCRIPTION": "Energy- and carbon-aware scheduling of GPU training jobs.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Request bodies are documented as JSON only: the views parse forms too, but three content
    # types per body made generated clients send multipart with a JSON header (config/openapi.py).
    "PARSER_WHITELIST": ["config.parsers.JSONParser"],
    # a job's model and its prior share one set of kinds (scheduling.choices)
    "ENUM_NAME_OVERRIDES": {"PerfModelKindEnum": "scheduling.choices.PerfModelKind"},
}

# --- Channels -------------------------------------------------------------------------------
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL]},
    }
}

# --- Celery ---------------------------------------------------------------------------------
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_EXPIRES = env_int("CELERY_RESULT_EXPIRES_S", 3600)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Periodic tasks are code: each app adds its entries here, with its interval read from the
# environment and ``options={"expires": interval}`` so a backlog never piles up.
CELERY_BEAT_SCHEDULE: dict[str, dict] = {}


def _every(task: str, interval_s: int) -> dict:
    """A beat entry that runs ``task`` every ``interval_s`` and lets a run that waited a whole
    interval in the queue expire (the next one is already due)."""
    return {"task": task, "schedule": interval_s, "options": {"expires": interval_s}}


# --- Wattflow -------------------------------------------------------------------------------
# Where seed_demo writes the agent tokens that `make run` hands to the simulated agents.
WATTFLOW_VAR_DIR = Path(env_str("WATTFLOW_VAR_DIR", str(BASE_DIR / "var")))

# --- Telemetry (telemetry/) ------------------------------------------------------------------
# Raw 1 s samples older than this are deleted (rollups and ledgers are kept).
TELEMETRY_RETENTION_S = env_int("TELEMETRY_RETENTION_S", 7 * 24 * 3600)
# A sample stamped further ahead than this is refused (agent clock skew).
TELEMETRY_MAX_FUTURE_S = env_int("TELEMETRY_MAX_FUTURE_S", 300)
TELEMETRY_MAX_BATCH_SAMPLES = env_int("TELEMETRY_MAX_BATCH_SAMPLES", 20000)
# Samples further apart than this are a gap (agent down): its energy is not attributed.
TELEMETRY_MAX_GAP_S = env_float("TELEMETRY_MAX_GAP_S", 60.0)
# A job event stamped up to this much before its allocation's start (agent clock behind) is
# clamped to the start; further before is refused with HTTP 400.
TELEMETRY_MAX_CLOCK_SKEW_S = env_float("TELEMETRY_MAX_CLOCK_SKEW_S", 60.0)
# An energy-counter step above (max power limit x (1 + this)) x (interval + 1 s) is physically
# impossible: the interval is charged by integrated power instead and the step is logged.
TELEMETRY_COUNTER_TOLERANCE = env_float("TELEMETRY_COUNTER_TOLERANCE", 0.5)
# Grid zone of the cluster and where its hourly intensity comes from: "stored" (rows loaded by
# `manage.py import_carbon`) or "http" (an Electricity-Maps-style API); either falls back to
# the zone's static yearly mean, marked estimated.
TELEMETRY_CARBON_ZONE = env_str("TELEMETRY_CARBON_ZONE", "ES")
TELEMETRY_CARBON_PROVIDER = env_str("TELEMETRY_CARBON_PROVIDER", "stored")
TELEMETRY_CARBON_HTTP_URL = env_str(
    "TELEMETRY_CARBON_HTTP_URL", "https://api.electricitymap.org/v3/carbon-intensity/past"
)
TELEMETRY_CARBON_HTTP_TOKEN = env_str("TELEMETRY_CARBON_HTTP_TOKEN", "")
# Where jobs keep checkpoints on the nodes (handed to jobs as WATTFLOW_CHECKPOINT_DIR).
TELEMETRY_CHECKPOINT_ROOT = env_str("TELEMETRY_CHECKPOINT_ROOT", "/var/lib/wattflow/checkpoints")
TELEMETRY_ACCOUNTING_INTERVAL_S = env_int("TELEMETRY_ACCOUNTING_INTERVAL_S", 60)
TELEMETRY_RETENTION_INTERVAL_S = env_int("TELEMETRY_RETENTION_INTERVAL_S", 3600)
TELEMETRY_BROADCAST_INTERVAL_S = env_int("TELEMETRY_BROADCAST_INTERVAL_S", 5)
CELERY_BEAT_SCHEDULE["telemetry-process-dirty-hours"] = _every(
    "telemetry.tasks.process_dirty_hours_task", TELEMETRY_ACCOUNTING_INTERVAL_S
)
CELERY_BEAT_SCHEDULE["telemetry-broadcast"] = _every(
    "telemetry.tasks.broadcast_telemetry_task", TELEMETRY_BROADCAST_INTERVAL_S
)
CELERY_BEAT_SCHEDULE["telemetry-delete-expired-samples"] = _every(
    "telemetry.tasks.delete_expired_samples_task", TELEMETRY_RETENTION_INTERVAL_S
)

# Who may read /metrics (telemetry/metrics.py): requests from these networks (CIDRs; default
# loopback, where `make run` serves and a local Prometheus scrapes), or with
# "Authorization: Bearer <WATTFLOW_METRICS_TOKEN>" when a token is set.
WATTFLOW_METRICS_TOKEN = env_str("WATTFLOW_METRICS_TOKEN", "")
# "none" = no network (the token only).
WATTFLOW_METRICS_ALLOWED_NETWORKS = [
    cidr
    for cidr in env_list("WATTFLOW_METRICS_ALLOWED_NETWORKS", ["127.0.0.0/8", "::1/128"])
    if cidr.lower() != "none"
]
for _cidr in WATTFLOW_METRICS_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_cidr, strict=False)
    except ValueError:
        refuse_to_start(f"WATTFLOW_METRICS_ALLOWED_NETWORKS: {_cidr!r} is not a network (CIDR).")

# --- Live scheduling (scheduling/) -----------------------------------------------------------
# Beat fires a round this often (the finest step); admins may lengthen the interval at runtime
# in the admin's scheduler settings, whose defaults these are.
WATTFLOW_ROUND_INTERVAL_S = env_int("WATTFLOW_ROUND_INTERVAL_S", 10)
WATTFLOW_DEFAULT_POLICY = env_str("WATTFLOW_DEFAULT_POLICY", "powerflow")
# Share of a new job's predicted completion time that just-in-time exploration of power
# limits may cost (policies that explore: zeus; scheduling/core/exploration.py); 0: off.
WATTFLOW_EXPLORATION_BUDGET = env_float("WATTFLOW_EXPLORATION_BUDGET", 0.03)
# A new job that may change its batch runs one round at twice it while exploring
# (scheduling.core.exploration, "The batch probe"); off by default.
WATTFLOW_EXPLORATION_BATCH_PROBE = env_bool("WATTFLOW_EXPLORATION_BATCH_PROBE", False)
if not 0.0 <= WATTFLOW_EXPLORATION_BUDGET < 1.0:
    refuse_to_start("WATTFLOW_EXPLORATION_BUDGET must be in [0, 1).")
# A node whose agent has not heart-beaten for this long is marked unhealthy and its jobs are
# re-queued (the agent heart-beats every 15 s by default).
WATTFLOW_NODE_TIMEOUT_S = env_int("WATTFLOW_NODE_TIMEOUT_S", 60)
WATTFLOW_LIVENESS_INTERVAL_S = env_int("WATTFLOW_LIVENESS_INTERVAL_S", 15)
# Who carries out a committed round (scheduling/executors): "agent" (the node agents poll
# their assignments and launch jobs themselves) or "slurm" (one Slurm job per allocation,
# submitted through Slurm's CLI; docs/slurm.md). The Slurm executor's account and partition
# (or reservation) are the ones an admin gave Wattflow, with Operator rights on them.
WATTFLOW_EXECUTOR = env_str("WATTFLOW_EXECUTOR", "agent")
WATTFLOW_SLURM_PARTITION = env_str("WATTFLOW_SLURM_PARTITION", "gpu")
WATTFLOW_SLURM_ACCOUNT = env_str("WATTFLOW_SLURM_ACCOUNT", "")
WATTFLOW_SLURM_RESERVATION = env_str("WATTFLOW_SLURM_RESERVATION", "")
# slurm.conf for the CLI (empty: Slurm's default lookup), the directory holding sbatch,
# squeue... (empty: PATH), and a directory shared with the nodes for the jobs' output files.
WATTFLOW_SLURM_CONF = env_str("WATTFLOW_SLURM_CONF", "")
WATTFLOW_SLURM_BIN_DIR = env_str("WATTFLOW_SLURM_BIN_DIR", "")
WATTFLOW_SLURM_OUTPUT_DIR = env_str(
    "WATTFLOW_SLURM_OUTPUT_DIR", str(WATTFLOW_VAR_DIR / "slurm-output")
)
# A CLI call that takes longer than this fails the step (the next round tries again).
WATTFLOW_SLURM_COMMAND_TIMEOUT_S = env_int("WATTFLOW_SLURM_COMMAND_TIMEOUT_S", 30)
# A released Slurm job still pending after this long goes back to Wattflow's queue (Slurm
# would not start it where it was planned, e.g. its GPUs are taken by jobs outside Wattflow).
WATTFLOW_SLURM_START_TIMEOUT_S = env_int("WATTFLOW_SLURM_START_TIMEOUT_S", 300)
CELERY_BEAT_SCHEDULE["scheduling-round"] = _every(
    "scheduling.tasks.run_scheduling_round_task", WATTFLOW_ROUND_INTERVAL_S
)
CELERY_BEAT_SCHEDULE["scheduling-node-liveness"] = _every(
    "scheduling.tasks.mark_silent_nodes_task", WATTFLOW_LIVENESS_INTERVAL_S
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"refusals": {"()": "config.log_filters.RefusalsWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django.request": {"filters": ["refusals"]},
        # axes.apps logs only its "AXES: BEGIN version ..." banner, at INFO, as each process
        # starts: every manage.py command printed it before its own output or one-line
        # error. Its warnings still show; the lockouts and failed logins are other axes.*
        # loggers, kept at the root's level.
        "axes.apps": {"level": "WARNING"},
    },
    "root": {"handlers": ["console"], "level": env_str("DJANGO_LOG_LEVEL", "INFO")},
}
