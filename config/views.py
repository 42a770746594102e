"""Error views of the whole site, and the API docs page."""

from django.http import HttpResponse, JsonResponse
from django.views import defaults
from drf_spectacular.views import SpectacularSwaggerView


def not_found(request, exception=None):
    """404 for a URL that matches no route. Under ``/api/`` it answers JSON in DRF's error
    shape, as the schema documents (a path such as ``/api/jobs/1.5/`` never reaches a view);
    elsewhere Django's page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


class SwaggerView(SpectacularSwaggerView):
    """Swagger UI's page. OPTIONS answers the allowed methods with no body: DRF's own answer
    (the view's metadata) went through the page's template renderer, which has no template
    for it: ``TemplateDoesNotExist``, a 500 for anyone."""

    def options(self, request, *args, **kwargs):
        response = HttpResponse()
        response["Allow"] = ", ".join(self.allowed_methods)
        return response
