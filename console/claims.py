"""Work rows that a Celery task claims: one rule for every table that queues work this way
(a download to this server, a copy of model files to a machine).

A task claims its queued row with a compare-and-set update, so a task delivered twice works
once. A row in work saves its progress (and so its timestamp) as it goes: one whose timestamp
stopped moving for `stalled_after` lost its worker, and may be claimed or queued again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone


def claim(
    table: type[models.Model],
    pk: int,
    queued: str,
    working: str,
    stalled_after: timedelta,
    **changes: Any,
) -> bool:
    """queued → working (or a stalled row taken over), with `changes`; False if another has it."""
    now = timezone.now()
    free = Q(state=queued) | Q(state=working, updated_at__lt=now - stalled_after)
    rows = table._default_manager.filter(pk=pk).filter(free)
    return bool(rows.update(state=working, updated_at=now, **changes))


def requeue_stalled(
    table: type[models.Model], queued: str, working: str, stalled_after: timedelta
) -> list[int]:
    """Queue again the rows a dead worker left; their ids, to send their tasks again.

    The fresh timestamp means a row is sent at most once per period, however often this runs.
    """
    now = timezone.now()
    stalled = table._default_manager.filter(
        state__in=(queued, working), updated_at__lt=now - stalled_after
    )
    ids = list(stalled.values_list("pk", flat=True))
    table._default_manager.filter(pk__in=ids).update(state=queued, updated_at=now)
    return ids
