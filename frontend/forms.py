"""Forms of the pages. Validation messages are per field; the models' ``clean()`` and the
services stay the source of the rules (forms only shape the input)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from datetime import timedelta

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator

from cluster.choices import HardLimitAction, JobState
from cluster.models import Budget, Job, Team
from cluster.queries import priority_refusal
from cluster.services import BUDGET_AUDIT_FIELDS, audit_snapshot, submission_digest
from cluster.validators import (
    BUDGET_LIMITS,
    EARLIEST_BUDGET_START,
    LATEST_BUDGET_END,
    MAX_BATCH_SIZE,
    MAX_ITERATIONS,
    MAX_PARAM_COUNT,
    MIN_PARAM_COUNT,
    budget_limit_floor_error,
    period_bound_errors,
    submission_key,
)
from cluster.workloads import catalog_name, known_workloads, workload_errors

_INT = {"min_value": 1}


def workload_choices(known: Sequence[str] | None = None) -> list[tuple[str, str]]:
    return [(w, w) for w in (known_workloads() if known is None else known)]


def workload_field() -> forms.CharField:
    """Any name (issue 12 point 1); the catalog's workloads are offered as suggestions."""
    return forms.CharField(
        max_length=100,
        widget=forms.TextInput(attrs={"list": "workload-names", "autocomplete": "off"}),
        help_text="A catalog workload, or any name: an unknown one is predicted from an "
        "estimate (see Resembles) that the job's own telemetry corrects.",
    )


def resembles_field() -> forms.ChoiceField:
    return forms.ChoiceField(
        choices=(),
        required=False,
        label="Resembles",
        help_text="For a workload the catalog does not know: the catalog workload it is most "
        "like, which its prediction starts from.",
    )


def param_count_field() -> forms.IntegerField:
    return forms.IntegerField(
        label="Parameters",
        required=False,
        min_value=MIN_PARAM_COUNT,
        max_value=MAX_PARAM_COUNT,
        help_text="Hint: the model's number of parameters (optional).",
    )


class JobSubmitForm(forms.Form):
    """A training job: workload (any name, with hints for one the catalog does not know),
    GPUs, batch, work."""

    name = forms.CharField(max_length=200)
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    workload = workload_field()
    resembles = resembles_field()
    param_count = param_count_field()
    gpus = forms.IntegerField(label="GPUs", **_INT, max_value=1024)
    max_gpus = forms.IntegerField(
        label="Max GPUs (elastic)",
        required=False,
        min_value=1,
        max_value=1024,
        help_text="Leave empty for a fixed GPU count.",
    )
    batch_size = forms.IntegerField(label="Global batch size", **_INT, max_value=MAX_BATCH_SIZE)
    iterations = forms.IntegerField(**_INT, max_value=MAX_ITERATIONS)
    priority = forms.IntegerField(
        initial=0,
        min_value=-100,
        max_value=100,
        help_text=(
            "A higher priority starts first, ahead of every team's jobs, so only a lead of "
            "the team or an admin may set more than 0; you may set 0 or lower to let your "
            "team's other work go first."
        ),
    )
    # A key drawn when the form is shown: the same form posted twice (a double click, a
    # reload after a lost answer) queues one job (``cluster.services.submit_job_once``).
    submission_key = forms.CharField(
        required=False, widget=forms.HiddenInput, validators=[submission_key]
    )

    def __init__(self, *args, teams, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        if not self.is_bound:
            self.initial.setdefault("submission_key", uuid.uuid4().hex)
        self.fields["team"].queryset = teams
        self.known_workloads = known_workloads()
        self.fields["resembles"].choices = [("", "—"), *workload_choices(self.known_workloads)]

    def clean_workload(self) -> str:
        return catalog_name(self.cleaned_data["workload"], self.known_workloads)

    def clean(self):
        cleaned = super().clean()
        gpus, max_gpus = cleaned.get("gpus"), cleaned.get("max_gpus")
        if gpus is not None and max_gpus is not None and max_gpus < gpus:
            self.add_error("max_gpus", "Must be at least the GPU count.")
        workload = cleaned.get("workload")
        if workload:
            errors = workload_errors(
                workload,
                resembles=cleaned.get("resembles") or "",
                param_count=cleaned.get("param_count"),
                known=self.known_workloads,
            )
            for field, message in errors.items():
                self.add_error(field if field in self.fields else None, message)
        team, priority = cleaned.get("team"), cleaned.get("priority")
        if team is not None:
            refusal = priority_refusal(self.user, team, priority)
            if refusal:
                self.add_error("priority", refusal)
        return cleaned

    def request_digest(self) -> str:
        """A digest of the job asked for, to tell a repeated post from an edited one."""
        return submission_digest(self.service_kwargs())

    def service_kwargs(self) -> dict:
        """Keyword arguments for ``cluster.services.submit_job``."""
        data = self.cleaned_data
        return {
            "team": data["team"],
            "name": data["name"],
            "workload": data["workload"],
            "resembles": data.get("resembles") or "",
            "param_count": data.get("param_count"),
            "min_gpus": data["gpus"],
            "max_gpus": data["max_gpus"] or data["gpus"],
            "global_batch_size": data["batch_size"],
            "total_iterations": data["iterations"],
            "priority": data["priority"],
        }


class PredictForm(forms.Form):
    """The query of the live prediction endpoint (same names as the submit form)."""

    # The team the job would be submitted to (one the user may submit to): with it, a job
    # that could never run there is refused as the submit would refuse it.
    team = forms.ModelChoiceField(queryset=Team.objects.none(), required=False)
    workload = workload_field()
    resembles = resembles_field()
    param_count = param_count_field()
    gpus = forms.IntegerField(**_INT, max_value=1024)
    # An elastic job's most GPUs (the submit's): what the job could never do is judged on it
    max_gpus = forms.IntegerField(min_value=1, max_value=1024, required=False)
    # The submit form's bounds: 10**400 iterations overflowed the prediction (a 500).
    batch_size = forms.IntegerField(**_INT, max_value=MAX_BATCH_SIZE)
    iterations = forms.IntegerField(**_INT, max_value=MAX_ITERATIONS)

    def clean_workload(self) -> str:
        return catalog_name(self.cleaned_data["workload"], self.known_workloads)

    def shape_errors(self) -> dict[str, str]:
        """What the submit refuses whatever the team (a valid form's): no figures for a job
        that cannot be. Kept out of ``clean`` so that a team's reasons (a job larger than
        the cluster "could never run") come first where both apply."""
        data = self.cleaned_data
        gpus, max_gpus, batch = (data.get(k) for k in ("gpus", "max_gpus", "batch_size"))
        errors = {}
        if max_gpus is not None and max_gpus < gpus:
            errors["max_gpus"] = "Must be at least the GPU count."
        if batch < gpus:
            errors["batch_size"] = (
                f"A batch of {batch} is smaller than the {gpus} GPU(s): each GPU computes "
                "at least one sample a step."
            )
        # a near miss of a catalog workload without a hint, as the submit answers it
        errors.update(
            workload_errors(
                data["workload"],
                resembles=data.get("resembles") or "",
                param_count=data.get("param_count"),
                known=self.known_workloads,
            )
        )
        return errors

    def __init__(self, *args, teams=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.known_workloads = known_workloads()
        self.fields["resembles"].choices = [("", "—"), *workload_choices(self.known_workloads)]
        if teams is not None:
            self.fields["team"].queryset = teams


class JobFilterForm(forms.Form):
    state = forms.ChoiceField(required=False, choices=[("", "any state"), *JobState.choices])
    team = forms.ModelChoiceField(
        queryset=Team.objects.none(), required=False, empty_label="any team"
    )
    workload = forms.ChoiceField(required=False, choices=())
    q = forms.CharField(required=False, label="Name contains", max_length=100)

    def __init__(self, *args, teams, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams
        # The catalog's workloads and any other name the teams' jobs use (any name is allowed).
        # No order (the model's, -submitted_at and -id, joined the DISTINCT: 100,000 rows
        # read for the 8 names of a large cluster's jobs, 1.5 s of the admin's job list).
        named = (
            Job.objects.filter(team__in=teams)
            .order_by()
            .values_list("workload", flat=True)
            .distinct()
        )
        names = sorted(set(known_workloads()) | set(named))
        self.fields["workload"].choices = [("", "any workload"), *((w, w) for w in names)]

    def filter(self, jobs):
        if not self.is_valid():
            return jobs.none()
        data = self.cleaned_data
        if data.get("state"):
            jobs = jobs.filter(state=data["state"])
        if data.get("team"):
            jobs = jobs.filter(team=data["team"])
        if data.get("workload"):
            jobs = jobs.filter(workload=data["workload"])
        if data.get("q"):
            jobs = jobs.filter(name__icontains=data["q"])
        return jobs


_DATETIME = forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")


def budget_fingerprint(budget: Budget) -> str:
    """A digest of a stored budget's audited fields (``BUDGET_AUDIT_FIELDS``)."""
    snapshot = audit_snapshot(budget, BUDGET_AUDIT_FIELDS)
    return hashlib.sha256(json.dumps(snapshot, sort_keys=True).encode()).hexdigest()[:32]


class BudgetForm(forms.ModelForm):
    """A team budget. The soft limit is ``warn_fraction`` of each hard limit (shown in %)."""

    # What the budget was when the page was opened (``budget_fingerprint``): a save over a
    # change someone made since is refused, not written back over it.
    seen = forms.CharField(widget=forms.HiddenInput, required=False)
    warn_percent = forms.FloatField(
        label="Soft limit (% of the hard limit)",
        min_value=1,
        max_value=100,
        initial=80,
        help_text="The team is warned at this share of each limit.",
    )

    class Meta:
        model = Budget
        fields = [
            "team",
            "period_start",
            "period_end",
            "energy_limit_kwh",
            "carbon_limit_kg",
            "hard_limit_action",
        ]
        labels = {
            "energy_limit_kwh": "Energy hard limit (kWh)",
            "carbon_limit_kg": "Carbon hard limit (kg CO2e)",
            "hard_limit_action": "At the hard limit",
        }
        # The model's help text is the unit the label already names (it serves the API).
        help_texts = {"carbon_limit_kg": ""}
        widgets = {"period_start": _DATETIME, "period_end": _DATETIME}

    def __init__(self, *args, teams, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams
        self.fields["team"].empty_label = None
        self.fields["hard_limit_action"].choices = HardLimitAction.choices
        for name in ("period_start", "period_end"):
            self.fields[name].input_formats = ["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"]
            self.fields[name].help_text = "UTC, to the minute."
        if self.instance.pk:
            self.initial["warn_percent"] = round(self.instance.warn_fraction * 100, 2)
            self.initial["seen"] = budget_fingerprint(self.instance)

    def _kept_if_unchanged(self, name: str):
        """The submitted time, or the stored one where the form shows it unchanged: the form
        is to the minute, and saving an untouched budget dropped the seconds of its period
        (and could then overlap a neighbour ending at 00:00:30)."""
        value = self.cleaned_data.get(name)
        stored = getattr(self.instance, name) if self.instance.pk else None
        if value is not None and stored is not None:
            if value == stored.replace(second=0, microsecond=0):
                return stored
        return value

    def clean_period_start(self):
        return self._kept_if_unchanged("period_start")

    def clean_period_end(self):
        return self._kept_if_unchanged("period_end")

    def clean(self):
        cleaned = super().clean()
        # (the instance is still the row as stored: the form's values go on it after clean)
        seen = cleaned.get("seen")
        if self.instance.pk and seen and seen != budget_fingerprint(self.instance):
            raise forms.ValidationError(
                "Someone changed this budget since you opened it; nothing was saved. Reload "
                "the page to see the change, then edit again."
            )
        percent = cleaned.get("warn_percent")
        if percent is not None:
            # 1..100 % maps into Budget's (0, 1], so the model never rejects warn_fraction
            # (a field this form does not show under that name).
            self.instance.warn_fraction = percent / 100.0
        return cleaned


class WhatIfForm(forms.Form):
    """One point of the budget what-if: a proposed limit of one kind for a team's period."""

    team = forms.ModelChoiceField(queryset=Team.objects.none())
    kind = forms.ChoiceField(choices=[("energy", "energy (kWh)"), ("carbon", "carbon (kg)")])
    # A limit a budget of the kind may have (``budget_limit_floor_error`` and the model
    # field's ceiling), refused with the budget's messages.
    limit = forms.FloatField()
    period_start = forms.DateTimeField(input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"])
    period_end = forms.DateTimeField(input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"])

    def __init__(self, *args, teams, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams

    def clean(self):
        cleaned = super().clean()
        kind, limit = cleaned.get("kind"), cleaned.get("limit")
        if kind in BUDGET_LIMITS and limit is not None:
            error = budget_limit_floor_error(kind, limit)
            if error is None:
                try:
                    MaxValueValidator(BUDGET_LIMITS[kind][1])(limit)
                except ValidationError as exc:
                    error = exc
            if error is not None:
                self.add_error("limit", error)
        start, end = cleaned.get("period_start"), cleaned.get("period_end")
        # The budget's own bounds (Budget.clean): a period to year 9999 was simulated, ten
        # seconds a point, for a budget that could not be saved.
        bounds = period_bound_errors(start, end)
        for field, message in bounds.items():
            self.add_error(field, message)
        if "period_end" not in bounds and start and end and end <= start:
            self.add_error("period_end", "Must be after the period start.")
        return cleaned


class ReportPeriodForm(forms.Form):
    start = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(
        widget=forms.DateInput(attrs={"type": "date"}), help_text="Inclusive (whole days, UTC)."
    )

    def clean(self):
        cleaned = super().clean()
        start, end = cleaned.get("start"), cleaned.get("end")
        # Within the years a budget may cover: the day after 9999-12-31 overflowed (500).
        for name, day in (("start", start), ("end", end)):
            if day and not EARLIEST_BUDGET_START.date() <= day < LATEST_BUDGET_END.date():
                self.add_error(
                    name,
                    f"Must lie between {EARLIEST_BUDGET_START:%Y-%m-%d} and "
                    f"{LATEST_BUDGET_END - timedelta(days=1):%Y-%m-%d}.",
                )
                cleaned[name] = None
        start, end = cleaned.get("start"), cleaned.get("end")
        if start and end and end < start:
            self.add_error("end", "Must not be before the start.")
        # Both days count (the end is inclusive): 2026-01-01 .. 2027-01-01 is 366 days.
        if start and end and (end - start).days + 1 > 366:
            self.add_error("end", "A report covers at most 366 days.")
        return cleaned
