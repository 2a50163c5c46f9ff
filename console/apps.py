from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Teams and access"

    def ready(self) -> None:
        from console import logins, signals  # noqa: F401 - connects their receivers
