"""Filters of the telemetry read API: ``?gpu=3&node=node-01&minute_after=...&minute_before=...``
on rollups, ``?job=12&team=vision&hour_after=...`` on the ledger."""

import django_filters

from cluster.queries import jobs_visible_to
from telemetry.models import EnergyLedgerEntry, GpuHour, GpuMinute


def _visible_jobs(request):
    # Another team's job is no choice: it answers as a job that does not exist (an empty
    # list for it, and a 400 for an unused id, told a member which ids other teams had).
    return jobs_visible_to(getattr(request, "user", None))


class GpuMinuteFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="gpu__node__name", help_text="Node name.")
    minute = django_filters.IsoDateTimeFromToRangeFilter(
        help_text="Use minute_after / minute_before (ISO 8601 with time zone)."
    )

    class Meta:
        model = GpuMinute
        fields = ["gpu", "node", "minute"]


class GpuHourFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="gpu__node__name", help_text="Node name.")
    hour = django_filters.IsoDateTimeFromToRangeFilter(
        help_text="Use hour_after / hour_before (ISO 8601 with time zone)."
    )

    class Meta:
        model = GpuHour
        fields = ["gpu", "node", "hour"]


class LedgerFilterSet(django_filters.FilterSet):
    job = django_filters.ModelChoiceFilter(queryset=_visible_jobs, help_text="Job id.")
    team = django_filters.CharFilter(field_name="team__slug", help_text="Team slug.")
    hour = django_filters.IsoDateTimeFromToRangeFilter(
        help_text="Use hour_after / hour_before (ISO 8601 with time zone)."
    )

    class Meta:
        model = EnergyLedgerEntry
        fields = ["job", "team", "gpu", "hour"]
