from django.apps import AppConfig


class FrontendConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "frontend"

    def ready(self) -> None:
        # Open dashboards re-check their groups when their user's access changes.
        from frontend import broadcast, signals

        signals.connect_user_signals()
        # The domain publishes rounds, telemetry and budget usage; the pages push them.
        broadcast.subscribe_to_domain_events()
