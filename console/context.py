"""Template context shared by every page: the navigation and the user's standing."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from console.access import can_operate_somewhere, is_platform_admin

NAVIGATION = [
    ("Overview", "home", "overview"),
    ("Deployments", "deployment_list", "deployments"),
    ("Marketplace", "marketplace", "models"),
    ("On this server", "server_models", "models"),
    ("Clusters", "cluster_list", "clusters"),
    ("Chat", "chat", "chat"),
    ("Usage", "usage", "usage"),
    ("Events", "event_list", "events"),
]


def navigation(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    return {
        "navigation": NAVIGATION,
        "is_platform_admin": is_platform_admin(user),
        "operates_somewhere": can_operate_somewhere(user) if user.is_authenticated else False,
    }
