"""The gateway's long-lived parts: the pooled HTTP client, the table, the figures, the keys.

One Gateway per event loop (the server's one loop in production; a test may run others), made
on first use. Figures, the picker's counts and the key cache belong to the process. Database
work runs in a small thread pool of its own: the event loop never waits on the database.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import json
import logging
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import aiohttp
from django.db import connection

from console import live
from deployments import load, waking
from gateway import conf, errors, routing
from gateway.directory import KeyBox, Route, Table, Upstream, load_table
from gateway.errors import GatewayError
from gateway.figures import Figures
from gateway.keys import Caller, KeyCache
from gateway.limits import KeyLimits
from gateway.picking import Picker
from gateway.queueing import Queues
from gateway.quotas import Book, Quotas, load_book
from gateway.relay import Call, Reply, error_reply, json_reply, relay
from gateway.usage import UsageBatch
from gateway.waking import Waker

log = logging.getLogger(__name__)
T = TypeVar("T")
DATABASE_THREADS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gateway-db")
# Key look-ups have threads of their own: a flood of made-up keys must not hold up the reads of
# the routing table (nor the other way round).
KEY_THREADS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gateway-keys")


def in_thread(work: Callable[[], T]) -> T:
    try:
        return work()
    except Exception:
        connection.close()  # a broken connection must not stay in this thread for next time
        raise


async def run_blocking(work: Callable[[], T]) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(DATABASE_THREADS, in_thread, work)


async def look_up_key(work: Callable[[], T]) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(KEY_THREADS, in_thread, work)


# Load reports have a thread of their own: Redis being slow must not hold up the table's reads.
LOAD_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-load")
FIGURES = Figures()
PICKER = Picker()
KEYS = KeyCache(look_up_key)
LIMITS = KeyLimits()
USAGE = UsageBatch()
ROUTING_INDEXES = routing.indexes()  # the prefix index and the session index
QUEUES = Queues()


@atexit.register
def flush_at_exit() -> None:
    """A stopping server keeps the figures of its last minute."""
    with contextlib.suppress(Exception):
        DATABASE_THREADS.submit(in_thread, FIGURES.flush).result(timeout=10)


@atexit.register
def flush_usage_at_exit() -> None:
    """A stopping server writes the usage records of its last second. In this thread: the
    thread pools take no more work once the interpreter is exiting, and no event loop runs."""
    with contextlib.suppress(Exception):
        USAGE.flush()


class Directory:
    """The current table; re-read in the background, one read at a time."""

    def __init__(self) -> None:
        self.table: Table | None = None
        self.read_at = 0.0
        self.keys = KeyBox()
        self.reading: asyncio.Task[Table] | None = None
        self.book = Book()  # the quotas, read with the table

    async def current(self) -> Table:
        if self.table is None:
            return await self.refresh()
        if time.monotonic() - self.read_at > conf.refresh_s():
            self.refresh_soon()
        return self.table

    def refresh_soon(self) -> None:
        if self.reading is None or self.reading.done():
            self.reading = asyncio.create_task(self.read())

    async def refresh(self) -> Table:
        self.refresh_soon()
        assert self.reading is not None
        return await asyncio.shield(self.reading)

    async def read(self) -> Table:
        # The quotas first: a deployment on offer has had the quotas of that moment read.
        book = await run_blocking(load_book)
        table = await run_blocking(lambda: load_table(self.keys))
        self.book, self.table, self.read_at = book, table, time.monotonic()
        return table


class Gateway:
    """Routes calls to ready copies; see gateway/relay.py for one request's way."""

    def __init__(self) -> None:
        self.client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
            auto_decompress=False,  # relayed as they came
        )
        # One client per local engine's Unix socket (a connector speaks to one socket), with
        # the copy that listens on it.
        self.socket_clients: dict[str, tuple[int, aiohttp.ClientSession]] = {}
        self.directory = Directory()
        self.picker = PICKER
        self.routing_indexes = ROUTING_INDEXES
        self.queues = QUEUES
        self.figures = FIGURES
        self.usage = USAGE
        self.keys = KEYS
        self.waker = Waker()
        self.quotas = Quotas()  # its Redis client belongs to this event loop
        self.tasks: list[asyncio.Task[Any]] = []

    async def room_at_a_copy(self, call: Call, routes: list[Route]) -> None:
        """When every copy is full, wait in the deployment's queue, if it has one."""
        route = routes[0]
        if route.max_waiting and self.queues.full(routes, self.picker.in_flight):
            left = route.reply_wait_s - (time.monotonic() - call.started)
            wait_s = min(route.queue_wait_s or route.reply_wait_s, left)
            await self.queues.wait_for_room(route, call.caller, wait_s)

    def in_background(self, work: Callable[..., Any], *args: Any) -> None:
        """Blocking database work that nothing waits for (an Event), in the database threads."""
        loop = asyncio.get_running_loop()
        loop.run_in_executor(DATABASE_THREADS, in_thread, functools.partial(work, *args))

    def start(self) -> None:
        self.tasks = [
            asyncio.create_task(self.keep_table_fresh()),
            asyncio.create_task(self.flush_every_minute()),
            asyncio.create_task(self.flush_usage_every_second()),
            asyncio.create_task(self.follow_broadcasts()),
            asyncio.create_task(self.report_load()),
        ]

    async def handle(self, call: Call) -> Reply:
        try:
            table = await self.table()
            routes = table.resolve(call.model, call.caller)
            if routes is None:
                raise errors.unknown_model(call.model, table.on_offer(call.caller))
            if not any(route.upstreams for route in routes):
                routes = await self.waker.until_serving(self, call, routes)
            return await relay(self, call, routes)
        except GatewayError as error:
            return error_reply(error)

    async def models(self, caller: Caller) -> Reply:
        table = await self.table()
        data = [model_card(name, table, caller) for name in table.on_offer(caller)]
        return json_reply(200, json_bytes({"object": "list", "data": data}))

    async def wake(self, deployment_id: int, requested_by: str) -> None:
        """Ask for a copy of an idle deployment, and read the table again at once."""
        await run_blocking(functools.partial(waking.wake, deployment_id, requested_by))
        self.directory.refresh_soon()

    def client_for(self, upstream: Upstream) -> aiohttp.ClientSession:
        if not upstream.socket:
            return self.client
        if upstream.socket not in self.socket_clients:
            client = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(upstream.socket, limit=0, keepalive_timeout=30),
                auto_decompress=False,
            )
            self.socket_clients[upstream.socket] = (upstream.copy_id, client)
        return self.socket_clients[upstream.socket][1]

    async def close_unused_clients(self, table: Table) -> None:
        """The clients of sockets that no ready copy listens on any more, once the requests
        still running there (a copy stopping finishes them) are done."""
        in_use = {u.socket for route in table.routes.values() for u in route.upstreams}
        for path, (copy_id, client) in list(self.socket_clients.items()):
            if path not in in_use and not self.picker.in_flight.get(copy_id):
                del self.socket_clients[path]
                await client.close()

    async def table(self) -> Table:
        try:
            return await self.directory.current()
        except Exception as error:  # only before the first table: later ones keep the last
            log.exception("the gateway could not read the deployments")
            why = "The gateway cannot read the deployments just now. Try again shortly."
            raise GatewayError(503, why) from error

    # ---------------------------------------------------------------- in the background

    async def keep_table_fresh(self) -> None:
        while True:
            await asyncio.sleep(conf.refresh_s())
            with contextlib.suppress(Exception):
                await self.close_unused_clients(await self.directory.refresh())

    async def flush_every_minute(self) -> None:
        while True:
            await asyncio.sleep(conf.flush_s())
            with contextlib.suppress(Exception):
                await run_blocking(self.figures.flush)

    async def flush_usage_every_second(self) -> None:
        """The usage records of the last second, in one insert (none when nothing came)."""
        while True:
            await asyncio.sleep(conf.usage_flush_s())
            if self.usage.pending:
                with contextlib.suppress(Exception):
                    await run_blocking(self.usage.flush)

    async def report_load(self) -> None:
        """Tell the autoscaler and the drain (deployments/load.py) what this process has in
        flight, every load.REPORT_EVERY_S; they sum every gateway process's reports."""
        while True:
            requested = self.picker.take_requested()
            report = functools.partial(
                load.report_in_flight, dict(self.picker.in_flight), requested
            )
            try:
                await asyncio.get_running_loop().run_in_executor(LOAD_THREAD, report)
            except Exception:
                log.warning("gateway: could not report its load", exc_info=True)
                self.picker.requested_at = {**requested, **self.picker.requested_at}  # next time
            await asyncio.sleep(load.REPORT_EVERY_S)

    async def follow_broadcasts(self) -> None:
        """Deployments announce their state changes on the "deployments" group: re-read the
        table at once rather than at the next periodic read. A user's keys and roles changes are
        announced on the access group: forget what was cached of that user's keys."""
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is None:
            return
        while True:
            try:
                # The layer's default prefix, as the page consumers' channels have: channels_redis
                # pops every local channel of a process from one list per prefix under one lock,
                # so a channel with its own prefix would hold that lock while the consumers'
                # messages wait in the other list (the pages would stop updating).
                channel = await layer.new_channel()
                await layer.group_add("deployments", channel)
                await layer.group_add(live.ACCESS_GROUP, channel)
                while True:
                    message = await layer.receive(channel)
                    if message.get("kind") == "user":
                        self.keys.forget_user(int(message["id"]))
                    else:
                        self.directory.refresh_soon()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.debug("gateway: deployment broadcasts unavailable; polling only", exc_info=True)
                await asyncio.sleep(30)


def model_card(name: str, table: Table, caller: Caller) -> dict[str, Any]:
    """A chat name or a deployment, as OpenAI lists a model; owned by the team that hosts it."""
    route = (table.resolve(name, caller) or [])[0]
    return {"id": name, "object": "model", "created": route.created, "owned_by": route.team_name}


def json_bytes(value: Any) -> bytes:
    return json.dumps(value).encode()


GATEWAYS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Gateway] = (
    weakref.WeakKeyDictionary()
)


def current() -> Gateway:
    """This event loop's gateway, started on first use."""
    loop = asyncio.get_running_loop()
    gateway = GATEWAYS.get(loop)
    if gateway is None:
        gateway = GATEWAYS[loop] = Gateway()
        gateway.start()
    return gateway
