"""Budget pages: everyone reads their teams' budgets with progress; the team's leads (and
admins) create and edit them, with a simulator what-if before saving. Members get 403 on any
write, and nothing is stored."""

from __future__ import annotations

import json
import math

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from cluster import services
from cluster.models import Budget
from cluster.queries import budgets_visible_to, can_manage_budgets_of, managed_teams
from cluster.validators import BUDGET_LIMITS
from frontend import figures
from frontend.dashboard import progress_of
from frontend.forms import BudgetForm, WhatIfForm
from frontend.predictions import whatif_average_jct_s
from scheduling.simulator import whatif
from telemetry.usage import budget_usage

# The what-if sweeps the proposed budget times these factors (one simulation each).
WHATIF_FACTORS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


FUTURE_PERIOD = (
    "This period starts later: it is replayed as if it started now, at its length, on the "
    "team's queue as it is now."
)
ENDED_PERIOD = (
    "This period has ended: the what-if replays the queue from now, so it needs a period "
    "that has not."
)


@login_required
def budget_list(request):
    now = timezone.now()
    budgets = budgets_visible_to(request.user).select_related("team")
    rows = []
    budgets = list(budgets.order_by("team__name", "-period_start"))
    # can_manage_budgets_of, for every row in one query (it was one a row).
    led = set(managed_teams(request.user).values_list("pk", flat=True))
    for budget, row in zip(budgets, progress_of(budgets, now=now), strict=True):
        row["can_edit"] = budget.team_id in led
        row["active"] = budget.period_start <= now < budget.period_end
        rows.append(row)
    return render(
        request,
        "frontend/budget_list.html",
        {
            "rows": rows,
            "can_create": managed_teams(request.user, "add").exists(),
            "page": "budgets",
        },
    )


def _save(request, form: BudgetForm):
    try:
        changes = None
        if form.instance.pk is not None:
            # Only what the form changed is written, onto the row as stored under a lock
            # (the form refused a save over a change made since the page was opened).
            fields = {f.name for f in Budget._meta.concrete_fields}
            changes = {f: form.cleaned_data[f] for f in form.changed_data if f in fields}
            if "warn_percent" in form.changed_data:
                changes["warn_fraction"] = form.instance.warn_fraction
        return services.save_budget(form.instance, actor=request.user, changes=changes)
    except services.BudgetGone:
        raise Http404("This budget was deleted while you edited it.") from None
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    return None


def _budget_form(request, *, budget: Budget | None):
    verb = "add" if budget is None else "change"
    teams = managed_teams(request.user, verb)
    if budget is not None and not can_manage_budgets_of(request.user, budget.team, verb):
        raise PermissionDenied("Only the team's leads and admins edit its budgets.")
    if budget is None and not teams.exists():
        raise PermissionDenied("Only team leads and admins create budgets.")
    form = BudgetForm(request.POST or None, instance=budget, teams=teams)
    if request.method == "POST" and form.is_valid():
        saved = _save(request, form)
        if saved is not None:
            messages.success(request, f"Budget for {saved.team} saved.")
            return redirect("frontend:budget-list")
    return render(
        request,
        "frontend/budget_form.html",
        {
            "form": form,
            "budget": budget,
            "whatif_factors": json.dumps(WHATIF_FACTORS),
            # The smallest and largest limit of each kind: the sweep leaves out points
            # outside them (the server refuses those, and one refusal stopped the sweep).
            "whatif_floors": json.dumps({kind: b[0] for kind, b in BUDGET_LIMITS.items()}),
            "whatif_ceilings": json.dumps({kind: b[1] for kind, b in BUDGET_LIMITS.items()}),
            "page": "budgets",
        },
        status=400 if request.method == "POST" else 200,
    )


@login_required
def budget_new(request):
    return _budget_form(request, budget=None)


@login_required
def budget_edit(request, pk: int):
    budget = get_object_or_404(budgets_visible_to(request.user).select_related("team"), pk=pk)
    return _budget_form(request, budget=budget)


def _amount(value) -> float:
    """A finite number >= 0 from the what-if page's fields, else ValueError: a NaN or an
    infinity would be written back as bare NaN / Infinity, which is not JSON, and a negative
    average JCT would stand in the figure for a replay's."""
    if isinstance(value, bool):
        raise ValueError("not a number")
    try:
        number = float(value)
    except OverflowError:  # a JSON integer past any float (1 and 400 zeros): was a 500
        raise ValueError("not a finite number") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError("not a finite number >= 0")
    return number


@login_required
@require_POST
def budget_whatif(request):
    """One simulator replay of the team's queue under one proposed limit (JSON).

    The page calls it once per point of the sweep, showing progress between calls, and sends
    the points done so far (``done``: JSON list of [budget, avg_jct_s or null]) so the answer
    carries the whole figure up to now."""
    form = WhatIfForm(request.POST, teams=managed_teams(request.user))
    if not form.is_valid():
        return JsonResponse({"errors": form.errors}, status=400)
    try:
        done = [
            (_amount(b), None if j is None else _amount(j))
            for b, j in json.loads(request.POST.get("done") or "[]")
        ]
    except (TypeError, ValueError, RecursionError):  # RecursionError: brackets nested deep
        pairs = "Must be a JSON list of [budget, average JCT or null] pairs of numbers >= 0."
        return JsonResponse({"errors": {"done": [pairs]}}, status=400)
    try:
        proposed = _amount(request.POST["proposed"]) if request.POST.get("proposed") else None
    except ValueError:
        return JsonResponse({"errors": {"proposed": ["Must be a finite number >= 0."]}}, status=400)
    data = form.cleaned_data
    now = timezone.now()
    if data["period_end"] <= now:
        # The replay starts now: an ended period was stretched to end a round from now and
        # renewed at that length (a day's budget that ended ten days ago, every 11 days).
        return JsonResponse({"errors": {"period_end": [ENDED_PERIOD]}}, status=400)
    start, end, note = data["period_start"], data["period_end"], ""
    if start > now:
        # The replay starts now, on the queue as it is now. A later period was replayed from
        # now to its end, its limit spread over the wait as well (a day's budget a week
        # ahead paced as eight days'): it is replayed as if it started now, at its length.
        start, end = now, now + (end - start)
        note = FUTURE_PERIOD
    # The proposed (unsaved) budget's use so far, computed as for every stored budget.
    usage = budget_usage(Budget(team=data["team"], period_start=start, period_end=end))
    used = usage.energy_kwh if data["kind"] == "energy" else usage.co2_kg
    result = whatif_average_jct_s(
        team=data["team"],
        kind=data["kind"],
        limit=data["limit"],
        period_start=start,
        period_end=end,
        now=now,
        used=used,
    )
    # More budget never predicts worse (see scheduling/simulator/whatif.py): the plotted
    # points are the best replay at or under each budget; this replay's own is "raw".
    points = whatif.monotone([*done, (result.budget, result.avg_jct_s)])
    unit = "kWh" if data["kind"] == "energy" else "kg CO2e"
    return JsonResponse(
        {
            "budget": result.budget,
            "avg_jct_s": dict(points)[result.budget],
            "raw_avg_jct_s": result.avg_jct_s,
            "never_run": [{"job": name, "reason": why} for name, why in result.never_run],
            "unfinished": list(result.unfinished),
            "n_jobs": result.n_jobs,
            "schedulable_gpus": result.schedulable_gpus,
            "n_finished": result.n_finished,
            "used": used,
            "note": note,
            "points": points,
            "figure": figures.whatif_figure(points, unit=unit, proposed=proposed),
        }
    )
