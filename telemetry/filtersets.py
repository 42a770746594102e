"""Filters of the telemetry read API: ``?gpu=3&node=node-01&minute_after=...&minute_before=...``
on rollups, ``?job=12&team=vision&hour_after=...`` on the ledger."""

import django_filters

from cluster.models import Job
from cluster.queries import admin_sees, jobs_visible_to
from telemetry.models import EnergyLedgerEntry, GpuHour, GpuMinute

# ``<bucket>_after`` .. ``<bucket>_before`` is [after, before): a row is a bucket (a minute, an
# hour) starting at its time, so the bucket starting at ``before`` was drawn after it.
# Inclusive (django-filter's range default), ``hour_after=14:00&hour_before=15:00`` summed two
# hours, and two adjacent ranges counted their shared hour twice (a day's totals by the API
# were 25 hours, not the reports page's 24). Two filters, not one range filter: a range
# filter's errors are keyed by its own name ("hour"), which names no parameter the client
# sent (``?hour_after=yesterday`` answered ``{"hour": [...]}``).


def _from(field: str, bucket: str) -> django_filters.IsoDateTimeFilter:
    return django_filters.IsoDateTimeFilter(
        field_name=field,
        lookup_expr="gte",
        help_text=f"{bucket.capitalize()}s starting at or after this time (inclusive): ISO 8601 "
        "with time zone.",
    )


def _to(field: str, bucket: str) -> django_filters.IsoDateTimeFilter:
    return django_filters.IsoDateTimeFilter(
        field_name=field,
        lookup_expr="lt",
        help_text=f"{bucket.capitalize()}s starting before this time (exclusive): ISO 8601 with "
        "time zone.",
    )


def _visible_jobs(request):
    # Another team's job is no choice: it answers as a job that does not exist (an empty
    # list for it, and a 400 for an unused id, told a member which ids other teams had).
    # A staff user who reads every team's ledger rows (``LedgerViewSet``) may name any job
    # those rows name, whether or not they may view jobs: a job listed in the ledger was
    # refused as its filter ("Select a valid choice").
    user = getattr(request, "user", None)
    if admin_sees(user, "telemetry.view_energyledgerentry"):
        return Job.objects.all()
    return jobs_visible_to(user)


class GpuMinuteFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="gpu__node__name", help_text="Node name.")
    minute_after = _from("minute", "minute")
    minute_before = _to("minute", "minute")

    class Meta:
        model = GpuMinute
        fields = ["gpu", "node", "minute_after", "minute_before"]


class GpuHourFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="gpu__node__name", help_text="Node name.")
    hour_after = _from("hour", "hour")
    hour_before = _to("hour", "hour")

    class Meta:
        model = GpuHour
        fields = ["gpu", "node", "hour_after", "hour_before"]


class LedgerFilterSet(django_filters.FilterSet):
    job = django_filters.ModelChoiceFilter(queryset=_visible_jobs, help_text="Job id.")
    team = django_filters.CharFilter(field_name="team__slug", help_text="Team slug.")
    hour_after = _from("hour", "hour")
    hour_before = _to("hour", "hour")
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
        fields = ["job", "team", "gpu", "hour_after", "hour_before", "idle"]
