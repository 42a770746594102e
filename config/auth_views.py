"""``POST /api/auth-token/`` with login throttling and token expiry (see ``config/auth.py``).

Kept apart from ``config/auth.py``: DRF imports the authentication classes while it loads its
views, so that module must not import views itself."""

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.response import Response
from rest_framework.settings import api_settings

from config.auth import fresh_token, lockout_response


class ObtainTokenView(ObtainAuthToken):
    """``POST /api/auth-token/``: username and password for the user's API token (a new one
    when the old has expired). Locked-out callers get 429 and no token."""

    # DRF's view names its own parsers; these are the API's (a body nested too deep is a 400).
    parser_classes = api_settings.DEFAULT_PARSER_CLASSES

    @extend_schema(
        # Anyone may ask (the password is the credential): config.openapi documents views
        # without permission classes as needing no authentication.
        request=AuthTokenSerializer,
        responses={
            200: inline_serializer("AuthToken", {"token": serializers.CharField()}),
            400: OpenApiResponse(description="Wrong username or password."),
            429: OpenApiResponse(description="Too many failed logins; wait for the cool-off."),
        },
    )
    def post(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        if not serializer.is_valid():
            # Axes marks the request it saw (DRF's wrapper) when it refused a locked-out login.
            if getattr(request, "axes_locked_out", False):
                return lockout_response(request._request)
            raise exceptions.ValidationError(serializer.errors)
        token = fresh_token(serializer.validated_data["user"])
        return Response({"token": token.key})
