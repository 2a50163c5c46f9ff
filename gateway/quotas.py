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
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
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

    @cached_property  # a lane is made once a minute and asked about on every request
    def counter(self) -> str:
        if self.counts_requests:
            return f"{prefix(self.rule.id)}:{self.limit}:log"
        return f"{prefix(self.rule.id)}:{self.limit}:{int(self.start)}"

    @cached_property
    def in_flight(self) -> str:
        return f"{prefix(self.rule.id)}:{self.limit}:in-flight"

    @cached_property
    def biggest(self) -> str:
        return f"{prefix(self.rule.id)}:{self.limit}:biggest"

    @cached_property
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


# The requests a gateway process asked about in one turn of its event loop, in one call: a
# burst costs one round trip, and each lane's counters are read and written once however many
# of the burst's requests it counts. The requests are still taken one after the other, each as
# if it had come alone: every one of its lanes checked, then the request counted in all of them
# or (refused) in none.
#
# The arguments: now and the number of lanes; per lane its kind (r: requests, t: tokens), limit,
# keep time and whether it is a shadow; then the requests, in one argument (a burst's many
# arguments would cost more to send than the script takes), one per line: its id, its own size
# estimate and its lanes' numbers (comma-separated). The keys, per lane: its counter, its set
# of requests in flight, its biggest request seen and its count of shadow refusals.
#
# The answer is one line per request: "0,room[,its shadow lanes that would have refused...]"
# or "its lane,verdict,used,detail": verdict 1 the limit is used up (detail: the oldest request
# of the log), 2 the remainder is reserved by the requests in flight (detail: how many). Room
# is 1 while every limit that refuses is less than half used, counting the requests in flight
# at the size seen. Lanes are numbered as the request's own lanes are.
ADMIT = """
local now, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local lanes = {}
for i = 1, count do
  local b, c = 3 + 4 * (i - 1), 4 * (i - 1)
  local lane = {kind = ARGV[b], limit = tonumber(ARGV[b + 1]), keep = tonumber(ARGV[b + 2]),
                shadow = ARGV[b + 3] == '1', log = KEYS[c + 1], flying = KEYS[c + 2],
                refusals_key = KEYS[c + 4], added = {}, refusals = 0, in_flight = 0, size = 0}
  if lane.kind == 'r' then
    redis.call('ZREMRANGEBYSCORE', lane.log, '-inf', now - 60)
    lane.used = redis.call('ZCARD', lane.log)
  else
    lane.used = tonumber(redis.call('GET', KEYS[c + 1]) or '0')
    redis.call('ZREMRANGEBYSCORE', lane.flying, '-inf', now - lane.keep)
    lane.in_flight = redis.call('ZCARD', lane.flying)
    lane.size = tonumber(redis.call('GET', KEYS[c + 3]) or '0')
  end
  lanes[i] = lane
end

local function verdict_of(lane, own)
  if lane.kind == 'r' then
    if lane.used >= lane.limit then
      local oldest = redis.call('ZRANGE', lane.log, 0, 0, 'WITHSCORES')[2]
      return 1, lane.used, tonumber(oldest or now), lane.used + 1 <= lane.limit / 2
    end
    return 0, lane.used, 0, lane.used + 1 <= lane.limit / 2
  end
  local held = lane.used + (lane.in_flight + 1) * math.max(lane.size, own)
  local room = held <= lane.limit / 2
  if lane.used >= lane.limit then return 1, lane.used, 0, room end
  if lane.in_flight > 0 and held > lane.limit then return 2, lane.used, lane.in_flight, room end
  return 0, lane.used, 0, room
end

local function admit(id, own, numbers)
  local mine, over = {}, {}
  local room = 1
  for number in string.gmatch(numbers, '%d+') do
    local lane = lanes[tonumber(number)]
    table.insert(mine, lane)
    local verdict, used, detail, roomy = verdict_of(lane, own)
    if not lane.shadow then
      if verdict > 0 then
        return string.format('%d,%d,%d,%.3f', #mine, verdict, used, detail)
      end
      if not roomy then room = 0 end
    end
    over[#mine] = verdict > 0
  end
  local answer = {0, room}
  for position, lane in ipairs(mine) do
    table.insert(lane.added, id)
    if lane.kind == 'r' then lane.used = lane.used + 1 else lane.in_flight = lane.in_flight + 1 end
    if over[position] then
      lane.refusals = lane.refusals + 1
      table.insert(answer, position)
    end
  end
  return table.concat(answer, ',')
end

local answers = {}
for id, own, numbers in string.gmatch(ARGV[3 + 4 * count], '(%w+) (%d+) ([%d,]+)') do
  table.insert(answers, admit(id, tonumber(own), numbers))
end

for _, lane in ipairs(lanes) do
  local log = lane.kind == 'r' and lane.log or lane.flying
  for first = 1, #lane.added, 500 do
    local members = {}
    for i = first, math.min(first + 499, #lane.added) do
      table.insert(members, now)
      table.insert(members, lane.added[i])
    end
    redis.call('ZADD', log, unpack(members))
  end
  if #lane.added > 0 then redis.call('EXPIRE', log, lane.keep) end
  if lane.refusals > 0 then
    redis.call('INCRBY', lane.refusals_key, lane.refusals)
    redis.call('EXPIRE', lane.refusals_key, 86400 * 31)
  end
end
return table.concat(answers, '\\n')
"""

# The requests that ended in one turn of the event loop, in one call: their tokens added to
# their token lanes' windows, their reservations given back, and the biggest request seen
# raised. The arguments: how long the biggest is kept and the number of lanes; per lane its
# counter's keep time; then the requests in one argument, one per line: its id, its tokens and
# its lanes' numbers (comma-separated). The keys, per lane: its counter, its set of requests in
# flight, its biggest request seen.
SPEND = """
local biggest_keep, count = ARGV[1], tonumber(ARGV[2])
local lanes = {}
for i = 1, count do lanes[i] = {tokens = 0, biggest = 0, ended = {}} end
for id, spent, numbers in string.gmatch(ARGV[3 + count], '(%w+) (%d+) ([%d,]+)') do
  local tokens = tonumber(spent)
  for number in string.gmatch(numbers, '%d+') do
    local lane = lanes[tonumber(number)]
    lane.tokens = lane.tokens + tokens
    lane.biggest = math.max(lane.biggest, tokens)
    table.insert(lane.ended, id)
  end
end
for i, lane in ipairs(lanes) do
  local c = 3 * (i - 1)
  if lane.tokens > 0 then
    redis.call('INCRBY', KEYS[c + 1], lane.tokens)
    redis.call('EXPIRE', KEYS[c + 1], tonumber(ARGV[2 + i]))
  end
  for first = 1, #lane.ended, 500 do
    redis.call('ZREM', KEYS[c + 2], unpack(lane.ended, first, math.min(first + 499, #lane.ended)))
  end
  if lane.biggest > tonumber(redis.call('GET', KEYS[c + 3]) or '0') then
    redis.call('SET', KEYS[c + 3], lane.biggest, 'EX', biggest_keep)
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


@dataclass
class Asking:
    """A request waiting for the next call to Redis to be admitted (or refused)."""

    rules: tuple[Rule, ...]
    own_size: int
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    lanes: list[Lane] = field(default_factory=list)  # as of the call's moment
    at: float = 0.0  # that moment
    answer: asyncio.Future[list[str] | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Numbering:
    """The lanes of one call to Redis, each once (by its counter: two quotas' requests may
    share one), numbered from 1 in the order they came."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        self.lanes: list[Lane] = []

    def of(self, lanes: list[Lane]) -> str:
        """These lanes' numbers, comma-separated, as the scripts read them."""
        for lane in lanes:
            if lane.counter not in self.numbers:
                self.lanes.append(lane)
                self.numbers[lane.counter] = len(self.lanes)
        return ",".join(str(self.numbers[lane.counter]) for lane in lanes)


def size_estimate(body: dict[str, Any]) -> int:
    """What a request may spend, from its own body: about 4 bytes a prompt token, and the
    completion it allows itself (none stated: nothing known)."""
    prompt = body.get("messages", body.get("prompt", body.get("input", "")))
    most = body.get("max_completion_tokens", body.get("max_tokens"))
    completion = most if isinstance(most, int) and not isinstance(most, bool) else 0
    return len(json.dumps(prompt)) // 4 + max(0, completion)


class Quotas:
    """The gateway process's side: admit a request against its quotas, spend its tokens.

    Redis is asked once per turn of the event loop, for every request that came in that turn
    (and told once about every request that ended): a burst of requests costs one round trip,
    not one each, and the script still takes them one after the other."""

    def __init__(self) -> None:
        self.redis: aioredis.Redis | None = None
        self.scripts: dict[str, Any] = {}
        self.asking: list[Asking] = []
        self.ending: list[tuple[Ticket, int]] = []
        self.calls: set[asyncio.Task[None]] = set()
        self.lanes_by_minute: dict[tuple[Rule, ...], tuple[int, list[Lane]]] = {}
        self.roomy: dict[tuple[Rule, ...], bool] = {}
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

    def lanes(self, rules: tuple[Rule, ...], now: float) -> list[Lane]:
        """The rules' lanes, made once a minute (every window starts on a minute; a request
        lane's window slides, and its start and end are not used)."""
        minute = int(now // 60)
        made = self.lanes_by_minute.get(rules)
        if made is None or made[0] != minute:
            if len(self.lanes_by_minute) > 10_000:  # quotas of many keys come and go
                self.lanes_by_minute.clear()
                self.roomy.clear()
            made = self.lanes_by_minute[rules] = (minute, lanes_of(rules, now))
        return made[1]

    def in_background(self, call: Awaitable[None]) -> None:
        task = asyncio.ensure_future(call)
        self.calls.add(task)
        task.add_done_callback(self.calls.discard)

    # ---------------------------------------------------------------- admitting

    def ask(self, rules: tuple[Rule, ...], own_size: int) -> Asking:
        """Ask to count a request in under these quotas; its answer comes with the next call
        to Redis (`answered` reads it)."""
        asking = Asking(rules, own_size)
        self.asking.append(asking)
        if len(self.asking) == 1:
            asyncio.get_running_loop().call_soon(self.send_asked)
        return asking

    def answered(self, asking: Asking, answer: list[str] | None) -> Ticket | None:
        """The request's ticket, or OverQuota (429); None where Redis could not be asked."""
        if answer is None:
            return None
        refused_by = int(answer[0])
        if refused_by:
            lane = asking.lanes[refused_by - 1]
            raise refusal(lane, int(answer[1]), int(answer[2]), float(answer[3]), asking.at)
        return self.ticket(asking, [asking.lanes[int(index) - 1] for index in answer[2:]])

    def has_room(self, rules: tuple[Rule, ...]) -> bool:
        """Whether Redis's last answer here for these quotas left each less than half used."""
        return self.roomy.get(rules, False)

    def ticket(self, asking: Asking, over_shadow: list[Lane]) -> Ticket:
        for lane in over_shadow:
            self.shadow_refused += 1
            log.info(
                "quotas: %s's shadow quota of %s %s would have refused a request",
                lane.rule.subject,
                f"{lane.value:,}",
                LIMIT_WORDS[lane.limit],
            )
        token_lanes = [lane for lane in asking.lanes if not lane.counts_requests]
        return Ticket(asking.id, token_lanes, over_shadow)

    def send_asked(self) -> None:
        """Ask Redis about every request that came in this turn of the event loop."""
        batch, self.asking = self.asking, []
        self.in_background(self.asked(batch))

    async def asked(self, batch: list[Asking]) -> None:
        now = time.time()
        numbering = Numbering()
        asked = []
        for asking in batch:
            asking.lanes, asking.at = self.lanes(asking.rules, now), now
            asked.append(f"{asking.id} {asking.own_size} {numbering.of(asking.lanes)}")
        keys: list[str] = []
        lane_args: list[Any] = []
        for lane in numbering.lanes:
            keys += [lane.counter, lane.in_flight, lane.biggest, lane.shadow_refusals]
            keep = lane.keep_s if lane.counts_requests else STALE_FLIGHT_S
            kind = "r" if lane.counts_requests else "t"
            lane_args += [kind, lane.value, keep, int(lane.rule.shadow)]
        args = [now, len(numbering.lanes), *lane_args, "\n".join(asked)]
        try:
            answered = await self.script(ADMIT)(keys=keys, args=args)
            answers = [line.split(",") for line in answered.decode().split("\n")]
        except Exception:
            log.warning("quotas: Redis cannot be reached; %d request(s) go through",
                        len(batch), exc_info=True)  # fmt: skip
            answers = [None] * len(batch)
        for asking, answer in zip(batch, answers, strict=True):
            if answer is not None:
                self.roomy[asking.rules] = answer[0] == "0" and answer[1] == "1"
            if not asking.answer.cancelled():
                asking.answer.set_result(answer)
            elif answer is not None and answer[0] == "0":  # its client left while it was asked
                self.spend(self.ticket(asking, []), 0)

    # ---------------------------------------------------------------- spending

    def spend(self, ticket: Ticket | None, tokens: int) -> None:
        """The request has ended with these tokens: count them, in the background."""
        if ticket is None or not ticket.token_lanes:
            return
        self.ending.append((ticket, max(0, tokens)))
        if len(self.ending) == 1:
            asyncio.get_running_loop().call_soon(self.tell)

    def tell(self) -> None:
        """Tell Redis about every request that ended this turn of the event loop."""
        batch, self.ending = self.ending, []
        self.in_background(self.spent(batch))

    async def spent(self, batch: list[tuple[Ticket, int]]) -> None:
        numbering = Numbering()
        ended = [
            f"{ticket.id} {tokens} {numbering.of(ticket.token_lanes)}" for ticket, tokens in batch
        ]
        keys: list[str] = []
        for lane in numbering.lanes:
            keys += [lane.counter, lane.in_flight, lane.biggest]
        keeps = [lane.keep_s for lane in numbering.lanes]
        args = [BIGGEST_KEEP_S, len(numbering.lanes), *keeps, "\n".join(ended)]
        try:
            await self.script(SPEND)(keys=keys, args=args)
        except Exception:
            tokens = sum(tokens for _ticket, tokens in batch)
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
