"""Who is calling: API keys checked by SHA-256 and cached, so a request costs no database trip.

A key's owner, staff flag and teams are cached for ``KEY_TTL_S``; a revoked key or a changed
membership takes effect within that time. Unknown secrets are cached briefly too, so a client
retrying a bad key does not hammer the database.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from console.access import is_platform_admin, team_roles
from console.models import ApiKey, hash_secret

KEY_TTL_S = 30.0
UNKNOWN_TTL_S = 5.0
MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class Caller:
    """A key's owner, as much as the gateway needs: whose deployments it may use."""

    user_id: int
    username: str
    is_staff: bool
    team_ids: frozenset[int]

    def may_use(self, team_id: int) -> bool:
        return self.is_staff or team_id in self.team_ids


def caller_of(user: Any) -> Caller:
    """The caller for a user (also a session's user, for the chat page)."""
    return Caller(
        user_id=user.pk,
        username=user.get_username(),
        is_staff=is_platform_admin(user),
        team_ids=frozenset(team_roles(user)),
    )


def load_caller(secret: str) -> Caller | None:
    """Blocking: find the key (indexed prefix, then SHA-256) and note that it was used."""
    key = ApiKey.find(secret)
    if key is None or not key.user.is_active:
        return None
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    return caller_of(key.user)


Blocking = Callable[[Callable[[], Any]], Awaitable[Any]]


class KeyCache:
    """Presented secrets (by their SHA-256) to callers, for a short while."""

    def __init__(self, run_blocking: Blocking, ttl_s: float = KEY_TTL_S) -> None:
        self.run_blocking = run_blocking
        self.ttl_s = ttl_s
        self.entries: dict[str, tuple[float, Caller | None]] = {}

    async def caller(self, secret: str) -> Caller | None:
        digest = hash_secret(secret)
        now = time.monotonic()
        cached = self.entries.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        found: Caller | None = await self.run_blocking(lambda: load_caller(secret))
        if len(self.entries) >= MAX_ENTRIES:
            self.entries.clear()  # a flood of made-up keys must not grow memory without end
        self.entries[digest] = (now + (self.ttl_s if found else UNKNOWN_TTL_S), found)
        return found


def bearer(authorization: str) -> str | None:
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
