"""The admin classes of records nobody edits by hand (written by rounds, the agent's
telemetry, accounting or ``record_audit``), shared by every app's admin."""

from django.contrib import admin


class RecordAdmin(admin.ModelAdmin):
    """List, view and delete only: every field read-only, nothing added or changed by hand.
    The change page still renders (read-only) for users who may view."""

    show_full_result_count = False

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
