"""Quotas on an API key, a team (all of its deployments' traffic) or a deployment, held across
every gateway process by counters in Redis that the gateway owns.

Definitions are Quota rows, read with the routing table (service.Directory) and so refreshed as
often. Each limit a quota sets is a lane with a counter in Redis:

- requests per minute: a log of the last minute's admissions (a sorted set by time), so the
  window slides; a request is counted in the same script that checks it, so concurrent requests
  never pass a request limit at all.
- tokens per minute, day and month (UTC windows): the tokens of finished replies, added when a
  reply ends (prompt + completion), and a set of the requests in flight. A request is admitted
  only while the tokens used are below the limit, and — so that a burst of one subject cannot
  all slip in while the last tokens are being spent — only while the remainder still covers one
  more request of the size seen so far on top of those in flight; once it does not, just one
  request may be in flight (the last reservation). Overshoot is then at most that one request,
  as long as requests are no bigger than the biggest seen (or the body's own estimate).

One script checks every lane of a request's quotas and counts it in all of them or in none.
A shadow quota is checked and counted like the others, but where it would refuse it only adds
to its count of refusals (shown with the quota) and logs; it never refuses. If Redis cannot be
reached, requests are let through and logged: a quota must not take the gateway down with it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from django.conf import settings

from gateway.errors import GatewayError

log = logging.getLogger(__name__)

LIMIT_WORDS = {
    "tokens_per_day": "tokens per day",
    "tokens_per_month": "tokens per month",
    "requests_per_minute": "requests per minute",
    "tokens_per_minute": "tokens per minute",
}
LIMIT_FIELDS = tuple(LIMIT_WORDS)
SUBJECT_FIELDS = ("api_key", "team", "deployment")
LARGEST_LIMIT = 10**15
# A request in flight longer than this (its gateway process died, say) no longer holds a
# reservation: longer than any reply wait and stream.
STALE_FLIGHT_S = 3600
# How long the biggest request seen on a lane is remembered.
BIGGEST_KEEP_S = 31 * 86400


class QuotaRefused(Exception):
    """A quota definition that cannot be: the field and what is wrong, in words."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.message, self.field = message, field


# ---------------------------------------------------------------- the rules of a definition


def limit_value(value: Any) -> int | None:
    """One limit: a whole number from 1 up, or None (not set)."""
    if value is None or value == "":
        return None
    wrong = f"must be a whole number from 1 to {LARGEST_LIMIT:,}, not {value!r}"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise QuotaRefused(wrong)
    try:
        number = int(value)
    except ValueError:
        raise QuotaRefused(wrong) from None
    if number < 1:
        raise QuotaRefused(f"must be at least 1, not {number}; leave it out for no limit")
    if number > LARGEST_LIMIT:
        raise QuotaRefused(f"must be at most {LARGEST_LIMIT:,}, not {number:,}")
    return number


def checked_limits(values: dict[str, Any]) -> dict[str, int | None]:
    """Each limit checked, by name; at least one set."""
    checked: dict[str, int | None] = {}
    for name in LIMIT_FIELDS:
        try:
            checked[name] = limit_value(values.get(name))
        except QuotaRefused as refused:
            raise QuotaRefused(refused.message, name) from None
    if all(value is None for value in checked.values()):
        raise QuotaRefused(
            f"set at least one of {', '.join(LIMIT_FIELDS)} (each a whole number from 1)",
            "limits",
        )
    return checked


def check_one_subject(api_key: object, team: object, deployment: object) -> None:
    named = [
        name
        for name, value in zip(SUBJECT_FIELDS, (api_key, team, deployment), strict=True)
        if value
    ]
    if len(named) != 1:
        what = "none" if not named else " and ".join(named)
        raise QuotaRefused(
            f"a quota names exactly one of api_key, team or deployment, not {what}", "subject"
        )


def subject_words(quota: Any) -> str:
    """Who a quota limits, as its refusals name it."""
    if quota.api_key_id:
        return f'API key "{quota.api_key.name}"'
    if quota.team_id:
        return f"team {quota.team.name}"
    return f"deployment {quota.deployment.name}"


def limits_words(quota: Any) -> str:
    """e.g. "1,000 tokens per day, 30 requests per minute" (and "shadow: counts only")."""
    words = ", ".join(f"{value:,} {LIMIT_WORDS[name]}" for name, value in quota.limits().items())
    return f"{words} (shadow: counts only)" if quota.shadow else words


# ---------------------------------------------------------------- definitions, as cached


@dataclass(frozen=True)
class Rule:
    """One quota as the gateway holds it."""

    id: str  # what its counters are named by
    subject: str
    shadow: bool
    limits: tuple[tuple[str, int], ...]
    scope: str = "key"  # what it names: key, team or deployment (the metrics' label)


@dataclass(frozen=True)
class Book:
    """Every quota, by what it names."""

    by_key: dict[int, Rule] = field(default_factory=dict)
    by_team: dict[int, Rule] = field(default_factory=dict)
    by_deployment: dict[int, Rule] = field(default_factory=dict)

    def rules_for(self, key_id: int, team_id: int, deployment_id: int) -> list[Rule]:
        found = (
            self.by_key.get(key_id),
            self.by_team.get(team_id),
            self.by_deployment.get(deployment_id),
        )
        return [rule for rule in found if rule is not None]


def rule_of(quota: Any, subject: str) -> Rule:
    # Counted under the id and the moment it was made: a quota made again (or an id used
    # again, as a test database made afresh does) starts from nothing.
    counted_as = f"{quota.pk}.{int(quota.created_at.timestamp() * 1000)}"
    scope = "key" if quota.api_key_id else "team" if quota.team_id else "deployment"
    return Rule(counted_as, subject, quota.shadow, tuple(quota.limits().items()), scope)


def load_book() -> Book:
    """Blocking: every quota, read in one query."""
    from gateway.models import Quota

    book = Book()
    for quota in Quota.objects.select_related("api_key", "team", "deployment"):
        rule = rule_of(quota, subject_words(quota))
        if quota.api_key_id:
            book.by_key[quota.api_key_id] = rule
        elif quota.team_id:
            book.by_team[quota.team_id] = rule
        else:
            book.by_deployment[quota.deployment_id] = rule
    return book


# ---------------------------------------------------------------- windows and Redis keys


def window(limit: str, now: float) -> tuple[float, float]:
    """The start and end (epoch seconds) of the UTC window a token limit counts in."""
    if limit == "tokens_per_minute":
        start = now // 60 * 60
        return start, start + 60
    moment = datetime.fromtimestamp(now, UTC)
    if limit == "tokens_per_day":
        begun = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        return begun.timestamp(), begun.timestamp() + 86400
    begun = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (
        begun.replace(year=begun.year + 1, month=1)
        if begun.month == 12
        else (begun.replace(month=begun.month + 1))
    )
    return begun.timestamp(), following.timestamp()


def since_words(limit: str, start: float) -> str:
    moment = datetime.fromtimestamp(start, UTC)
    if limit == "tokens_per_minute":
        return f"since {moment:%H:%M} UTC"
    if limit == "tokens_per_day":
        return "since 00:00 UTC today"
    return f"since {moment.day} {moment:%B} 00:00 UTC"


def prefix(quota_id: str) -> str:
    # Namespaced as the load reports are: installs (and test runs) sharing a Redis stay apart.
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}:quota:{quota_id}"


@dataclass(frozen=True)
class Lane:
    """One limit of one quota, and its Redis keys for the present window."""

    rule: Rule
    limit: str
    value: int
    start: float
    end: float

    @property
    def counts_requests(self) -> bool:
        return self.limit == "requests_per_minute"

    @property
    def counter(self) -> str:
        if self.counts_requests:
            return f"{prefix(self.rule.id)}:{self.limit}:log"
        return f"{prefix(self.rule.id)}:{self.limit}:{int(self.start)}"

    @property
    def in_flight(self) -> str:
        return f"{prefix(self.rule.id)}:{self.limit}:in-flight"

    @property
    def biggest(self) -> str:
        return f"{prefix(self.rule.id)}:{self.limit}:biggest"

    @property
    def shadow_refusals(self) -> str:
        return shadow_key(self.rule.id, self.limit)

    @property
    def keep_s(self) -> int:
        """How long the window's counter outlives its last change."""
        return 61 if self.counts_requests else int(self.end - self.start) + 60


def shadow_key(quota_id: str, limit: str) -> str:
    return f"{prefix(quota_id)}:{limit}:shadow-refusals"


def lanes_of(rules: Iterable[Rule], now: float) -> list[Lane]:
    lanes = []
    for rule in rules:
        for limit, value in rule.limits:
            start, end = (
                (now - 60, now + 0.0) if limit == "requests_per_minute" else (window(limit, now))
            )
            lanes.append(Lane(rule, limit, value, start, end))
    return lanes


# Checks every lane, then counts the request in all of them or (refused) in none. Per lane the
# keys are its counter, its set of requests in flight, its biggest request seen and its count
# of shadow refusals; the arguments: now, the request's id, its own size estimate, then per
# lane its kind (r: requests, t: tokens), limit, keep time and whether it is a shadow.
# Returns {0, shadow lanes that would have refused...} or {lane, verdict, used, detail}:
# verdict 1 the limit is used up (detail: the oldest request of the log), 2 the remainder is
# reserved by the requests in flight (detail: how many).
ADMIT = """
local now, id, own = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local lanes = (#ARGV - 3) / 4
local verdicts = {}
local refused = 0
for i = 1, lanes do
  local kind, limit = ARGV[4 * i], tonumber(ARGV[4 * i + 1])
  local counter, flying = KEYS[4 * i - 3], KEYS[4 * i - 2]
  local verdict, used, detail = 0, 0, 0
  if kind == 'r' then
    redis.call('ZREMRANGEBYSCORE', counter, '-inf', now - 60)
    used = redis.call('ZCARD', counter)
    if used >= limit then
      verdict = 1
      detail = tonumber(redis.call('ZRANGE', counter, 0, 0, 'WITHSCORES')[2])
    end
  else
    used = tonumber(redis.call('GET', counter) or '0')
    redis.call('ZREMRANGEBYSCORE', flying, '-inf', now - tonumber(ARGV[4 * i + 2]))
    local in_flight = redis.call('ZCARD', flying)
    local size = math.max(tonumber(redis.call('GET', KEYS[4 * i - 1]) or '0'), own)
    if used >= limit then
      verdict = 1
    elseif in_flight > 0 and used + (in_flight + 1) * size > limit then
      verdict, detail = 2, in_flight
    end
  end
  verdicts[i] = {verdict, used, detail}
  if verdict > 0 and ARGV[4 * i + 3] == '0' and refused == 0 then refused = i end
end
if refused > 0 then
  local v = verdicts[refused]
  return {refused, v[1], v[2], tostring(v[3])}
end
local result = {0}
for i = 1, lanes do
  local keep = tonumber(ARGV[4 * i + 2])
  if ARGV[4 * i] == 'r' then
    redis.call('ZADD', KEYS[4 * i - 3], now, id)
    redis.call('EXPIRE', KEYS[4 * i - 3], keep)
  else
    redis.call('ZADD', KEYS[4 * i - 2], now, id)
    redis.call('EXPIRE', KEYS[4 * i - 2], keep)
  end
  if verdicts[i][1] > 0 then
    redis.call('INCR', KEYS[4 * i])
    redis.call('EXPIRE', KEYS[4 * i], 86400 * 31)
    table.insert(result, i)
  end
end
return result
"""

# A finished request of token lanes: its tokens added to each window, its reservation given
# back, and the biggest request seen raised. Keys per lane: counter, in flight, biggest; the
# arguments: the request's id, its tokens, then per lane the counter's keep time.
SPEND = """
local id, tokens = ARGV[1], tonumber(ARGV[2])
for i = 1, #KEYS / 3 do
  if tokens > 0 then
    redis.call('INCRBY', KEYS[3 * i - 2], tokens)
    redis.call('EXPIRE', KEYS[3 * i - 2], tonumber(ARGV[2 + i]))
  end
  redis.call('ZREM', KEYS[3 * i - 1], id)
  if tokens > tonumber(redis.call('GET', KEYS[3 * i]) or '0') then
    redis.call('SET', KEYS[3 * i], tokens, 'EX', ARGV[#ARGV])
  end
end
return 1
"""


# ---------------------------------------------------------------- refusals in words


class OverQuota(GatewayError):
    """A request over a quota: 429, and when to try again."""

    def __init__(self, message: str, retry_after_s: int, lane: Lane) -> None:
        super().__init__(429, message, retry_after_s)
        self.lane = lane  # the limit that refused it


def refusal(lane: Lane, verdict: int, used: int, detail: float, now: float) -> OverQuota:
    named = f"{lane.rule.subject}'s quota of {lane.value:,} {LIMIT_WORDS[lane.limit]}"
    if lane.counts_requests:
        wait = max(1, math.ceil(detail + 60 - now))
        return OverQuota(
            f"{named} is used up: {used:,} requests in the last minute. Try again in {wait:,} s.",
            wait,
            lane,
        )
    if verdict == 2:
        return OverQuota(
            f"{named} is nearly used up: {used:,} used {since_words(lane.limit, lane.start)}, "
            f"and the rest is held by {int(detail):,} request(s) still running. "
            f"Try again when they have finished.",
            1,
            lane,
        )
    wait = max(1, math.ceil(lane.end - now))
    return OverQuota(
        f"{named} is used up: {used:,} used {since_words(lane.limit, lane.start)}. "
        f"Try again in {wait:,} s, when the window starts again.",
        wait,
        lane,
    )


# ---------------------------------------------------------------- the gateway's side


@dataclass
class Ticket:
    """A request admitted under quotas: its id in the lanes' sets, and its token lanes."""

    id: str
    token_lanes: list[Lane]
    shadow_refusals: list[Lane] = field(default_factory=list)  # shadow limits it went over


def size_estimate(body: dict[str, Any]) -> int:
    """What a request may spend, from its own body: about 4 bytes a prompt token, and the
    completion it allows itself (none stated: nothing known)."""
    prompt = body.get("messages", body.get("prompt", body.get("input", "")))
    most = body.get("max_completion_tokens", body.get("max_tokens"))
    completion = most if isinstance(most, int) and not isinstance(most, bool) else 0
    return len(json.dumps(prompt)) // 4 + max(0, completion)


class Quotas:
    """The gateway process's side: admit a request against its quotas, spend its tokens."""

    def __init__(self) -> None:
        self.book = Book()
        self.redis: aioredis.Redis | None = None
        self.scripts: dict[str, Any] = {}
        self.spending: set[asyncio.Task[None]] = set()
        self.shadow_refused = 0

    def script(self, source: str) -> Any:
        """The script, sent by its SHA-1 (EVALSHA) once Redis knows it."""
        if self.redis is None:
            self.redis = aioredis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2
            )
        if source not in self.scripts:
            self.scripts[source] = self.redis.register_script(source)
        return self.scripts[source]

    async def admit_call(
        self, book: Book, key_id: int, team_id: int, deployment_id: int, body: dict[str, Any]
    ) -> Ticket | None:
        """Admit a call to a deployment under the quotas of its key, team and deployment."""
        rules = book.rules_for(key_id, team_id, deployment_id)
        if not rules:
            return None
        return await self.admit(rules, size_estimate(body))

    async def admit(
        self, rules: list[Rule], own_size: int, now: float | None = None
    ) -> Ticket | None:
        """Count the request in under these quotas, or refuse it (OverQuota, 429)."""
        if not rules:
            return None
        now = time.time() if now is None else now
        lanes = lanes_of(rules, now)
        request_id = uuid.uuid4().hex
        keys: list[str] = []
        args: list[Any] = [now, request_id, own_size]
        for lane in lanes:
            keys += [lane.counter, lane.in_flight, lane.biggest, lane.shadow_refusals]
            keep = lane.keep_s if lane.counts_requests else STALE_FLIGHT_S
            args += ["r" if lane.counts_requests else "t", lane.value, keep, int(lane.rule.shadow)]
        try:
            answer = await self.script(ADMIT)(keys=keys, args=args)
        except Exception:
            log.warning("quotas: Redis cannot be reached; the request goes through", exc_info=True)
            return None
        if answer[0]:
            lane = lanes[int(answer[0]) - 1]
            raise refusal(lane, int(answer[1]), int(answer[2]), float(answer[3]), now)
        over_shadow = [lanes[int(index) - 1] for index in answer[1:]]
        for lane in over_shadow:
            self.shadow_refused += 1
            log.info(
                "quotas: %s's shadow quota of %s %s would have refused a request",
                lane.rule.subject,
                f"{lane.value:,}",
                LIMIT_WORDS[lane.limit],
            )
        return Ticket(request_id, [lane for lane in lanes if not lane.counts_requests], over_shadow)

    def spend(self, ticket: Ticket | None, tokens: int) -> None:
        """The request has ended with these tokens: count them, in the background."""
        if ticket is None or not ticket.token_lanes:
            return
        task = asyncio.create_task(self.spent(ticket, tokens))
        self.spending.add(task)
        task.add_done_callback(self.spending.discard)

    async def spent(self, ticket: Ticket, tokens: int) -> None:
        keys: list[str] = []
        keeps: list[int] = []
        for lane in ticket.token_lanes:
            keys += [lane.counter, lane.in_flight, lane.biggest]
            keeps.append(lane.keep_s)
        try:
            await self.script(SPEND)(
                keys=keys, args=[ticket.id, max(0, tokens), *keeps, BIGGEST_KEEP_S]
            )
        except Exception:
            log.warning("quotas: could not count %d tokens in Redis", tokens, exc_info=True)


# ---------------------------------------------------------------- reading the counters


def standing(quota: Any, now: float | None = None) -> dict[str, dict[str, int]]:
    """Blocking: per limit set, what is used in its present window and how many requests a
    shadow quota would have refused; for the pages and the API."""
    from console.heartbeats import client

    now = time.time() if now is None else now
    rule = rule_of(quota, "")
    lanes = lanes_of([rule], now)
    try:
        with client().pipeline() as pipe:
            for lane in lanes:
                if lane.counts_requests:
                    pipe.zcount(lane.counter, now - 60, "+inf")
                else:
                    pipe.get(lane.counter)
                pipe.get(lane.shadow_refusals)
            answers = pipe.execute()
    except Exception:
        log.warning("quotas: Redis cannot be reached to read quota %s", quota.pk, exc_info=True)
        return {}
    found = {}
    for index, lane in enumerate(lanes):
        used, refused = answers[2 * index], answers[2 * index + 1]
        found[lane.limit] = {"used": int(used or 0), "shadow_refusals": int(refused or 0)}
    return found
