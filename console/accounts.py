"""The one door for changes a user makes to their own account: time zone and password."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from console import audit
from console.models import UserSettings
from console.time_zones import is_known_zone


class AccountChangeRefused(Exception):
    """A change that cannot be made as asked; its words say why and what to do instead."""


def set_time_zone(user: Any, zone: str) -> str:
    """Save the zone the user's pages show times in; empty: their browser's zone."""
    if zone and not is_known_zone(zone):
        raise AccountChangeRefused(unknown_zone_words(zone))
    UserSettings.objects.update_or_create(user=user, defaults={"time_zone": zone})
    if not zone:
        return "Times are now shown in your browser's zone (UTC where it does not say)."
    return f"Times are now shown in {zone}."


def unknown_zone_words(zone: str) -> str:
    return (
        f"“{zone[:64]}” is not a time zone Berth knows. Pick one from the list: IANA names "
        "such as Europe/Paris or America/New_York."
    )


def change_password(user: Any, new_password: str) -> str:
    """Set a password the form has checked (old one right, new one strong enough). The audit
    row says only that it changed."""
    with transaction.atomic():
        user.set_password(new_password)
        user.save(update_fields=["password"])
        audit.record(
            user, audit.PASSWORD_CHANGED, f"user {user.get_username()}", "Password changed."
        )
    return "Your password was changed. Other browsers where you were logged in must log in again."
