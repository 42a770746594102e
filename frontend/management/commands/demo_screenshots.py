"""``manage.py demo_screenshots --server http://127.0.0.1:8000 --out docs/screenshots``

Screenshots of a *running* demo (``seed_demo`` then the processes of ``Procfile.dev``), taken
with Debian's Chromium through Playwright at 1366 px, as the demo's users: the dashboard of an
admin, a vision member and the language lead, the job list, the job with the most allocations,
a job that waits, budgets and nodes. Files are named ``live_<page>.png``. Read-only: it signs in
and looks, nothing else.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from django.core.management.base import CommandError
from django.db.models import Count
from tqdm import tqdm

from cluster.choices import JobState
from cluster.management.commands.seed_demo import USERS
from cluster.models import Job
from config.commands import OneLineCommand

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1366, "height": 768}
PASSWORDS = {u.username: u.password for u in USERS}


def _blocked_folder(path: Path) -> str | None:
    """Why ``path`` cannot be made a folder (a file there, or a file where one of its parents
    would be), found without making anything; None if nothing in the way."""
    try:
        for part in (path, *path.parents):
            if part.exists():
                if part.is_dir():
                    return None
                return "File exists" if part == path else f"{str(part)!r} is not a folder"
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


class Command(OneLineCommand):
    help = "Screenshot the pages of a running demo as its users (Playwright, Chromium)."

    def add_arguments(self, parser):
        parser.add_argument("--server", required=True, help="e.g. http://127.0.0.1:8000")
        parser.add_argument("--out", default="docs/screenshots")

    def handle(self, *args, server: str, out: str, **options):
        # First, before the browser: a server that is no web address ("", "127.0.0.1:8000")
        # started Chromium, drew the progress bar and failed at the first page.
        try:
            parts = urlsplit(server)
            parts.port  # noqa: B018 (raises ValueError for a port that is not one)
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise CommandError(
                f"--server {server!r}: not an http(s) address, e.g. http://127.0.0.1:8000"
            )
        out_dir = Path(out)
        # (a file there was a FileExistsError traceback) Refused first, as it was, but
        # without making the folder: a refusal below (no Playwright, no Chromium) leaves
        # the disk as it was.
        blocked = _blocked_folder(out_dir)
        if blocked:
            raise CommandError(f"--out {out}: cannot make the folder: {blocked}")
        try:
            from playwright.sync_api import Error, sync_playwright
        except ImportError:
            raise CommandError("playwright is not installed (requirements-dev.txt)") from None
        if not Path(CHROMIUM).exists():
            raise CommandError(f"{CHROMIUM} not found (scripts/bootstrap.sh installs it)")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # (what only the attempt shows: no permission)
            raise CommandError(
                f"--out {out}: cannot make the folder: {exc.strerror or exc}"
            ) from None
        server = server.rstrip("/")
        busiest = (
            Job.objects.annotate(n=Count("allocations"))
            .filter(n__gt=1)
            .order_by("-n", "-pk")
            .first()
        )
        waiting = (
            Job.objects.filter(state__in=[JobState.QUEUED, JobState.PAUSED])
            .exclude(pending_reason_code="")
            .order_by("-pk")
            .first()
        )
        shots = [
            ("admin", "/", "live_dashboard_admin"),
            ("vision_member", "/", "live_dashboard_member"),
            ("language_lead", "/", "live_dashboard_language_lead"),
            ("admin", "/jobs/", "live_jobs"),
            ("vision_lead", "/budgets/", "live_budgets"),
            ("admin", "/nodes/", "live_nodes"),
        ]
        if busiest is not None:
            shots.append(("admin", f"/jobs/{busiest.pk}/", "live_job_allocations"))
        if waiting is not None:
            shots.append(("admin", f"/jobs/{waiting.pk}/", "live_job_waiting"))
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
                )
                pages = {}
                for username, path, name in tqdm(shots, desc="screenshots", unit="page"):
                    page = pages.get(username) or self._login(browser, server, username)
                    pages[username] = page
                    page.goto(server + path)
                    # Plotly draws after load; every figure div has its SVG when it is done.
                    page.wait_for_function(
                        "[...document.querySelectorAll('.fig')].every(d => d.querySelector('svg'))"
                    )
                    page.wait_for_timeout(500)
                    page.screenshot(path=str(out_dir / f"{name}.png"), full_page=True)
                browser.close()
        except Error as exc:
            raise CommandError(f"browser: {str(exc).splitlines()[0]}") from None
        self.stdout.write(f"{len(shots)} screenshots in {out_dir}")

    def _login(self, browser, server: str, username: str):
        page = browser.new_context(viewport=VIEWPORT).new_page()
        page.set_default_timeout(20_000)
        page.goto(f"{server}/accounts/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORDS[username])
        page.click("button[type=submit]")
        page.wait_for_url(f"{server}/")
        return page
