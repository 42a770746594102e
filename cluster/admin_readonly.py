"""The admin classes of records nobody edits by hand (written by rounds, the agent's
telemetry, accounting or ``record_audit``), shared by every app's admin."""

from django.contrib import admin
from django.core.paginator import Paginator
from django.utils.functional import cached_property


class BoundedCountPaginator(Paginator):
    """The admin's paginator for a table too long to count per page: it counts at most
    ``limit`` rows (``COUNT(*)`` over a ``LIMIT``ed subquery) and says ``capped`` when there
    are more; the pages past the bound are not offered. (The admin counts its filtered
    list for every page: the ledger's 838,980 rows took most of its 2-4 s.) Every app's
    ``admin/<app>/pagination.html`` says "more than" where ``capped``
    (``admin/bounded_pagination.html``)."""

    limit = 10_000
    capped = False

    @cached_property
    def count(self) -> int:
        counted = self.object_list.order_by()[: self.limit + 1].count()
        self.capped = counted > self.limit
        return min(counted, self.limit)


class RecordAdmin(admin.ModelAdmin):
    """List, view and delete only: every field read-only, nothing added or changed by hand.
    The change page still renders (read-only) for users who may view.

    Records are appended by the service as it runs (events, samples' rollups, rounds and
    their decisions, allocations, the audit log), so their lists count at most
    ``BoundedCountPaginator.limit`` rows: on the scale database (docs/benchmarks.md) the
    job events' and GPU minutes' counts alone took 100-170 ms a page, and grow by the day.
    A list whose default order is not an index's reads it from one (the primary key where
    rows are written in time order), not from a sort of the table."""

    show_full_result_count = False
    paginator = BoundedCountPaginator

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyAdmin(RecordAdmin):
    """List and view only: no add, change or delete."""

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
