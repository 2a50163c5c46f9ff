from typing import Any

from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"

    def ready(self) -> None:
        from catalog.signals import server_files_changed

        server_files_changed.connect(files_on_server_changed, dispatch_uid="deployments-files")


def files_on_server_changed(sender: Any, row_id: int, **kwargs: Any) -> None:
    """Deployments waiting for these files go on, fail, or say how far the download got."""
    from deployments import lifecycle

    lifecycle.model_files_changed(row_id)
