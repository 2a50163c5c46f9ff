"""Per-key limits: how many requests one API key may have running at once, and start within a
minute. A caller over either is answered 429 with Retry-After and words; the defaults sit well
above what one busy client needs (64 concurrent streams from one key pass), so that one key
cannot stall everyone else's traffic. Counted per gateway process."""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from gateway import conf
from gateway.errors import GatewayError

WINDOW_S = 60.0
MAX_KEYS = 10_000  # past this many keys counted, the idle ones are forgotten


class TooMany(GatewayError):
    """A request over a key's limit: 429, and when to try again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(429, message, retry_after_s)


@dataclass
class KeyUse:
    running: int = 0
    started: deque[float] = field(default_factory=deque)  # when each request of the window began


class KeyLimits:
    def __init__(self) -> None:
        self.uses: dict[int, KeyUse] = {}
        self.refused = {"concurrent": 0, "per_minute": 0}

    def admit(self, key_id: int) -> None:
        """Count a request of this key in, or refuse it (GatewayError 429)."""
        now = time.monotonic()
        if len(self.uses) > MAX_KEYS:
            self.forget_idle(now)
        use = self.uses.setdefault(key_id, KeyUse())
        while use.started and use.started[0] <= now - WINDOW_S:
            use.started.popleft()
        if use.running >= conf.key_concurrent():
            self.refused["concurrent"] += 1
            raise TooMany(
                f"This API key has {use.running} requests running, its limit "
                f"(BERTH_GATEWAY_KEY_CONCURRENT): wait for one to finish.",
                1,
            )
        if len(use.started) >= conf.key_per_minute():
            self.refused["per_minute"] += 1
            wait = max(1, math.ceil(use.started[0] + WINDOW_S - now))
            raise TooMany(
                f"This API key started {len(use.started)} requests in the last minute, its limit "
                f"(BERTH_GATEWAY_KEY_PER_MINUTE): try again in {wait} s.",
                wait,
            )
        use.running += 1
        use.started.append(now)

    def forget_idle(self, now: float) -> None:
        """Keys with nothing running and nothing started within the window count nothing."""
        for key_id, use in list(self.uses.items()):
            if not use.running and (not use.started or use.started[-1] <= now - WINDOW_S):
                del self.uses[key_id]

    def done(self, key_id: int) -> None:
        use = self.uses.get(key_id)
        if use is None:
            return
        use.running = max(0, use.running - 1)
