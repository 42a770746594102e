"""Admin pages: energy/carbon reports with CSV export and the audit log; nodes with drain.

Non-admins get 403 (anonymous users the login page), and nothing is changed.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from functools import wraps

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from cluster import services
from cluster.choices import NodeStatus
from cluster.models import AuditEntry, Job, Node, Team, gpus_in_service
from cluster.queries import admin_may, admin_sees
from frontend import figures
from frontend.csvcells import SafeWriter
from frontend.forms import ReportPeriodForm
from scheduling.core.types import G_PER_KG, J_PER_KWH
from telemetry.queries import latest_gpu_readings, usage_by, usage_query

REPORT_DAYS = 30
REPORT_JOBS_PER_PAGE = 50
AUDIT_ROWS = 200


def admin_required(view):
    """Login first (redirect), then staff only (403)."""

    @login_required
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not request.user.is_staff:
            raise PermissionDenied("Admins only.")
        return view(request, *args, **kwargs)

    return wrapped


def _may_read(request, permission: str) -> None:
    """403 unless the staff user may view what the page shows in the Django admin
    (``admin_sees``): a staff user granted nothing read every team's energy and jobs here."""
    if not admin_sees(request.user, permission):
        raise PermissionDenied("Only admins allowed to view this in the admin read it here.")


# What the reports show: every team's, user's and job's energy (the ledger's rows).
REPORTS_PERMISSION = "telemetry.view_energyledgerentry"
NODES_PERMISSION = "cluster.view_node"


def report_period(form: ReportPeriodForm, *, today: date) -> tuple[date, date]:
    if form.is_bound and form.is_valid():
        return form.cleaned_data["start"], form.cleaned_data["end"]
    return today - timedelta(days=REPORT_DAYS - 1), today


def _bounds(start: date, end: date) -> tuple[datetime, datetime]:
    """[start 00:00, the day after end 00:00) in UTC: the end date is inclusive."""
    return (
        datetime.combine(start, time(), tzinfo=UTC),
        datetime.combine(end + timedelta(days=1), time(), tzinfo=UTC),
    )


def _job_rows(per_job) -> list[dict]:
    """Report rows of the jobs of ``per_job`` (``usage_query("job", ...)`` rows), their names,
    teams and owners read in one query."""
    per_job = list(per_job)
    # Each job's team and owner in the same query: read per row, they were two queries a
    # job (186,000 for a month of a 100-node cluster's 93,000 jobs).
    jobs = (
        Job.objects.select_related("team", "owner")
        .only("name", "team__name", "owner__username")
        .in_bulk([r["job"] for r in per_job])
    )
    return [
        _row(
            r["job"],
            jobs[r["job"]].name,
            r,
            team=jobs[r["job"]].team.name,
            owner=jobs[r["job"]].owner.username,
        )
        for r in per_job
    ]


def _row(key, name, r, **extra) -> dict:
    return {
        "key": key,
        "name": name,
        "energy_kwh": r["energy_j"] / J_PER_KWH,
        "co2_kg": r["co2_g"] / G_PER_KG,
        **extra,
    }


def report_rows(start: date, end: date, *, jobs: bool = True) -> dict[str, list[dict]]:
    """Energy (kWh) and carbon (kg) per team, user and (unless ``jobs`` is false) job over
    [start, end] (whole UTC days), from the telemetry ledger."""
    lo, hi = _bounds(start, end)
    teams = {t.pk: t for t in Team.objects.all()}
    users = {u.pk: u for u in get_user_model().objects.all()}
    rows = {
        "team": [
            _row(teams[r["team"]].slug, teams[r["team"]].name, r) for r in usage_by("team", lo, hi)
        ],
        "user": [
            _row(users[r["job__owner"]].pk, users[r["job__owner"]].username, r)
            for r in usage_by("job__owner", lo, hi)
        ],
    }
    if jobs:
        rows["job"] = _job_rows(usage_query("job", lo, hi))
    return rows


def _period_form(request) -> ReportPeriodForm:
    """The report's period as asked: parameters other than the period's (a page link's
    ?page=2) leave it unbound, the default period's, not a period left blank (a 400)."""
    return ReportPeriodForm(request.GET if {"start", "end"} & set(request.GET) else None)


@admin_required
def reports(request):
    _may_read(request, REPORTS_PERMISSION)
    form = _period_form(request)
    start, end = report_period(form, today=timezone.now().date())
    if not form.is_bound:
        form = ReportPeriodForm(initial={"start": start, "end": end})
    rows = report_rows(start, end, jobs=False)
    lo, hi = _bounds(start, end)
    # Jobs a page at a time, largest energy first: a month of a 100-node cluster is 93,000
    # jobs, which made a 15 MB page in over a minute. Teams and users stay complete, and
    # the CSV export lists every job.
    job_page = Paginator(usage_query("job", lo, hi), REPORT_JOBS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    rows["job"] = _job_rows(job_page.object_list)
    audit = AuditEntry.objects.filter(at__gte=lo, at__lt=hi).select_related("team")[:AUDIT_ROWS]
    if not admin_sees(request.user, "cluster.view_auditentry"):
        audit = AuditEntry.objects.none()
    return render(
        request,
        "frontend/reports.html",
        {
            "form": form,
            "start": start,
            "end": end,
            "rows": rows,
            # Every team's row is complete: their sum is the period's (every job's) total.
            "total": {
                "energy_kwh": sum(r["energy_kwh"] for r in rows["team"]),
                "co2_kg": sum(r["co2_kg"] for r in rows["team"]),
            },
            "job_page": job_page,
            "team_figure": figures.energy_carbon_bars(
                [(r["name"], r["energy_kwh"], r["co2_kg"]) for r in rows["team"]],
                title="Energy and carbon per team",
            ),
            "audit": audit,
            "page": "reports",
        },
        status=400 if form.is_bound and form.errors else 200,
    )


@admin_required
def reports_csv(request):
    _may_read(request, REPORTS_PERMISSION)
    form = _period_form(request)
    if form.is_bound and not form.is_valid():
        return HttpResponse(
            "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()),
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    # A byte-order mark for Excel, which reads a CSV without one in the system's code page
    # (non-ASCII names garbled); off by default: other programs read it into the first
    # column's name.
    bom = request.GET.get("bom", "0")
    if bom not in ("0", "1"):
        return HttpResponse(
            "bom: must be 0 or 1.", status=400, content_type="text/plain; charset=utf-8"
        )
    start, end = report_period(form, today=timezone.now().date())
    rows = report_rows(start, end)
    # Streamed a row at a time: a month of a large cluster is ~100,000 job rows, which were
    # written into one response body in memory before the first byte was sent. Under ASGI
    # (daphne serves the site) the lines must come from an asynchronous iterator: Django
    # reads a synchronous one whole into a list first, with a warning each time. The rows
    # are read above, so a database error is a 500, not a CSV cut short.
    lines = _csv_lines(rows, start, end, bom=bom == "1")
    if isinstance(request, ASGIRequest):
        lines = _async_lines(lines)
    response = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = (
        f'attachment; filename="wattflow-energy-{start.isoformat()}-{end.isoformat()}.csv"'
    )
    return response


class _Line:
    """A file-like sink that keeps the last line written (for a streamed CSV)."""

    def write(self, text: str) -> None:
        self.text = text


async def _async_lines(lines):
    """``lines``, an asynchronous iterator (they are formatted in memory: nothing blocks)."""
    for line in lines:
        yield line


def _csv_lines(rows: dict[str, list[dict]], start: date, end: date, *, bom: bool = False):
    line = _Line()
    # Job, team and user names are typed by users: no cell may become a formula.
    writer = SafeWriter(line)
    writer.writerow(
        ["level", "key", "name", "team", "owner", "energy_kwh", "co2_kg", "start", "end"]
    )
    yield ("\ufeff" if bom else "") + line.text
    for level, level_rows in rows.items():
        for r in level_rows:
            writer.writerow(
                [
                    level,
                    r["key"],
                    r["name"],
                    r.get("team", ""),
                    r.get("owner", ""),
                    f"{r['energy_kwh']:.6f}",
                    f"{r['co2_kg']:.6f}",
                    start.isoformat(),
                    end.isoformat(),
                ]
            )
            yield line.text


@admin_required
def nodes(request):
    _may_read(request, NODES_PERMISSION)
    readings: dict[int, object] = {r.gpu_id: r for r in latest_gpu_readings(now=timezone.now())}
    rows = []
    jobs_on = dict(
        Node.objects.annotate(
            n=Count(
                "gpus__allocations__job",
                filter=Q(gpus__allocations__ended_at__isnull=True),
                distinct=True,
            )
        ).values_list("pk", "n")
    )
    for node in Node.objects.prefetch_related(gpus_in_service()).order_by("name"):
        gpus = [
            {"gpu": gpu, "reading": readings.get(gpu.pk)}
            for gpu in sorted(node.gpus.all(), key=lambda g: g.index)
        ]
        power_w = sum(g["reading"].power_w or 0.0 for g in gpus if g["reading"])
        rows.append(
            {
                "node": node,
                "status": NodeStatus(node.status),
                "gpus": gpus,
                "power_w": power_w,
                # The simulated agent sends no temperature (no thermal model to draw one
                # from); the column shows only where some GPU of the node reported one.
                "reports_temp": any(
                    g["reading"] is not None and g["reading"].temp_c is not None for g in gpus
                ),
                "jobs": jobs_on.get(node.pk, 0),
            }
        )
    return render(
        request,
        "frontend/nodes.html",
        {
            "rows": rows,
            "page": "nodes",
            "max_future_s": settings.TELEMETRY_MAX_FUTURE_S,
            # (a staff user who may only view is shown no button that answers 403)
            "can_drain": admin_may(request.user, "change_node"),
        },
    )


def _node_action(request, pk: int, action) -> HttpResponse:
    if not admin_may(request.user, "change_node"):
        # (as the API and the admin ask: a staff user allowed only to view drained nodes here)
        raise PermissionDenied("Only admins allowed to change nodes drain them.")
    node = get_object_or_404(Node, pk=pk)
    try:
        action(node, actor=request.user)
    except services.NodeStateError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Node {node.name} is {node.status} now.")
    return redirect("frontend:nodes")


@require_POST
@admin_required
def node_drain(request, pk: int):
    return _node_action(request, pk, services.drain_node)


@require_POST
@admin_required
def node_undrain(request, pk: int):
    return _node_action(request, pk, services.undrain_node)
