"""Pages of everyday use: dashboard and jobs. Budgets are in ``budget_views.py``, the admin
pages (reports, nodes) in ``admin_views.py``.

Views stay thin: visibility comes from ``cluster.queries``, writes go through
``cluster.services``, numbers from ``frontend.dashboard`` and figures from
``frontend.figures``. Every view requires a login; a job outside the user's teams is a 404.
"""

from __future__ import annotations

import hashlib

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from cluster import services
from cluster.choices import JobState
from cluster.queries import (
    can_cancel_job,
    jobs_visible_to,
    submittable_teams,
    teams_with_jobs_visible_to,
)
from frontend import labels, timeline_figures
from frontend.dashboard import as_json, dashboard_payload, page_labels
from frontend.forms import JobFilterForm, JobSubmitForm, PredictForm
from frontend.predictions import predict_job
from scheduling.choices import DecisionAction
from scheduling.core.types import G_PER_KG
from scheduling.feasibility import submit_refusals
from scheduling.models import JobSchedulingState, RoundDecision
from scheduling.perf_lookup import job_models
from scheduling.queries import placement_label
from scheduling.workload_profiles import JobHints
from telemetry.accounting import job_totals
from telemetry.queries import job_energy_series

JOBS_PER_PAGE = 25


@login_required
def dashboard(request):
    payload = dashboard_payload(request.user, now=timezone.now())
    return render(
        request,
        "frontend/dashboard.html",
        {"payload": payload, "labels": page_labels(), "page": "dashboard"},
    )


@login_required
@require_GET
def dashboard_data(request):
    """The dashboard's numbers as JSON: the page's resync when it becomes visible again."""
    return JsonResponse(as_json(dashboard_payload(request.user, now=timezone.now())))


@login_required
def job_list(request):
    teams = teams_with_jobs_visible_to(request.user)  # the filter's choices
    form = JobFilterForm(request.GET or None, teams=teams)
    jobs = jobs_visible_to(request.user).select_related("team", "owner", "current_allocation")
    if form.is_bound:
        jobs = form.filter(jobs)
    page = Paginator(jobs.order_by("-submitted_at", "-id"), JOBS_PER_PAGE).get_page(
        request.GET.get("page")
    )
    query = request.GET.copy()
    query.pop("page", None)
    # A filter the form refuses (a state or workload it does not offer, a team the user is
    # not in, a name past 100 characters) lists nothing: said beside the field, with a 400,
    # as the reports page does; it read "No jobs match." with a 200.
    return render(
        request,
        "frontend/job_list.html",
        {"form": form, "page_obj": page, "query": query.urlencode(), "page": "jobs"},
        status=400 if form.is_bound and form.errors else 200,
    )


# The job model's field names as the submit and prediction forms name them.
_FORM_FIELD = {
    "min_gpus": "gpus",
    "global_batch_size": "batch_size",
    "total_iterations": "iterations",
}


@login_required
def job_new(request):
    teams = submittable_teams(request.user)
    if not teams.exists():
        raise PermissionDenied("You are in no team, so you cannot submit jobs.")
    form = JobSubmitForm(request.POST or None, teams=teams, user=request.user)
    if request.method == "POST" and form.is_valid():
        key, digest = form.cleaned_data["submission_key"], form.request_digest()
        try:
            earlier = services.earlier_submission(request.user, key, digest) if key else None
        except services.IdempotencyKeyReused:
            # The form was posted before and then edited (the browser's back button): a
            # new job, under a key of its own that the same edited post gives again (a
            # double click on it queues one job).
            key = hashlib.sha256(f"{key}:{digest}".encode()).hexdigest()[:32]
            earlier = services.earlier_submission(request.user, key, digest)
        if earlier is not None:
            messages.info(
                request,
                f"This form was already submitted: job {earlier.name} "
                f"(#{earlier.pk}), shown here; no second job was queued.",
            )
            return redirect("frontend:job-detail", pk=earlier.pk)
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
                hints=JobHints(kwargs["resembles"], kwargs.get("param_count")),
            )
            if refusals:
                raise ValidationError(refusals)
            if key:
                job, created = services.submit_job_once(
                    owner=request.user, idempotency_key=key, request_digest=digest, **kwargs
                )
            else:
                job, created = services.submit_job(owner=request.user, **kwargs), True
        except ValidationError as exc:
            # The model's own rules (e.g. batch ranges): shown beside the form's fields.
            for field, errors in exc.message_dict.items():
                target = _FORM_FIELD.get(field, field)
                form.add_error(target if target in form.fields else None, errors)
        except services.IdempotencyKeyReused as exc:  # a racing post of the edited form
            form.add_error(None, str(exc))
        else:
            if created:
                messages.success(request, f"Job {job.name} (#{job.pk}) queued.")
            else:
                messages.info(
                    request,
                    f"This form was already submitted: job {job.name} "
                    f"(#{job.pk}), shown here; no second job was queued.",
                )
            return redirect("frontend:job-detail", pk=job.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "frontend/job_new.html", {"form": form, "page": "jobs"}, status=status)


@login_required
@require_GET
def job_predict(request):
    """Predicted duration, energy and carbon of the form's configuration (JSON); 400 with
    per-field messages on bad input."""
    form = PredictForm(request.GET, teams=submittable_teams(request.user))
    if not form.is_valid():
        return JsonResponse({"errors": form.errors}, status=400)
    data = form.cleaned_data
    hints = JobHints(data.get("resembles") or "", data.get("param_count"))
    now = timezone.now()
    if data.get("team") is not None:
        # A job the submit would refuse (larger than the cluster, longer than a job may run,
        # beyond the team's budgets) gets the submit's reasons, not figures for a run that
        # cannot happen.
        refusals = submit_refusals(
            team=data["team"],
            workload=data["workload"],
            gpu_model="",
            min_gpus=data["gpus"],
            max_gpus=max(data.get("max_gpus") or data["gpus"], data["gpus"]),
            min_batch_size=data["batch_size"],
            total_iterations=data["iterations"],
            now=now,
            hints=hints,
        )
        if refusals:
            errors = {_FORM_FIELD.get(f, f): [message] for f, message in refusals.items()}
            return JsonResponse({"errors": errors}, status=400)
    shape = form.shape_errors()
    if shape:
        return JsonResponse({"errors": {f: [m] for f, m in shape.items()}}, status=400)
    try:
        prediction = predict_job(
            workload=data["workload"],
            gpus=data["gpus"],
            batch_size=data["batch_size"],
            iterations=data["iterations"],
            now=now,
            hints=hints,
        )
    except KeyError as exc:
        return JsonResponse({"errors": {"workload": [str(exc)]}}, status=400)
    return JsonResponse(prediction.as_dict())


def allocation_rows(job) -> list[dict]:
    """The job's allocations, oldest first, each with its node and GPUs, the energy its GPUs
    measured while it held them, and the round decision that made it (and, for one that
    ended, the decision that ended it)."""
    decisions: dict = {}
    for d in RoundDecision.objects.filter(job=job, applied=True).select_related("round"):
        decisions.setdefault(d.round.started_at, []).append(d)
    rows = []
    previous = None
    for a in job.allocations.order_by("started_at", "pk").prefetch_related("gpus__node"):
        gpus = sorted((g.node.name, g.index) for g in a.gpus.all())
        made = next(
            (d for d in decisions.get(a.started_at, []) if d.action != DecisionAction.STOP), None
        )
        ended = next((d for d in decisions.get(a.ended_at, []) if a.ended_at is not None), None)
        row = {
            "started_at": a.started_at,
            "ended_at": a.ended_at,
            "gpus": len(gpus),
            "gpu_ids": [g.pk for g in a.gpus.all()],
            "placement": placement_label(gpus) or "—",
            "batch_size": a.batch_size,
            "sm_clock_mhz": a.sm_clock_mhz,
            "power_limit_w": a.power_limit_w,
            "ended_why": (
                labels.wait_label(ended.reason_code) if ended and ended.reason_code else ""
            ),
            "round_id": made.round_id if made else None,
        }
        row["why"] = allocation_reason(made, previous=previous, current=row)
        rows.append(row)
        previous = row
    return rows


def allocation_reason(decision, *, previous: dict | None, current: dict) -> str:
    """Why an allocation began, from the round that made it: its action, what changed against
    the allocation before, the round's policy and the grid intensity it saw."""
    if decision is None:
        return "not made by a recorded round"
    action = labels.action_label(decision.action)
    gpus = current["gpus"]
    if previous is None:
        what = f"{action} on {gpus} GPU{pluralize(gpus)}"
    else:
        changes = []
        if previous["gpus"] != gpus:
            changes.append(f"{previous['gpus']} → {gpus} GPUs")
        elif previous["placement"] != current["placement"]:
            changes.append("moved")
        for key, unit in (("batch_size", ""), ("sm_clock_mhz", " MHz"), ("power_limit_w", " W")):
            if previous[key] != current[key]:
                old = f"{previous[key]}{unit}" if previous[key] else "default"
                new = f"{current[key]}{unit}" if current[key] else "default"
                name = {"batch_size": "batch", "sm_clock_mhz": "clock"}.get(key, "power limit")
                changes.append(f"{name} {old} → {new}")
        what = f"{action}: {', '.join(changes) or 'same configuration'}"
    ci = decision.round.ci_g_per_kwh
    made = f"{what} by round {decision.round_id} ({decision.round.policy}, grid {ci:.0f} g/kWh)"
    # The round's own account (scheduling.core.explain: clauses joined by "; "): its first
    # clause says what changed, as ``what`` does here; the rest (GPUs the round's stops
    # freed, what the job's budgets allowed this round) is added.
    context = decision.reason.rstrip(".").split("; ")[1:] if decision.reason else []
    return "; ".join([made, *context])


@login_required
def job_detail(request, pk: int):
    job = get_object_or_404(jobs_visible_to(request.user).select_related("team", "owner"), pk=pk)
    now = timezone.now()
    allocations = allocation_rows(job)
    energy = job_energy_series(job.pk)
    timeline = (
        timeline_figures.job_timeline_figure(
            allocations, energy, now=now, state_colour=JobState(job.state).colour
        )
        if allocations
        else None
    )
    totals = job_totals(job)
    # Why it waits (the one store, Job.pending_*); for a running job, only a round's hold
    # (a spent hold_queue budget keeps it where it runs) writes one.
    state = JobState(job.state)
    why_code, why_text = job.pending_reason_code, job.pending_reason
    return render(
        request,
        "frontend/job_detail.html",
        {
            "job": job,
            "state": state,
            "allocations": allocations,
            "timeline": timeline,
            "wait_until": job.pending_until,
            "why_code": "" if state.is_terminal else why_code,
            "why_text": "" if state.is_terminal else why_text,
            "totals": totals,
            "co2_kg": totals.co2_g / G_PER_KG,
            "finished": state.is_terminal,
            "progress_percent": min(100.0, 100.0 * job.completed_iterations / job.total_iterations),
            "can_cancel": can_cancel_job(request.user, job) and not state.is_terminal,
            "exploration": _exploration(job),
            "models": job_models(JobSchedulingState.objects.filter(job=job).first()),
            "page": "jobs",
        },
    )


def _exploration(job) -> dict | None:
    """The job's power-limit exploration record (scheduling/core/exploration.py), if any."""
    state = JobSchedulingState.objects.filter(job=job).only("exploration").first()
    return (state.exploration or None) if state is not None else None


@login_required
@require_POST
def job_cancel(request, pk: int):
    job = get_object_or_404(jobs_visible_to(request.user), pk=pk)
    if not can_cancel_job(request.user, job):
        raise PermissionDenied("Only the owner, a team lead or an admin may cancel it.")
    try:
        services.cancel_job(job)
    except services.InvalidTransition as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Job {job.name} cancelled.")
    return redirect("frontend:job-detail", pk=job.pk)
