from django.apps import AppConfig


class ClusterConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "cluster"

    def ready(self) -> None:
        # Registers the wattflow.* configuration checks and the cluster.* stored-row checks.
        from cluster import checks as stored_rows  # noqa: F401
        from config import checks  # noqa: F401
