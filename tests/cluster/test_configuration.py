"""Settings helpers fail loudly, bad configuration is a system check with an ID, and the
Channels layer really talks to Redis."""

import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_float, env_int, env_list, env_str
from config.log_filters import RefusalsWithoutTraceback

ROOT = Path(__file__).resolve().parents[2]


def test_env_helpers_parse_and_default(monkeypatch):
    monkeypatch.setenv("WF_INT", "42")
    monkeypatch.setenv("WF_FLOAT", "0.25")
    monkeypatch.setenv("WF_BOOL", "Yes")
    monkeypatch.setenv("WF_LIST", "a, b,,c")
    monkeypatch.setenv("WF_EMPTY", "  ")
    monkeypatch.delenv("WF_MISSING", raising=False)

    assert env_int("WF_INT", 1) == 42
    assert env_float("WF_FLOAT", 1.0) == 0.25
    assert env_bool("WF_BOOL", False) is True
    assert env_list("WF_LIST", []) == ["a", "b", "c"]
    assert env_str("WF_EMPTY", "default") == "default"
    assert env_int("WF_MISSING", 7) == 7


@pytest.mark.parametrize(
    ("reader", "value", "message"),
    [
        (env_int, "ten", "WF_BAD must be an integer, got 'ten'"),
        (env_float, "1,5", "WF_BAD must be a number, got '1,5'"),
        (env_float, "nan", "WF_BAD must be a finite number, got 'nan'"),
        (env_float, "-inf", "WF_BAD must be a finite number, got '-inf'"),
        (env_bool, "maybe", "WF_BAD must be one of true/false/1/0/yes/no, got 'maybe'"),
    ],
)
def test_env_helpers_fail_loudly_naming_the_variable(monkeypatch, reader, value, message):
    monkeypatch.setenv("WF_BAD", value)

    with pytest.raises(ImproperlyConfigured) as excinfo:
        reader("WF_BAD", None)

    assert str(excinfo.value) == message


def _check_ids() -> set[str]:
    return {message.id for message in run_checks() if message.id.startswith("wattflow.")}


def test_default_configuration_passes_the_checks(settings):
    # pytest-django runs tests with DEBUG off; the defaults are meant for DEBUG on.
    settings.DEBUG = True

    assert _check_ids() == set()


def test_production_with_the_development_key_is_an_error(settings):
    settings.DEBUG = False
    settings.SECRET_KEY = settings.DEV_SECRET_KEY
    settings.ALLOWED_HOSTS = ["*"]

    assert _check_ids() == {"wattflow.E001", "wattflow.W001"}


def test_non_postgres_database_and_bad_redis_url_are_errors(settings, monkeypatch):
    settings.DEBUG = True
    # In place, so Django's connection handler is not rebuilt; monkeypatch restores it.
    monkeypatch.setitem(settings.DATABASES["default"], "ENGINE", "django.db.backends.sqlite3")
    settings.REDIS_URL = "http://127.0.0.1:6379/0"

    assert _check_ids() == {"wattflow.E002", "wattflow.E003"}


def test_channel_layer_round_trips_through_redis():
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    payload = {"type": "test.message", "nonce": uuid.uuid4().hex}

    async_to_sync(layer.send)(channel, payload)
    received = async_to_sync(layer.receive)(channel)

    assert received == payload
    assert layer.hosts[0]["address"].startswith("redis://")


@pytest.mark.django_db
def test_a_refused_request_logs_one_line_and_a_server_error_its_traceback(client, caplog):
    # given a user in no team, whom the job form refuses (PermissionDenied: a 403)
    loner = get_user_model().objects.create_user("lonely", password="not-used-here")
    with caplog.at_level("WARNING", logger="django.request"):
        client.force_login(loner)
        response = client.get("/jobs/new/")

    # then the log has Django's one line for it, without a traceback
    assert response.status_code == 403
    (record,) = [r for r in caplog.records if r.name == "django.request"]
    assert record.getMessage() == "Forbidden (Permission denied): /jobs/new/"
    assert record.exc_info is None and "Traceback" not in caplog.text

    # while a server error's record keeps its traceback
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed = logging.LogRecord("django.request", logging.ERROR, "", 0, "x", (), sys.exc_info())
    failed.status_code = 500
    assert RefusalsWithoutTraceback().filter(failed) and failed.exc_info is not None


def test_a_failing_command_prints_its_one_line_error_and_nothing_else():
    # given the default log level (INFO), at which axes announced itself as each process
    # started
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_LOG_LEVEL"}

    # when a management command is given a bad argument
    result = subprocess.run(
        [sys.executable, "manage.py", "replay_trace", "--work-scale", "nan"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    # then its stderr is its one-line error, without the "AXES: BEGIN version" line
    assert result.returncode == 2
    assert result.stderr == (
        "replay_trace: error: argument --work-scale: must be a finite number > 0, got nan\n"
    )
    assert result.stdout == ""


def test_axes_still_logs_failed_logins_at_info(settings):
    # only the start-up banner's logger is raised to WARNING; the handlers that log failed
    # logins and lockouts keep the root's level (whatever DJANGO_LOG_LEVEL sets it to)
    axes = {k: v for k, v in settings.LOGGING["loggers"].items() if k.startswith("axes")}
    assert axes == {"axes.apps": {**axes["axes.apps"], "level": "WARNING"}}
    assert not logging.getLogger("axes.apps").isEnabledFor(logging.INFO)
    handlers = logging.getLogger("axes.handlers.database")
    assert handlers.getEffectiveLevel() == logging.getLogger().getEffectiveLevel()


@pytest.mark.parametrize(
    ("app", "name"),
    [
        ("cluster", "seed_demo"),
        ("frontend", "demo_screenshots"),
        ("scheduling", "fit_perf_models"),
        ("scheduling", "perf_model_report"),
        ("scheduling", "replay_trace"),
        ("scheduling", "simulate"),
        ("scheduling", "slurm_check"),
        ("telemetry", "import_carbon"),
    ],
)
def test_every_project_command_refuses_a_bad_argument_with_one_line(app, name, capsys):
    from django.core.management import load_command_class

    # when a command of this project is given an option it does not have
    with pytest.raises(SystemExit) as exited:
        load_command_class(app, name).run_from_argv(["manage.py", name, "--bogus"])

    # then it exits 2 with argparse's error on one line (the option, or a required one it
    # lacks), not the whole usage first
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{name}: error: ") and err.endswith("\n")
    assert err.count("\n") == 1 and "usage:" not in err
    assert "--bogus" in err or "the following arguments are required" in err


def test_demo_screenshots_refuses_an_output_folder_it_cannot_make_in_one_line(tmp_path):
    # --out naming a file (or /proc/version) was a FileExistsError traceback (a fifth probe)
    from django.core.management import CommandError, call_command

    taken = tmp_path / "a-file"
    taken.write_text("")
    for out in (taken, taken / "below"):
        with pytest.raises(CommandError, match=r"^--out .*: cannot make the folder: "):
            call_command("demo_screenshots", server="http://127.0.0.1:1", out=str(out))


@pytest.mark.parametrize(
    "server", ["", "not a url", "127.0.0.1:8000", "ftp://127.0.0.1", "http://", "http://[::1"]
)
def test_demo_screenshots_refuses_a_server_that_is_no_web_address_in_one_line(tmp_path, server):
    # It started Chromium, drew its progress bar and then failed at the first page (or, for
    # "http://[::1", raised ValueError from Playwright): a sixth probe.
    from django.core.management import CommandError, call_command

    out = tmp_path / "shots"
    with pytest.raises(CommandError, match=r"^--server .*: not an http\(s\) address"):
        call_command("demo_screenshots", server=server, out=str(out))
    assert not out.exists()


def test_demo_screenshots_refusing_for_lack_of_chromium_makes_no_folder(tmp_path, monkeypatch):
    # Its refusals change nothing on disk: the --out check made the folder before the
    # Chromium check refused (an empty folder left behind by a command that took nothing).
    from django.core.management import CommandError, call_command

    from frontend.management.commands import demo_screenshots

    monkeypatch.setattr(demo_screenshots, "CHROMIUM", str(tmp_path / "no-chromium"))
    out = tmp_path / "shots" / "live"
    with pytest.raises(CommandError, match="no-chromium not found"):
        call_command("demo_screenshots", server="http://127.0.0.1:1", out=str(out))
    assert not (tmp_path / "shots").exists()


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        # each accepted silently before, measured against daphne (a probe): every request,
        # GETs included, a 413 "at most -1 are accepted"; every list an unpaginated array;
        # every catalog job refused as "longer than the -1 days a job may run"; every
        # sample batch refused as "at most 0 samples per batch"
        ("WATTFLOW_MAX_REQUEST_BODY_BYTES", -1),
        ("WATTFLOW_MAX_REQUEST_BODY_BYTES", 0),
        ("API_PAGE_SIZE", 0),
        ("WATTFLOW_MAX_JOB_DAYS", -1),
        ("TELEMETRY_MAX_BATCH_SAMPLES", 0),
    ],
)
def test_a_limit_below_one_is_an_error(settings, setting, value):
    settings.DEBUG = True
    if setting == "API_PAGE_SIZE":
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "PAGE_SIZE": value}
    else:
        setattr(settings, setting, value)

    assert _check_ids() == {"wattflow.E004"}


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        ("API_PAGE_SIZE", "abc", "API_PAGE_SIZE must be an integer, got 'abc'"),
        (
            "WATTFLOW_ROUND_INTERVAL_S",
            "nan",
            "WATTFLOW_ROUND_INTERVAL_S must be an integer, got 'nan'",
        ),
        (
            "TELEMETRY_COUNTER_TOLERANCE",
            "1,5",
            "TELEMETRY_COUNTER_TOLERANCE must be a number, got '1,5'",
        ),
        ("DJANGO_DEBUG", "maybe", "DJANGO_DEBUG must be one of true/false/1/0/yes/no, got 'maybe'"),
    ],
)
def test_a_setting_that_does_not_parse_stops_start_up_with_one_line(variable, value, line):
    # given a value the settings cannot read (it stopped every process with Django's
    # ImproperlyConfigured traceback, 31-55 lines: a seventh probe)
    env = {**os.environ, variable: value}

    # when a process loads the settings
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    # then it stops with one line naming the variable
    assert result.returncode == 1
    assert result.stderr == f"wattflow: {line}.\n"
    assert result.stdout == ""


def test_seed_demos_replay_setting_that_does_not_parse_stops_it_with_one_line():
    env = {**os.environ, "WATTFLOW_REPLAY_JOBS": "many"}

    result = subprocess.run(
        [sys.executable, "manage.py", "seed_demo"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert result.returncode == 1
    assert result.stderr == "wattflow: WATTFLOW_REPLAY_JOBS must be an integer, got 'many'.\n"
    assert result.stdout == ""


def test_a_negative_api_token_lifetime_stops_start_up_with_one_line():
    # given WATTFLOW_API_TOKEN_TTL_S=-1 (read as "no expiry", as 0 is: an eighth probe)
    env = {**os.environ, "WATTFLOW_API_TOKEN_TTL_S": "-1"}

    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert result.returncode == 1
    assert result.stderr == (
        "wattflow: WATTFLOW_API_TOKEN_TTL_S must be 0 (no expiry) or more seconds, got -1.\n"
    )
    assert result.stdout == ""
