"""Agent authentication: ``Authorization: Token <raw token>`` checked against the node's hash.

The authenticated principal is the node (``request.auth``); ``request.user`` is a small
stand-in so DRF's permission plumbing works without a Django user per node.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Q, Value
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from cluster.models import Node, hash_agent_token


@dataclass(frozen=True)
class AgentUser:
    node: Node
    is_authenticated: bool = True
    is_staff: bool = False
    is_superuser: bool = False

    @property
    def pk(self) -> None:  # DRF throttling and logging read user.pk
        return None


def node_for_token(raw_token: str) -> Node | None:
    """The token's node with ``own_gpus`` (UUID -> pk of its GPUs), ``own_gpu_limits``
    (pk -> highest power limit, W) and ``own_gpu_since`` (pk -> when a GPU that moved here
    arrived: ``Gpu.node_since``) fetched in the same query: every telemetry batch needs
    them, and round trips are most of a small batch's cost."""
    if not raw_token:
        return None
    node = (
        Node.objects.filter(agent_token_hash=hash_agent_token(raw_token))
        .annotate(
            gpu_uuids=ArrayAgg("gpus__uuid", filter=Q(gpus__isnull=False), default=Value([])),
            gpu_pks=ArrayAgg("gpus__pk", filter=Q(gpus__isnull=False), default=Value([])),
            gpu_limits=ArrayAgg(
                "gpus__max_power_limit_w", filter=Q(gpus__isnull=False), default=Value([])
            ),
            gpu_since=ArrayAgg("gpus__node_since", filter=Q(gpus__isnull=False), default=Value([])),
        )
        .first()
    )
    if node is not None:
        node.own_gpus = dict(zip(node.gpu_uuids, node.gpu_pks, strict=True))
        node.own_gpu_limits = dict(zip(node.gpu_pks, node.gpu_limits, strict=True))
        node.own_gpu_since = {
            pk: since for pk, since in zip(node.gpu_pks, node.gpu_since, strict=True) if since
        }
    return node


class AgentTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header.")
        node = node_for_token(header[1].decode(errors="replace"))
        if node is None:
            raise exceptions.AuthenticationFailed("Unknown agent token.")
        return AgentUser(node), node

    def authenticate_header(self, request) -> str:
        return self.keyword


class IsAgent(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, Node)


class AgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "telemetry.api.authentication.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <raw agent token>` as issued for the node.",
        }
