"""Beat's tasks for the gateway's usage records (gateway/usage.py)."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True)
def roll_up_usage() -> int:
    from gateway import usage

    return usage.roll_up()


@shared_task(acks_late=True)
def prune_usage() -> int:
    from gateway import usage

    return usage.prune()
