"""Filters of the cluster API's lists.

- jobs: ``?state=queued&state=running&team=vision&workload=resnet50&owner=alice
  &submitted_after=...&submitted_before=...``;
- budgets: ``?team=vision``.
"""

import django_filters

from cluster.choices import JobState
from cluster.models import Budget, Job


class JobFilterSet(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    team = django_filters.CharFilter(field_name="team__slug", help_text="Team slug.")
    workload = django_filters.CharFilter(field_name="workload")
    owner = django_filters.CharFilter(field_name="owner__username", help_text="Owner's username.")
    submitted = django_filters.IsoDateTimeFromToRangeFilter(
        field_name="submitted_at",
        help_text="Use submitted_after / submitted_before (ISO 8601 with time zone).",
    )

    class Meta:
        model = Job
        fields = ["state", "team", "workload", "owner", "submitted"]


class BudgetFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", help_text="Team slug.")

    class Meta:
        model = Budget
        fields = ["team"]
