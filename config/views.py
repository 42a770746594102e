"""Error views of the whole site."""

from django.http import JsonResponse
from django.views import defaults


def not_found(request, exception=None):
    """404 for a URL that matches no route. Under ``/api/`` it answers JSON in DRF's error
    shape, as the schema documents (a path such as ``/api/jobs/1.5/`` never reaches a view);
    elsewhere Django's page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)
