"""Browser tests: headless Chromium (Debian's) driven by Playwright against a real daphne.

Daphne runs in a subprocess on a free port against the *test* database (its name handed over
in DATABASE_URL) and the same Redis db, so the pages, the websocket and the channel layer are
the production stack. Tests use ``transaction=True``: what they create is committed, so the
server process sees it. Every page is also saved as a PNG: under var/screenshots/ by default,
so a test run leaves the tree clean, and under docs/screenshots/ (the committed ones) when run
with WATTFLOW_SCREENSHOT_DIR=docs/screenshots.
"""

from __future__ import annotations

import csv
import io
import os
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.db.models import Sum
from django.utils import timezone
from frontend_scene import PASSWORDS, build_scene
from support.daphne import Daphne

from cluster import services
from cluster.choices import HardLimitAction
from cluster.models import AuditEntry, Budget, BudgetAlert, Job
from frontend.broadcast import broadcast_round
from frontend.dashboard import dashboard_payload
from frontend.labels import reason_sentence, wait_label
from scheduling.core.types import J_PER_KWH
from scheduling.models import RoundDecision
from scheduling.services import run_scheduling_round
from telemetry.models import EnergyLedgerEntry
from telemetry.usage import publish_usage_of_teams

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

playwright_sync = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(settings.BASE_DIR) / os.environ.get(
    "WATTFLOW_SCREENSHOT_DIR", str(Path("var") / "screenshots")
)
VIEWPORT = {"width": 1366, "height": 768}
TIMEOUT_MS = 15_000


@pytest.fixture(autouse=True)
def _fast_password_hashing():
    """Overrides the conftest's MD5 hasher: the server process checks these passwords with
    its own (default) hashers, so they must be stored with one of those."""


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory):
    daphne = Daphne(
        tmp_path_factory.mktemp("daphne") / "daphne.log",
        env={
            "REDIS_URL": settings.REDIS_URL,
            # No persistent connections: the tests truncate tables between them.
            "DATABASE_CONN_MAX_AGE_S": "0",
            "DJANGO_DEBUG": "1",
        },
    )
    daphne.start()
    try:
        yield daphne.url
    finally:
        daphne.stop()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (make test installs it)")
    # Playwright's sync API keeps an asyncio loop in this thread; Django then refuses ORM calls
    # from it unless told that this thread's calls are deliberate (they are: the test's own
    # queries, made between browser steps, never from a coroutine).
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with playwright_sync.sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield b
            b.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def scene(db):
    return build_scene()


@pytest.fixture
def login(browser, server):
    contexts = []

    def log_in(username: str):
        context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{server}/accounts/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORDS[username])
        page.click("button[type=submit]")
        page.wait_for_url(f"{server}/")
        return page

    yield log_in
    for context in contexts:
        context.close()
    # A request the closed pages left in flight may still be reading in daphne when the test's
    # teardown truncates the tables; the two then deadlock and the flush fails (seen in CI).
    # The pages are gone, so end daphne's database sessions before the flush.
    end_other_database_sessions()


def end_other_database_sessions() -> None:
    """Terminate every other session on the test database (the server's: the tests' own
    connection is kept), so nothing holds a table lock when the test's tables are flushed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def broadcast_from_another_thread(summary: dict) -> int:
    """``broadcast_round`` as the round's worker calls it: from a thread without an event loop
    (this one runs Playwright's)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(broadcast_round, summary).result(timeout=10)


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def cells(rows) -> list[list[str]]:
    """Each row's cell texts. (A row's own inner text joins its cells with tabs only once
    the browser has laid the table out: on a loaded CI machine one came back as
    'vision-job #901Started4 GPUsdefault'.)"""
    return [row.locator("td, th").all_inner_texts() for row in rows.all()]


def nav_links(page) -> list[str]:
    return [t.strip() for t in page.locator("header nav a").all_inner_texts()]


def test_each_role_logs_in_and_sees_what_its_role_allows(scene, login, server):
    # given the three roles, when each signs in through the login form
    member = login("vera_member")
    lead = login("liam_lead")
    admin = login("ada_admin")
    # then the navigation offers admin pages to the admin only, and names each role
    common = ["Dashboard", "Jobs", "Budgets", "API docs"]
    assert nav_links(member) == common
    assert nav_links(lead) == common
    assert nav_links(admin) == [*common, "Reports", "Nodes", "Admin"]
    assert member.get_attribute("[data-role]", "data-role") == "member"
    assert lead.get_attribute("[data-role]", "data-role") == "lead"
    assert admin.get_attribute("[data-role]", "data-role") == "admin"
    # and a member who types an admin URL gets a styled 403 page that says why
    response = member.goto(f"{server}/reports/")
    assert response.status == 403
    assert member.inner_text("#error-page h1") == "You may not open this page"
    assert "Admins only." in member.inner_text("#error-page")
    assert member.locator("header.topbar").is_visible()  # styled: the site's own stylesheet
    shot(member, "error_403")
    # the API docs are one click away from the navigation
    member.goto(f"{server}/")
    member.click("nav >> text=API docs")
    member.wait_for_url(f"{server}/api/docs/")


def test_wrong_password_is_refused_and_the_login_page_is_saved(browser, server, scene):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(f"{server}/accounts/login/")
    shot(page, "login")
    page.fill("#id_username", "vera_member")
    page.fill("#id_password", "not-the-password")
    page.click("button[type=submit]")
    assert page.locator("[role=alert]").inner_text().startswith("Please enter a correct")
    assert page.url == f"{server}/accounts/login/"
    context.close()


def test_member_submits_a_job_through_the_form_and_finds_it_in_the_list(scene, login, server):
    page = login("vera_member")
    page.goto(f"{server}/jobs/new/")
    page.fill("#id_name", "browser-submitted-resnet")
    page.fill("#id_workload", "resnet50")
    page.fill("#id_gpus", "2")
    page.fill("#id_batch_size", "128")
    page.fill("#id_iterations", "1000")
    # the prediction appears before submitting
    page.wait_for_function("document.getElementById('pred-gpu').textContent === '2 × A100'")
    assert page.inner_text("#pred-duration") == "2 min 32 s"  # 1000 x 0.1522 s (perf model)
    assert page.inner_text("#pred-model") == "measured (catalog) — catalog resnet50@A100"
    shot(page, "job_submit")
    # a job larger than the cluster gets the submit's reason in place of figures
    page.fill("#id_gpus", "500")
    page.wait_for_function(
        "document.getElementById('prediction-note').textContent.includes('never')"
    )
    assert page.locator("#prediction dl").is_hidden()
    assert "this job needs at least 500" in page.inner_text("#prediction-note")
    page.fill("#id_gpus", "2")
    page.wait_for_function("document.getElementById('pred-gpu').textContent === '2 × A100'")
    page.wait_for_selector("#prediction dl", state="visible")
    page.click("#job-form button[type=submit]")
    page.wait_for_url(f"{server}/jobs/*/")
    job = Job.objects.get(name="browser-submitted-resnet")
    assert (job.owner.username, job.team.slug, job.min_gpus, job.state) == (
        "vera_member",
        "vision",
        2,
        "queued",
    )
    page.goto(f"{server}/jobs/?q=browser-submitted")
    rows = page.locator("#job-table tbody tr")
    assert rows.count() == 1
    assert rows.first.get_attribute("data-job-id") == str(job.pk)


def test_a_bad_job_form_shows_field_errors_and_stores_nothing(scene, login, server):
    page = login("vera_member")
    page.goto(f"{server}/jobs/new/")
    page.fill("#id_name", "broken")
    page.fill("#id_workload", "resnet50")  # free text now: only the two bad fields are wrong
    page.fill("#id_gpus", "4")
    page.fill("#id_max_gpus", "2")
    page.fill("#id_batch_size", "128")
    page.fill("#id_iterations", "0")
    page.click("#job-form button[type=submit]")
    errors = page.locator("#job-form .errorlist").all_inner_texts()
    assert errors == [
        "Must be at least the GPU count.",
        "Ensure this value is greater than or equal to 1.",
    ]
    assert not Job.objects.filter(name="broken").exists()


def test_a_what_if_of_a_tiny_budget_leaves_out_the_points_no_budget_may_have(scene, login, server):
    # 2 Wh: a quarter of it is under the 1 Wh a budget may have, which the server refuses
    # (it took 5e-324 kWh before); the sweep runs the other five points and finishes
    budget = scene.budgets["vision"]
    lead = login("liam_lead")
    lead.goto(f"{server}/budgets/{budget.pk}/edit/")
    lead.fill("#id_energy_limit_kwh", "0.002")
    lead.click("#whatif-run")
    lead.wait_for_function(
        "document.getElementById('whatif-status').textContent.startsWith('Done')",
        timeout=120_000,
    )
    assert lead.eval_on_selector("#whatif-progress", "p => [p.value, p.max]") == [5, 5]
    xs = lead.evaluate("document.getElementById('fig-whatif').data[0].x")
    assert xs == [0.001, 0.0015, 0.002, 0.003, 0.004]
    # and a proposal under the floor is answered with the budget's own message
    lead.fill("#id_energy_limit_kwh", "0.0005")
    lead.click("#whatif-run")
    lead.wait_for_function(
        "document.getElementById('whatif-status').textContent.startsWith('limit:')"
    )
    assert lead.inner_text("#whatif-status") == "limit: Must be at least 0.001 kWh (1 Wh)."


def test_a_what_if_of_a_budget_near_the_ceiling_leaves_out_the_points_above_it(
    scene, login, server
):
    # 900,000,000 kWh is a budget the form saves (the ceiling is 1e9 kWh), but its 1.5x and
    # 2x points are over the ceiling, which the server refuses: the whole sweep stopped at
    # the fifth point with "limit: Ensure this value is less than or equal to 1000000000.0",
    # read as a refusal of the limit the lead had typed (a live probe). The sweep runs the
    # four points a budget may have and finishes.
    budget = scene.budgets["vision"]
    lead = login("liam_lead")
    lead.goto(f"{server}/budgets/{budget.pk}/edit/")
    lead.fill("#id_energy_limit_kwh", "900000000")
    lead.click("#whatif-run")
    lead.wait_for_function(
        "['Done', 'limit:'].some(w => "
        "document.getElementById('whatif-status').textContent.startsWith(w))",
        timeout=120_000,
    )
    assert lead.inner_text("#whatif-status").startswith("Done")
    assert lead.eval_on_selector("#whatif-progress", "p => [p.value, p.max]") == [4, 4]
    xs = lead.evaluate("document.getElementById('fig-whatif').data[0].x")
    assert xs == [225_000_000, 450_000_000, 675_000_000, 900_000_000]
    # and a proposal over the ceiling is answered with the budget's own message
    lead.fill("#id_energy_limit_kwh", "2000000000")
    lead.click("#whatif-run")
    lead.wait_for_function(
        "document.getElementById('whatif-status').textContent.startsWith('limit:')"
    )
    assert lead.inner_text("#whatif-status") == (
        "limit: Ensure this value is less than or equal to 1000000000.0."
    )


def test_lead_edits_a_budget_after_a_what_if_and_a_member_cannot(scene, login, server):
    budget = scene.budgets["vision"]
    lead = login("liam_lead")
    lead.goto(f"{server}/budgets/")
    shot(lead, "budgets")
    lead.click(f"[data-budget-id='{budget.pk}'] a:text('Edit')")
    lead.fill("#id_energy_limit_kwh", "20")
    lead.click("#whatif-run")
    lead.wait_for_function(
        "document.getElementById('whatif-status').textContent.startsWith('Done')",
        timeout=120_000,
    )
    assert lead.eval_on_selector("#whatif-progress", "p => [p.value, p.max]") == [6, 6]
    # six budgets, 5..40 kWh; the largest lets the paced policy finish the whole queue
    xs = lead.evaluate("document.getElementById('fig-whatif').data[0].x")
    ys = lead.evaluate("document.getElementById('fig-whatif').data[0].y")
    assert xs == [5.0, 10.0, 15.0, 20.0, 30.0, 40.0]
    assert ys[-1] is not None and ys[-1] > 0
    # and more budget never predicts a worse average JCT
    shown = [y for y in ys if y is not None]
    assert shown == sorted(shown, reverse=True)
    shot(lead, "budget_whatif")
    lead.click("#budget-form button[type=submit]")
    lead.wait_for_url(f"{server}/budgets/")
    budget.refresh_from_db()
    assert budget.energy_limit_kwh == 20.0
    entry = AuditEntry.objects.get(object_type="budget", object_id=str(budget.pk))
    assert (entry.actor_username, entry.before["energy_limit_kwh"]) == ("liam_lead", 12.0)
    assert entry.after["energy_limit_kwh"] == 20.0

    member = login("vera_member")
    member.goto(f"{server}/budgets/")
    assert member.locator(f"[data-budget-id='{budget.pk}'] a:text('Edit')").count() == 0
    assert member.locator("a:text('New budget')").count() == 0
    assert member.goto(f"{server}/budgets/{budget.pk}/edit/").status == 403
    budget.refresh_from_db()
    assert budget.energy_limit_kwh == 20.0
    assert AuditEntry.objects.count() == 1


def test_dashboard_receives_a_live_round_and_pauses_while_hidden(scene, login, server):
    page = login("vera_member")
    page.wait_for_selector("#live-status[data-state=live]")
    shot(page, "dashboard")
    vision, language = scene.team.pk, scene.other_team.pk
    decisions = [
        {"job_id": 901, "team_id": vision, "job_name": "vision-job", "action": "start", "gpus": 4},
        {"job_id": 902, "team_id": language, "job_name": "language-job", "action": "start"},
    ]
    summary = {"at": scene.now.isoformat(), "policy": "powerflow", "running": 2}
    sent = broadcast_from_another_thread(
        {**summary, "round_id": 77, "queue_length": 5, "scope": "cluster", "decisions": decisions}
    )
    assert sent == 4  # admin, both teams, everyone
    page.wait_for_function("document.getElementById('round-head').textContent.includes('77')")
    rows = cells(page.locator("#round-table tbody tr"))
    # the member sees their team's decision only, never the other team's
    assert [r[:3] for r in rows] == [["vision-job #901", "Started", "4 GPUs"]]
    # the pushed round's cluster-wide counts head its table, saying they are the cluster's;
    # the push also triggers a refresh, after which the team's queue card shows the
    # database's count (2 queued jobs of the member's team in the scene)
    # (queue_length: the jobs queued after the round, as scheduling.summaries builds it)
    assert "the cluster has 5 queued, 2 running" in page.inner_text("#round-head")
    page.wait_for_function("document.getElementById('kpi-queue').textContent === '2'")
    # the pushed time reads as every other time on the site, not ISO's "2026-12-07T15:13:32"
    # (the push's time, then the refresh's it triggered)
    at = page.inner_text("#kpi-at")
    shown = datetime.strptime(at + " +0000", "%Y-%m-%d %H:%M:%S %z")
    assert shown >= scene.now, at

    # a hidden tab closes its socket and ignores rounds; coming back resyncs from the server
    page.evaluate(
        "Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});"
        "document.dispatchEvent(new Event('visibilitychange'));"
    )
    page.wait_for_selector("#live-status[data-state=paused]")
    assert broadcast_from_another_thread({**summary, "round_id": 78, "queue_length": 9}) == 2
    page.wait_for_timeout(1000)
    assert "Round 77" in page.inner_text("#round-head")
    page.evaluate(
        "Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});"
        "document.dispatchEvent(new Event('visibilitychange'));"
    )
    page.wait_for_selector("#live-status[data-state=live]")
    # the resync shows the database's queue (2 queued jobs), not the missed push's 9
    page.wait_for_function("document.getElementById('kpi-queue').textContent === '2'")


def test_admin_exports_a_csv_with_the_ledger_rows(scene, login, server):
    page = login("ada_admin")
    page.goto(f"{server}/reports/")
    shot(page, "reports")
    # the printable page: no navigation, filters or buttons, the tables and chart stay
    page.emulate_media(media="print")
    assert not page.is_visible("header.topbar") and not page.is_visible("#csv-link")
    assert page.is_visible("#report-team") and page.is_visible("#fig-teams")
    shot(page, "reports_print")
    page.emulate_media(media="screen")
    with page.expect_download() as download:
        page.click("#csv-link")
    text = Path(download.value.path()).read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    by_level = {}
    for row in rows:
        by_level.setdefault(row["level"], []).append(row)
    # expected: the ledger's own sums per team (idle energy, with no job, is not a team's)
    ledger = (
        EnergyLedgerEntry.objects.filter(job__isnull=False)
        .values("team__slug")
        .annotate(e=Sum("energy_j"), c=Sum("co2_g"))
        .order_by("-e")
    )
    assert [(r["key"], r["energy_kwh"], r["co2_kg"]) for r in by_level["team"]] == [
        (x["team__slug"], f"{x['e'] / J_PER_KWH:.6f}", f"{x['c'] / 1000:.6f}") for x in ledger
    ]
    # per job: the running jobs and the one finished inside the four sampled hours
    assert sorted(r["name"] for r in by_level["job"]) == [
        "bert-finetune",
        "finished-3",
        "resnet50-sweep",
    ]
    assert sorted(r["name"] for r in by_level["user"]) == ["otto_outsider", "vera_member"]


def test_admin_drains_a_node_and_every_page_is_saved(scene, login, server):
    # a real round of the live scheduler first, so the pages show recorded decisions
    result = run_scheduling_round(now=timezone.now(), policy="fifo", force=True)
    assert result.ran
    page = login("ada_admin")
    page.wait_for_function(
        f"document.getElementById('round-head').textContent.startsWith('Round {result.round_id} ')"
    )
    decided = sorted(tuple(r[:2]) for r in cells(page.locator("#round-table tbody tr")))
    # FIFO retunes the running resnet to full clock; both 4-GPU jobs wait (3 GPUs are free)
    assert decided == [
        (f"gpt2-small #{scene.jobs['gpt2-small'].pk}", "Waits"),
        (f"resnet50-sweep #{scene.jobs['running'].pk}", "Retuned"),
        (f"vgg16-baseline #{scene.jobs['vgg16-baseline'].pk}", "Waits"),
    ]
    shot(page, "dashboard_admin")
    page.goto(f"{server}/nodes/")
    # draining asks first: dismissing the question changes nothing
    questions = []

    def answer(accept: bool):
        def handle(dialog):
            questions.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        return handle

    page.once("dialog", answer(False))
    page.click("[data-node='node-02'] button:text('Drain')")
    page.wait_for_timeout(500)
    assert scene.nodes[1].__class__.objects.get(name="node-02").status == "healthy"
    page.once("dialog", answer(True))
    page.click("[data-node='node-02'] button:text('Drain')")
    page.wait_for_selector("[data-node='node-02'] button:text('Undrain')")
    assert questions[0].startswith("Drain node-02? The scheduler places no new work on its 4 GPUs")
    assert scene.nodes[1].__class__.objects.get(name="node-02").status == "draining"
    shot(page, "nodes")
    page.goto(f"{server}/jobs/")
    shot(page, "jobs")
    page.goto(f"{server}/jobs/{scene.jobs['running'].pk}/")
    shot(page, "job_detail")
    page.goto(f"{server}/jobs/{scene.jobs['gpt2-small'].pk}/")
    job = Job.objects.get(pk=scene.jobs["gpt2-small"].pk)
    text = page.inner_text("#pending-reason")
    # the round's code in words, its sentence once, without a second "Waiting:"
    assert text.startswith(f"Why it waits: {wait_label(job.pending_reason_code)}.")
    assert reason_sentence(job.pending_reason) in text
    assert "Waiting:" not in text
    shot(page, "job_detail_pending")
    page.goto(f"{server}/budgets/new/")
    shot(page, "budget_new")
    # the drain is in the audit log, with before and after
    page.goto(f"{server}/reports/")
    assert cells(page.locator("#audit-log tbody tr").first)[0][1:4] == [
        "ada_admin",
        f"Updated node {scene.nodes[1].pk}",
        "status",
    ]
    shot(page, "reports")
    assert Budget.objects.count() == 2


def page_width(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


def figure_traces(page, element_id: str) -> list[str]:
    """The names of the traces Plotly drew in ``element_id`` (its live data, not the JSON)."""
    page.wait_for_function(f"document.getElementById('{element_id}')?.data !== undefined")
    return page.evaluate(f"document.getElementById('{element_id}').data.map(t => t.name)")


def test_dashboard_draws_the_grid_beside_the_budgets_and_says_each_cards_scope(
    scene, login, server
):
    call_command("import_carbon", "data/carbon/em_ES_2022_hourly.csv", "--zone", "ES",
                 "--onto-year", str(scene.now.year))  # fmt: skip
    # vision's carbon is over its limit: 180 % of it used
    (row,) = dashboard_payload(scene.users["member"], now=scene.now)["budgets"]
    used_kg = row["limits"][1]["used"]
    Budget.objects.filter(pk=scene.budgets["vision"].pk).update(carbon_limit_kg=used_kg / 1.8)
    page = login("vera_member")
    # the grid: intensity behind and ahead, clean and dirty hours, the cluster's power and jobs
    grid = figure_traces(page, "fig-grid")
    assert grid[:2] == ["grid intensity (g/kWh)", "ahead (g/kWh)"]
    assert any(n.startswith("clean hour") for n in grid)
    assert any(n.startswith("dirty hour") for n in grid)
    assert {"cluster GPU power (kW)", "jobs running"} <= set(grid)
    assert page.locator("#fig-grid .shapelayer path").count() > 0  # shaded hours drawn
    assert "replayed onto" in page.text_content("#fig-grid .gtitle")
    # JCT as a distribution and a rolling mean; queue and running together
    assert figure_traces(page, "fig-jct") == [
        "share finished within (CDF)",
        "one job",
        "rolling mean of 10",
    ]
    assert figure_traces(page, "fig-queue") == ["queued", "running"]
    # every card says whose numbers it shows
    scopes = page.locator(".kpi .kpi-scope").all_inner_texts()
    assert scopes[:2] == ["your team Vision", "your team Vision"]
    assert scopes[2] == "the cluster"
    assert scopes[3].startswith("the cluster's grid")
    # the carbon burn chart: the crossings are marked, the title says the true share
    carbon_id = f"fig-budget-{scene.budgets['vision'].pk}-carbon"
    names = figure_traces(page, carbon_id)
    assert any(n.startswith("soft limit crossed ") for n in names)
    assert any(n.startswith("hard limit crossed ") for n in names)
    assert "180 % of" in page.text_content(f"#{carbon_id} .gtitle")
    shot(page, "dashboard_grid")
    page.goto(f"{server}/budgets/")
    carbon = page.locator(f"[data-budget-id='{scene.budgets['vision'].pk}'] .limit").nth(1)
    assert "(180.0 %)" in carbon.inner_text()
    assert carbon.locator(".bar").get_attribute("aria-valuetext") == "180.0 % used"
    shot(page, "budgets_over_limit")


def test_a_job_kept_running_by_hold_queue_reads_keeps_running_with_its_gpus(scene, login, server):
    Budget.objects.filter(pk=scene.budgets["vision"].pk).update(
        energy_limit_kwh=0.001, hard_limit_action=HardLimitAction.HOLD_QUEUE
    )
    result = run_scheduling_round(now=timezone.now(), policy="powerflow", force=True)
    assert result.ran
    page = login("vera_member")
    page.wait_for_selector("#round-table:not([hidden])")
    running = scene.jobs["running"]
    row = page.locator(f"#round-table tbody tr:has(a[href='/jobs/{running.pk}/'])")
    cells = row.locator("td").all_inner_texts()
    assert cells[1:3] == ["Keeps running", "4 GPUs · node-01: 0,1,2,3"]
    assert cells[5].startswith("Budget used up: ")
    assert "budget_exhausted" not in page.inner_text("#round")
    assert "wait" not in cells[1].lower()
    shot(page, "dashboard_hold_queue")


def test_a_lead_sees_a_budget_found_over_after_its_period_pushed_live(scene, login, server):
    # given vision's lead on the dashboard, whose running budget is spent (a round announced
    # it), so the alert card lists that alert
    Budget.objects.filter(pk=scene.budgets["vision"].pk).update(
        energy_limit_kwh=0.001, hard_limit_action=HardLimitAction.HOLD_QUEUE
    )
    assert run_scheduling_round(now=timezone.now(), policy="powerflow", force=True).ran
    page = login("liam_lead")
    page.wait_for_selector("#live-status[data-state=live]")
    items = page.locator("#budget-alert-list li")
    assert items.count() == 1 and "budget used up at" in items.first.inner_text()

    # when the period before it, which ended where it began, is found over its limit after
    # its end (accounted late), and a round's push makes the page fetch its data again
    now, end = timezone.now(), scene.budgets["vision"].period_start
    ended = Budget.objects.create(
        team=scene.team, period_start=end - timedelta(hours=2), period_end=end,
        energy_limit_kwh=1.0,
    )  # fmt: skip
    BudgetAlert.objects.create(
        budget=ended, team=scene.team, at=end + timedelta(minutes=2),
        action=ended.hard_limit_action, energy_used_kwh=1.25, energy_limit_kwh=1.0,
        carbon_used_kg=0.1,
    )  # fmt: skip
    broadcast_from_another_thread({"at": now.isoformat(), "round_id": 91, "running": 0})

    # then the script redraws the card with both, the late one saying what happened
    page.wait_for_function("document.querySelectorAll('#budget-alert-list li').length === 2")
    texts = items.all_inner_texts()
    assert any("budget used up at" in t for t in texts)
    (late,) = [t for t in texts if "after its period ended" in t]
    assert "Vision: budget found over its limit after its period ended at" in late
    assert "energy 1.25 of 1 kWh" in late and "no round could act on it" in late


def test_a_200_character_name_is_cut_with_the_full_name_on_hover(scene, login, server):
    name = "very-long-experiment-" + "x" * 179
    assert len(name) == 200
    job = services.submit_job(
        owner=scene.users["member"],
        team=scene.team,
        name=name,
        workload="resnet50",
        total_iterations=1000,
        global_batch_size=128,
        min_gpus=1,
        max_gpus=1,
    )
    page = login("vera_member")
    page.goto(f"{server}/jobs/")
    link = page.locator(f"#job-table a[href='/jobs/{job.pk}/']")
    assert link.get_attribute("title") == name
    assert page_width(page) <= VIEWPORT["width"]
    box = link.bounding_box()
    assert box is not None and box["width"] < 400
    page.goto(f"{server}/jobs/{job.pk}/")
    assert page_width(page) <= VIEWPORT["width"]
    assert page.locator("h1 .trunc").get_attribute("title") == name
    shot(page, "job_long_name")


def test_the_job_page_shows_allocations_with_nodes_why_and_energy(scene, login, server):
    result = run_scheduling_round(now=timezone.now(), policy="fifo", force=True)
    assert result.applied == 1  # fifo retunes the sweep to the default clock
    page = login("vera_member")
    running = scene.jobs["running"]
    page.goto(f"{server}/jobs/{running.pk}/")
    rows = page.locator("#allocation-table tbody tr")
    assert rows.count() == 2
    last = rows.nth(1).locator("td").all_inner_texts()
    assert last[3] == "node-01: 0,1,2,3"
    assert last[7].startswith(f"Retuned: clock 1200 MHz → default by round {result.round_id}")
    assert figure_traces(page, "fig-timeline") == ["allocation", "energy used (kWh)"]
    energy = page.evaluate("document.getElementById('fig-timeline').data[1].y")
    assert energy and energy[-1] > 0  # measured by the scene's four hours of samples
    assert page.inner_text(".kpis .kpi-label >> nth=0") == "ENERGY SO FAR"
    shot(page, "job_detail_allocations")
    finished = scene.jobs["finished-0"]
    page.goto(f"{server}/jobs/{finished.pk}/")
    assert page.inner_text(".kpis .kpi-label >> nth=0") == "ENERGY USED"


def test_nodes_show_reported_temperatures(scene, login, server):
    page = login("ada_admin")
    page.goto(f"{server}/nodes/")
    node = page.locator("[data-node='node-01']")
    headers = node.locator("thead th").all_inner_texts()
    assert "Temperature (°C)" in headers
    column = headers.index("Temperature (°C)")
    temps = [r[column] for r in cells(node.locator("tbody tr"))]
    # the scene's agent reported 71 °C for the busy GPUs (its test value)
    assert temps == ["71", "71", "71", "71"]
    assert node.locator(".temp-note").count() == 0


def test_demo_screenshots_signs_in_as_the_demo_users_and_saves_every_page(
    server, settings, tmp_path
):
    # given the demo's users and cluster (no browser fixture: the command runs its own)
    settings.WATTFLOW_VAR_DIR = tmp_path
    call_command("seed_demo", stdout=io.StringIO())
    out = tmp_path / "shots"
    with ThreadPoolExecutor(max_workers=1) as pool:  # its own Playwright loop, its own thread
        pool.submit(
            call_command, "demo_screenshots", server=server, out=str(out), stdout=io.StringIO()
        ).result(timeout=180)
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "live_budgets.png",
        "live_dashboard_admin.png",
        "live_dashboard_language_lead.png",
        "live_dashboard_member.png",
        "live_jobs.png",
        "live_nodes.png",
    ]  # no job has run yet: no job pages
    assert all((out / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)


def test_the_dashboards_budget_figure_follows_accounting_live(scene, login):
    # given vision's member on the dashboard, its energy budget figure drawn
    page = login("vera_member")
    budget = scene.budgets["vision"]
    fig = f"fig-budget-{budget.pk}-energy"
    used_now = (
        f"() => {{ const d = document.getElementById('{fig}').data || [];"
        " const t = d.find((x) => (x.name || '').startsWith('used'));"
        " return t ? t.y[t.y.length - 1] : null; }"
    )
    page.wait_for_function(f"({used_now})() !== null")
    page.wait_for_selector("#live-status[data-state=live]")
    before = page.evaluate(used_now)
    # when accounting books another 0.5 kWh to vision in the period and publishes the change
    gpu = scene.nodes[0].gpus.order_by("index").first()
    hour = (scene.now - timedelta(hours=8)).replace(minute=0, second=0, microsecond=0)
    EnergyLedgerEntry.objects.create(
        gpu=gpu, hour=hour, team=budget.team, energy_j=0.5 * J_PER_KWH, co2_g=80.0,
        ci_g_per_kwh=160.0, zone="ES",
    )  # fmt: skip

    def publish():  # as accounting does, from a thread without Playwright's event loop
        try:
            return publish_usage_of_teams([budget.team_id], now=timezone.now())
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        named = pool.submit(publish).result(timeout=10)
    assert named == 1
    # then the figure redraws with the new total, without a reload
    page.wait_for_function(f"Math.abs(({used_now})() - {before + 0.5}) < 1e-5")
    assert page.evaluate(used_now) == pytest.approx(before + 0.5, abs=1e-5)


def test_the_round_table_says_why_each_start_and_retune_happened(scene, login, server):
    # given a one-GPU job of the vision team (node-02 has 3 GPUs free; the queued jobs that
    # need 4 on one node, ahead of it in fifo's queue, are cancelled) and a real round: fifo
    # starts it and retunes the running sweep to the default clock
    for name in ("vgg16-baseline", "gpt2-small"):
        services.cancel_job(scene.jobs[name])
    services.submit_job(
        owner=scene.users["member"],
        team=scene.team,
        name="small-probe",
        workload="resnet50",
        total_iterations=1000,
        global_batch_size=128,
        min_gpus=1,
        max_gpus=1,
    )
    result = run_scheduling_round(now=timezone.now(), policy="fifo", force=True)
    started = RoundDecision.objects.filter(
        round_id=result.round_id, action="start", applied=True, job__team=scene.team
    ).first()
    assert started is not None
    # when the member opens the dashboard
    page = login("vera_member")
    page.wait_for_selector("#round-table:not([hidden])")

    def cells(job_id: int) -> list[str]:
        row = page.locator(f"#round-table tbody tr:has(a[href='/jobs/{job_id}/'])")
        return row.locator("td").all_inner_texts()

    # then the start says which policy granted what it asked for, in words, not blank
    n = len(started.gpu_uuids)
    assert cells(started.job_id)[1] == "Started"
    assert cells(started.job_id)[5] == (
        f"Started by fifo on the {n} GPU{'s' if n > 1 else ''} it asked for, at default clocks."
    )
    # and the retune what changed
    running = scene.jobs["running"]
    assert cells(running.pk)[1] == "Retuned"
    assert cells(running.pk)[5] == "Fifo re-planned it: 1200 MHz → default clocks."
    shot(page, "dashboard_round_why")


def test_two_admins_on_one_gpus_page_the_second_save_of_the_same_field_is_refused(
    scene, login, server
):
    # Two admins open one GPU's change page; the first saves a power limit; the second's
    # save of another power limit comes back refused, naming the field, and the first's
    # value stays (it was written over: the page posted every field as it showed it).
    from cluster.models import Gpu

    gpu = Gpu.objects.filter(retired_at__isnull=True).order_by("pk").first()
    middle = (gpu.min_power_limit_w + gpu.max_power_limit_w) // 2
    first, second = (
        (middle + 1, middle + 2) if gpu.power_limit_w != middle + 1 else (middle + 3, middle + 2)
    )
    url = f"{server}/admin/cluster/gpu/{gpu.pk}/change/"
    one, two = login("ada_admin"), login("ada_admin")
    for page in (one, two):
        page.goto(url)

    one.fill("#id_power_limit_w", str(first))
    one.click("input[name=_save]")
    one.wait_for_url(f"{server}/admin/cluster/gpu/")
    two.fill("#id_power_limit_w", str(second))
    two.click("input[name=_save]")

    refusal = two.locator("ul.errorlist.nonfield").inner_text()
    assert "nothing was saved" in refusal and "power limit" in refusal.lower(), refusal
    shot(two, "admin_stale_edit_refused")
    assert Gpu.objects.get(pk=gpu.pk).power_limit_w == first


def test_the_job_page_follows_its_job_without_a_reload(scene, login, server):
    # A new user's walkthrough: after submitting by the form, the job page said "Queued, not
    # allocated yet" for good, while the job started and finished; only a reload told.
    page = login("vera_member")
    running = scene.jobs["running"]
    page.goto(f"{server}/jobs/{running.pk}/")
    assert page.inner_text("#job-iterations") == "8200"
    Job.objects.filter(pk=running.pk).update(completed_iterations=running.total_iterations / 2)
    page.wait_for_function("document.getElementById('job-progress').textContent === '50.0'")
    assert page.inner_text("#job-iterations") == str(running.total_iterations // 2)

    queued = scene.jobs["vgg16-baseline"]
    page.goto(f"{server}/jobs/{queued.pk}/")
    assert page.inner_text(".state.big") == "Queued"
    assert "Waiting for 4 free GPUs on one node." in page.inner_text("#pending-reason")
    page.wait_for_timeout(500)  # (its first answer, asked at once, has come)
    Job.objects.filter(pk=queued.pk).update(
        pending_reason_code="over_round_allowance", pending_reason="Paced by the budget."
    )
    page.wait_for_function(
        "document.getElementById('pending-reason').textContent.includes('Paced by the budget.')"
    )
    services.cancel_job(queued, at=timezone.now())
    page.wait_for_function("document.querySelector('.state.big').textContent === 'Cancelled'")
    assert page.locator("#pending-reason").count() == 0
    assert "Wattflow.jobPage(" not in page.content()  # a finished job's page stops asking
