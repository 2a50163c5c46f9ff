"""Changes of a user's access, however they are made (a page, the Django admin, a command), are
announced on the access group: the gateway forgets the user's cached keys (console/keys.py)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from console import live
from console.models import Membership


@receiver(post_save, sender=Membership)
@receiver(post_delete, sender=Membership)
def membership_changed(sender: Any, instance: Membership, **kwargs: Any) -> None:
    live.access_changed(instance.user_id)


@receiver(post_save, sender=get_user_model())
def user_changed(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    """Deactivated, or made staff or not; a login only notes its time and changes nothing."""
    if not created and set(kwargs.get("update_fields") or ()) != {"last_login"}:
        live.access_changed(instance.pk)


@receiver(user_logged_out)
def logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is not None:
        live.access_changed(user.pk, "logout")
