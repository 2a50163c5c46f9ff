"""Lists page after page: the API answers {"items": […], "next_cursor": …}; these iterate over
every item, asking for the next page only when the one before is used up."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import TypeVar

from berth_sdk import _calls as calls
from berth_sdk._http import AsyncTransport, Request, Transport
from berth_sdk.results import Json

T = TypeVar("T")


def pages(transport: Transport, request: Request, parse: Callable[[Json], T]) -> Iterator[T]:
    while True:
        data = transport.send(request)
        yield from (parse(item) for item in data["items"])
        if not data.get("next_cursor"):
            return
        request = calls.with_cursor(request, data["next_cursor"])


async def async_pages(
    transport: AsyncTransport, request: Request, parse: Callable[[Json], T]
) -> AsyncIterator[T]:
    while True:
        data = await transport.send(request)
        for item in data["items"]:
            yield parse(item)
        if not data.get("next_cursor"):
            return
        request = calls.with_cursor(request, data["next_cursor"])
