"""The agent API (``/api/agent/...``): register, heartbeat, samples, assignments, job events.

Every endpoint authenticates the node by its agent token; a token speaks only for its own
node (GPUs or jobs of another node: HTTP 403, nothing stored).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import APIView

from cluster.models import Node
from telemetry import services
from telemetry.api import serializers as s
from telemetry.api.authentication import AgentTokenAuthentication, IsAgent
from telemetry.ingest import BatchRejected, ingest_batch

log = logging.getLogger(__name__)


class AgentView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]
    throttle_classes: list = []

    @property
    def node(self) -> Node:
        return self.request.auth


_REFUSED = OpenApiResponse(description="The GPUs or jobs named belong to another node.")


class RegisterView(AgentView):
    @extend_schema(
        request=s.RegistrationSerializer,
        responses={
            200: s.RegistrationResultSerializer,
            400: OpenApiResponse(
                description="Per-GPU field errors (also a maximum SM clock below the clocks "
                "it would be stored with); nothing stored."
            ),
            403: _REFUSED,
            409: OpenApiResponse(description="An index is held by a GPU no longer reported."),
        },
        summary="Register the node's GPUs (idempotent by token; GPUs by UUID).",
        tags=["agent"],
    )
    def post(self, request):
        data = s.RegistrationSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            gpus = services.register_gpus(
                self.node, data.validated_data["gpus"], now=timezone.now()
            )
        except services.NotYourNode as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
        except services.NodeGone as exc:  # (what its next request would hear)
            raise exceptions.AuthenticationFailed(str(exc)) from None
        except services.GpuIndexTaken as exc:
            return Response({"gpus": [str(exc)]}, status=status.HTTP_409_CONFLICT)
        except services.RegistrationRejected as exc:
            return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
        return Response(
            {
                "node_id": self.node.pk,
                "node_name": self.node.name,
                "gpus": [{"id": g.pk, "uuid": g.uuid, "index": g.index} for g in gpus],
            }
        )


_SPOOL_HEALTH = {
    "spooled": "agent_spooled",
    "quarantined": "agent_quarantined",
    "last_quarantine_reason": "agent_quarantine_reason",
}


class HeartbeatView(AgentView):
    @extend_schema(
        request=s.HeartbeatSerializer,
        responses={
            200: s.HeartbeatResultSerializer,
            400: OpenApiResponse(description="Per-field errors; nothing stored."),
        },
        summary="Tell the server the agent is alive, and how its spool stands.",
        tags=["agent"],
    )
    def post(self, request):
        data = s.HeartbeatSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        now = timezone.now()
        fields = {"last_heartbeat_at": now, "agent_clock_skew_s": None}
        ts = data.validated_data.get("ts")
        if ts is not None:
            # (years 1 and 9999 give about -/+ 3e11 s: a float, as every other clock reading)
            skew_s = (ts - now).total_seconds()
            fields["agent_clock_skew_s"] = skew_s
            if abs(skew_s) > settings.TELEMETRY_MAX_FUTURE_S:
                log.warning(
                    "node %s: agent clock is %.0f s %s the server's (samples more than %d s "
                    "ahead are refused)",
                    self.node.name,
                    abs(skew_s),
                    "ahead of" if skew_s > 0 else "behind",
                    settings.TELEMETRY_MAX_FUTURE_S,
                )
        # Spool health from agents that report it (older agents send only ``ts``).
        for field, column in _SPOOL_HEALTH.items():
            if field in data.validated_data:
                fields[column] = data.validated_data[field]
        Node.objects.filter(pk=self.node.pk).update(**fields)
        return Response({"server_time": now})


class SamplesView(AgentView):
    """A batch of samples, all or nothing (``telemetry.ingest``). Two samples of one GPU at one
    time in the batch are a 400 naming the time. A sample whose GPU and time are already stored
    (an agent's retry) is a duplicate and changes nothing; ``conflicts`` counts those whose
    values differ from the stored sample, which is kept."""

    @extend_schema(
        request=s.SampleBatchSerializer,
        responses={
            200: s.IngestResultSerializer,
            400: OpenApiResponse(
                description="Per-sample field errors (also the samples of a GPU deleted "
                "while the batch was stored); nothing stored."
            ),
            403: _REFUSED,
        },
        summary="Post a batch of GPU samples (all or nothing; idempotent on GPU and ts; "
        "a resend with other values is counted in conflicts).",
        tags=["agent"],
    )
    def post(self, request):
        try:
            result = ingest_batch(
                self.node,
                request.data,
                own_gpus=self.node.own_gpus,
                own_limits=self.node.own_gpu_limits,
                own_since=self.node.own_gpu_since,
            )
        except BatchRejected as exc:
            return Response(exc.errors, status=exc.status)
        except services.NodeGone as exc:  # deleted meanwhile (what its next request would hear)
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return Response(
            {
                "received": result.received,
                "inserted": result.inserted,
                "duplicates": result.duplicates,
                "conflicts": result.conflicts,
            }
        )


class AssignmentsView(AgentView):
    @extend_schema(
        responses=s.AssignmentsSerializer,
        summary="What this node should run now, and which jobs to stop.",
        tags=["agent"],
    )
    def get(self, request):
        return Response(services.assignments_for(self.node, now=timezone.now()))


class JobEventsView(AgentView):
    @extend_schema(
        request=s.JobEventBatchSerializer,
        responses={
            200: s.JobEventResultSerializer,
            400: OpenApiResponse(
                description="Per-event errors (unknown allocation, not the job's, a time "
                "outside the allocation, an event_id sent before with other contents); "
                "nothing stored."
            ),
            403: _REFUSED,
        },
        summary="Report job starts, progress (iterations) and exits (status, log tail).",
        tags=["agent"],
    )
    def post(self, request):
        data = s.JobEventBatchSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        events = data.validated_data["events"]
        try:
            new = services.record_job_events(self.node, events, now=timezone.now())
        except services.NotYourNode as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
        except services.EventsRejected as exc:
            return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
        return Response({"received": len(events), "new": new})
