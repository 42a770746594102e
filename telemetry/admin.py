"""Admin of the telemetry app: every model, read only.

Everything here is measured or derived from measurements (agents' reports, rollups, the
energy ledger, imported grid intensity), and accounting recomputes it from the raw samples; an
edit by hand would be silently undone or, worse, make the ledger disagree with the samples. So
nothing can be added, changed or deleted here.

Raw samples (``GpuSample``) have no page of their own: their primary key is (GPU, timestamp)
and Django's admin refuses models with a composite primary key. The GPU's admin page shows the
latest samples of that GPU instead (``cluster/admin.py``).

The tables behind these pages grow by the hour, so no page asks for a full count or for the
distinct dates of a table: date filters are the fixed ranges of ``DateFieldListFilter``. Every
list counts at most ``BoundedCountPaginator.limit`` rows (``RecordAdmin``) and reads its order
from an index: the ledger's (hour, GPU, id), the others' primary key (rows are written as
they arrive or are accounted, so the newest written come first).
"""

from django.contrib import admin

from cluster.admin_readonly import ReadOnlyAdmin
from scheduling.core.types import J_PER_KWH
from telemetry.models import (
    CarbonIntensity,
    DirtyHour,
    EnergyLedgerEntry,
    GpuHour,
    GpuMinute,
    JobEvent,
    RefusedEnergyStep,
)


@admin.register(RefusedEnergyStep)
class RefusedEnergyStepAdmin(admin.ModelAdmin):
    """The audit trail of refused energy-counter steps; deletable once reviewed."""

    list_display = ["gpu", "ts", "previous_ts", "step_j", "allowed_j", "charged_j", "detected_at"]
    list_filter = ["gpu__node"]
    list_select_related = ["gpu__node"]
    date_hierarchy = "ts"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(EnergyLedgerEntry)
class EnergyLedgerEntryAdmin(ReadOnlyAdmin):
    """Energy and carbon of one GPU-hour per job (no job: idle or unattributed draw)."""

    list_display = [
        "hour", "gpu", "job", "team", "energy_kwh", "co2_g", "ci_g_per_kwh", "ci_estimated", "zone",
    ]  # fmt: skip
    list_filter = [("hour", admin.DateFieldListFilter), "team", "ci_estimated"]
    list_select_related = ["gpu__node", "job", "team"]
    search_fields = ["job__name", "gpu__uuid", "gpu__node__name"]
    # Newest first, read backwards from the ledger's (hour, gpu, id) index: ordered by the
    # GPU's and job's own orderings, every page joined and sorted the whole ledger. Counted
    # up to a bound (the page says "more than" past it; ``RecordAdmin``).
    ordering = ["-hour", "-gpu_id", "-id"]

    @admin.display(description="energy (kWh)", ordering="energy_j")
    def energy_kwh(self, obj: EnergyLedgerEntry) -> str:
        return f"{obj.energy_j / J_PER_KWH:.3f}"


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin):
    """What agents reported about jobs: started, progress, exited."""

    list_display = [
        "ts", "job", "kind", "node", "allocation_id", "iterations", "exit_status", "reason",
        "received_at",
    ]  # fmt: skip
    list_filter = ["kind", "reason", ("ts", admin.DateFieldListFilter), "node"]
    list_select_related = ["job", "node"]
    search_fields = ["job__name", "=job__id", "=event_id"]
    # Newest received first, on the primary key: ordered by ``ts`` (no index of its own),
    # every page sorted all events (1.6 million progress reports of 250 running jobs on
    # the scale database: 2.2-2.6 s a page). A column's header still sorts by it.
    ordering = ["-id"]


@admin.register(GpuHour)
class GpuHourAdmin(ReadOnlyAdmin):
    list_display = [
        "hour", "gpu", "samples", "power_avg_w", "power_max_w", "util_avg_pct", "energy_j",
    ]  # fmt: skip
    list_filter = [("hour", admin.DateFieldListFilter), "gpu__node"]
    list_select_related = ["gpu__node"]
    search_fields = ["gpu__uuid", "gpu__node__name"]
    # Newest accounted first, on the primary key (the unique index is (GPU, hour)): by
    # hour and GPU every page sorted the table (0.25-0.29 s for 135,200 rows).
    ordering = ["-id"]


@admin.register(GpuMinute)
class GpuMinuteAdmin(ReadOnlyAdmin):
    list_display = [
        "minute", "gpu", "samples", "power_avg_w", "power_max_w", "util_avg_pct", "energy_j",
    ]  # fmt: skip
    list_filter = [("minute", admin.DateFieldListFilter), "gpu__node"]
    list_select_related = ["gpu__node"]
    search_fields = ["gpu__uuid", "gpu__node__name"]
    # As the hours' (1.4-1.5 s a page for a day's 1,152,000 minutes of 800 GPUs).
    ordering = ["-id"]


@admin.register(DirtyHour)
class DirtyHourAdmin(ReadOnlyAdmin):
    """GPU-hours waiting to be accounted again (a long list means accounting is behind)."""

    list_display = ["hour", "gpu", "marked_at"]
    list_filter = ["gpu__node"]
    list_select_related = ["gpu__node"]
    ordering = ["hour", "gpu"]


@admin.register(CarbonIntensity)
class CarbonIntensityAdmin(ReadOnlyAdmin):
    """Grid carbon intensity per zone and hour, as imported or fetched."""

    list_display = ["hour", "zone", "ci_g_per_kwh", "source", "estimated"]
    list_filter = ["zone", "source", "estimated", ("hour", admin.DateFieldListFilter)]
    ordering = ["-hour", "zone"]
