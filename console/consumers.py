"""WebSocket consumers: thin, and permission-checked with the same helper as the views."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from console.access import can_view_group


class LiveConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """Joins one live group (e.g. deployment-7) and forwards what changed to the page."""

    group: str = ""

    async def connect(self) -> None:
        user = self.scope.get("user")
        group = self.scope["url_route"]["kwargs"]["group"]
        if user is None or not await database_sync_to_async(can_view_group)(user, group):
            await self.close(code=4403)
            return
        self.group = group
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def live_changed(self, message: dict[str, Any]) -> None:
        await self.send_json({"kind": message["kind"], "id": message["id"], "seq": message["seq"]})
