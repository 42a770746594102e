"""REST routes of the cluster app, mounted under /api/ (kebab-case plural resource names)."""

from rest_framework.routers import DefaultRouter

router = DefaultRouter()

urlpatterns = router.urls
