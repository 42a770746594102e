"""Root URLs: admin, login/logout, the REST API with its schema and docs, then the pages."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

from config.auth_views import ObtainTokenView
from config.views import SwaggerView, no_favicon
from telemetry.metrics import metrics_view

handler404 = "config.views.not_found"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/auth-token/", ObtainTokenView.as_view(), name="api-auth-token"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/agent/", include("telemetry.api.urls")),
    path("api/telemetry/", include("telemetry.api.report_urls")),
    path("metrics", metrics_view, name="metrics"),
    path("favicon.ico", no_favicon, name="favicon"),
    path("api/", include("cluster.api.urls")),
    path("", include("frontend.urls")),
    # Fallback until the dashboard claims "/": the frontend's own "" route above wins.
    path("", RedirectView.as_view(pattern_name="api-docs", permanent=False), name="home"),
]
