"""Page URLs, included at the site root by config/urls.py."""

from django.urls import path

from frontend import admin_views, budget_views, views

app_name = "frontend"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("dashboard/data/", views.dashboard_data, name="dashboard-data"),
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/new/", views.job_new, name="job-new"),
    path("jobs/predict/", views.job_predict, name="job-predict"),
    path("jobs/<int:pk>/", views.job_detail, name="job-detail"),
    path("jobs/<int:pk>/cancel/", views.job_cancel, name="job-cancel"),
    path("budgets/", budget_views.budget_list, name="budget-list"),
    path("budgets/new/", budget_views.budget_new, name="budget-new"),
    path("budgets/<int:pk>/edit/", budget_views.budget_edit, name="budget-edit"),
    path("budgets/what-if/", budget_views.budget_whatif, name="budget-whatif"),
    path("reports/", admin_views.reports, name="reports"),
    path("reports/export.csv", admin_views.reports_csv, name="reports-csv"),
    path("nodes/", admin_views.nodes, name="nodes"),
    path("nodes/<int:pk>/drain/", admin_views.node_drain, name="node-drain"),
    path("nodes/<int:pk>/undrain/", admin_views.node_undrain, name="node-undrain"),
]
