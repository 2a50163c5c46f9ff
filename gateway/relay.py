"""One request through the gateway: to one ready copy, streamed, within the reply wait.

The upstream request is always streamed. Until the first token the gateway holds what the copy
sent (so that a reply wait that passes can still be answered with a 504, and a copy that fails
to connect can be swapped for another); from the first token on it relays bytes as they come.
A non-streaming client gets the stream reassembled into one response.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from gateway import conf, errors, resume, sse
from gateway.directory import Route, Upstream
from gateway.errors import GatewayError
from gateway.figures import Outcome
from gateway.keys import Caller
from gateway.meter import METER, OPERATIONS, Where
from gateway.quotas import OverQuota, Ticket, size_estimate
from gateway.reassemble import Reassembly
from gateway.routing import wish_for
from gateway.usage import UsageEntry

if TYPE_CHECKING:
    from gateway.service import Gateway

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
EMBEDDINGS = "/v1/embeddings"
RELAYED = (CHAT, COMPLETIONS, EMBEDDINGS)
JSON = [(b"content-type", b"application/json")]
EVENT_STREAM = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tell a proxy in front not to buffer the stream either
]
# Failing to reach a copy before it answered: safe to try another copy, nothing went out yet.
# (A pooled connection the copy closed, or a copy that died, fails before any response too.)
UNREACHABLE = (aiohttp.ClientConnectionError, ConnectionError)
UPSTREAM_FAILED = (aiohttp.ClientError, ConnectionError)
DONE_TAIL = b"data: [DONE]"
# An embeddings response ends with its usage, after the vectors: the last bytes are kept for it.
EMBEDDING_TAIL = 512
PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')


@dataclass
class Call:
    """One client request, as the gateway read it."""

    path: str
    body: dict[str, Any]
    caller: Caller
    session: str = ""  # its X-Berth-Session header (gateway/routing.py)
    started: float = field(default_factory=time.monotonic)

    @property
    def model(self) -> str:
        return str(self.body["model"])

    @property
    def wants_stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def hides_usage(self) -> bool:
        """A stream whose client did not ask for usage: the gateway asks the engine for it all
        the same (the usage records count the prompt's tokens) and takes it out again."""
        options = self.body.get("stream_options")
        asked = isinstance(options, dict) and bool(options.get("include_usage"))
        return self.wants_stream and not asked


@dataclass
class Reply:
    """What goes back: a status, headers, a first body; then more pieces until None."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    more: Callable[[], Awaitable[bytes | None]] | None = None
    close: Callable[[], Awaitable[None]] | None = None


def json_reply(status: int, body: bytes) -> Reply:
    return Reply(status, JSON, body)


def error_reply(error: GatewayError) -> Reply:
    if error.retry_after_s is None:
        return json_reply(error.status, error.body())
    retry = (b"retry-after", str(error.retry_after_s).encode())
    return Reply(error.status, [*JSON, retry], error.body())


class Unreachable(Exception):
    """The copy could not be reached; another may be tried."""


class Flight:
    """One request at one copy: its upstream response, its timings and its token count."""

    def __init__(
        self, hub: Gateway, call: Call, route: Route, upstream: Upstream, admission: Admission
    ) -> None:
        self.hub, self.call, self.route, self.upstream = hub, call, route, upstream
        self.admission = admission  # under its quotas, which its tokens are spent from
        self.response: aiohttp.ClientResponse | None = None
        self.first_token_at: float | None = None
        self.last_at: float | None = None
        self.chunks = 0
        self.usage_tokens: int | None = None
        self.prompt_tokens: int | None = None  # the engine's, when it reports usage
        self.status = 200  # what the client gets (usage records)
        self.usage_hidden = sse.UsageHidden() if call.hides_usage else None
        self.tail = b""
        self.failed = self.timed_out = self.ended = self.finished = False
        # For a stream continued at another copy (gateway/resume.py): what the client has been
        # sent, the copies tried, and the tokens earlier copies generated.
        self.continuable = (
            call.wants_stream
            and call.path in (CHAT, COMPLETIONS)
            and resume.may_continue(call.path == CHAT, call.body, 0)
        )
        self.sent = bytearray()
        self.tried = {upstream.copy_id}
        self.resumes = 0
        self.carried = 0
        self.retry_whole = False
        hub.picker.start(upstream)

    # ---------------------------------------------------------------- until the first token

    async def take_off(self) -> Reply:
        """Connect, and wait for the first token within the reply wait; nothing goes back to
        the client before the call is admitted under its quotas."""
        try:
            async with asyncio.timeout(self.remaining()):
                response = await self.connect()
                if response.status != 200:
                    await self.admission.ticket()
                    return await self.passed_through(response)
                if self.call.path == EMBEDDINGS:
                    await self.admission.ticket()
                    self.first_token_at = time.monotonic()
                    return Reply(200, content_type(response), b"", self.more, self.finish)
                held = await self.to_first_token()
                await self.admission.ticket()
        except OverQuota:
            await self.finish(record=False)  # refused: closing the upstream cancels it there
            raise
        except TimeoutError:
            self.failed = self.timed_out = True
            self.status = 504
            await self.finish()
            raise errors.reply_wait_passed(self.route.reply_wait_s) from None
        except UPSTREAM_FAILED as error:
            self.failed = True
            self.status = 502
            await self.finish()
            why = f"The model's copy failed before it replied: {error!r}."
            raise GatewayError(502, why) from error
        except BaseException:
            await self.finish()
            raise
        if self.call.wants_stream:
            return Reply(200, EVENT_STREAM, self.relayed(held), self.more, self.finish)
        return await self.reassembled(held)

    def remaining(self) -> float:
        return self.route.reply_wait_s - (time.monotonic() - self.call.started)

    async def connect(self) -> aiohttp.ClientResponse:
        try:
            self.response = await self.post(None)
        except UNREACHABLE as error:
            self.hub.picker.set_aside(self.upstream)
            self.hub.directory.refresh_soon()
            await self.finish(record=False)  # the request goes on at another copy
            raise Unreachable(str(error)) from error
        return self.response

    async def post(self, body: dict[str, Any] | None) -> aiohttp.ClientResponse:
        # Past the first token, a copy silent for longer than this has hung.
        silence = max(300.0, self.route.reply_wait_s + 5.0)
        return await self.hub.client_for(self.upstream).post(
            self.upstream.url + self.call.path,
            data=upstream_body(self.call, self.route, body),
            headers={**self.upstream.headers, **UPSTREAM_HEADERS},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=silence),
        )

    async def read(self) -> bytes:
        """Whatever the copy has sent since the last read (b"" at the end): bytes as they came,
        several engine writes at once when the gateway is busy, never split into events."""
        assert self.response is not None
        return await self.response.content.readany()

    async def to_first_token(self) -> bytes:
        held = bytearray()
        pending = b""
        skipped = 0  # events before the first token (a role-only opening chunk)
        while piece := await self.read():
            held += piece
            payloads, pending = sse.split_events(pending + piece)
            for index, payload in enumerate(payloads):
                if sse.starts_reply(payload):
                    self.first_token_at = self.last_at = time.monotonic()
                    self.chunks = sse.count_chunks(held) - skipped - index
                    self.tail = bytes(held[-32:])
                    usage = sse.usage_of(bytes(held))  # a short reply may come in one read
                    if usage is not None:
                        self.take_usage(usage)
                    if self.continuable:
                        self.sent += held
                    return bytes(held)
            skipped += len(payloads)
        raise aiohttp.ClientPayloadError("the copy closed the stream before its first token")

    async def passed_through(self, response: aiohttp.ClientResponse) -> Reply:
        """The engine's own error response, unchanged."""
        body = await response.read()
        self.failed = response.status >= 500
        self.status = response.status
        await self.finish()
        return Reply(response.status, content_type(response), body)

    # ---------------------------------------------------------------- after the first token

    async def more(self) -> bytes | None:
        """The next piece as it came from the copy, or None at the end."""
        if self.ended or self.response is None:
            return None
        try:
            piece = await self.read()
        except UPSTREAM_FAILED as error:
            return await self.broken(str(error) or type(error).__name__)
        if not piece:
            if self.cut_short():
                return await self.broken("its stream ended before the answer did", ended=True)
            self.end()
            return (self.usage_hidden.end() if self.usage_hidden else b"") or None
        self.last_at = time.monotonic()
        if self.call.path == EMBEDDINGS:
            self.tail = (self.tail + piece)[-EMBEDDING_TAIL:]
            return self.relayed(piece)
        self.count(piece)
        if self.continuable:
            self.sent += piece
        if self.carried:
            piece = resume.whole_usage(piece, self.carried)
        return self.relayed(piece)

    def cut_short(self) -> bool:
        """A stream that stops without [DONE] was cut short (the engine died, say)."""
        return self.call.path != EMBEDDINGS and DONE_TAIL not in self.tail

    async def broken(self, why: str, ended: bool = False) -> bytes | None:
        """The copy broke off after the first token (its connection broke, or it `ended` its
        stream early): a streaming client's answer goes on at another copy where one can take
        it (gateway/resume.py); else it ends here, with an error event where the connection
        broke."""
        chat = self.call.path == CHAT
        if self.continuable and resume.may_continue(chat, self.call.body, self.resumes):
            continued = await self.continued(why)
            if continued is not None:
                return self.relayed(continued)
        self.ended = self.failed = True
        if not self.call.wants_stream and resume.may_retry():
            self.retry_whole = True  # nothing has gone to the client: another copy answers
            self.hub.picker.set_aside(self.upstream)
            return None
        if ended:
            return (self.usage_hidden.end() if self.usage_hidden else b"") or None
        return errors.broke_off(why)

    async def continued(self, why: str) -> bytes | None:
        """Ask another copy for the rest of the answer; its first bytes, or None."""
        chosen = self.hub.picker.choose([self.route], self.tried)
        if chosen is None:
            return None
        broken = self.upstream
        self.hub.picker.set_aside(broken)
        self.hub.directory.refresh_soon()
        so_far = resume.sent_so_far(bytes(self.sent), self.call.path == CHAT)
        if self.response is not None:
            self.response.close()
        self.hub.picker.done(broken)
        self.upstream = chosen[1]
        self.hub.picker.start(self.upstream)
        self.tried.add(self.upstream.copy_id)
        self.resumes += 1
        self.carried = so_far.tokens
        first_token_at, chunks = self.first_token_at, self.chunks
        try:
            self.response = await self.post(
                resume.continuation_body(self.call.path == CHAT, self.call.body, so_far)
            )
            if self.response.status != 200:
                return None
            held = await self.to_first_token()
        except UPSTREAM_FAILED:
            return None
        finally:
            self.first_token_at = first_token_at
        self.chunks += chunks
        self.hub.in_background(
            resume.say_continued, self.route.id, broken.copy_id, self.upstream.copy_id,
            so_far.tokens, why,
        )  # fmt: skip
        return resume.whole_usage(resume.continued_events(held, so_far), self.carried)

    def relayed(self, piece: bytes) -> bytes:
        return self.usage_hidden.relay(piece) if self.usage_hidden else piece

    def count(self, piece: bytes) -> None:
        self.chunks += sse.count_chunks(piece)
        self.tail = (self.tail + piece)[-32:]
        usage = sse.usage_of(piece)
        if usage is not None:
            self.take_usage(usage)

    def take_usage(self, usage: dict[str, Any]) -> None:
        # A continued stream's copy counted the earlier copies' tokens as its prompt's.
        if isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"] + self.carried
        if isinstance(usage.get("prompt_tokens"), int):
            self.prompt_tokens = max(0, usage["prompt_tokens"] - self.carried)

    def end(self) -> None:
        self.ended = True
        if self.call.path == EMBEDDINGS:
            self.prompt_tokens = embedding_prompt_tokens(self.tail)
        if self.cut_short():
            self.failed = True

    async def reassembled(self, held: bytes) -> Reply:
        reassembly = Reassembly(chat=self.call.path == CHAT)
        pending = held
        try:
            while True:
                payloads, pending = sse.split_events(pending)
                for payload in payloads:
                    reassembly.feed(payload)
                piece = await self.more()
                if piece is None:
                    break
                pending += piece
        finally:
            if reassembly.error is not None:
                self.status = reassembly.error_status()
            elif self.failed:
                self.status = 502
            await self.finish(record=not self.retry_whole)
        if self.retry_whole:
            raise Unreachable("its reply broke off before it was complete")
        self.usage_tokens = reassembly.completion_tokens()
        if reassembly.error is not None:
            return json_reply(reassembly.error_status(), reassembly.body())
        if self.failed:
            raise GatewayError(502, "The model's reply broke off before it was complete.")
        return json_reply(200, reassembly.body())

    # ---------------------------------------------------------------- the end

    async def finish(self, record: bool = True) -> None:
        """Close the upstream request (which cancels it if it is still running) and count."""
        if self.finished:
            return
        self.finished = True
        self.hub.picker.done(self.upstream)
        self.hub.queues.freed(self.route.id)
        if record:
            outcome = self.outcome()
            self.hub.figures.record(outcome)
            self.admission.spend(outcome.tokens + (self.prompt_tokens or 0))
            if conf.usage_metering():
                self.metered(outcome)
        if self.response is not None:
            # Read to the end, the connection goes back to the pool; otherwise closing it is
            # what cancels the request at the copy.
            if self.ended and not self.failed:
                self.response.release()
            else:
                self.response.close()

    def outcome(self) -> Outcome:
        now = time.monotonic()
        first = self.first_token_at
        completed = first is not None and not self.failed
        generated = self.usage_tokens if self.usage_tokens is not None else max(self.chunks, 0)
        return Outcome(
            deployment_id=self.route.id,
            deployment_name=self.route.name,
            failed=self.failed,
            timed_out=self.timed_out,
            ttft_s=None if first is None else first - self.call.started,
            latency_s=now - self.call.started if completed else None,
            tokens=generated if first is not None else 0,
            generation_s=(self.last_at or now) - first if first is not None else 0.0,
        )

    def metered(self, outcome: Outcome) -> None:
        """Its usage record, and this process's metrics (gateway/meter.py)."""
        entry = self.usage_entry()
        self.hub.usage.add(entry)
        where = where_of(self.call, self.route)
        METER.ended(
            where, self.status, entry.prompt_tokens, entry.completion_tokens, entry.ttft_s,
            entry.duration_s,
        )  # fmt: skip

    def usage_entry(self) -> UsageEntry:
        """This request's usage record (gateway/usage.py), with the tokens the figures count."""
        outcome = self.outcome()
        return usage_entry(
            self.call, self.route, self.status, copy_id=self.upstream.copy_id,
            prompt_tokens=self.prompt_tokens, completion_tokens=outcome.tokens,
            ttft_s=outcome.ttft_s,
        )  # fmt: skip


def usage_entry(
    call: Call,
    route: Route,
    status: int,
    copy_id: int | None = None,
    prompt_tokens: int | None = None,
    completion_tokens: int = 0,
    ttft_s: float | None = None,
) -> UsageEntry:
    """A call's usage record: who called, whose deployment served it, and how it went."""
    took_s = time.monotonic() - call.started
    return UsageEntry(
        at=time.time() - took_s,
        key_id=call.caller.key_id or None,
        user_id=call.caller.user_id,
        team_id=route.team_id,  # whose deployment served it: the team it is used in
        deployment_id=route.id,
        deployment_name=route.name,
        copy_id=copy_id,
        model=call.model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        ttft_s=ttft_s,
        duration_s=took_s,
        status=status,
    )


UPSTREAM_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "Accept-Encoding": "identity",  # bytes are relayed as they are: nothing to decompress
}


def where_of(call: Call, route: Route) -> Where:
    operation = OPERATIONS.get(call.path, call.path)
    return Where(route.team_id, route.team_name, route.name, operation, call.model)


class Admission:
    """A call's admission under the quotas of its key, team and deployment.

    Redis is asked while the call goes on to its copy, so that its answer (a round trip through
    a busy event loop) is not added to the time to the first token; nothing goes back to the
    client before it, and a refused call's upstream request is closed (cancelled at the copy).
    Only where the last answer here for the same quotas left one of them half used or more does
    the call wait for its answer before any copy sees it: a subject at its limit does not send
    the requests it has refused on to the engines. Each refusal, shadow or not, is counted in
    the metrics."""

    def __init__(self, hub: Gateway, call: Call, route: Route) -> None:
        self.quotas = hub.quotas
        self.where = where_of(call, route)
        rules = tuple(hub.directory.book.rules_for(call.caller.key_id, route.team_id, route.id))
        self.asking = self.quotas.ask(rules, size_estimate(call.body)) if rules else None
        self.known = False
        self.settled: Ticket | OverQuota | None = None

    @property
    def must_wait(self) -> bool:
        return self.asking is not None and not self.quotas.has_room(self.asking.rules)

    async def ticket(self) -> Ticket | None:
        """The call's ticket once admitted, or OverQuota (429). A call that goes away while
        Redis is asked cancels its question; its reservation, if made, is given back."""
        if self.asking is None:
            return None
        if not self.known:
            self.settle(await self.asking.answer)
        if isinstance(self.settled, OverQuota):
            raise self.settled
        return self.settled

    def settle(self, answer: list[str] | None) -> None:
        assert self.asking is not None
        self.known = True
        try:
            self.settled = self.quotas.answered(self.asking, answer)
        except OverQuota as refused:
            self.settled = refused
            METER.refused(self.where, refused.lane.rule.scope, refused.lane.limit, shadow=False)
            return
        for lane in self.settled.shadow_refusals if self.settled is not None else ():
            METER.refused(self.where, lane.rule.scope, lane.limit, shadow=True)

    def spend(self, tokens: int) -> None:
        """The call has ended with these tokens (an answer still to come: once it has)."""
        asked = self.asking.answer if self.asking is not None else None
        if asked is None or asked.cancelled():
            return
        if not asked.done():
            asked.add_done_callback(lambda _asked: self.spend(tokens))
            return
        if not self.known:
            self.settle(asked.result())
        if isinstance(self.settled, Ticket):
            self.quotas.spend(self.settled, tokens)


def embedding_prompt_tokens(tail: bytes) -> int | None:
    """The prompt's tokens from the end of an embeddings response, if it says."""
    found = PROMPT_TOKENS.findall(tail)
    return int(found[-1]) if found else None


def upstream_body(call: Call, route: Route, asked: dict[str, Any] | None = None) -> bytes:
    """The client's body (or the one continuing its stream) for the copy: the engine's own
    model name, and always a stream."""
    body = {**(asked or call.body), "model": route.served_name}
    if call.path != EMBEDDINGS:
        body["stream"] = True
        if not call.wants_stream or call.hides_usage:
            # For the reassembled reply's usage, and the prompt's tokens in the usage records.
            options = call.body.get("stream_options")
            body["stream_options"] = {**(options if isinstance(options, dict) else {}),
                                      "include_usage": True}  # fmt: skip
    return json.dumps(body).encode()


def content_type(response: aiohttp.ClientResponse) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", response.headers.get("content-type", "application/json").encode())]


async def relay(hub: Gateway, call: Call, routes: list[Route]) -> Reply:
    """Send the call to the copy its deployment's routing picks (gateway/picking.py); if it
    cannot be reached, to one other copy once. A call refused before a copy answered (over a
    quota, no copy ready or none reachable) has its usage record too, with its status and no
    copy."""
    tried: set[int] = set()
    admission: Admission | None = None
    route = routes[0]
    wish = wish_for(routes, call.path == CHAT, call.body, call.session, *hub.routing_indexes)
    try:
        await hub.room_at_a_copy(call, routes)
    except GatewayError as refused:  # its queue is full, or its wait passed
        refused_before_a_copy(hub, call, route, refused.status)
        raise
    try:
        for _attempt in range(2):
            chosen = hub.picker.choose(routes, tried, wish)
            if chosen is None:
                break
            route, upstream = chosen
            tried.add(upstream.copy_id)
            if wish is not None:
                wish.went_to(upstream)
            if admission is None:  # once per call, also when the first copy cannot be reached
                admission = Admission(hub, call, route)
                if admission.must_wait:
                    await admission.ticket()
            try:
                return await Flight(hub, call, route, upstream, admission).take_off()
            except Unreachable:
                continue
    except OverQuota as refused:
        refused_before_a_copy(hub, call, route, refused.status)
        raise
    if admission is not None:
        admission.spend(0)  # no copy took it: its reservation goes back
    hub.figures.record(Outcome(route.id, route.name, failed=True))
    error = (
        errors.unreachable(call.model)
        if tried
        else errors.no_copy_ready(call.model, [(r.name, r.state_label) for r in routes])
    )
    refused_before_a_copy(hub, call, route, error.status)
    raise error


def refused_before_a_copy(hub: Gateway, call: Call, route: Route, status: int) -> None:
    """The usage record (and the metrics) of a call no copy answered."""
    if not conf.usage_metering():
        return
    entry = usage_entry(call, route, status)
    hub.usage.add(entry)
    if status != 429:  # a quota's refusals are counted (by status too) as refusals
        METER.ended(where_of(call, route), status, None, 0, None, entry.duration_s)
