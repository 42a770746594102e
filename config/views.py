"""Error views of the whole site, the API docs page, and its (absent) favicon."""

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


def no_favicon(request):
    """``/favicon.ico``: none, said with 204. The site's pages declare none (``data:``), but
    the admin's and Swagger UI's do not, and the browser's request logged a 404 in the
    console of every such page (a new user's walkthrough)."""
    response = HttpResponse(status=204)
    response["Cache-Control"] = "max-age=86400"
    return response
