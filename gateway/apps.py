from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"

    def ready(self) -> None:
        # A deployment's quota is part of what it is asked to be: its revisions keep it, a
        # rollback or an apply writes it back (deployments/revisions.py's parts).
        from deployments import revisions
        from gateway.quota_setting import QUOTA_PART

        revisions.add_part("quota", QUOTA_PART)
