"""The Celery app (Redis broker). Tasks carry ids only; the database row is the truth."""

import os
import time
from typing import Any

from celery import Celery, bootsteps
from celery.beat import PersistentScheduler
from celery.signals import task_postrun, task_prerun, worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
# Celery's Django fixup runs Django's system checks when a worker or beat starts, and they import
# every URL and view (1.4 s of a 3.8 s start). `make run` checks once, with migrate, before it
# starts them; `make test` runs `manage.py check`. Set it empty to have them run here too.
os.environ.setdefault("CELERY_SKIP_CHECKS", "1")

app = Celery("berth")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class WorkerHeartbeat(bootsteps.StartStopStep):
    """Writes the heartbeat of each queue this worker consumes (console/heartbeats.py), from the
    worker's own timer in its main process: the one that takes tasks off the queues."""

    requires = {"celery.worker.components:Timer"}

    def start(self, worker: Any) -> None:
        from django.conf import settings

        self.beat(worker)
        self.timer = worker.timer.call_repeatedly(
            settings.HEARTBEAT_EVERY_S, self.beat, (worker,), priority=10
        )

    def stop(self, worker: Any) -> None:
        if getattr(self, "timer", None) is not None:
            self.timer.cancel()

    def beat(self, worker: Any) -> None:
        from console import heartbeats

        parts = heartbeats.part_of_queue()
        for queue in worker.app.amqp.queues.consume_from:
            if queue in parts:
                heartbeats.write_quietly(parts[queue], queue)


app.steps["worker"].add(WorkerHeartbeat)


class HeartbeatScheduler(PersistentScheduler):
    """Beat's scheduler (CELERY_BEAT_SCHEDULER), writing beat's heartbeat from its own tick: the
    heartbeat says beat itself is alive, not that some worker ran a task."""

    last_heartbeat = 0.0

    def tick(self, *args: Any, **kwargs: Any) -> float:
        from django.conf import settings

        from console import heartbeats

        if time.monotonic() - self.last_heartbeat >= settings.HEARTBEAT_EVERY_S:
            heartbeats.write_quietly("beat")
            self.last_heartbeat = time.monotonic()
        # Wake up for the next heartbeat, also when no task is due before it.
        next_heartbeat = self.last_heartbeat + settings.HEARTBEAT_EVERY_S - time.monotonic()
        return max(0.0, min(float(super().tick(*args, **kwargs)), next_heartbeat))


@worker_init.connect
def refuse_demo_passwords_at_start(**kwargs: object) -> None:
    """Celery only logs what a signal's receiver raises: the worker must exit, saying why."""
    from django.core.exceptions import ImproperlyConfigured

    from console.demo_passwords import refuse_demo_passwords

    try:
        refuse_demo_passwords("worker")
    except ImproperlyConfigured as refused:
        raise SystemExit(f"ImproperlyConfigured: {refused}") from None


# When each task running in this process began (prerun and postrun run in the same process).
STARTED_AT: dict[str, float] = {}


@task_prerun.connect
def note_the_start(task_id: str = "", **kwargs: object) -> None:
    STARTED_AT[task_id] = time.monotonic()


@task_postrun.connect
def record_the_run_time(
    task_id: str = "", task: Any = None, state: str = "", **kwargs: object
) -> None:
    from console import task_figures

    began = STARTED_AT.pop(task_id, None)
    if began is not None and task is not None:
        task_figures.record(task.name, time.monotonic() - began, failed=state == "FAILURE")
