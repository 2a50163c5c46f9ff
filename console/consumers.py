"""WebSocket consumers: thin, permission-checked with the same helper as the views.

A broadcast says only what changed (kind, id, seq). Each consumer renders the partial for its
own user, with the same template files the page includes, so a viewer never receives an
operator's buttons, forms carry the user's own CSRF token and times are in the user's own
zone. htmx's ws extension swaps the HTML it receives into the page by element id (hx-swap-oob).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, tzinfo
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from console import live, time_zones
from deployments.access import visible_deployments


def csrf_token_from(scope: dict[str, Any]) -> str:
    """A masked CSRF token for the user's own cookie secret (as a page render would give)."""
    from django.middleware.csrf import _mask_cipher_secret  # type: ignore[attr-defined]

    secret = scope.get("cookies", {}).get("csrftoken", "")
    return _mask_cipher_secret(secret) if len(secret) == 32 else ""


def still_may_view(user_id: int, group: str) -> Any:
    """The user as the database has it now (after a change of its roles), if it may still
    view the group; else None."""
    user = get_user_model().objects.filter(pk=user_id).first()
    return user if user is not None and can_view_group(user, group) else None


def can_view_group(user: Any, group: str) -> bool:
    """Whether a WebSocket may join a live group (same rules as the pages)."""
    if not (user.is_authenticated and user.is_active):
        return False
    if group in ("deployments", live.MODELS_GROUP, live.FLEET_GROUP):
        return True
    kind, _, rest = group.partition("-")
    ident = rest.removesuffix("-logs")
    if not ident.isdigit():
        return False
    if kind == "deployment":
        return visible_deployments(user).filter(pk=int(ident)).exists()
    return kind in {"cluster", "model"}


class LiveConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    """Joins one live group (deployments, deployment-7, deployment-7-logs) and sends HTML."""

    group: str = ""
    last_seq: int = 0
    zone: tzinfo = UTC
    # Open sockets per user in this process: a user's tabs are many, a flood of sockets is not.
    open_by_user: Counter[int] = Counter()

    async def connect(self) -> None:
        user = self.scope.get("user")
        group = self.scope["url_route"]["kwargs"]["group"]
        if user is None or not await database_sync_to_async(can_view_group)(user, group):
            await self.close(code=4403)
            return
        if self.open_by_user[user.pk] >= settings.SOCKETS_PER_USER:
            await self.close(code=4429)  # too many: the page polls instead
            return
        self.open_by_user[user.pk] += 1
        self.group = group
        browser_zone = self.scope.get("cookies", {}).get(time_zones.BROWSER_ZONE_COOKIE)
        self.zone = await database_sync_to_async(time_zones.zone_for)(user, browser_zone)
        # The user's own group first: a change of its access is heard before anything else.
        await self.channel_layer.group_add(live.user_group(user.pk), self.channel_name)
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_catch_up()
        if group.endswith("-logs"):
            # The page says the last seq it has; it gets everything after, once, in order.
            from console import live_render

            query = self.scope.get("query_string", b"").decode()
            after = query.removeprefix("after=") if query.startswith("after=") else "0"
            asked = int(after) if after.isdigit() else 0
            deployment_id = int(group.split("-")[1])
            self.last_seq = await self.rendered(
                live_render.log_replay_start, user, deployment_id, asked
            )
            await self.send_new_lines()

    async def rendered(self, render: Callable[..., Any], *args: Any) -> Any:
        """Renders in a worker thread, with times in this socket's user's zone (each socket
        renders for its own user, so viewers in different zones each get their own)."""

        def in_zone() -> Any:
            with timezone.override(self.zone):
                return render(*args)

        return await database_sync_to_async(in_zone)()

    async def send_catch_up(self) -> None:
        from console import live_render

        html = await self.rendered(
            live_render.catch_up, self.scope["user"], self.group, csrf_token_from(self.scope)
        )
        if html:
            await self.send(text_data=html)

    async def disconnect(self, code: int) -> None:
        if self.group:
            user_id = self.scope["user"].pk
            self.open_by_user[user_id] -= 1
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.channel_layer.group_discard(live.user_group(user_id), self.channel_name)

    async def live_changed(self, message: dict[str, Any]) -> None:
        from console import live_render

        if message["kind"] in ("user", "logout"):
            await self.check_access_again(message["kind"])
            return
        if not self.group:
            return  # closed for its user's access: nothing more reaches it
        if self.group.endswith("-logs"):
            await self.send_new_lines()
            return
        query = self.scope.get("query_string", b"").decode()
        html = await self.rendered(
            live_render.render,
            self.scope["user"],
            self.group,
            message,
            csrf_token_from(self.scope),
            query,
        )
        if html:
            await self.send(text_data=html)

    async def check_access_again(self, why: str) -> None:
        """The user logged out (every socket of the user closes: the browser that still has a
        session reconnects), or its roles changed: close unless it may still see the group."""
        if why == "user":
            user = await database_sync_to_async(still_may_view)(self.scope["user"].pk, self.group)
            if user is not None:
                self.scope["user"] = user  # what it is sent from now on is for its new roles
                return
        await self.disconnect(4403)
        self.group = ""
        await self.close(code=4403 if why == "user" else 4401)

    async def send_new_lines(self) -> None:
        """Lines after the last one sent. Seqs are taken under the deployment's row lock and
        committed in order, so reading after the last seq never skips a line. The read is
        shared with this process's other viewers of the log (console/live_logs.py)."""
        from console import live_logs

        deployment_id = int(self.group.split("-")[1])
        while True:
            batch = await live_logs.fanout().after(deployment_id, self.last_seq, self.zone)
            if batch.count:
                self.last_seq = batch.last_seq
                await self.send(text_data=batch.html)
            if not batch.is_full:
                return
