"""Agent authentication: ``Authorization: Token <raw token>`` checked against the node's hash.

The authenticated principal is the node (``request.auth``); ``request.user`` is a small
stand-in so DRF's permission plumbing works without a Django user per node.
"""

from __future__ import annotations

from dataclasses import dataclass

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from cluster.models import Node


@dataclass(frozen=True)
class AgentUser:
    node: Node
    is_authenticated: bool = True
    is_staff: bool = False
    is_superuser: bool = False

    @property
    def pk(self) -> None:  # DRF throttling and logging read user.pk
        return None


class AgentTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header.")
        node = Node.for_agent_token(header[1].decode(errors="replace"))
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
