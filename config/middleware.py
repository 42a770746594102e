"""Request-level guards that hold before any view or parser runs."""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse


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
