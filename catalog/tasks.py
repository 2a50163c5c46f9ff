"""Celery tasks of the catalog: thin, carrying ids only, idempotent and acknowledged late.

The ServerModel row is the truth: a task delivered twice (or after a dead worker) finds the
row claimed or done and changes nothing (see catalog/downloads.py).
"""

from __future__ import annotations

from celery import shared_task

from catalog import downloads


@shared_task(acks_late=True)
def download_model(server_model_id: int) -> None:
    downloads.run(server_model_id)
