"""Django admin of the scheduling app. Performance profiles are read-only: they are written
by ``manage.py fit_perf_models`` from the measurements, never by hand."""

from django.contrib import admin

from scheduling.models import PerfProfile


@admin.register(PerfProfile)
class PerfProfileAdmin(admin.ModelAdmin):
    list_display = [
        "workload",
        "gpu_model",
        "version",
        "fitted_at",
        "iter_time_median_abs_error",
        "iter_time_p90_abs_error",
        "n_heldout",
    ]
    list_filter = ["gpu_model", "version"]
    search_fields = ["workload", "gpu_model"]
    readonly_fields = [f.name for f in PerfProfile._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        # The change page still renders (read-only) for users who may view.
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
