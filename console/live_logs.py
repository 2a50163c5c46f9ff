"""New log lines for every viewer of a deployment's log in this process, read once.

Twenty people watching one log used to mean twenty reads of the same new lines and twenty
renders of the same rows for each line the engine printed. Now the first viewer to hear of new
lines reads them; the others that ask for the same lines while that read runs, or after it, get
its result, rendered once per time zone: the only thing that makes one viewer's rows differ
from another's. Whether a viewer may see the log at all is decided when its socket opens and
again whenever its user's access changes (consumers.py), not per batch of lines.

A batch holds the lines after a seq as they stood when read. Lines committed later are not in
it, so a shorter batch is still correct, and the write that committed them broadcasts again.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from datetime import tzinfo

from channels.db import database_sync_to_async
from django.template.loader import render_to_string
from django.utils import timezone

from deployments.log_search import lines_after

MAX_LINES_PER_MESSAGE = 500
# Batches kept for viewers that ask a moment later (each is a few hundred rows of HTML).
BATCHES_KEPT = 64

BatchKey = tuple[int, int, str]


class Batch:
    """Rows to append after a seq, as HTML, with the last seq among them (0: none)."""

    def __init__(self, html: str, last_seq: int, count: int) -> None:
        self.html, self.last_seq, self.count = html, last_seq, count

    @property
    def is_full(self) -> bool:
        """More lines may follow at once: the reader asks again without waiting."""
        return self.count >= MAX_LINES_PER_MESSAGE


def zone_name(zone: tzinfo) -> str:
    return getattr(zone, "key", None) or str(zone)


def rows_after(deployment_id: int, after: int, zone: tzinfo) -> Batch:
    lines = lines_after(deployment_id, after, MAX_LINES_PER_MESSAGE)
    if not lines:
        return Batch("", after, 0)
    with timezone.override(zone):
        html = render_to_string("deployments/_log_lines.html", {"lines": lines, "oob": True})
    return Batch(html, lines[-1].seq, len(lines))


class LogFanout:
    """Shares reads of new lines between the viewers of one process (one per event loop)."""

    def __init__(self) -> None:
        self.batches: OrderedDict[BatchKey, asyncio.Future[Batch]] = OrderedDict()

    async def after(self, deployment_id: int, after: int, zone: tzinfo) -> Batch:
        key = (deployment_id, after, zone_name(zone))
        pending = self.batches.get(key)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self.batches[key] = pending
            self.read(key, pending, zone)
        return await asyncio.shield(pending)

    def read(self, key: BatchKey, pending: asyncio.Future[Batch], zone: tzinfo) -> None:
        async def reading() -> None:
            try:
                batch = await database_sync_to_async(rows_after)(key[0], key[1], zone)
            except Exception as error:  # each waiting viewer hears it; the next ask reads again
                self.batches.pop(key, None)
                pending.set_exception(error)
                return
            if not batch.count:
                # Nothing new yet: not kept, so the next ask (after the next write) reads again.
                self.batches.pop(key, None)
            pending.set_result(batch)
            while len(self.batches) > BATCHES_KEPT:
                self.batches.popitem(last=False)

        asyncio.ensure_future(reading())


fanout_by_loop: dict[int, LogFanout] = {}


def fanout() -> LogFanout:
    """This event loop's fan-out (a process has one loop; tests may start others)."""
    loop_id = id(asyncio.get_running_loop())
    if loop_id not in fanout_by_loop:
        fanout_by_loop.clear()  # a loop that ended took its viewers with it
        fanout_by_loop[loop_id] = LogFanout()
    return fanout_by_loop[loop_id]
