"""Work rows that a Celery task claims: one rule for every table that queues work this way
(a download to this server, a copy of model files to a machine).

A task claims its queued row with a compare-and-set update, so a task delivered twice works
once. A row in work saves its progress (and so its timestamp) as it goes, at least once a
minute: one whose timestamp stopped moving for STALLED_AFTER lost its worker, and may be claimed
or queued again. Every table and every question about such a row (is it being worked on? may
it be taken over?) uses this one window.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone

# Twice the longest gap between progress saves (a Kubernetes fill saves at every poll).
STALLED_AFTER = timedelta(minutes=2)


def in_work(working: str) -> Q:
    """Rows a live worker has now: in the working state, saved within STALLED_AFTER."""
    return Q(state=working, updated_at__gte=timezone.now() - STALLED_AFTER)


def claim(
    table: type[models.Model],
    pk: int,
    queued: str,
    working: str,
    **changes: Any,
) -> bool:
    """queued → working (or a stalled row taken over), with `changes`; False if another has it."""
    now = timezone.now()
    free = Q(state=queued) | Q(state=working, updated_at__lt=now - STALLED_AFTER)
    rows = table._default_manager.filter(pk=pk).filter(free)
    return bool(rows.update(state=working, updated_at=now, **changes))


def requeue_stalled(table: type[models.Model], queued: str, working: str) -> list[int]:
    """Queue again the rows a dead worker left; their ids, to send their tasks again.

    The fresh timestamp means a row is sent at most once per period, however often this runs.
    """
    now = timezone.now()
    stalled = table._default_manager.filter(
        state__in=(queued, working), updated_at__lt=now - STALLED_AFTER
    )
    ids = list(stalled.values_list("pk", flat=True))
    table._default_manager.filter(pk__in=ids).update(state=queued, updated_at=now)
    return ids
