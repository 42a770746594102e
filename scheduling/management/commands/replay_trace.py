"""``manage.py replay_trace``: submit a real job trace through the REST API at a speed-up.

Reads an ElasticFlow/Philly trace from ``data/trace/`` (job, submit time, model, global
batch, GPUs, iterations) and POSTs each job to ``/api/jobs/`` when its (compressed) submit
time comes, like users would. With ``--speedup S`` the trace's clock runs S times faster and,
unless ``--work-scale`` says otherwise, each job's iterations shrink by the same factor, so
the replay is the trace in fast-forward: a job that took an hour on the traced cluster takes
about 3.6 s at ``--speedup 1000`` on the same GPUs (it is sized by the perf models, which
are measured, not by the trace's durations). ``--max-wait-s`` caps the wall-clock pause
between two submissions (the trace has multi-hour quiet spells); it changes arrival times
and says so in the summary.

Jobs are submitted as members of ``--teams`` in turn (the first member of each team, by
username; the command issues them an API token if they have none). Each job asks for
``1..num_gpu`` GPUs (elastic) unless ``--fixed-gpus``; its batch is fixed. ``--command``
gives every job that command (the demo on Slurm: ``scripts/demo_slurm_job.py``).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import requests
from django.conf import settings
from django.core.management.base import CommandError
from tqdm import tqdm

from cluster.models import Membership, Team
from config.auth import fresh_token
from config.commands import OneLineCommand
from scheduling.simulator.traces import TraceError, read_elasticflow_trace

DEFAULT_TRACE = Path(settings.BASE_DIR) / "data" / "trace" / "elasticflow_philly_876.csv"


# A job at most 1000x its traced iterations (1e308 overflowed turning iterations into an
# integer, after the server had been waited for); the default work scale is 1 / speedup, so
# the speed-up is at least its inverse (and a slower one would not sleep: 1e-300 overflowed).
MAX_WORK_SCALE = 1000.0
MIN_SPEEDUP = 1.0 / MAX_WORK_SCALE


def positive(kind, *, lower: float = 0.0, upper: float = math.inf):
    """An argument type: a finite ``kind`` above 0 (at least ``lower``, at most ``upper``),
    refused with a message that says so (argparse's own says "invalid float value")."""
    what = "a whole number" if kind is int else "a finite number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be {what} > 0, got {text}")
        if value < lower:
            raise argparse.ArgumentTypeError(f"must be at least {lower:g}, got {text}")
        if value > upper:
            raise argparse.ArgumentTypeError(f"must be at most {upper:g}, got {text}")
        return value

    return parse


def submission_schedule(
    jobs: list, *, speedup: float, max_wait_s: float | None
) -> tuple[list[float], float]:
    """When each job is due, in wall seconds after the first, and how many seconds of quiet
    trace time ``max_wait_s`` removed (``seed_demo`` sizes the demo budgets from this too)."""
    t0_trace = jobs[0].submit_time_s
    shifted_s = last_due = 0.0
    dues = []
    for job in jobs:
        due = (job.submit_time_s - t0_trace) / speedup - shifted_s
        if max_wait_s is not None and due - last_due > max_wait_s:
            shifted_s += due - last_due - max_wait_s
            due = last_due + max_wait_s
        dues.append(due)
        last_due = due
    return dues, shifted_s


class Command(OneLineCommand):
    help = "Submit jobs of a real trace through the REST API at a chosen speed-up."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--server", default="http://127.0.0.1:8000")
        parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
        parser.add_argument("--speedup", type=positive(float, lower=MIN_SPEEDUP), default=1000.0)
        parser.add_argument(
            "--work-scale",
            type=positive(float, upper=MAX_WORK_SCALE),
            default=None,
            help="multiply each job's iterations by this, at most 1000 (default: 1 / speedup)",
        )
        parser.add_argument("--max-wait-s", type=positive(float), default=None)
        parser.add_argument("--limit", type=positive(int), default=None, help="first N jobs")
        parser.add_argument("--teams", default="vision,language", help="comma-separated slugs")
        parser.add_argument("--max-gpus", type=positive(int), default=8)
        parser.add_argument("--fixed-gpus", action="store_true")
        parser.add_argument("--wait-for-server-s", type=positive(float), default=60.0)
        parser.add_argument(
            "--command",
            default="",
            help="each job's command (empty: none; the demo on Slurm gives its stand-in job)",
        )

    def handle(self, *args, **opts) -> None:
        try:
            jobs = read_elasticflow_trace(opts["trace"])
        except TraceError as exc:
            raise CommandError(str(exc)) from None  # it names the trace already
        except OSError as exc:
            raise CommandError(f"cannot read trace {opts['trace']}: {exc}") from None
        if opts["limit"]:
            jobs = jobs[: opts["limit"]]
        if not jobs:
            raise CommandError(f"trace {opts['trace']} has no jobs")
        sessions = self._sessions(opts["teams"])
        api = opts["server"].rstrip("/") + "/api/jobs/"
        self._wait_for(api, sessions[0][1], opts["wait_for_server_s"])

        speedup = opts["speedup"]
        work_scale = opts["work_scale"] or 1.0 / speedup
        dues, shifted_s = submission_schedule(jobs, speedup=speedup, max_wait_s=opts["max_wait_s"])
        start = time.monotonic()
        submitted = rejected = 0
        bar = tqdm(jobs, desc="replay", unit="job", disable=None)
        for i, job in enumerate(bar):
            due = dues[i]
            pause = due - (time.monotonic() - start)
            if pause > 0:
                time.sleep(pause)
            team_slug, session = sessions[i % len(sessions)]
            n = min(job.requested_gpus, opts["max_gpus"])
            body = {
                "name": f"trace-{job.job_id}-{job.workload}",
                "team": team_slug,
                "workload": job.workload,
                "global_batch_size": job.global_batch,
                "total_iterations": max(1, round(job.total_iters * work_scale)),
                "min_gpus": n if opts["fixed_gpus"] else 1,
                "max_gpus": n,
            }
            if opts["command"]:
                body["command"] = opts["command"]
            response = self._post(session, api, body)
            if response.status_code == 201:
                submitted += 1
            elif response.status_code == 400:
                rejected += 1
                tqdm.write(f"job {job.job_id} refused: {response.text[:200]}")
            else:
                raise CommandError(
                    f"{api} answered HTTP {response.status_code} for job {job.job_id}: "
                    f"{response.text[:200]}"
                )
            bar.set_postfix(submitted=submitted, refused=rejected)
        if not submitted:
            # Every job came back 400: nothing was replayed, whatever the loop printed.
            raise CommandError(
                f"the server refused all {rejected} jobs of {opts['trace']} "
                "(each refusal is printed above); nothing was submitted"
            )
        self.stdout.write(
            f"replayed {len(jobs)} jobs in {time.monotonic() - start:.0f} s: {submitted} "
            f"submitted, {rejected} refused; speed-up {speedup:g}, work scale {work_scale:g}"
            + (f", {shifted_s:.0f} s of quiet trace time skipped" if shifted_s else "")
        )

    def _sessions(self, teams: str) -> list[tuple[str, requests.Session]]:
        sessions = []
        for slug in [s.strip() for s in teams.split(",") if s.strip()]:
            team = Team.objects.filter(slug=slug).first()
            if team is None:
                raise CommandError(f"no team {slug!r} (run `manage.py seed_demo` first)")
            membership = (
                Membership.objects.filter(team=team)
                .select_related("user")
                .order_by("user__username")
            ).first()
            if membership is None:
                raise CommandError(f"team {slug!r} has no members to submit as")
            # A fresh one if WATTFLOW_API_TOKEN_TTL_S has expired the old.
            token = fresh_token(membership.user)
            session = requests.Session()
            session.headers["Authorization"] = f"Token {token.key}"
            sessions.append((slug, session))
        if not sessions:
            raise CommandError("--teams names no team")
        return sessions

    def _wait_for(self, api: str, session: requests.Session, timeout_s: float) -> None:
        """The web server may still be starting under honcho: wait for it, then go."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                response = session.get(api, timeout=5)
            except requests.RequestException as exc:
                if time.monotonic() > deadline:
                    raise CommandError(f"{api} is not reachable: {exc}") from None
                time.sleep(1)
                continue
            if response.status_code != 200:
                raise CommandError(f"{api} answered HTTP {response.status_code}: cannot submit")
            return

    def _post(self, session: requests.Session, api: str, body: dict) -> requests.Response:
        for attempt in range(5):
            try:
                return session.post(api, json=body, timeout=30)
            except requests.RequestException as exc:
                if attempt == 4:
                    raise CommandError(f"{api} is not reachable: {exc}") from None
                time.sleep(2**attempt)
        raise AssertionError("unreachable")
