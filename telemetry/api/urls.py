from django.urls import path

from telemetry.api import views

app_name = "telemetry-agent"

urlpatterns = [
    path("register/", views.RegisterView.as_view(), name="register"),
    path("heartbeat/", views.HeartbeatView.as_view(), name="heartbeat"),
    path("samples/", views.SamplesView.as_view(), name="samples"),
    path("assignments/", views.AssignmentsView.as_view(), name="assignments"),
    path("job-events/", views.JobEventsView.as_view(), name="job-events"),
]
