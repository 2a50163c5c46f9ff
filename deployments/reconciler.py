"""The reconciler: every few seconds (Celery beat), converge what is wanted with what runs.

It starts copies that wait for room (first come, first served), retries what is due, reaps
copies stuck past their deadline, gives back room held by copies that no longer run, and
re-dispatches work a dead worker left behind.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from clusters.backends.base import ENGINE_GONE, RunningEngine
from clusters.models import Cluster
from clusters.registry import backend_for, install_id
from deployments import launching, lifecycle, machine_files, moving, placing_pass
from deployments.choices import (
    COPY_HOLDS_NO_ROOM,
    COPY_MAY_HAVE_ENGINE,
    COPY_PLACED,
    COPY_WAITING,
    DEPLOYMENT_PLACEABLE,
    CopyState,
    DeploymentState,
    EventKind,
)
from deployments.models import Copy, Deployment, Event, Reservation
from placement.words import when

log = logging.getLogger(__name__)
# A copy claimed by a worker that shows no progress for this long is dispatched again.
ABANDONED_AFTER = timedelta(seconds=60)


def converge(deployment_id: int) -> None:
    """Bring one deployment toward what is wanted: more, fewer or new-size copies, retries."""
    deployment = Deployment.objects.filter(pk=deployment_id).first()
    if deployment is None or deployment.state not in DEPLOYMENT_PLACEABLE:
        if deployment is not None:
            lifecycle.finish_draining(deployment)  # a stop drains the copies that serve
            lifecycle.refresh_state(deployment.pk)
        return
    lifecycle.finish_draining(deployment)
    lifecycle.scale_down_extras(deployment)
    lifecycle.replace_old_generation(deployment)
    lifecycle.retry_due(deployment.pk)
    if needs_placing(deployment):
        lifecycle.place(deployment.pk)
    redispatch_abandoned(deployment)
    lifecycle.refresh_state(deployment.pk)


def redispatch_abandoned(deployment: Deployment) -> None:
    """Copies whose worker died mid-step, or that waited for a neighbour to start, go again."""
    quiet_since = timezone.now() - ABANDONED_AFTER
    # A copy whose files are still arriving is not abandoned, however long the copy takes.
    copying = deployment.copies.filter(state=CopyState.COPYING_FILES).exclude(
        machine_files.being_copied()
    )
    for copy in copying.filter(Q(state_changed_at__lt=quiet_since) | ~Q(pending_reason="")):
        lifecycle.enqueue("prepare_copy", copy.pk)
    for copy in deployment.copies.filter(
        state=CopyState.STOPPING, state_changed_at__lt=quiet_since
    ):
        lifecycle.enqueue("stop_copy", copy.pk)


def needs_placing(deployment: Deployment) -> bool:
    live = deployment.copies.filter(lifecycle.q_live_current_copies())
    return live.count() < deployment.copies_wanted or live.filter(state__in=COPY_WAITING).exists()


def reap_stuck() -> None:
    """Copies still starting past their deadline: stop them and say STARTUP_TIMEOUT. The copy
    keeps its room until its engine is seen gone: at once where the stop waits for it (local
    engines), else when the watcher sees the pod go (it fails the copy with the same words);
    until then each pass asks again (a Kubernetes delete is idempotent)."""
    stuck = Copy.objects.filter(state=CopyState.STARTING, startup_deadline__lt=timezone.now())
    for copy in stuck.select_related("deployment__cluster", "machine"):
        backend = backend_for(copy.deployment.cluster)
        handle = launching.handle_for(copy)
        try:
            backend.stop(handle)
            (seen,) = backend.observe([handle])
        except Exception:  # the stop is asked again on the next pass
            log.exception("stopping stuck copy %s", copy.pk)
            continue
        if seen.status in ENGINE_GONE:
            lifecycle.fail_copy(copy, lifecycle.startup_timed_out(copy))


def evacuate_lost_machines() -> None:
    """Copies on a machine that is no longer reported wait for room elsewhere."""
    lost = Copy.objects.filter(state__in=COPY_PLACED, machine__ready=False).select_related(
        "deployment__cluster", "machine"
    )
    for copy in lost:
        try:
            backend_for(copy.deployment.cluster).stop(launching.handle_for(copy))
        except Exception:  # the machine is gone; there may be nothing left to stop
            log.info("could not stop copy %s on lost machine %s", copy.pk, copy.machine)
        reason = f"Its machine {copy.machine.name} is no longer reported; placing it again."
        lifecycle.give_up_room(
            copy,
            COPY_PLACED,
            CopyState.PENDING,
            message=reason,
            pending_reason=reason,
            process_id=None,
        )


def release_orphaned_reservations() -> int:
    """Room held by copies that no longer run (stopped, or failed with no process)."""
    orphaned = Reservation.objects.filter(copy__state__in=COPY_HOLDS_NO_ROOM)
    deleted, _ = orphaned.delete()
    return deleted


def check(deployment_id: int) -> None:
    """Check now: converge at once and note when it was checked."""
    converge(deployment_id)
    Deployment.objects.filter(pk=deployment_id).update(last_checked_at=timezone.now())


def copy_counts_by_deployment(ids: list[int]) -> dict[int, list[tuple[str, int, int]]]:
    """(state, generation, how many) of the copies of each deployment, in one query."""
    rows = (
        Copy.objects.filter(deployment_id__in=ids)
        .values_list("deployment_id", "state", "generation")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts: dict[int, list[tuple[str, int, int]]] = {}
    for deployment_id, state, generation, n in rows:
        counts.setdefault(deployment_id, []).append((state, generation, n))
    return counts


def is_settled(deployment: Deployment, copies: list[tuple[str, int, int]]) -> bool:
    """Every wanted copy of the current size serves and nothing else runs: nothing to do."""
    if deployment.state != DeploymentState.DEPLOYED:
        return False
    running = [
        (state, generation, n) for state, generation, n in copies if state != CopyState.STOPPED
    ]
    ready = sum(
        n
        for state, generation, n in running
        if state == CopyState.READY and generation == deployment.generation
    )
    return ready == deployment.copies_wanted and sum(n for _, _, n in running) == ready


def reconcile_all() -> None:
    reap_stuck()
    moving.advance_all()
    evacuate_lost_machines()
    release_orphaned_reservations()
    redispatch_stalled_downloads()
    machine_files.redispatch_stalled()
    active = list(
        Deployment.objects.filter(lifecycle.q_active_deployments())
        .order_by("created_at", "pk")
        .only("pk", "state", "generation", "copies_wanted", "cluster_id")
    )
    counts = copy_counts_by_deployment([d.pk for d in active])
    unsettled = [d for d in active if not is_settled(d, counts.get(d.pk, []))]
    try:
        placed = placing_pass.place_batches(unsettled, counts)
    except Exception:  # the one-by-one way below still converges every deployment
        log.exception("placing this pass's new copies together")
        placed = set()
    for deployment in unsettled:  # oldest first: first come, first served for freed room
        if deployment.pk in placed:
            continue
        try:
            converge(deployment.pk)
        except Exception:  # one broken deployment must not stop the others converging
            log.exception("converging deployment %s", deployment.pk)


def redispatch_stalled_downloads() -> None:
    from catalog.downloads import redispatch_stalled

    redispatch_stalled()


def sweep_strays(now: datetime | None = None) -> int:
    """Stop the engines this install started that no copy owns (its row deleted, or moved to a
    state without an engine), once they have run past the grace period; say so in an Event.
    Engines without this install's id (another console's, or older ones) are never touched."""
    now = now or timezone.now()
    ours = install_id()
    stopped = 0
    for cluster in Cluster.objects.order_by("pk"):
        try:
            running = backend_for(cluster).running_engines(ours)
        except Exception:  # an unreachable cluster is looked at again on the next sweep
            log.warning("cannot list the engines of cluster %s", cluster.name, exc_info=True)
            continue
        for engine in strays(running, now - timedelta(seconds=settings.SWEEP_GRACE_S)):
            stopped += stop_stray(cluster, engine)
    return stopped


def strays(running: list[RunningEngine], started_before: datetime) -> list[RunningEngine]:
    # Not filtered by cluster: two clusters may name one Kubernetes namespace.
    owned = set(
        Copy.objects.filter(
            pk__in=[engine.handle.copy_id for engine in running],
            state__in=COPY_MAY_HAVE_ENGINE,
        ).values_list("pk", flat=True)
    )
    return [
        engine
        for engine in running
        if engine.handle.copy_id not in owned and engine.started_at < started_before
    ]


def stop_stray(cluster: Cluster, engine: RunningEngine) -> int:
    try:
        backend_for(cluster).stop(engine.handle)
    except Exception:
        log.warning("cannot stop stray engine of copy %s", engine.handle.copy_id, exc_info=True)
        return 0
    copy = Copy.objects.filter(pk=engine.handle.copy_id).select_related("deployment").first()
    name = copy.deployment.name if copy else engine.deployment_name or "(deleted)"
    where = f", machine {engine.handle.machine}" if engine.handle.machine else ""
    Event.objects.create(
        deployment=copy.deployment if copy else None,
        deployment_name=name,
        copy=copy,
        kind=EventKind.SYSTEM,
        message=(
            f"Stopped an engine that no copy owns (copy {engine.handle.copy_id} of {name}, "
            f"cluster {cluster.name}{where}, running since "
            f"{when(engine.started_at)}). Its copy is gone or no longer runs, "
            "so the memory it used was not counted for placement."
        ),
    )
    log.info("stopped stray engine of copy %s on cluster %s", engine.handle.copy_id, cluster)
    return 1
