"""Autoscaling: a deployment's bounds and target (Policy, the one reading of the stored object),
and what the autoscaler decides from the live load (decide, pure: it reads no clock or
database, so every rule below is tested on its own).

The load is what waits on the deployment: its requests in flight at every gateway process
(deployments/load.py) and the requests its engines say are waiting (vllm:num_requests_waiting).
Copies wanted = ceil(load / target per copy), within the bounds. A change waits until the load
has asked for it for a whole window: the up-window (short, so a burst is met fast) before
adding, the down-window (long, so a lull does not send copies away that the next burst needs)
before removing; each window starts again whenever the wish changes direction. That is the
hysteresis; the window after each change is the cooldown.

A policy with min_copies 0 and an idle time goes to zero copies once no request came for that
long (the IDLE state), and a request wakes it (deployments/waking.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from django.conf import settings

from deployments.models import MOST_COPIES
from placement.words import plural

DEFAULT_TARGET_IN_FLIGHT = 4.0
LONGEST_WINDOW_S = 86400  # a day
LONGEST_IDLE_MINUTES = 10080  # a week
HIGHEST_TARGET = 1e6  # requests in flight per copy, or milliseconds to the first token
FIELDS = (
    "min_copies",
    "max_copies",
    "target_in_flight",
    "target_ttft_ms",
    "up_window_s",
    "down_window_s",
    "idle_minutes",
)


class PolicyRefused(ValueError):
    """An autoscaling object that cannot be used; `field` names its part (autoscaling.…)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Policy:
    """Bounds and target; None windows mean the settings' defaults."""

    min_copies: int
    max_copies: int
    target_in_flight: float = DEFAULT_TARGET_IN_FLIGHT
    target_ttft_ms: float | None = None
    up_window_s: int | None = None
    down_window_s: int | None = None
    idle_minutes: int | None = None

    @property
    def up_window(self) -> float:
        return float(
            settings.AUTOSCALE_UP_WINDOW_S if self.up_window_s is None else self.up_window_s
        )

    @property
    def down_window(self) -> float:
        chosen = (
            settings.AUTOSCALE_DOWN_WINDOW_S if self.down_window_s is None else self.down_window_s
        )
        return float(chosen)

    @property
    def lowest_serving(self) -> int:
        """The fewest copies load alone may bring it to: zero only through idleness."""
        return max(self.min_copies, 1)

    @property
    def may_idle(self) -> bool:
        return self.min_copies == 0 and self.idle_minutes is not None

    def clamp(self, copies: int) -> int:
        return min(max(copies, self.min_copies), self.max_copies)

    def settle(self, copies: int) -> int:
        """The copies to run now under this policy, from those wanted: within the bounds, and
        zero only when it may idle (new bounds that cannot idle wake an idle deployment)."""
        within = self.clamp(copies)
        return within if within or self.may_idle else self.lowest_serving

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def words(self) -> str:
        bounds = f"{self.min_copies} to {plural(self.max_copies, 'copy', 'copies')}"
        idle = f", to zero after {self.idle_minutes} min idle" if self.may_idle else ""
        return f"{bounds}, target {self.target_in_flight:g} requests in flight per copy{idle}"


def stored(raw: dict[str, Any] | None) -> Policy | None:
    """The policy a deployment row holds (written by parse, so trusted)."""
    return None if raw is None else Policy(**{k: raw[k] for k in FIELDS if k in raw})


def parse(raw: Any) -> Policy | None:
    """The policy an API body or form asks for; None (or absent) is a fixed number of copies.
    Refused with the field named: bounds out of 0..1000 or crossed, a target not above 0."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise PolicyRefused("give an object with min_copies and max_copies, or null", "autoscaling")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise PolicyRefused(
            f"unknown; the fields are {', '.join(FIELDS)}", f"autoscaling.{unknown[0]}"
        )
    policy = Policy(
        min_copies=whole(raw, "min_copies", required=True, low=0),
        max_copies=whole(raw, "max_copies", required=True, low=1),
        target_in_flight=positive(raw, "target_in_flight") or DEFAULT_TARGET_IN_FLIGHT,
        target_ttft_ms=positive(raw, "target_ttft_ms"),
        up_window_s=whole(raw, "up_window_s", low=0, high=LONGEST_WINDOW_S),
        down_window_s=whole(raw, "down_window_s", low=0, high=LONGEST_WINDOW_S),
        idle_minutes=whole(raw, "idle_minutes", low=1, high=LONGEST_IDLE_MINUTES),
    )
    if policy.min_copies > policy.max_copies:
        raise PolicyRefused(
            f"{policy.min_copies} is above max_copies ({policy.max_copies}); the lowest must not "
            "be above the highest",
            "autoscaling.min_copies",
        )
    if policy.idle_minutes is not None and policy.min_copies > 0:
        raise PolicyRefused(
            f"only a deployment whose min_copies is 0 goes idle (min_copies is "
            f"{policy.min_copies}): set min_copies to 0, or idle_minutes to null",
            "autoscaling.idle_minutes",
        )
    return policy


def whole(raw: dict[str, Any], name: str, *, required: bool = False, low: int = 0,
          high: int = MOST_COPIES) -> Any:  # fmt: skip
    value = raw.get(name)
    if value is None:
        if required:
            raise PolicyRefused(
                f"required: a whole number from {low} to {high}", f"autoscaling.{name}"
            )
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PolicyRefused(
            f"{value!r} is not allowed: a whole number from {low} to {high}", f"autoscaling.{name}"
        )
    return value


def positive(raw: dict[str, Any], name: str) -> float | None:
    value = raw.get(name)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= HIGHEST_TARGET
    ):
        raise PolicyRefused(
            f"{value!r} is not allowed: a number above 0, at most {HIGHEST_TARGET:g}",
            f"autoscaling.{name}",
        )
    return float(value)


# --- deciding --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """What waits on a deployment now."""

    in_flight: int  # at every gateway process, summed
    waiting: float = 0.0  # queued inside its engines
    ttft_ms: float | None = None  # its engines' recent mean time to first token

    @property
    def demand(self) -> float:
        return self.in_flight + self.waiting


@dataclass(frozen=True)
class Pending:
    """A wish for another number of copies, and since when load has held it."""

    copies: int
    since: float


@dataclass(frozen=True)
class Decision:
    copies: int  # what to run now (unchanged: no change)
    pending: Pending | None  # the wish still waiting for its window
    why: str = ""  # the Event's words, when copies changed


def wished(policy: Policy, load: Load, current: int) -> int:
    """The copies the load asks for now, within the bounds (never zero by load alone)."""
    by_load = math.ceil(load.demand / policy.target_in_flight)
    if policy.target_ttft_ms is not None and load.ttft_ms is not None:
        if load.ttft_ms > policy.target_ttft_ms and load.demand > 0:
            by_load = max(by_load, current + 1)  # answers come too slowly: one more copy
    return min(max(by_load, policy.lowest_serving), policy.max_copies)


def decide(
    policy: Policy,
    load: Load,
    current: int,
    pending: Pending | None,
    now: float,
    idle_s: float = 0.0,
) -> Decision:
    """The number of copies to run, given those wanted now (`current`), the wish that has
    been waiting for its window (`pending`) and the seconds since its last request (`idle_s`)."""
    if current < policy.min_copies or current > policy.max_copies:
        target = policy.clamp(current)  # the bounds changed: only what is outside them moves
        return Decision(target, None, f"{current} → {target} copies: {policy.words()}")
    if current and policy.may_idle and load.demand == 0:
        assert policy.idle_minutes is not None
        if idle_s >= policy.idle_minutes * 60:
            return Decision(0, None, idle_words(policy, current))
    want = wished(policy, load, current)
    if want == current:
        return Decision(current, None)
    going_up = want > current
    if pending is None or (pending.copies > current) != going_up:
        pending = Pending(want, now)  # a new wish, or one in the other direction
    else:
        pending = replace(pending, copies=want)
    window = policy.up_window if going_up else policy.down_window
    if now - pending.since < window:
        return Decision(current, pending)
    return Decision(want, None, change_words(policy, load, current, want, window))


def idle_words(policy: Policy, before: int) -> str:
    return (
        f"{before} → 0 copies: no request for {policy.idle_minutes} min; idle until the next "
        "request wakes it"
    )


def change_words(policy: Policy, load: Load, before: int, after: int, window: float) -> str:
    held = "above" if after > before else "below"
    waiting = f" and {load.waiting:g} waiting in the engines" if load.waiting else ""
    # The first token's time is said when the policy aims at it, not as noise beside the load.
    said_ttft = policy.target_ttft_ms is not None and load.ttft_ms is not None
    ttft = f", time to first token {load.ttft_ms:.0f} ms" if said_ttft else ""
    return (
        f"{before} → {plural(after, 'copy', 'copies')}: {load.in_flight} requests in flight"
        f"{waiting} for {plural(before, 'copy', 'copies')}{ttft}, target "
        f"{policy.target_in_flight:g} per copy ({held} it for {window:g} s)"
    )
