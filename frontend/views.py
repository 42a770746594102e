"""Pages of everyday use: dashboard and jobs. Budgets are in ``budget_views.py``, the admin
pages (reports, nodes) in ``admin_views.py``.

Views stay thin: visibility comes from ``cluster.queries``, writes go through
``cluster.services``, numbers from ``frontend.dashboard`` and figures from
``frontend.figures``. Every view requires a login; a job outside the user's teams is a 404.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpResponseForbidden, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from cluster import services
from cluster.choices import JobState
from cluster.models import Team
from cluster.queries import can_cancel_job, jobs_visible_to, teams_of
from frontend import figures
from frontend.dashboard import as_json, dashboard_payload
from frontend.forms import JobFilterForm, JobSubmitForm, PredictForm
from frontend.predictions import predict_job
from scheduling.feasibility import submit_refusals
from telemetry.accounting import job_totals

JOBS_PER_PAGE = 25


def submittable_teams(user):
    """Teams the user may submit jobs to: their own; admins any."""
    return Team.objects.all() if user.is_staff else teams_of(user)


@login_required
def dashboard(request):
    payload = dashboard_payload(request.user, now=timezone.now())
    return render(request, "frontend/dashboard.html", {"payload": payload, "page": "dashboard"})


@login_required
@require_GET
def dashboard_data(request):
    """The dashboard's numbers as JSON: the page's resync when it becomes visible again."""
    return JsonResponse(as_json(dashboard_payload(request.user, now=timezone.now())))


@login_required
def job_list(request):
    teams = submittable_teams(request.user)
    form = JobFilterForm(request.GET or None, teams=teams)
    jobs = jobs_visible_to(request.user).select_related("team", "owner", "current_allocation")
    if form.is_bound:
        jobs = form.filter(jobs)
    page = Paginator(jobs.order_by("-submitted_at", "-id"), JOBS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "frontend/job_list.html",
        {"form": form, "page_obj": page, "query": query.urlencode(), "page": "jobs"},
    )


@login_required
def job_new(request):
    teams = submittable_teams(request.user)
    if not teams.exists():
        return HttpResponseForbidden("You are in no team, so you cannot submit jobs.")
    form = JobSubmitForm(request.POST or None, teams=teams)
    if request.method == "POST" and form.is_valid():
        try:
            kwargs = form.service_kwargs()
            refusals = submit_refusals(
                team=kwargs["team"],
                workload=kwargs["workload"],
                gpu_model=kwargs.get("gpu_model", ""),
                min_gpus=kwargs["min_gpus"],
                max_gpus=kwargs["max_gpus"],
                min_batch_size=kwargs.get("min_batch_size") or kwargs["global_batch_size"],
                total_iterations=kwargs["total_iterations"],
                now=timezone.now(),
            )
            if refusals:
                raise ValidationError(refusals)
            job = services.submit_job(owner=request.user, **kwargs)
        except ValidationError as exc:
            # The model's own rules (e.g. batch ranges): shown beside the form's fields.
            for field, errors in exc.message_dict.items():
                target = {
                    "min_gpus": "gpus",
                    "global_batch_size": "batch_size",
                    "total_iterations": "iterations",
                }.get(field, field)
                form.add_error(target if target in form.fields else None, errors)
        else:
            messages.success(request, f"Job {job.name} (#{job.pk}) queued.")
            return redirect("frontend:job-detail", pk=job.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "frontend/job_new.html", {"form": form, "page": "jobs"}, status=status)


@login_required
@require_GET
def job_predict(request):
    """Predicted duration, energy and carbon of the form's configuration (JSON); 400 with
    per-field messages on bad input."""
    form = PredictForm(request.GET)
    if not form.is_valid():
        return JsonResponse({"errors": form.errors}, status=400)
    data = form.cleaned_data
    try:
        prediction = predict_job(
            workload=data["workload"],
            gpus=data["gpus"],
            batch_size=data["batch_size"],
            iterations=data["iterations"],
            now=timezone.now(),
        )
    except KeyError as exc:
        return JsonResponse({"errors": {"workload": [str(exc)]}}, status=400)
    return JsonResponse(prediction.as_dict())


@login_required
def job_detail(request, pk: int):
    job = get_object_or_404(jobs_visible_to(request.user).select_related("team", "owner"), pk=pk)
    now = timezone.now()
    allocations = [
        {
            "started_at": a.started_at,
            "ended_at": a.ended_at,
            "gpus": a.gpus.count(),
            "gpu_names": ", ".join(str(g) for g in a.gpus.select_related("node")),
            "batch_size": a.batch_size,
            "sm_clock_mhz": a.sm_clock_mhz,
            "power_limit_w": a.power_limit_w,
        }
        for a in job.allocations.order_by("started_at")
    ]
    timeline = (
        figures.allocation_timeline_figure(
            allocations, now=now, state_colour=JobState(job.state).colour
        )
        if allocations
        else None
    )
    totals = job_totals(job)
    return render(
        request,
        "frontend/job_detail.html",
        {
            "job": job,
            "state": JobState(job.state),
            "allocations": allocations,
            "timeline": timeline,
            "wait_until": job.pending_until,
            "totals": totals,
            "co2_kg": totals.co2_g / 1000.0,
            "progress_percent": min(100.0, 100.0 * job.completed_iterations / job.total_iterations),
            "can_cancel": can_cancel_job(request.user, job) and not JobState(job.state).is_terminal,
            "page": "jobs",
        },
    )


@login_required
@require_POST
def job_cancel(request, pk: int):
    job = get_object_or_404(jobs_visible_to(request.user), pk=pk)
    if not can_cancel_job(request.user, job):
        return HttpResponseForbidden("Only the owner, a team lead or an admin may cancel it.")
    try:
        services.cancel_job(job)
    except services.InvalidTransition as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Job {job.name} cancelled.")
    return redirect("frontend:job-detail", pk=job.pk)
