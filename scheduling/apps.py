from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "scheduling"

    def ready(self) -> None:
        from scheduling import checks  # noqa: F401  (registers the system checks)

        # netdelay's auto-tuner replays in the simulator; the core cannot import it, so
        # the live service installs the simulator's replay here.
        from scheduling.simulator import netdelay_replay  # noqa: F401
