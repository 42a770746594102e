"""Request-level guards that hold before any view or parser runs."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponseBadRequest, JsonResponse

from config.views import not_found


class RequestBodyLimitMiddleware:
    """Refuse a body longer than ``WATTFLOW_MAX_REQUEST_BODY_BYTES`` with 413, from its
    declared ``Content-Length``, before anything reads or parses it.

    Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` guards only form parsing and ``request.body``;
    DRF's JSON parser reads the stream and parsed a 100 MB body in full. A body without a
    ``Content-Length`` (chunked) is not read by DRF at all, so the header is the whole story.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.WATTFLOW_MAX_REQUEST_BODY_BYTES
        declared = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(declared)
        except ValueError:
            return JsonResponse({"detail": "Content-Length is not a number."}, status=400)
        if length > limit:
            return JsonResponse(
                {"detail": f"The request body is {length} bytes; at most {limit} are accepted."},
                status=413,
            )
        return self.get_response(request)


NUL_MESSAGE = "Control characters (such as NUL) are not allowed."


class QueryStringNulMiddleware:
    """Refuse a query string with a NUL character (400) before any view filters by it.

    PostgreSQL cannot hold NUL in text, and a view that filters by a query parameter
    (the admin's list filters: ``/admin/cluster/job/?state=%00``) turned it into a 500.
    Forms already refuse NUL in their fields, and the API's filter backend names the
    parameter; this answers the same for every page, the API's way under ``/api/``."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        bad = [
            name
            for name, values in request.GET.lists()
            if "\x00" in name or any("\x00" in v for v in values)
        ]
        if bad:
            if request.path.startswith("/api/"):
                return JsonResponse({name: [NUL_MESSAGE] for name in bad}, status=400)
            return HttpResponseBadRequest(
                f"{NUL_MESSAGE} Parameter(s): {', '.join(repr(n) for n in bad)}.",
                content_type="text/plain; charset=utf-8",
            )
        return self.get_response(request)


class ApiNotFoundMiddleware:
    """A path under ``/api/`` that matches no route answers the API's JSON 404
    (``config.views.not_found``) with DEBUG on too.

    ``handler404`` serves only with DEBUG off; with it on (the default: ``make run``, a
    developer's runserver) Django answers its HTML debug page, and a client reading the
    documented error body got HTML. A 404 from a view that was reached (a missing object, a
    page past the end) has a ``resolver_match`` and is left as the view made it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code == 404
            and request.path.startswith("/api/")
            and getattr(request, "resolver_match", None) is None
        ):
            return not_found(request)
        return response
