"""Viewsets of the cluster API. They pick querysets through cluster.queries and write through
cluster.services; the rules live there, not here."""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import exceptions, mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from cluster import services
from cluster.api.permissions import AdminOnly, BudgetPermission, ReadOnlyOrAdmin
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
from cluster.choices import NodeStatus
from cluster.filtersets import BudgetFilterSet, JobFilterSet
from cluster.models import Budget, Gpu, Node, Team
from cluster.queries import (
    budgets_visible_to,
    can_cancel_job,
    jobs_visible_to,
    teams_visible_to,
)
from cluster.validators import submission_key
from telemetry.usage import budget_usages

IDEMPOTENCY_HEADER = "Idempotency-Key"


def request_digest(data) -> str:
    """``services.submission_digest`` of a request's body as sent."""
    if hasattr(data, "lists"):  # a form-encoded body: each field's values
        data = {k: v if len(v) > 1 else v[0] for k, v in data.lists()}
    elif not isinstance(data, dict):  # a list or a scalar: refused by the serializer
        data = {"": data}
    return services.submission_digest(data)


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
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                location=OpenApiParameter.HEADER,
                required=False,
                pattern=r"^[\x21-\x7e]{1,128}$",
                description=(
                    "A key you choose for this submission (1-128 printable ASCII "
                    "characters). Sent again with the same request, it answers with the "
                    "job queued the first time (header Idempotent-Replayed: true) instead "
                    "of queueing a second one: retry a submit whose answer was lost."
                ),
            ),
            OpenApiParameter(
                "Idempotent-Replayed",
                location=OpenApiParameter.HEADER,
                response=[201],
                description="true when the job was queued by an earlier request with this key",
            ),
        ],
        responses={
            201: JobSerializer,
            409: OpenApiResponse(
                ErrorSerializer, description="The key's job is in a team you have left."
            ),
            422: OpenApiResponse(
                ErrorSerializer, description="The key was used for a different request."
            ),
        },
    )
    def create(self, request, *args, **kwargs):
        """Queue a job. Send an ``Idempotency-Key`` header to make retries safe."""
        key = request.headers.get(IDEMPOTENCY_HEADER)
        if key is None:
            return super().create(request, *args, **kwargs)
        try:
            submission_key(key)
        except DjangoValidationError as exc:
            raise serializers.ValidationError({IDEMPOTENCY_HEADER: exc.messages}) from None
        digest = request_digest(request.data)
        try:
            # A retry is answered before its fields are checked again: what was valid
            # then (a budget with room, a GPU model in service) may not be now.
            job = services.earlier_submission(request.user, key, digest)
            created = False
            if job is None:
                serializer = self.get_serializer(data=request.data)
                serializer.is_valid(raise_exception=True)
                job, created = services.submit_job_once(
                    owner=request.user,
                    idempotency_key=key,
                    request_digest=digest,
                    **serializer.validated_data,
                )
        except services.IdempotencyKeyReused as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_422_UNPROCESSABLE_ENTITY)
        except DjangoValidationError as exc:  # (the team deleted since ``is_valid``)
            raise serializers.ValidationError(exc.message_dict) from None
        shown = self.get_queryset().filter(pk=job.pk).first()
        if shown is None:  # queued by you in a team you have left since
            return Response(
                {"detail": f"This key's job #{job.pk} is no longer visible to you."},
                status=status.HTTP_409_CONFLICT,
            )
        body = self.get_serializer(shown).data
        headers = {} if created else {"Idempotent-Replayed": "true"}
        return Response(body, status=status.HTTP_201_CREATED, headers=headers)

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


def _destroy_schema(conflict: str):
    """A delete that answers 409 when history names the object (a client generated from a
    schema without it raised on the refusal as on an unknown status)."""
    return extend_schema_view(
        destroy=extend_schema(
            responses={204: None, 409: OpenApiResponse(ErrorSerializer, description=conflict)}
        )
    )


@_destroy_schema("The team has jobs or energy use, which stay attributed to it.")
class TeamViewSet(viewsets.ModelViewSet):
    """Teams you belong to, with their members and roles; admins see and edit all."""

    serializer_class = TeamSerializer
    permission_classes = [ReadOnlyOrAdmin]
    permission_model = "team"
    lookup_field = "slug"

    def get_queryset(self):
        return teams_visible_to(self.request.user).prefetch_related("memberships__user")

    def update(self, request, *args, **kwargs):
        with transaction.atomic():
            return super().update(request, *args, **kwargs)

    def get_object(self):
        team = super().get_object()
        if self.request.method in ("PUT", "PATCH"):
            # Read again under its lock, held to the edit's commit (``update``), as a delete
            # takes it: the edit saves the whole row, and two edits of one team (its name,
            # its slug) each wrote back the field the other changed, both 200 (a live
            # probe), and an edit beside a delete inserted the team again.
            try:
                team = services.lock_team(team)
            except Team.DoesNotExist:
                raise Http404 from None
        return team

    def perform_destroy(self, instance):
        try:
            services.delete_team(instance, actor=self.request.user)
        except services.TeamInUse as exc:
            raise TeamConflict(str(exc)) from None
        except Team.DoesNotExist:  # deleted by a racing delete, which answered 204 (was a 500)
            raise Http404 from None


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

    def list(self, request, *args, **kwargs):
        # The page's usage in two queries (``budget_usages``), not two a budget.
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        rows = list(queryset) if page is None else page
        context = {
            **self.get_serializer_context(),
            "usages": {u.budget_id: u for u in budget_usages(rows)},
        }
        data = self.get_serializer(rows, many=True, context=context).data
        return Response(data) if page is None else self.get_paginated_response(data)

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
        except services.BudgetGone:  # deleted by a racing writer
            raise exceptions.NotFound() from None

    def perform_destroy(self, instance):
        try:
            services.delete_budget(instance, actor=self.request.user)
        except services.BudgetGone:  # the racing delete that got there first answered 204
            raise exceptions.NotFound() from None


@_destroy_schema(
    "Its GPUs have history (allocations, samples, energy): drain it and retire them instead."
)
class NodeViewSet(viewsets.ModelViewSet):
    """GPU servers of the cluster (admins only)."""

    serializer_class = NodeSerializer
    permission_classes = [AdminOnly]
    permission_model = "node"
    queryset = Node.objects.prefetch_related("gpus")  # (gpu_count leaves retired ones out)
    filterset_fields = ["status", "switch_label", "gpu_model"]

    def perform_update(self, serializer):
        # A status change is a drain or an undrain, through the audited services the pages
        # use (healthy <-> draining only; liveness sets and clears unhealthy). A PATCH of
        # the status was saved as it came: no audit entry, and unhealthy -> draining on a
        # node that never reported.
        node = serializer.instance
        new = serializer.validated_data.pop("status", node.status)
        move = {
            (NodeStatus.HEALTHY, NodeStatus.DRAINING): services.drain_node,
            (NodeStatus.DRAINING, NodeStatus.HEALTHY): services.undrain_node,
        }
        if new != node.status and (node.status, new) not in move:
            raise serializers.ValidationError(
                {
                    "status": [
                        f"A {node.status} node cannot be set {new}: admins drain a healthy "
                        "node and undrain a draining one; heartbeats set unhealthy."
                    ]
                }
            )
        with transaction.atomic():
            # Only the fields sent: a whole save would write back a status that liveness
            # changed since the row was read.
            fields = dict(serializer.validated_data)
            for name, value in fields.items():
                setattr(node, name, value)
            if fields:
                node.save(update_fields=sorted(fields))
            if new != node.status:
                try:
                    move[node.status, new](node, actor=self.request.user)
                except services.NodeStateError as exc:
                    raise serializers.ValidationError({"status": [str(exc)]}) from None
        serializer.instance.refresh_from_db()

    def perform_create(self, serializer):
        status_given = serializer.validated_data.get("status", NodeStatus.HEALTHY)
        if status_given == NodeStatus.UNHEALTHY:
            raise serializers.ValidationError(
                {"status": ["A new node is healthy or draining; heartbeats set unhealthy."]}
            )
        with transaction.atomic():
            # A node created draining is created healthy and drained, so the audit log
            # says who drained it, as for any drain.
            node = serializer.save(status=NodeStatus.HEALTHY)
            if status_given == NodeStatus.DRAINING:
                services.drain_node(node, actor=self.request.user)
                node.refresh_from_db()

    def perform_destroy(self, instance):
        try:
            services.delete_node(instance, actor=self.request.user)
        except services.GpuInUse as exc:
            raise HistoryConflict(str(exc)) from None
        except Node.DoesNotExist:  # deleted by a racing delete, which answered 204 (was a 500)
            raise Http404 from None

    @extend_schema(request=None, responses={201: AgentTokenSerializer})
    @action(detail=True, methods=["post"], url_path="issue-token")
    def issue_token(self, request, pk=None):
        """Issue a new agent token for the node (the old one stops working). Shown once."""
        node = self.get_object()
        token = services.issue_agent_token(node, actor=request.user)
        return Response({"token": token}, status=status.HTTP_201_CREATED)


@_destroy_schema("The GPU has history (allocations, samples, energy): retire it instead.")
class GpuViewSet(viewsets.ModelViewSet):
    """GPUs with their power and clock ranges (admins only), retired ones included."""

    serializer_class = GpuSerializer
    permission_classes = [AdminOnly]
    permission_model = "gpu"
    queryset = Gpu.objects.select_related("node")
    filterset_fields = ["node", "model"]

    def update(self, request, *args, **kwargs):
        # Validated and saved in one transaction: ``Gpu.clean`` locks a GPU being moved or
        # renamed, so no round places a job on it between the check and the save.
        with transaction.atomic():
            return super().update(request, *args, **kwargs)

    def get_object(self):
        gpu = super().get_object()
        if self.request.method in ("PUT", "PATCH"):
            # Read again under its lock (its node's first, as a retire or a registration
            # takes them), held to the edit's commit: the edit saves the whole row, and one
            # read before a retire committed wrote ``retired_at`` back to empty (a live
            # probe: 10 of 30 edits racing a retire, both 200, the GPU in service again),
            # or inserted again a GPU deleted meanwhile.
            try:
                gpu = services.lock_gpu(gpu)
            except Gpu.DoesNotExist:
                raise Http404 from None
        return gpu

    def perform_create(self, serializer):
        node = serializer.validated_data["node"]
        with transaction.atomic():
            # The node's row locked (as its delete locks it) and read again: a GPU added
            # beside the node's delete waited on the insert's foreign key check and then
            # failed it, a 500 (a live probe).
            if not Node.objects.select_for_update(no_key=True).filter(pk=node.pk).exists():
                raise serializers.ValidationError({"node": [f"Node {node.name} no longer exists."]})
            serializer.save()

    def perform_destroy(self, instance):
        try:
            services.delete_gpu(instance, actor=self.request.user)
        except services.GpuInUse as exc:
            raise HistoryConflict(str(exc)) from None
        except Gpu.DoesNotExist:  # its node deleted meanwhile, with it (was a 500)
            raise Http404 from None

    @extend_schema(request=None, responses={200: GpuSerializer, 409: ErrorSerializer})
    @action(detail=True, methods=["post"])
    def retire(self, request, pk=None):
        """Take a GPU that left its node out of service: it keeps its history, is no longer
        capacity, and frees its index. 409 while a job runs on it."""
        try:
            gpu = services.retire_gpu(self.get_object(), actor=request.user)
        except services.GpuInUse as exc:
            raise HistoryConflict(str(exc)) from None
        except Gpu.DoesNotExist:  # its node deleted meanwhile, with it (was a 500)
            raise Http404 from None
        return Response(GpuSerializer(gpu).data)


class HistoryConflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "has_history"
