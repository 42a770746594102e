"""Viewsets of the cluster API. They pick querysets through cluster.queries and write through
cluster.services; the rules live there, not here."""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from cluster import services
from cluster.api.permissions import BudgetPermission, ReadOnlyOrAdmin
from cluster.api.serializers import (
    AgentTokenSerializer,
    BudgetSerializer,
    ErrorSerializer,
    GpuSerializer,
    JobAllocationSerializer,
    JobSerializer,
    NodeSerializer,
    TeamSerializer,
)
from cluster.filtersets import BudgetFilterSet, JobFilterSet
from cluster.models import Budget, Gpu, Node
from cluster.queries import (
    budgets_visible_to,
    can_cancel_job,
    jobs_visible_to,
    teams_visible_to,
)


class JobViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    """Training jobs of the teams you belong to (all jobs for admins)."""

    serializer_class = JobSerializer
    filterset_class = JobFilterSet

    def get_queryset(self):
        return (
            jobs_visible_to(self.request.user)
            .select_related("owner", "team", "current_allocation", "scheduling")
            .prefetch_related("current_allocation__gpus")
        )

    @extend_schema(
        request=None,
        responses={
            200: JobSerializer,
            403: OpenApiResponse(ErrorSerializer, description="Not the owner, a lead or admin."),
            404: OpenApiResponse(ErrorSerializer, description="No such job visible to you."),
            409: OpenApiResponse(ErrorSerializer, description="The job has already finished."),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel a queued, running or paused job (owner, team lead or admin)."""
        job = self.get_object()
        if not can_cancel_job(request.user, job):
            raise PermissionDenied("Only the job's owner, a lead of its team or an admin may.")
        try:
            services.cancel_job(job, at=timezone.now())
        except services.InvalidTransition as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(self.get_serializer(self.get_queryset().get(pk=job.pk)).data)

    @extend_schema(responses={200: JobAllocationSerializer(many=True)})
    @action(detail=True, methods=["get"], filterset_class=None, pagination_class=None)
    def allocations(self, request, pk=None):
        """The job's allocation history, oldest first; the open one has ``ended_at`` null."""
        job = self.get_object()
        history = job.allocations.prefetch_related("gpus").order_by("started_at", "id")
        return Response(JobAllocationSerializer(history, many=True).data)


class TeamViewSet(viewsets.ModelViewSet):
    """Teams you belong to, with their members and roles; admins see and edit all."""

    serializer_class = TeamSerializer
    permission_classes = [ReadOnlyOrAdmin]
    lookup_field = "slug"

    def get_queryset(self):
        return teams_visible_to(self.request.user).prefetch_related("memberships__user")

    def perform_destroy(self, instance):
        try:
            services.delete_team(instance, actor=self.request.user)
        except services.TeamInUse as exc:
            raise TeamConflict(str(exc)) from None


class TeamConflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "team_in_use"


class BudgetViewSet(viewsets.ModelViewSet):
    """Budgets of your teams. A team's leads (and admins) create, edit and delete them."""

    serializer_class = BudgetSerializer
    permission_classes = [permissions.IsAuthenticated, BudgetPermission]
    filterset_class = BudgetFilterSet

    def get_queryset(self):
        return budgets_visible_to(self.request.user).select_related("team")

    # Budget changes over the API go through the same audited services as the pages'.
    def perform_create(self, serializer):
        serializer.instance = self._save(Budget(**serializer.validated_data))

    def perform_update(self, serializer):
        # Only the fields the request names are written, onto the row as stored.
        serializer.instance = self._save(
            serializer.instance, changes=dict(serializer.validated_data)
        )

    def _save(self, budget: Budget, changes=None) -> Budget:
        try:
            return services.save_budget(budget, actor=self.request.user, changes=changes)
        except DjangoValidationError as exc:
            # What only the save can see (an overlapping budget a racing writer stored).
            raise serializers.ValidationError(exc.message_dict) from None

    def perform_destroy(self, instance):
        services.delete_budget(instance, actor=self.request.user)


class NodeViewSet(viewsets.ModelViewSet):
    """GPU servers of the cluster (admins only)."""

    serializer_class = NodeSerializer
    permission_classes = [permissions.IsAdminUser]
    queryset = Node.objects.prefetch_related("gpus")
    filterset_fields = ["status", "switch_label", "gpu_model"]

    @extend_schema(request=None, responses={201: AgentTokenSerializer})
    @action(detail=True, methods=["post"], url_path="issue-token")
    def issue_token(self, request, pk=None):
        """Issue a new agent token for the node (the old one stops working). Shown once."""
        node = self.get_object()
        token = node.issue_agent_token(at=timezone.now())
        return Response({"token": token}, status=status.HTTP_201_CREATED)


class GpuViewSet(viewsets.ModelViewSet):
    """GPUs with their power and clock ranges (admins only)."""

    serializer_class = GpuSerializer
    permission_classes = [permissions.IsAdminUser]
    queryset = Gpu.objects.select_related("node")
    filterset_fields = ["node", "model"]
