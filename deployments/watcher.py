"""The watcher: one process, one asyncio task per cluster, each under a Postgres advisory lock
(so two watchers never watch one cluster). It follows the backends' observations and logs,
writes them into rows, and wakes the rest. Blocking backend and database calls run in threads,
never on the event loop.

Engine processes of standalone and simulator clusters run in their own sessions, recorded by
pid and port: a restarted watcher re-adopts them, so restarting the console never stops a model.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from datetime import datetime, timedelta

import psycopg
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone
from psycopg.conninfo import make_conninfo

from clusters import ray_driver
from clusters.backends.base import (
    ENGINE_GONE,
    INFEASIBLE,
    RESTARTING,
    MetricSample,
    Observation,
)
from clusters.backends.logparse import last_telling_line, says_serving
from clusters.models import Cluster
from clusters.registry import backend_for
from console import heartbeats
from deployments import engine_figures, lifecycle, logs, revisions, transitions
from deployments.choices import COPY_ENGINE_STARTED, CopyState, ErrorCode, LogLevel, LogStream
from deployments.classify import Failure, classify
from deployments.launching import handle_for
from deployments.models import Copy

log = logging.getLogger(__name__)
ADVISORY_NAMESPACE = 7261  # "berth watcher"; the cluster id is the second key
# A copy claimed for launch but without a process after this long lost its worker.
LAUNCH_GRACE = timedelta(seconds=60)
# A cluster added while the watcher runs is watched within this long (one small query each).
NEW_CLUSTERS_EVERY_S = 1.0


def watched_copies(cluster_id: int) -> list[Copy]:
    related = ("deployment__cluster", "deployment__variant", "machine")
    return list(
        Copy.objects.filter(
            deployment__cluster_id=cluster_id, state__in=COPY_ENGINE_STARTED
        ).select_related(*related)
    )


class LogFollower:
    """Follows the engine logs of one cluster's copies, remembering how far each was read, so
    frequent passes cost a file read per copy and no query when nothing was printed."""

    def __init__(self) -> None:
        self.read_until: dict[int, datetime | None] = {}
        # Copies whose engine said it serves since the last look: looked at once, not at the
        # tick (only they: a hundred copies starting must not mean a hundred looks at all).
        self.heard_serving: set[int] = set()

    def follow(self, backend: object, copy: Copy) -> None:
        if copy.process_id is None and not copy.pod_name:
            return
        if copy.pk not in self.read_until:  # first look (or after a restart): ask the database
            self.read_until[copy.pk] = logs.last_engine_line_at(copy)
        records = backend.logs(handle_for(copy), self.read_until[copy.pk])  # type: ignore[attr-defined]
        if not records:
            return
        lines = [(copy, LogStream.ENGINE, r.level, r.at, r.text) for r in records]
        logs.write_lines(copy.deployment_id, lines)
        self.read_until[copy.pk] = records[-1].at
        if copy.state == CopyState.STARTING and any(says_serving(r.text) for r in records):
            self.heard_serving.add(copy.pk)

    def forget_others(self, copies: list[Copy]) -> None:
        watched = {copy.pk for copy in copies}
        for copy_id in [c for c in self.read_until if c not in watched]:
            del self.read_until[copy_id]


def failure_of(copy: Copy, seen: Observation) -> Failure:
    if seen.reason == INFEASIBLE:
        fix = "Stop a deployment to free room, or host it smaller."
        return Failure(ErrorCode.NO_FIT, True, seen.message, fix)
    lines = logs.recent_engine_lines(copy)
    if lifecycle.past_startup_deadline(copy) and classify(lines) is None:
        return lifecycle.startup_timed_out(copy)  # no line says why: it was stopped for lateness
    found = classify(lines, seen.exit_code)
    if found is None:
        words = seen.message or f"The engine stopped ({seen.reason or 'no reason given'})."
        found = Failure(ErrorCode.CONTAINER_EXITED, False, words)
    if copy.state == CopyState.READY:  # it served before, so the same start can work again
        found = Failure(found.code, False, found.line, found.fix)
    return found


def became_ready(copy: Copy) -> None:
    machine = copy.machine.name if copy.machine_id else "its machine"
    moved = transitions.move_copy_if_in(
        copy.pk,
        {CopyState.STARTING},
        CopyState.READY,
        message=f"Serves on {machine}.",
        pending_reason="",
    )
    if moved is None:
        return
    revisions.copy_served(moved)
    where = "its own socket" if copy.socket_path else f"port {copy.port}"
    logs.serving(copy, f"Copy {copy.ordinal} serves on {machine} ({where}).")
    lifecycle.refresh_state(copy.deployment_id)
    wake_neighbours(copy)


def wake_neighbours(copy: Copy) -> None:
    """Copies that waited for this one to finish starting on a shared GPU may start now."""
    waiting = Copy.objects.filter(
        deployment__cluster_id=copy.deployment.cluster_id, state=CopyState.COPYING_FILES
    ).exclude(pending_reason="")
    for neighbour in waiting:
        lifecycle.enqueue_now("launch_copy", neighbour.pk)


def stopped_running(copy: Copy, seen: Observation) -> None:
    if copy.state == CopyState.STOPPING:
        logs.serving(copy, f"Copy {copy.ordinal} stopped.")
        lifecycle.observed_stopped(copy)
        return
    if seen.status == "gone" and copy.process_id is None and not copy.pod_name:
        if copy.started_at and timezone.now() - copy.started_at < LAUNCH_GRACE:
            return  # its launch is still on its way
    failure = failure_of(copy, seen)
    logs.serving(
        copy, f"Copy {copy.ordinal} stopped: {failure.code}: {failure.line}", LogLevel.ERROR
    )
    lifecycle.fail_copy(copy, failure)


def restarted_by_platform(copy: Copy, seen: Observation) -> None:
    """A serving copy whose engine exited and that the platform starts again itself: it leaves
    the gateway (STARTING) until its engine answers, with the platform's words and the
    engine's last line; the usual path back to READY follows."""
    last = last_telling_line(logs.recent_engine_lines(copy, limit=50))
    words = f"{seen.message}. Its last line: {last}" if last else seen.message
    moved = transitions.move_copy_if_in(
        copy.pk,
        {CopyState.READY},
        CopyState.STARTING,
        message=words,
        pending_reason=words,
        startup_deadline=timezone.now() + lifecycle.startup_deadline(copy),
    )
    if moved is not None:
        logs.serving(copy, f"Copy {copy.ordinal} stopped serving: {words}", LogLevel.WARNING)
        lifecycle.refresh_state(copy.deployment_id)


# What a backend says of an engine that is not serving yet, and why.
SAID_WHILE_STARTING = frozenset({"unschedulable", "waiting"})


def apply(copy: Copy, seen: Observation) -> None:
    if seen.port and seen.port != copy.port and copy.state in COPY_ENGINE_STARTED:
        # Where it listens is known once it runs (a Ray copy's relay picks its port there).
        Copy.objects.filter(pk=copy.pk).update(port=seen.port)
        copy.port = seen.port
    if seen.status == "ready" and copy.state == CopyState.STARTING:
        became_ready(copy)
    elif seen.status in ENGINE_GONE:
        stopped_running(copy, seen)
    elif seen.reason == RESTARTING and copy.state == CopyState.READY:
        restarted_by_platform(copy, seen)
    elif seen.status in SAID_WHILE_STARTING and copy.state in COPY_ENGINE_STARTED:
        # Not placed by the platform yet, or being restarted by it: said on the copy.
        Copy.objects.filter(pk=copy.pk).update(pending_reason=seen.message or seen.reason)
    elif seen.status == "ready" and copy.pending_reason:
        Copy.objects.filter(pk=copy.pk).update(pending_reason="")


def follow_logs_once(cluster_id: int, follower: LogFollower) -> list[Copy]:
    """New engine lines of every watched copy of the cluster into LogLines."""
    close_old_connections()
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return []
    backend = backend_for(cluster)
    copies = watched_copies(cluster_id)
    follower.forget_others(copies)
    for copy in copies:
        follower.follow(backend, copy)
    return copies


def watch_once(
    cluster_id: int, follower: LogFollower | None = None, only: set[int] | None = None
) -> int:
    """One look at a cluster (or at the copies `only` names): read new log lines, then apply
    what the backend observes.

    Logs are read first, so a copy that just exited is classified with its last lines; a copy
    seen gone has them read once more, for an engine that printed why and exited in between."""
    follower = follower or LogFollower()
    copies = follow_logs_once(cluster_id, follower)
    if only is not None:
        copies = [copy for copy in copies if copy.pk in only]
    if not copies:
        return 0
    backend = backend_for(copies[0].deployment.cluster)
    observations = {o.copy_id: o for o in backend.observe([handle_for(c) for c in copies])}
    for copy in copies:
        if copy.pk in observations:
            if observations[copy.pk].status in ENGINE_GONE:
                follower.follow(backend, copy)
            apply(copy, observations[copy.pk])
    return len(copies)


def look_pass(cluster_id: int) -> str:
    """The name of the watcher's looks at a cluster, as console.heartbeats records them."""
    return f"watcher-look-{cluster_id}"


def look(cluster_id: int, follower: LogFollower) -> None:
    """watch_once, then the record that a look begun then has finished."""
    began = time.time()
    watch_once(cluster_id, follower)
    heartbeats.finished_pass(look_pass(cluster_id), began)


def scrape_once(cluster_id: int) -> None:
    """The engines' own figures (/metrics) of every serving copy, per deployment."""
    close_old_connections()
    serving = list(
        Copy.objects.filter(
            deployment__cluster_id=cluster_id, state=CopyState.READY
        ).select_related("deployment__cluster", "machine")
    )
    if not serving:
        return
    backend = backend_for(serving[0].deployment.cluster)
    by_deployment: dict[int, list[list[MetricSample]]] = {}
    for copy in serving:
        handle = replace(handle_for(copy), api_key=copy.engine_api_key())
        by_deployment.setdefault(copy.deployment_id, []).append(backend.metrics(handle))
    for deployment_id, samples in by_deployment.items():
        engine_figures.record(deployment_id, samples)


def database_dsn() -> str:
    s = connection.settings_dict
    return make_conninfo(
        host=s["HOST"], port=s["PORT"], dbname=s["NAME"], user=s["USER"], password=s["PASSWORD"]
    )


async def hold_lock(cluster_id: int) -> psycopg.AsyncConnection:
    """A dedicated connection holding the cluster's advisory lock for as long as it is open."""
    while True:
        lock_connection = await psycopg.AsyncConnection.connect(database_dsn(), autocommit=True)
        cursor = await lock_connection.execute(
            "SELECT pg_try_advisory_lock(%s, %s)", (ADVISORY_NAMESPACE, cluster_id)
        )
        row = await cursor.fetchone()
        if row and row[0]:
            return lock_connection
        await lock_connection.close()
        await asyncio.sleep(settings.WATCH_EVERY_S * 5)  # another watcher has it


async def watch_cluster(cluster_id: int, stop: asyncio.Event) -> None:
    lock_connection = await hold_lock(cluster_id)
    log.info("watching cluster %s", cluster_id)
    follower = LogFollower()
    next_look = next_scrape = 0.0
    driver = await asyncio.to_thread(ray_driver.start_if_ray, cluster_id)
    try:
        while not stop.is_set():
            if driver is not None and driver.poll() is not None:
                log.warning("the Ray driver of cluster %s ended; starting it again", cluster_id)
                driver = await asyncio.to_thread(ray_driver.start_if_ray, cluster_id)
            # Logs are followed often (lines should reach the pages fast); the backend is
            # asked about the copies' health less often (each look is a request per copy),
            # and at once when an engine says it serves (its copy is READY on the 200).
            looking = time.monotonic() >= next_look
            step = look if looking else follow_logs_once
            try:
                await asyncio.to_thread(step, cluster_id, follower)
                if follower.heard_serving and not looking:
                    serving, follower.heard_serving = follower.heard_serving, set()
                    await asyncio.to_thread(watch_once, cluster_id, follower, serving)
            except Exception:  # a bad pass must not end the watch; the next one retries
                log.exception("watching cluster %s", cluster_id)
            if looking:
                follower.heard_serving = set()
                next_look = time.monotonic() + settings.WATCH_EVERY_S
            if time.monotonic() >= next_scrape:
                next_scrape = time.monotonic() + settings.METRICS_EVERY_S
                try:
                    await asyncio.to_thread(scrape_once, cluster_id)
                except Exception:  # figures are an addition; a failed scrape is tried again
                    log.exception("scraping cluster %s", cluster_id)
            try:
                await asyncio.wait_for(stop.wait(), settings.LOG_FOLLOW_EVERY_S)
            except TimeoutError:
                pass
    finally:
        await asyncio.to_thread(ray_driver.stop, driver)
        await lock_connection.close()


def cluster_ids() -> list[int]:
    close_old_connections()
    return list(Cluster.objects.values_list("pk", flat=True))


async def watch_all(stop: asyncio.Event) -> None:
    """Watch every cluster, starting tasks for clusters added while running."""
    tasks: dict[int, asyncio.Task[None]] = {}
    beating = asyncio.create_task(heartbeats.keep_beating("watcher", stop))
    while not stop.is_set():
        for cluster_id in await asyncio.to_thread(cluster_ids):
            if cluster_id not in tasks or tasks[cluster_id].done():
                tasks[cluster_id] = asyncio.create_task(watch_cluster(cluster_id, stop))
        try:
            await asyncio.wait_for(stop.wait(), NEW_CLUSTERS_EVERY_S)
        except TimeoutError:
            pass
    await asyncio.gather(beating, *tasks.values(), return_exceptions=True)
