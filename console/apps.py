from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Teams and access"

    def ready(self) -> None:
        from console import signals  # noqa: F401 - connects the access receivers
