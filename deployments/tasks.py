"""Celery tasks: thin, carrying ids only, idempotent and acknowledged late.

The database row is the truth; a task that runs twice, or after a dead worker, finds the work
done (or claimed) and changes nothing. Retries are not Celery countdowns: a copy's
next_attempt_at is picked up by the reconciler.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from celery import shared_task

from console import heartbeats
from deployments import (
    actions,
    autoscaler,
    launching,
    lifecycle,
    machine_files,
    reconciler,
    webhook_delivery,
)


@shared_task(acks_late=True)
def place_deployment(deployment_id: int) -> None:
    lifecycle.place(deployment_id)


@shared_task(acks_late=True)
def prepare_copy(copy_id: int) -> None:
    launching.prepare(copy_id)


@shared_task(acks_late=True)
def sync_machine_files(machine_files_id: int, team_id: int | None = None) -> None:
    machine_files.run_sync(machine_files_id, team_id)


@shared_task(acks_late=True)
def launch_copy(copy_id: int) -> None:
    launching.launch(copy_id)


@shared_task(acks_late=True)
def stop_copy(copy_id: int) -> None:
    launching.stop(copy_id)


@shared_task(acks_late=True)
def refresh_deployment(deployment_id: int) -> None:
    lifecycle.refresh_state(deployment_id)


@shared_task(acks_late=True)
def converge_deployment(deployment_id: int) -> None:
    reconciler.converge(deployment_id)


@shared_task(acks_late=True)
def roll_back_failed_revision(deployment_id: int, failed_number: int) -> None:
    actions.roll_back_failed(deployment_id, failed_number)


@shared_task(acks_late=True)
def check_deployment(deployment_id: int) -> None:
    reconciler.check(deployment_id)


@shared_task(acks_late=True)
def reconcile() -> None:
    reconciler.reconcile_all()


# The passes recorded in console.heartbeats, which tests wait for instead of sleeping.
AUTOSCALE_PASS = "autoscale"
SWEEP_PASS = "sweep-strays"


def recorded_pass(name: str, work: Callable[[], int]) -> int:
    began = time.time()
    done = work()
    heartbeats.finished_pass(name, began)
    return done


@shared_task(acks_late=True)
def autoscale() -> int:
    return recorded_pass(AUTOSCALE_PASS, autoscaler.run)


@shared_task(acks_late=True)
def sweep_strays() -> int:
    return recorded_pass(SWEEP_PASS, reconciler.sweep_strays)


@shared_task(acks_late=True)
def prune_logs() -> int:
    from django.conf import settings

    from deployments import engine_figures, logs

    return logs.prune(settings.LOG_LINES_PER_COPY) + engine_figures.prune()


@shared_task(acks_late=True)
def deliver_notification(delivery_id: int) -> None:
    webhook_delivery.deliver(delivery_id)


@shared_task(acks_late=True)
def deliver_due_notifications() -> int:
    return webhook_delivery.deliver_due()
