"""Admin of the telemetry app: the audit trail of refused energy-counter steps (read only)."""

from django.contrib import admin

from telemetry.models import RefusedEnergyStep


@admin.register(RefusedEnergyStep)
class RefusedEnergyStepAdmin(admin.ModelAdmin):
    list_display = ["gpu", "ts", "previous_ts", "step_j", "allowed_j", "charged_j", "detected_at"]
    list_filter = ["gpu__node"]
    list_select_related = ["gpu__node"]
    date_hierarchy = "ts"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
