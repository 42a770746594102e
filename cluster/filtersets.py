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
    # Two filters, not one range filter: a range filter's errors are keyed by its own
    # name ("submitted"), which names no parameter the client sent.
    submitted_after = django_filters.IsoDateTimeFilter(
        field_name="submitted_at",
        lookup_expr="gte",
        help_text="Jobs submitted at or after this time (ISO 8601 with time zone).",
    )
    submitted_before = django_filters.IsoDateTimeFilter(
        field_name="submitted_at",
        lookup_expr="lte",
        help_text="Jobs submitted at or before this time (ISO 8601 with time zone).",
    )

    class Meta:
        model = Job
        fields = ["state", "team", "workload", "owner", "submitted_after", "submitted_before"]


class BudgetFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", help_text="Team slug.")

    class Meta:
        model = Budget
        fields = ["team"]
