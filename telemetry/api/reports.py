"""Read API for pages and reports (``/api/telemetry/...``): rollups and the energy ledger.

Pages read these (never raw samples). GPU rollups are cluster hardware, visible to every
signed-in user; ledger rows are visible for the teams a user belongs to (admins who may view
the ledger in the Django admin: all, including the idle rows that belong to no job).
"""

from django.db.models import Sum
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from cluster.api.pagination import KeysetPagination
from cluster.queries import admin_sees, teams_of
from scheduling.core.types import J_PER_KWH
from telemetry.filtersets import GpuHourFilterSet, GpuMinuteFilterSet, LedgerFilterSet
from telemetry.models import EnergyLedgerEntry, GpuHour, GpuMinute


class GpuMinuteSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuMinute
        fields = [
            "gpu", "minute", "samples", "power_avg_w", "power_max_w", "util_avg_pct", "energy_j",
        ]  # fmt: skip


class GpuHourSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuHour
        fields = [
            "gpu", "hour", "samples", "power_avg_w", "power_max_w", "util_avg_pct", "energy_j",
        ]  # fmt: skip


class LedgerEntrySerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = EnergyLedgerEntry
        fields = [
            "gpu", "hour", "job", "team", "energy_j", "co2_g", "ci_g_per_kwh", "ci_estimated",
            "zone",
        ]  # fmt: skip


class LedgerTotalsSerializer(serializers.Serializer):
    energy_j = serializers.FloatField()
    energy_kwh = serializers.FloatField()
    co2_g = serializers.FloatField()
    estimated = serializers.BooleanField(help_text="Some carbon was priced with a fallback.")


class GpuMinuteViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    queryset = GpuMinute.objects.order_by("gpu_id", "minute")
    serializer_class = GpuMinuteSerializer
    filterset_class = GpuMinuteFilterSet


class GpuHourViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    queryset = GpuHour.objects.order_by("gpu_id", "hour")
    serializer_class = GpuHourSerializer
    filterset_class = GpuHourFilterSet


class LedgerPagination(KeysetPagination):
    """The ledger by hour, GPU and row id: the ``ledger_hour_gpu_id_idx`` index's order."""

    ordering = ("hour", "gpu_id", "id")


class LedgerViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """The ledger's rows, oldest hour first, a page at a time by cursor (``next`` and
    ``previous`` links; no count: the ledger grows by a row per GPU and job each hour)."""

    serializer_class = LedgerEntrySerializer
    filterset_class = LedgerFilterSet
    pagination_class = LedgerPagination

    def get_queryset(self):
        rows = EnergyLedgerEntry.objects.select_related("team").order_by(*LedgerPagination.ordering)
        if admin_sees(self.request.user, "telemetry.view_energyledgerentry"):
            return rows
        return rows.filter(team__in=teams_of(self.request.user).values("pk"))

    @extend_schema(
        responses=LedgerTotalsSerializer, filters=True, summary="Sum of the filtered ledger rows."
    )
    @action(detail=False, methods=["get"])
    def totals(self, request):
        rows = self.filter_queryset(self.get_queryset())
        agg = rows.aggregate(e=Sum("energy_j"), c=Sum("co2_g"))
        energy_j = agg["e"] or 0.0
        return Response(
            {
                "energy_j": energy_j,
                "energy_kwh": energy_j / J_PER_KWH,
                "co2_g": agg["c"] or 0.0,
                "estimated": rows.filter(ci_estimated=True).exists(),
            }
        )
