"""Carbon intensity: the import command, the HTTP provider against a real local server, and
the static fallback when a provider fails."""

import json
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from io import StringIO
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from django.core.management import CommandError, call_command
from support.net import free_port

from scheduling.simulator.carbon import read_electricity_maps_csv
from telemetry.carbon import (
    HttpProvider,
    carbon_signal,
    intensity_for_hour,
    static_mean_g_per_kwh,
)
from telemetry.choices import CarbonSource
from telemetry.models import CarbonIntensity

ES_FILE = "data/carbon/em_ES_2022_hourly.csv"


def test_the_floor_is_under_every_vendored_hour():
    # The cleanest hour of the four zones' files, direct or LCA, is above the floor.
    from scheduling.core.carbon_data import MIN_CI_G_PER_KWH

    for path in sorted(Path(ES_FILE).parent.glob("em_*_hourly.csv")):
        for kind in ("direct", "lca"):
            points = read_electricity_maps_csv(path, kind=kind)
            assert min(p.ci_g_per_kwh for p in points) >= 1.75 > MIN_CI_G_PER_KWH, path


def test_import_carbon_loads_every_hour_of_the_file(db):
    call_command("import_carbon", ES_FILE, "--zone", "ES")
    points = read_electricity_maps_csv(ES_FILE)
    assert CarbonIntensity.objects.filter(zone="ES").count() == 8760
    first = CarbonIntensity.objects.get(zone="ES", hour=points[0].start)
    assert (first.ci_g_per_kwh, first.source, first.estimated) == (
        points[0].ci_g_per_kwh,
        CarbonSource.IMPORTED,
        points[0].estimated,
    )
    # re-importing replaces, never duplicates
    call_command("import_carbon", ES_FILE, "--zone", "ES")
    assert CarbonIntensity.objects.filter(zone="ES").count() == 8760


def test_a_bad_file_fails_with_one_line_and_keeps_what_was_stored(db, tmp_path):
    kept = CarbonIntensity.objects.create(
        zone="ES", hour=datetime(2022, 1, 1, tzinfo=UTC), ci_g_per_kwh=1.0, source="imported"
    )
    bad = tmp_path / "bad.csv"
    bad.write_text("Datetime (UTC),Carbon Intensity gCO₂eq/kWh (direct)\n2022-01-01 00:00:00,x\n")
    with pytest.raises(CommandError, match=r"^bad.csv:2: bad value"):
        call_command("import_carbon", str(bad), "--zone", "ES")
    assert list(CarbonIntensity.objects.values_list("pk", "ci_g_per_kwh")) == [(kept.pk, 1.0)]


HEADER = "Datetime (UTC),Zone Id,Carbon Intensity gCO₂eq/kWh (direct)\n"


@pytest.mark.parametrize(
    ("row", "zone", "said"),
    [
        # (a row of 1e308 replaced a stored hour's 147.66 with it)
        ("2022-01-01 00:00:00,ES,1e308", "ES", r"^bad.csv:2: intensity 1e\+308 gCO2eq/kWh is"),
        # (a probe: 0 and 1e-320 were imported, every such hour's carbon free; the floor
        # is MIN_CI_G_PER_KWH, under the cleanest vendored hour, Norway's 1.75)
        ("2022-01-01 00:00:00,ES,0", "ES", r"^bad.csv:2: intensity 0 gCO2eq/kWh is below"),
        ("2022-01-01 00:00:00,ES,1e-320", "ES", r"^bad.csv:2: intensity 1e-320 gCO2eq/kWh is b"),
        ("2022-01-01 00:00:00,ES,0.09", "ES", r"^bad.csv:2: intensity 0.09 gCO2eq/kWh is below"),
        ("0001-01-01 00:00:00,ES,100", "ES", r"^bad.csv:2: hour 0001-01-01 00:00 is outside"),
        ("2022-01-01 00:00:00,NO,30", "ES", r"^bad.csv:2: a row of zone NO, not ES"),
        ("2022-01-01 00:00:00,ES,100", "E\tS", r"^--zone must be 1 to 32 printable"),
        # (a probe: a file whose rows fell on half hours was imported, 1 "hour" each, which
        # accounting never found, it prices the hour from its start, while the round's
        # forecast took them as hours of their own, 30 minutes off)
        ("2022-01-01 00:30:00,ES,0", "ES", r"^bad.csv:2: 2022-01-01 00:30:00 is not the start"),
        ("2022-01-01 00:00:01,ES,0", "ES", r"^bad.csv:2: 2022-01-01 00:00:01 is not the start"),
        # (a row longer than the header was imported, its tail dropped)
        ("2022-01-01 00:00:00,ES,100,7", "ES", r"^bad.csv:2: 4 fields where the header has 3"),
    ],
)
def test_what_is_no_intensity_of_the_zone_is_refused_and_keeps_what_was_stored(
    db, tmp_path, row, zone, said
):
    kept = CarbonIntensity.objects.create(
        zone="ES", hour=datetime(2022, 1, 1, tzinfo=UTC), ci_g_per_kwh=147.66, source="imported"
    )
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + row + "\n")
    with pytest.raises(CommandError, match=said):
        call_command("import_carbon", str(bad), "--zone", zone)
    assert list(CarbonIntensity.objects.values_list("pk", "ci_g_per_kwh")) == [(kept.pk, 147.66)]


def test_a_leap_day_alone_onto_a_common_year_fails_with_one_line(db, tmp_path):
    leap = tmp_path / "leap.csv"
    leap.write_text(HEADER + "2024-02-29 00:00:00,ES,100\n")
    with pytest.raises(CommandError, match=r"none of its hours falls on a date of 2023$"):
        call_command("import_carbon", str(leap), "--zone", "ES", "--onto-year", "2023")
    assert not CarbonIntensity.objects.exists()


def test_a_file_that_is_not_text_fails_with_one_line(db, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(HEADER.encode() + b"\xff\xfe\n")
    with pytest.raises(CommandError, match=r"^bad.csv: not UTF-8 text"):
        call_command("import_carbon", str(bad), "--zone", "ES")


def test_the_static_fallback_is_the_yearly_mean_of_the_zones_file():
    points = read_electricity_maps_csv("data/carbon/em_NO_2022_hourly.csv")
    assert static_mean_g_per_kwh("NO") == sum(p.ci_g_per_kwh for p in points) / 8760


class _Handler(BaseHTTPRequestHandler):
    answers: list = []
    seen: list = []
    intensity = 123.0

    def do_GET(self):  # noqa: N802 (http.server's name)
        query = parse_qs(urlparse(self.path).query)
        self.seen.append((query, self.headers.get("auth-token")))
        body = json.dumps(
            {"zone": query["zone"][0], "carbonIntensity": self.intensity, "isEstimated": True}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def intensity_server():
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    _Handler.seen = []
    _Handler.intensity = 123.0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v3/carbon-intensity/past", _Handler.seen
    server.shutdown()
    server.server_close()


def test_the_http_provider_fetches_once_and_stores_the_answer(db, intensity_server):
    url, seen = intensity_server
    provider = HttpProvider(url, "secret")
    hour = datetime(2026, 11, 22, 3, 17, tzinfo=UTC)
    got = intensity_for_hour("DE", hour, provider=provider)
    assert (got.ci_g_per_kwh, got.estimated, got.source) == (123.0, True, CarbonSource.HTTP)
    assert seen == [
        ({"zone": ["DE"], "datetime": ["2026-11-22T03:00:00+00:00"]}, "secret"),
    ]
    intensity_for_hour("DE", hour, provider=provider)
    assert len(seen) == 1  # the stored row answered the second time
    assert CarbonIntensity.objects.get(zone="DE").source == CarbonSource.HTTP


@pytest.mark.parametrize("answer", [float("inf"), float("nan"), -5.0, 1e308, 0.0, 1e-320])
def test_a_provider_answering_a_non_finite_or_negative_intensity_is_not_believed(
    db, intensity_server, answer
):
    # given a provider that answers Infinity (json.loads accepts it), NaN, a negative number
    # or one above any grid's
    url, _ = intensity_server
    _Handler.intensity = answer
    hour = datetime(2026, 11, 22, 3, 17, tzinfo=UTC)
    # when the hour is priced, then the static mean is used, marked estimated, nothing stored
    got = intensity_for_hour("ES", hour, provider=HttpProvider(url, ""))
    assert (got.ci_g_per_kwh, got.estimated) == (static_mean_g_per_kwh("ES"), True)
    assert not CarbonIntensity.objects.filter(zone="ES").exists()


def test_a_failing_http_provider_falls_back_to_the_static_mean_marked_estimated(db):
    provider = HttpProvider(f"http://127.0.0.1:{free_port()}/", "", timeout_s=1.0)
    got = intensity_for_hour("ES", datetime(2026, 11, 22, 3, tzinfo=UTC), provider=provider)
    assert (got.ci_g_per_kwh, got.estimated, got.source) == (
        static_mean_g_per_kwh("ES"),
        True,
        CarbonSource.STATIC,
    )
    assert not CarbonIntensity.objects.exists()


def test_a_failed_http_provider_is_not_asked_again_during_its_backoff(db, intensity_server):
    url, seen = intensity_server
    HttpProvider._down_until[url] = time.monotonic() + 60  # as if it had just failed
    try:
        got = intensity_for_hour("ES", datetime(2026, 11, 22, 3, tzinfo=UTC),
                                 provider=HttpProvider(url, ""))  # fmt: skip
    finally:
        HttpProvider._down_until.pop(url)
    assert (got.source, got.estimated) == (CarbonSource.STATIC, True)
    assert seen == []


def test_carbon_signal_gives_now_and_the_stored_hours_ahead(db):
    call_command("import_carbon", ES_FILE, "--zone", "ES")
    now = datetime(2022, 6, 1, 12, 30, tzinfo=UTC)
    signal = carbon_signal("ES", now, hours_ahead=3)
    rows = CarbonIntensity.objects.filter(zone="ES", hour__gte=now.replace(minute=0)).order_by(
        "hour"
    )[:3]
    assert signal.ci_g_per_kwh == rows[0].ci_g_per_kwh
    assert signal.forecast == tuple((r.hour.timestamp(), r.ci_g_per_kwh) for r in rows)


def test_carbon_signal_never_raises_for_a_zone_with_nothing(db):
    signal = carbon_signal("XX", datetime(2026, 1, 1, tzinfo=UTC))
    assert (signal.ci_g_per_kwh, signal.estimated, signal.forecast) == (0.0, True, ())


def test_import_onto_a_year_keeps_date_and_hour_and_marks_the_rows_estimated(db):
    call_command("import_carbon", ES_FILE, "--zone", "ES", "--onto-year", "2026")
    points = {p.start: p for p in read_electricity_maps_csv(ES_FILE)}
    assert CarbonIntensity.objects.filter(zone="ES").count() == 8760
    row = CarbonIntensity.objects.get(zone="ES", hour=datetime(2026, 11, 25, 13, tzinfo=UTC))
    source = points[datetime(2022, 11, 25, 13, tzinfo=UTC)]
    assert (row.ci_g_per_kwh, row.estimated, row.source) == (
        source.ci_g_per_kwh,
        True,
        CarbonSource.IMPORTED,
    )
    # the stored hour now answers for that hour: no fallback to the yearly mean
    got = intensity_for_hour("ES", datetime(2026, 11, 25, 13, 40, tzinfo=UTC))
    assert (got.ci_g_per_kwh, got.source) == (source.ci_g_per_kwh, CarbonSource.IMPORTED)


def test_import_onto_a_leap_year_repeats_the_28th_for_the_29th_of_february(db):
    call_command("import_carbon", ES_FILE, "--zone", "ES", "--onto-year", "2028")
    assert CarbonIntensity.objects.filter(zone="ES").count() == 8784
    feb28 = CarbonIntensity.objects.get(zone="ES", hour=datetime(2028, 2, 28, 5, tzinfo=UTC))
    feb29 = CarbonIntensity.objects.get(zone="ES", hour=datetime(2028, 2, 29, 5, tzinfo=UTC))
    assert feb29.ci_g_per_kwh == feb28.ci_g_per_kwh


def test_import_onto_an_impossible_year_fails_with_one_line_and_stores_nothing(db):
    with pytest.raises(CommandError, match="--onto-year must be a year between 2000 and 2099"):
        call_command("import_carbon", ES_FILE, "--zone", "ES", "--onto-year", "0")
    assert not CarbonIntensity.objects.exists()


def test_a_missing_hour_warns_once_per_zone_and_hour_not_every_round(db, caplog):
    hour = datetime(2026, 11, 22, 3, tzinfo=UTC)
    with caplog.at_level("WARNING", logger="telemetry.carbon"):
        for minute in (0, 10, 20):
            intensity_for_hour("BR", hour.replace(minute=minute))
    warnings = [r for r in caplog.records if "carbon provider failed" in r.getMessage()]
    assert len(warnings) == 1


def test_a_replay_onto_a_year_keeps_the_hours_measured_there(db):
    # A measured hour (the HTTP provider's, or a file of that year) stays; an estimate of
    # the same replay or of the static fallback is replaced. Before: the replay overwrote
    # the measurement with 2022's value, marked estimated.
    measured = CarbonIntensity.objects.create(
        zone="ES",
        hour=datetime(2026, 11, 25, 13, tzinfo=UTC),
        ci_g_per_kwh=111.0,
        source=CarbonSource.HTTP,
        estimated=False,
    )
    guessed = CarbonIntensity.objects.create(
        zone="ES",
        hour=datetime(2026, 11, 25, 14, tzinfo=UTC),
        ci_g_per_kwh=222.0,
        source=CarbonSource.HTTP,
        estimated=True,
    )
    out = StringIO()
    call_command("import_carbon", ES_FILE, "--zone", "ES", "--onto-year", "2026", stdout=out)
    measured.refresh_from_db()
    assert (measured.ci_g_per_kwh, measured.estimated, measured.source) == (
        111.0,
        False,
        CarbonSource.HTTP,
    )
    assert "imported 8759 hours" in out.getvalue()
    assert "kept 1 measured hour(s)" in out.getvalue()
    assert CarbonIntensity.objects.filter(zone="ES").count() == 8760
    guessed.refresh_from_db()
    points = {p.start: p for p in read_electricity_maps_csv(ES_FILE)}
    assert (guessed.ci_g_per_kwh, guessed.estimated, guessed.source) == (
        points[datetime(2022, 11, 25, 14, tzinfo=UTC)].ci_g_per_kwh,
        True,
        CarbonSource.IMPORTED,
    )
    # a file of the year itself (a measurement) still replaces what is stored
    call_command("import_carbon", ES_FILE, "--zone", "ES", stdout=StringIO())
    assert CarbonIntensity.objects.filter(zone="ES", hour__year=2022).count() == 8760
