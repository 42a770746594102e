"""The ledger's API list and admin list cost a page, not the ledger.

Both counted the whole ledger and sorted it for every page (the API ~1 s, the admin 2-4 s
on a 100,000-job database, 838,980 rows; docs/benchmarks.md). The API now pages by
position (``cluster.api.pagination.KeysetPagination``), the admin counts at most
``BoundedCountPaginator.limit`` rows, and both read their order from an index."""

import json
import re
from base64 import urlsafe_b64decode, urlsafe_b64encode
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import unquote

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cluster.models import Gpu
from telemetry.models import EnergyLedgerEntry

T0 = datetime(2026, 11, 22, 3, 0, 0, tzinfo=UTC)
LEDGER = EnergyLedgerEntry._meta.db_table
PLURAL = EnergyLedgerEntry._meta.verbose_name_plural


@pytest.fixture
def ledger(make_node, team, other_team, make_job, member, outsider):
    """Three hours of two nodes' four GPUs: each GPU-hour one job's row (the team's or the
    other team's, alternately), and in the middle hour an idle row beside each: 16 rows."""
    make_node("node-01", gpus=2)
    make_node("node-02", gpus=2)
    gpus = list(Gpu.objects.order_by("pk"))
    jobs = [make_job(owner=member, team=team), make_job(owner=outsider, team=other_team)]
    rows = []
    for h in range(3):
        for g, gpu in enumerate(gpus):
            job = jobs[(h + g) % 2]
            for owner in (job, None) if h == 1 else (job,):
                rows.append(
                    EnergyLedgerEntry(
                        gpu=gpu,
                        hour=T0 + timedelta(hours=h),
                        job=owner,
                        team=owner and owner.team,
                        energy_j=1000.0 * len(rows) + 1,
                        co2_g=0.0,
                        ci_g_per_kwh=0.0,
                        zone="ES",
                    )  # fmt: skip
                )
    # stored out of the list's order, as accounting writes hours late and out of turn
    return EnergyLedgerEntry.objects.bulk_create(rows[::-1])


def _walk(client, url, *, key):
    """Follow ``key`` links from ``url``; every page's rows and the links back."""
    pages, backs = [], []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        assert "count" not in body
        pages.append([r["energy_j"] for r in body["results"]])
        backs.append(body["previous" if key == "next" else "next"])
        url = body[key]
    return pages, backs


@pytest.mark.parametrize("persona", ["admin", "member"])
def test_the_ledger_api_pages_every_row_once_in_order_both_ways(
    ledger, api_client, personas, monkeypatch, persona
):
    # given 16 ledger rows (the member's team: 6) and pages of 5
    monkeypatch.setattr("telemetry.api.reports.LedgerPagination.page_size", 5)
    client = api_client(personas[persona])
    visible = [r for r in ledger if persona == "admin" or (r.team and r.team.slug == "vision")]
    expected = [r.energy_j for r in sorted(visible, key=lambda r: (r.hour, r.gpu_id, r.pk))]

    # when a client follows the next links from the first page
    pages, previous = _walk(client, "/api/telemetry/ledger/", key="next")

    # then it reads every row it may see once, in the list's order, a page at a time
    assert [e for page in pages for e in page] == expected
    assert [len(p) for p in pages] == [len(expected[i : i + 5]) for i in range(0, len(expected), 5)]
    assert previous[0] is None

    # and the previous links from the last page read the same pages back
    back, _ = _walk(client, previous[-1], key="previous") if len(pages) > 1 else ([], [])
    assert back == pages[-2::-1]


def test_a_filtered_ledger_page_keeps_its_filter_on_the_next(ledger, api_client, personas):
    client = api_client(personas["admin"])
    pages, _ = _walk(client, "/api/telemetry/ledger/?idle=true", key="next")
    assert sorted(e for page in pages for e in page) == sorted(
        r.energy_j for r in ledger if r.job_id is None
    )


def _cursor(position: bytes) -> str:
    return urlsafe_b64encode(b"[0, " + position + b"]").decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "not-base64!",
        urlsafe_b64encode(b"[0, [1]]").decode(),
        urlsafe_b64encode(b'[0, ["2026-11-22T03:00:00", 1, 1]]').decode(),  # naive
        urlsafe_b64encode(b'[2, ["2026-11-22T03:00:00+00:00", 1, 1]]').decode(),
        urlsafe_b64encode(b'[0, ["tuesday", 1, 1]]').decode(),
        # found by probing (each a 500): an id no integer holds (OverflowError), an hour
        # with no UTC equivalent, brackets past the parser's depth (RecursionError)
        pytest.param(_cursor(b'["2026-11-22T03:00:00+00:00", Infinity, 1]'), id="inf-gpu"),
        pytest.param(_cursor(b'["2026-11-22T03:00:00+00:00", 1, -Infinity]'), id="inf-id"),
        pytest.param(_cursor(b'["0001-01-01T00:00:00+05:00", 1, 1]'), id="before-year-1"),
        pytest.param(urlsafe_b64encode(b"[" * 50_000 + b"]" * 50_000).decode(), id="nested-50000"),
    ],
)
def test_a_cursor_the_list_did_not_give_is_refused_naming_it(ledger, api_client, personas, cursor):
    response = api_client(personas["admin"]).get("/api/telemetry/ledger/", {"cursor": cursor})
    assert response.status_code == 400
    assert list(response.json()) == ["cursor"]


@pytest.mark.parametrize("page", ["2", "1", "last"])
def test_a_page_number_is_refused_on_the_cursor_paged_ledger(ledger, api_client, personas, page):
    # A client written for the page numbers of the other lists would read the first page
    # again for every number and never see the rest: it is told instead.
    response = api_client(personas["admin"]).get("/api/telemetry/ledger/", {"page": page})
    assert response.status_code == 400
    assert list(response.json()) == ["page"]
    assert "cursor" in response.json()["page"][0]


def _explained(queries):
    """The plan of each query of the ledger, sequential scans and sorts priced out (the
    test's tables are too small for the planner to prefer an index): a plan that still
    sorts has no index to read its order from."""
    plans = []
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        for query in queries:
            if f'FROM "{LEDGER}"' in query["sql"]:
                cursor.execute("EXPLAIN " + query["sql"])
                plans.append((query["sql"], "\n".join(r[0] for r in cursor.fetchall())))
    return plans


def _unbounded_counts(queries):
    return [
        q["sql"]
        for q in queries
        if re.search(r"COUNT\(", q["sql"], re.I) and LEDGER in q["sql"] and "LIMIT" not in q["sql"]
    ]


@pytest.mark.parametrize("persona", ["admin", "member"])
def test_a_ledger_api_page_neither_counts_nor_sorts_the_ledger(
    ledger, api_client, personas, monkeypatch, persona
):
    # given pages of 5 rows (the first page, then the second)
    monkeypatch.setattr("telemetry.api.reports.LedgerPagination.page_size", 5)
    client = api_client(personas[persona])
    url = "/api/telemetry/ledger/"
    for _ in range(2):
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(url)
        assert response.status_code == 200
        # then no page counts the ledger, and each reads its rows in the index's order
        assert _unbounded_counts(ctx.captured_queries) == []
        plans = _explained(ctx.captured_queries)
        assert plans, "no query of the ledger"
        for sql, plan in plans:
            assert "Sort" not in plan, (sql, plan)
        url = response.json()["next"]


def test_the_admins_ledger_list_neither_counts_nor_sorts_the_ledger(
    ledger, admin_client, monkeypatch
):
    # given a count bound below the ledger's 16 rows
    monkeypatch.setattr("cluster.admin_readonly.BoundedCountPaginator.limit", 10)
    with CaptureQueriesContext(connection) as ctx:
        response = admin_client.get("/admin/telemetry/energyledgerentry/")
    assert response.status_code == 200
    assert _unbounded_counts(ctx.captured_queries) == []
    for sql, plan in _explained(ctx.captured_queries):
        assert "Sort" not in plan, (sql, plan)
    # the rows of the page, newest hour first, and the count said as a bound
    cl = response.context["cl"]
    assert [r.pk for r in cl.result_list] == [
        r.pk for r in sorted(ledger, key=lambda r: (r.hour, r.gpu_id, r.pk), reverse=True)
    ][:100]
    assert f"more than 10 {PLURAL}" in response.content.decode()


def test_the_admins_ledger_list_counts_a_short_ledger_exactly(ledger, admin_client):
    response = admin_client.get("/admin/telemetry/energyledgerentry/")
    assert response.context["cl"].result_count == 16
    html = response.content.decode()
    assert f"16 {PLURAL}" in html and "more than" not in html


def test_a_cursor_at_another_utc_offset_reads_the_same_page(
    ledger, api_client, personas, monkeypatch
):
    # given pages of 5 and the cursor of the first page's next link, its hour at -18:14
    # (Python takes offsets to 23:59, PostgreSQL to 15:59: as sent, it was a 500)
    monkeypatch.setattr("telemetry.api.reports.LedgerPagination.page_size", 5)
    client = api_client(personas["admin"])
    link = client.get("/api/telemetry/ledger/").json()["next"]
    encoded = re.search(r"cursor=([^&]+)", link).group(1)
    reverse, (hour, gpu, pk) = json.loads(urlsafe_b64decode(unquote(encoded)))
    shifted = datetime.fromisoformat(hour).astimezone(timezone(-timedelta(hours=18, minutes=14)))
    other = [reverse, [shifted.isoformat(), gpu, pk]]

    # when the list is asked from each
    pages = [
        client.get("/api/telemetry/ledger/", {"cursor": c}).json()["results"]
        for c in (unquote(encoded), urlsafe_b64encode(json.dumps(other).encode()).decode())
    ]

    # then both name one position: the same rows
    assert pages[0] == pages[1]
    assert len(pages[0]) == 5
