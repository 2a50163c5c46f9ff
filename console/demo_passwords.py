"""The demo's well-known logins, and the refusal to serve with one of them outside a demo (the
web, gateway and worker processes check at start). Below the apps: it imports none."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from console.models import Role

# Demo logins; the README lists them too. Change or remove them before real use.
DEMO_USERS = [
    ("admin", "berth-admin", Role.ADMIN),
    ("operator", "berth-operator", Role.OPERATOR),
    ("viewer", "berth-viewer", Role.VIEWER),
]


def users_with_demo_passwords() -> list[str]:
    """The demo users whose password is still the one every reader of the README knows."""
    users = get_user_model().objects
    return [
        username
        for username, password, _ in DEMO_USERS
        if (user := users.filter(username=username).first()) is not None
        and user.check_password(password)
    ]


def refuse_demo_passwords(process: str) -> None:
    """Outside a demo (no BERTH_DEMO), a process that serves or works does not start while a
    user still has a demo password: it says who, and how to change it."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    if settings.DEMO:
        return
    names = users_with_demo_passwords()
    if names:
        raise ImproperlyConfigured(
            f"The {process} does not start: the demo password of {', '.join(names)} is still "
            "set, and BERTH_DEMO is not, so this is not a demo. Change each with `python "
            "manage.py changepassword USERNAME`, or set BERTH_DEMO=1 for a demo; then start again."
        )
