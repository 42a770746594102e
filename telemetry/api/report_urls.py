"""Routes of the telemetry read API, mounted under /api/telemetry/."""

from rest_framework.routers import DefaultRouter

from telemetry.api import reports

router = DefaultRouter()
router.register("gpu-minutes", reports.GpuMinuteViewSet, basename="gpu-minute")
router.register("gpu-hours", reports.GpuHourViewSet, basename="gpu-hour")
router.register("ledger", reports.LedgerViewSet, basename="ledger")

urlpatterns = router.urls
