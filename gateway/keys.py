"""Who is calling: API keys checked by SHA-256 and cached, so a request costs no database trip.

A key's owner, staff flag, teams and scope are cached for ``KEY_TTL_S`` (never past the key's
expiry). A revoked key or a changed membership is forgotten at once: the change is announced on
the access group (console/live.py), which the gateway follows (service.follow_broadcasts). Unknown
secrets are remembered briefly, in a bounded cache of their own, so that a client retrying a bad
key does not hammer the database and a flood of made-up keys never evicts a valid caller.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from console.access import is_platform_admin, team_roles
from console.models import ApiKey, KeyScope, hash_secret

KEY_TTL_S = 30.0
UNKNOWN_TTL_S = 5.0
MAX_UNKNOWN = 10_000


@dataclass(frozen=True)
class Caller:
    """A key's owner, as much as the gateway needs: whose deployments it may use, and the key's
    scope (a session's user acts as with an operate key)."""

    user_id: int
    username: str
    is_staff: bool
    team_ids: frozenset[int]
    scope: str = KeyScope.OPERATE
    expires_in_s: float | None = None  # the key's expiry, from when it was read
    key_id: int = 0  # 0: a session's user (the chat page), counted as the user

    @property
    def limit_key(self) -> int:
        """Whose requests the per-key limits count: the key's, or a signed-in user's."""
        return self.key_id or -self.user_id

    def may_use(self, team_id: int) -> bool:
        return self.is_staff or team_id in self.team_ids

    @property
    def may_chat(self) -> bool:
        return self.scope != KeyScope.READ


def caller_of(user: Any, key: ApiKey | None = None) -> Caller:
    """The caller for a user (also a session's user, for the chat page)."""
    expires_in = (
        (key.expires_at - timezone.now()).total_seconds() if key and key.expires_at else None
    )
    return Caller(
        user_id=user.pk,
        username=user.get_username(),
        is_staff=is_platform_admin(user),
        team_ids=frozenset(team_roles(user)),
        scope=key.scope if key else KeyScope.OPERATE,
        expires_in_s=expires_in,
        key_id=key.pk if key else 0,
    )


def load_caller(secret: str) -> Caller | None:
    """Blocking: find the key (indexed prefix, then SHA-256) and note that it was used."""
    key = ApiKey.find(secret)
    if key is None or not key.user.is_active:
        return None
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    return caller_of(key.user, key)


Blocking = Callable[[Callable[[], Any]], Awaitable[Any]]


class KeyCache:
    """Presented secrets (by their SHA-256) to callers, for a short while."""

    def __init__(
        self, run_blocking: Blocking, ttl_s: float = KEY_TTL_S, max_unknown: int = MAX_UNKNOWN
    ) -> None:
        self.run_blocking = run_blocking
        self.ttl_s = ttl_s
        self.max_unknown = max_unknown
        self.known: dict[str, tuple[float, Caller]] = {}
        # Oldest first: a full cache of unknown secrets drops its oldest, never a known key.
        self.unknown: OrderedDict[str, float] = OrderedDict()
        self.access_changes_seen = 0

    async def caller(self, secret: str) -> Caller | None:
        digest = hash_secret(secret)
        now = time.monotonic()
        known = self.known.get(digest)
        if known is not None and known[0] > now:
            return known[1]
        if self.unknown.get(digest, 0.0) > now:
            return None
        found: Caller | None = await self.run_blocking(lambda: load_caller(secret))
        if found is None:
            self.remember_unknown(digest, now)
        else:
            self.unknown.pop(digest, None)
            self.known[digest] = (now + self.lifetime(found), found)
        return found

    def lifetime(self, caller: Caller) -> float:
        if caller.expires_in_s is None:
            return self.ttl_s
        return max(0.0, min(self.ttl_s, caller.expires_in_s))

    def remember_unknown(self, digest: str, now: float) -> None:
        self.unknown[digest] = now + UNKNOWN_TTL_S
        self.unknown.move_to_end(digest)
        while len(self.unknown) > self.max_unknown:
            self.unknown.popitem(last=False)

    def forget_user(self, user_id: int) -> None:
        """The user's keys or roles changed: the next request of each of its keys reads again."""
        self.access_changes_seen += 1
        for digest in [d for d, (_, c) in self.known.items() if c.user_id == user_id]:
            del self.known[digest]
