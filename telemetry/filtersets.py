"""Filters of the telemetry read API: ``?gpu=3&node=node-01&minute_after=...&minute_before=...``
on rollups, ``?job=12&team=vision&hour_after=...`` on the ledger."""

import django_filters

from cluster.queries import jobs_visible_to
from telemetry.models import EnergyLedgerEntry, GpuHour, GpuMinute


class HalfOpenRangeFilter(django_filters.IsoDateTimeFromToRangeFilter):
    """``<name>_after`` .. ``<name>_before`` as [after, before): a row is a bucket (a minute,
    an hour) starting at its time, so the bucket starting at ``before`` was drawn after it.
    Inclusive (django-filter's default), ``hour_after=14:00&hour_before=15:00`` summed two
    hours, and two adjacent ranges counted their shared hour twice (a day's totals by the API
    were 25 hours, not the reports page's 24)."""

    def filter(self, qs, value):
        if not value:
            return qs
        if value.start is not None:
            qs = self.get_method(qs)(**{f"{self.field_name}__gte": value.start})
        if value.stop is not None:
            qs = self.get_method(qs)(**{f"{self.field_name}__lt": value.stop})
        return qs.distinct() if self.distinct else qs


def _visible_jobs(request):
    # Another team's job is no choice: it answers as a job that does not exist (an empty
    # list for it, and a 400 for an unused id, told a member which ids other teams had).
    return jobs_visible_to(getattr(request, "user", None))


class GpuMinuteFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="gpu__node__name", help_text="Node name.")
    minute = HalfOpenRangeFilter(
        help_text="Use minute_after (from, inclusive) / minute_before (to, exclusive): ISO "
        "8601 with time zone."
    )

    class Meta:
        model = GpuMinute
        fields = ["gpu", "node", "minute"]


class GpuHourFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="gpu__node__name", help_text="Node name.")
    hour = HalfOpenRangeFilter(
        help_text="Use hour_after (from, inclusive) / hour_before (to, exclusive): ISO 8601 "
        "with time zone."
    )

    class Meta:
        model = GpuHour
        fields = ["gpu", "node", "hour"]


class LedgerFilterSet(django_filters.FilterSet):
    job = django_filters.ModelChoiceFilter(queryset=_visible_jobs, help_text="Job id.")
    team = django_filters.CharFilter(field_name="team__slug", help_text="Team slug.")
    hour = HalfOpenRangeFilter(
        help_text="Use hour_after (from, inclusive) / hour_before (to, exclusive): ISO 8601 "
        "with time zone."
    )
    idle = django_filters.TypedChoiceFilter(
        field_name="job",
        lookup_expr="isnull",
        choices=[("true", "true"), ("false", "false")],
        coerce=lambda value: value == "true",
        help_text="true: only the rows of idle GPUs' draw, which belong to no job (admins "
        "see them); false: only jobs' rows, as the reports page counts.",
    )

    class Meta:
        model = EnergyLedgerEntry
        fields = ["job", "team", "gpu", "hour", "idle"]
