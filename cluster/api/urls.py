"""REST routes of the cluster app, mounted under /api/ (kebab-case plural resource names)."""

from rest_framework.routers import DefaultRouter

from cluster.api import views

router = DefaultRouter()
router.register("jobs", views.JobViewSet, basename="job")
router.register("teams", views.TeamViewSet, basename="team")
router.register("budgets", views.BudgetViewSet, basename="budget")
router.register("nodes", views.NodeViewSet, basename="node")
router.register("gpus", views.GpuViewSet, basename="gpu")

urlpatterns = router.urls
