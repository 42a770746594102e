from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "telemetry"

    def ready(self) -> None:
        from telemetry import checks  # noqa: F401  (registers the system checks)
        from telemetry.api import authentication  # noqa: F401  (OpenAPI auth extension)
