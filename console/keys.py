"""API keys: issued, narrowed and revoked here only (the keys page, the API, the command line),
each audited; and what a key's scope lets it do.

A key's scope: `read` (GET requests, the fit check and the estimate), `chat` (the gateway only)
or `operate` (everything its owner's roles allow, the gateway included). A key creates only keys
no wider and no longer-lived than itself. Revoking a key, or a change of its owner's roles, is
announced (console/live.py::access_changed) so that the gateway forgets what it cached at once.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from console import audit, live
from console.models import ApiKey, KeyScope
from placement.words import when

MAX_DAYS = 3650
LONGEST_NAME = 100
# str.isspace()'s characters, as a regular expression's class that Python and JSON Schema
# (ECMA 262) read alike: a key's name is text with one character that is none of them, no NUL.
SPACES = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
KEY_NAME = rf"^[^\x00]*[^\x00{SPACES}][^\x00]*$"
# What a key of each scope may create: itself and what it includes.
MAY_CREATE = {
    KeyScope.OPERATE: {KeyScope.OPERATE, KeyScope.READ, KeyScope.CHAT},
    KeyScope.READ: {KeyScope.READ},
    KeyScope.CHAT: {KeyScope.CHAT},
}
# POSTs that only read: a read key may check a fit and estimate memory.
READING_POSTS = ("/api/v1/fit-check", "/api/v1/estimate")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def bearer(authorization: str) -> str | None:
    """The key in an Authorization header (`Bearer <key>`, the scheme in any case); None
    when the header holds no bearer token. The console's API and the gateway both read it so."""
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


# What the console's API and the gateway answer a key they cannot use (with 401).
NOT_VALID = (
    "The API key is not valid: it was revoked, it expired, or it never existed. Create one "
    "under API keys."
)


class KeyRefused(ValueError):
    """A key that cannot be issued as asked; the message says why and what to do instead."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.message, self.field = message, field


def key_name(name: Any) -> str:
    """The name as given, checked as sent (1 to 100 characters, not only spaces, no NUL),
    then without the spaces around it."""
    text = name if isinstance(name, str) else ""
    if len(text) > LONGEST_NAME or not re.fullmatch(KEY_NAME, text):
        raise KeyRefused(
            f"give the key a name of 1 to {LONGEST_NAME} characters, e.g. “notebook”", "name"
        )
    return text.strip()


def scope_named(text: str) -> KeyScope:
    try:
        return KeyScope(text)
    except ValueError:
        raise KeyRefused(
            f"scope {text!r} is not one of read, chat, operate: read only reads, chat only "
            "calls the gateway, operate does all its owner's roles allow",
            "scope",
        ) from None


def expiry_after(days: int | None, now: datetime) -> datetime | None:
    if days is None:
        return None
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise KeyRefused(
            f"expires in {days!r} days: give a whole number of days from 1 to {MAX_DAYS}, or "
            "none for a key that does not expire",
            "expires_in_days",
        )
    return now + timedelta(days=days)


def within(parent: ApiKey, scope: KeyScope, expires_at: datetime | None) -> datetime | None:
    """The expiry a key made by `parent` gets; refused when it would be wider or outlive it."""
    if scope not in MAY_CREATE[KeyScope(parent.scope)]:
        raise KeyRefused(
            f"this key's scope is {parent.scope}, so it can create only {parent.scope} keys, "
            f"not {scope}: create a {scope} key with a wider key or on the API keys page",
            "scope",
        )
    if parent.expires_at is None:
        return expires_at
    if expires_at is None:
        return parent.expires_at  # no longer-lived than its maker: it ends when that one does
    if expires_at > parent.expires_at:
        raise KeyRefused(
            f"this key expires on {when(parent.expires_at)}, so a key it creates "
            "cannot outlive it: ask for fewer days",
            "expires_in_days",
        )
    return expires_at


def issue(
    owner: Any,
    name: str,
    scope: str = KeyScope.OPERATE,
    expires_in_days: int | None = None,
    *,
    made_with: ApiKey | None = None,
    by: str = "",
) -> tuple[ApiKey, str]:
    """Issue a key for `owner`; returns it with its secret (shown once, never stored)."""
    name = key_name(name)
    chosen = scope_named(scope)
    expires_at = expiry_after(expires_in_days, timezone.now())
    if made_with is not None:
        expires_at = within(made_with, chosen, expires_at)
    key, secret = ApiKey.issue(owner, name, chosen, expires_at)
    until = f", until {when(expires_at)}" if expires_at else ""
    audit.record(
        None if by else owner,
        audit.API_KEY_ISSUED,
        f"API key “{key.name}” of {owner}",
        f"scope {chosen}{until}",
        by=by,
    )
    return key, secret


def revoke(actor: Any, key: ApiKey) -> None:
    with transaction.atomic():
        ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
        audit.record(actor, audit.API_KEY_REVOKED, f"API key “{key.name}” of {key.user}")
        live.access_changed(key.user_id)


def console_refusal(key: ApiKey, method: str, path: str) -> str | None:
    """Why this key may not make this request of the console's API, or None when it may."""
    if key.scope == KeyScope.CHAT:
        return (
            "This API key's scope is chat: it may call the gateway (/v1/chat/completions …), "
            "not the console's API. Use a read or operate key here."
        )
    if key.scope == KeyScope.READ and method not in SAFE_METHODS and path not in READING_POSTS:
        return (
            "This API key's scope is read: it may read (GET), check a fit and estimate memory, "
            "but not change anything. Use an operate key for this."
        )
    return None
