"""How a deployment's copies go from placed to serving, and how its state follows them.

Every function here is idempotent and takes ids: Celery tasks, the reconciler and the watcher
call them, and running one twice (or after a dead worker) changes nothing more. States change
only through transitions.py; this module decides which change is due.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from catalog.models import ServerModel, ServerModelState
from clusters.models import Cluster
from console import live
from deployments import autoscaling, load, repacking, revisions, transitions
from deployments.choices import (
    COPY_PLACED,
    COPY_STOPPING_OR_STOPPED,
    COPY_WAITING,
    DEPLOYMENT_GAVE_UP,
    DEPLOYMENT_PLACEABLE,
    DEPLOYMENT_SERVING,
    CopyState,
    DeploymentState,
    ErrorCode,
    EventKind,
)
from deployments.classify import Failure
from deployments.models import Copy, Deployment, Event, Reservation
from deployments.placing import (
    first_reason,
    fit_check,
    placed_words,
    release,
    request_for,
    reserve,
)
from placement import GIB, PlanResult
from placement.words import gib, percent, plural

log = logging.getLogger(__name__)


def enqueue(task_name: str, *ids: int) -> None:
    """Send a task once the current transaction commits (tasks carry ids only)."""
    from deployments import tasks

    task = getattr(tasks, task_name)
    transaction.on_commit(lambda: task.delay(*ids))


def enqueue_now(task_name: str, *ids: int) -> None:
    """Send a task at once (outside any transaction)."""
    from deployments import tasks

    getattr(tasks, task_name).delay(*ids)


# --- placing -----------------------------------------------------------------------------


def q_live_current_copies() -> Q:
    """Copies of their deployment's current generation (its size now) that are not leaving:
    what counts toward the copies it wants (one rule for one deployment or many at once)."""
    return Q(generation=F("deployment__generation")) & ~Q(state__in=COPY_STOPPING_OR_STOPPED)


def ensure_copies(deployment: Deployment) -> None:
    """Create Copy rows of the current generation up to the number wanted."""
    current = deployment.copies.filter(q_live_current_copies())
    missing = deployment.copies_wanted - current.count()
    if missing <= 0:
        return
    highest = deployment.copies.order_by("-ordinal").values_list("ordinal", flat=True).first()
    start = 0 if highest is None else highest + 1
    for ordinal in range(start, start + missing):
        Copy.objects.create(
            deployment=deployment, ordinal=ordinal, generation=deployment.generation
        )


def copies_without_room(deployment: Deployment) -> list[Copy]:
    waiting = deployment.copies.filter(state__in=COPY_WAITING, generation=deployment.generation)
    return list(waiting.annotate(held=Count("reservations")).filter(held=0).order_by("ordinal"))


def who_holds_the_room(cluster: Cluster, besides: Deployment) -> str:
    """'llama-70b holds 4 copies (318.60 GiB)', for a NoFit message; another team's deployment
    is named only as "another team" (teams do not see each other's deployments)."""
    rows = (
        Reservation.objects.filter(machine__cluster=cluster)
        .exclude(copy__deployment=besides)
        .values("copy__deployment__name", "copy__deployment__team_id")
        .annotate(copies=Count("copy", distinct=True), held=Sum("reserved_bytes"))
        .order_by("-held")[:3]
    )
    parts = [
        f"{holder_name(r['copy__deployment__name'], r['copy__deployment__team_id'], besides)} "
        f"holds {plural(r['copies'], 'copy', 'copies')} ({gib(r['held'])})"
        for r in rows
    ]
    return "; ".join(parts)


def holder_name(name: str, team_id: int, asking: Deployment) -> str:
    return name if team_id == asking.team_id else "another team"


def files_on_this_server(deployment: Deployment) -> ServerModel | None:
    """The variant's files kept on this server (ready to copy to the machines), if any."""
    ready = ServerModel.objects.filter(
        variant_id=deployment.variant_id, state=ServerModelState.READY
    ).order_by("pk")
    return next(
        (f for f in ready if kept_files_match(deployment, f.revision, f.requested_revision)),
        None,
    )


def kept_files_match(deployment: Deployment, revision: str, requested_revision: str) -> bool:
    """Whether files kept at this revision (asked for as requested_revision) are the ones the
    deployment runs: any revision where it names none."""
    return not deployment.revision or deployment.revision in (revision, requested_revision)


def download_progress(deployment: Deployment) -> str:
    files = (
        ServerModel.objects.filter(variant_id=deployment.variant_id)
        .exclude(state=ServerModelState.READY)
        .first()
    )
    if files is None:
        return "The model is not on this server yet; it is queued for download."
    if files.state == ServerModelState.DOWNLOADING and files.size_bytes:
        done = percent(files.progress_bytes, of=files.size_bytes)
        return (
            f"Waiting for the model to download: {done} "
            f"({gib(files.progress_bytes)} of {gib(files.size_bytes)})."
        )
    return f"Waiting for the model to download ({files.get_state_display().lower()})."


def place(deployment_id: int) -> None:
    """Give room to the copies that wait for it; start those that got it."""
    waiting_for_files = Deployment.objects.filter(
        pk=deployment_id, state=DeploymentState.REQUESTED
    ).first()
    if waiting_for_files is not None and files_on_this_server(waiting_for_files) is None:
        transitions.set_last_message(deployment_id, download_progress(waiting_for_files))
        return
    with transaction.atomic():
        deployment = Deployment.objects.select_related("cluster", "model", "variant").get(
            pk=deployment_id
        )
        Cluster.objects.select_for_update().get(pk=deployment.cluster_id)  # cluster lock first
        deployment = Deployment.objects.select_for_update().get(pk=deployment_id)
        if deployment.state not in DEPLOYMENT_PLACEABLE:
            return
        ensure_copies(deployment)
        waiting = copies_without_room(deployment)
        if not waiting:
            return
        result = reserve(deployment, waiting)
        record_notices(deployment, result.notices)
        for copy, placed in zip(waiting, result.placed, strict=False):
            transitions.move_copy(copy.pk, CopyState.COPYING_FILES, message=placed_words(placed))
            enqueue("prepare_copy", copy.pk)
        unplaced = waiting[len(result.placed) :]
        making_room = room_being_made(deployment, unplaced, result) if unplaced else ""
        for copy, reason in zip(unplaced, result.not_placed, strict=False):
            wait_for_room(copy, making_room or reason.message)
        if not result.placed and is_fresh(deployment) and not making_room:
            fail_no_fit(deployment, unplaced, first_reason(result))
            return
    refresh_state(deployment_id)


def room_being_made(deployment: Deployment, unplaced: list[Copy], result: PlanResult) -> str:
    """Why the copies wait where other copies move to make room for them, or moving them was
    tried lately and rolled back: such copies wait rather than fail ("" where neither)."""
    reason = first_reason(result)
    words = repacking.make_room(deployment, unplaced, reason)
    return "" if words == reason else words


def is_fresh(deployment: Deployment) -> bool:
    """True while none of its copies holds room or serves: Host fails fast on a NoFit then."""
    holding = deployment.copies.filter(state__in=COPY_PLACED)
    return deployment.state == DeploymentState.REQUESTED and not holding.exists()


def wait_for_room(copy: Copy, reason: str) -> None:
    if copy.state == CopyState.PENDING:
        Copy.objects.filter(pk=copy.pk).update(pending_reason=reason)
    else:
        transitions.move_copy(copy.pk, CopyState.PENDING, message=reason, pending_reason=reason)


def fail_no_fit(deployment: Deployment, copies: list[Copy], reason: str) -> None:
    holders = who_holds_the_room(deployment.cluster, deployment)
    message = reason + (f" Room is held by: {holders}." if holders else "")
    for copy in copies:
        transitions.move_copy_if_in(
            copy.pk,
            COPY_WAITING,
            CopyState.FAILED,
            message=message,
            last_error_code=ErrorCode.NO_FIT,
        )
    transitions.move_deployment(
        deployment.pk,
        DeploymentState.FAILED,
        message=f"Does not fit: {message}",
        last_error_code=ErrorCode.NO_FIT,
        last_error_message=message,
        last_error_at=timezone.now(),
    )


def never_fits(deployment: Deployment) -> str:
    """Why not one copy could fit even on the empty cluster ("" when one could). Host fails at
    once then, before a file is fetched or a copy made (DESIGN §4: placement fails fast)."""
    if not deployment.copies_wanted:
        return ""
    try:
        result = fit_check(deployment.cluster, request_for(deployment, 1))
    except ValueError as error:  # facts placement refuses, e.g. heads not divisible
        return str(error)
    if result.fit_empty:
        return ""
    return first_reason(result, "No copy fits this cluster.")


def fail_at_once(deployment: Deployment, reason: str) -> None:
    transitions.move_deployment(
        deployment.pk,
        DeploymentState.FAILED,
        message=f"Does not fit, even on the empty cluster: {reason}",
        last_error_code=ErrorCode.NO_FIT,
        last_error_message=reason,
        last_error_at=timezone.now(),
    )


PLACEMENT_NOTICES = {"SharingNotConfigured"}


def record_notices(deployment: Deployment, notices: tuple[str, ...]) -> None:
    """Placement's notices, as this pass found them; notices of other origins are kept."""
    others = set(deployment.notices) - PLACEMENT_NOTICES
    wanted = sorted((set(notices) & PLACEMENT_NOTICES) | others)
    if wanted != sorted(deployment.notices):
        Deployment.objects.filter(pk=deployment.pk).update(notices=wanted)


def model_files_changed(server_model_id: int) -> None:
    """A download moved on: deployments that wait for it go on, fail, or say how far it got."""
    files = ServerModel.objects.filter(pk=server_model_id).first()
    if files is None:
        return
    waiting = Deployment.objects.filter(variant_id=files.variant_id)
    if files.state == ServerModelState.READY:
        for deployment in waiting.filter(state__in=DEPLOYMENT_GAVE_UP).filter(
            last_error_code__in=[ErrorCode.DOWNLOAD_FAILED, ErrorCode.MUST_REDOWNLOAD]
        ):
            start_over(deployment, "The model's files are on this server now; starting.")
        for deployment in waiting.filter(state=DeploymentState.REQUESTED):
            enqueue("place_deployment", deployment.pk)
    elif files.state == ServerModelState.FAILED:
        for deployment in waiting.filter(state=DeploymentState.REQUESTED):
            transitions.move_deployment(
                deployment.pk,
                DeploymentState.FAILED,
                message=f"The download failed: {files.error}",
                last_error_code=ErrorCode.DOWNLOAD_FAILED,
                last_error_message=files.error,
                last_error_at=timezone.now(),
            )
    else:
        for deployment in waiting.filter(state=DeploymentState.REQUESTED):
            transitions.set_last_message(deployment.pk, download_progress(deployment))


def start_over(deployment: Deployment, message: str, actor: object = None) -> None:
    """Failed copies are tried again and the deployment is placed from the start."""
    for copy in deployment.copies.filter(state=CopyState.FAILED):
        transitions.move_copy_if_in(
            copy.pk, {CopyState.FAILED}, CopyState.REQUESTED, message=message, next_attempt_at=None
        )
    transitions.move_deployment(
        deployment.pk, DeploymentState.REQUESTED, message=message, actor=actor
    )
    enqueue("place_deployment", deployment.pk)


# --- failures and retries ---------------------------------------------------------------


def give_up_room(copy: Copy, expected: set[str], to: str, **fields: object) -> Copy | None:
    """Move a copy to a state that holds no room, releasing that room in the same commit."""
    with transaction.atomic():
        moved = transitions.move_copy_if_in(copy.pk, expected, to, **fields)
        if moved is not None:
            release(copy)
    return moved


def backoff(attempts: int) -> timedelta:
    """Exponential, capped: 5 s, 10 s, 20 s … at most BERTH_RETRY_MAX_S."""
    base = settings.RETRY_BASE_S * 2 ** max(0, attempts - 1)
    return timedelta(seconds=min(base, settings.RETRY_MAX_S))


def fail_copy(copy: Copy, failure: Failure) -> None:
    """A copy's engine stopped with a failure: retry later if it can pass, else not again."""
    now = timezone.now()
    retry_at = None if failure.permanent else now + backoff(copy.attempts)
    moved = give_up_room(
        copy,
        COPY_PLACED,
        CopyState.FAILED,
        message=f"{failure.code}: {failure.line}",
        last_error_code=failure.code,
        last_error_message=failure.line,
        last_error_at=now,
        next_attempt_at=retry_at,
        process_id=None,
    )
    if moved is None:
        return
    failed_revision = revisions.copy_failed(moved, failure.permanent, failure.line)
    if failed_revision is not None:
        enqueue("roll_back_failed_revision", copy.deployment_id, failed_revision)
    if failure.permanent:
        Deployment.objects.filter(pk=copy.deployment_id).update(
            last_error_code=failure.code,
            last_error_message=failure.line + (f" — {failure.fix}" if failure.fix else ""),
            last_error_at=now,
        )
    else:
        Deployment.objects.filter(pk=copy.deployment_id).update(
            last_error_code=failure.code, last_error_message=failure.line, last_error_at=now
        )
    refresh_state(copy.deployment_id)


def retry_due(deployment_id: int) -> None:
    """Copies whose next attempt is due wait for room again (placement runs next)."""
    due = Copy.objects.filter(
        deployment_id=deployment_id, state=CopyState.FAILED, next_attempt_at__lte=timezone.now()
    ).exclude(repacking.q_new_copy_of_a_move())
    for copy in due:
        transitions.move_copy_if_in(
            copy.pk,
            {CopyState.FAILED},
            CopyState.REQUESTED,
            message="Trying again.",
            next_attempt_at=None,
        )


# --- the deployment's state follows its copies ----------------------------------------


def copy_counts(deployment: Deployment) -> dict[str, int]:
    return copy_counts_of([deployment.pk])[deployment.pk]


def copy_counts_of(deployment_ids: list[int]) -> dict[int, dict[str, int]]:
    """Copies per state of each deployment, and those failed for good, in one query."""
    for_good = Q(state=CopyState.FAILED, next_attempt_at__isnull=True)
    rows = (
        Copy.objects.filter(deployment_id__in=deployment_ids)
        .values("deployment_id", "state")
        .annotate(n=Count("id"), for_good=Count("id", filter=for_good))
        .order_by()
    )
    counts: dict[int, dict[str, int]] = {pk: {"failed_for_good": 0} for pk in deployment_ids}
    for row in rows:
        of_deployment = counts[row["deployment_id"]]
        of_deployment[row["state"]] = row["n"]
        of_deployment["failed_for_good"] += row["for_good"]
    return counts


def pending_reason(deployment: Deployment) -> str:
    copy = deployment.copies.filter(state=CopyState.PENDING).exclude(pending_reason="").first()
    return copy.pending_reason if copy else ""


def failure_reason(deployment: Deployment) -> str:
    return deployment.last_error_message or deployment.last_error_code or "see the logs"


def what_the_rest_do(deployment: Deployment, counts: dict[str, int]) -> str:
    parts = []
    starting = (
        counts.get(CopyState.STARTING, 0)
        + counts.get(CopyState.COPYING_FILES, 0)
        + counts.get(CopyState.REQUESTED, 0)
    )
    if counts.get(CopyState.PENDING):
        parts.append(f"{counts[CopyState.PENDING]} waits for room: {pending_reason(deployment)}")
    if starting:
        parts.append(f"{starting} {'is' if starting == 1 else 'are'} starting")
    failed = counts.get(CopyState.FAILED, 0)
    if failed:
        parts.append(f"{failed} failed to start: {failure_reason(deployment)}")
    return "; ".join(parts)


def desired_state(deployment: Deployment, counts: dict[str, int] | None = None) -> tuple[str, str]:
    """The state and message that the copies call for now (`counts` as copy_counts gives
    them, where the caller has read them already)."""
    counts = copy_counts(deployment) if counts is None else counts
    wanted = deployment.copies_wanted
    ready = min(counts.get(CopyState.READY, 0), wanted)
    rest = what_the_rest_do(deployment, counts)
    if wanted == 0:
        policy = autoscaling.stored(deployment.autoscaling)
        if policy is not None and policy.may_idle:
            return (
                DeploymentState.IDLE,
                f"Idle: scaled to zero after {policy.idle_minutes} min without a request; the "
                "next request starts a copy.",
            )
        return DeploymentState.DEPLOYED, "Scaled to 0 copies: nothing runs, the settings are kept."
    if ready == wanted:
        return (
            DeploymentState.DEPLOYED,
            "The copy serves." if wanted == 1 else f"All {wanted} copies serve.",
        )
    if ready:
        return DeploymentState.DEGRADED, f"{ready} of {wanted} copies serve; {rest}."
    if (
        counts["failed_for_good"]
        and not counts.get(CopyState.STARTING)
        and not counts.get(CopyState.COPYING_FILES)
    ):
        return (
            DeploymentState.FAILED,
            f"Failed to start, not tried again: {failure_reason(deployment)}",
        )
    if counts.get(CopyState.STARTING):
        return DeploymentState.INITIALIZING, "The engine is loading the model; no copy serves yet."
    if counts.get(CopyState.COPYING_FILES):
        return DeploymentState.DEPLOYING, "Copying the model's files to the machines."
    if counts.get(CopyState.FAILED):
        return DeploymentState.ERROR, f"No copy serves; {rest}. It is tried again by itself."
    if counts.get(CopyState.PENDING):
        return DeploymentState.ERROR, f"No copy serves; {rest}."
    return DeploymentState.DEPLOYING, "Placing the copies."


def refresh_state(deployment_id: int) -> None:
    """Bring the deployment's state and message in line with its copies, under its row lock:
    a stop that comes meanwhile is never undone by a state decided before it."""
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().filter(pk=deployment_id).first()
        if deployment is not None:
            refresh_locked(deployment)


def refresh_locked(deployment: Deployment) -> None:
    if deployment.state == DeploymentState.STOPPING:
        finish_stopping(deployment)
        return
    if deployment.state not in DEPLOYMENT_PLACEABLE:
        return
    state, message = desired_state(deployment)
    if deployment.waking_since is not None and state in DEPLOYMENT_SERVING:
        record_cold_start(deployment)
    if state == deployment.state:
        if message != deployment.last_message:
            transitions.set_last_message(deployment.pk, message)
        return
    # The last error stays on record (with its time) after the deployment recovers.
    transitions.move_deployment(deployment.pk, state, message=message)


def refresh_states(deployment_ids: list[int]) -> None:
    """refresh_state for many deployments, with their copies counted in one query and their
    state changes written in one batch (a deployment waking from idle goes the one-by-one way,
    which records its cold start)."""
    deployments = list(Deployment.objects.filter(pk__in=deployment_ids).order_by("pk"))
    counts = copy_counts_of([d.pk for d in deployments])
    moves = []
    for deployment in deployments:
        if deployment.state not in DEPLOYMENT_PLACEABLE or deployment.waking_since is not None:
            refresh_state(deployment.pk)
            continue
        state, message = desired_state(deployment, counts[deployment.pk])
        if state != deployment.state:
            moves.append(
                transitions.Move(deployment.pk, state, message, decided_from=deployment.state)
            )
        elif message != deployment.last_message:
            transitions.set_last_message(deployment.pk, message)
    transitions.move_deployments(moves)


COLD_START_WORDS = "Woke from idle"


def record_cold_start(deployment: Deployment) -> None:
    """Woken from IDLE and a copy serves: how long that took, as an Event and as what the
    gateway tells the clients of the next wake to wait."""
    assert deployment.waking_since is not None
    took = (timezone.now() - deployment.waking_since).total_seconds()
    claimed = Deployment.objects.filter(pk=deployment.pk, waking_since__isnull=False).update(
        waking_since=None, last_cold_start_s=took
    )
    if claimed:  # once, however many workers refresh it
        Event.objects.create(
            deployment=deployment,
            deployment_name=deployment.name,
            kind=EventKind.AUTOSCALE,
            message=f"{COLD_START_WORDS}: a copy serves {took:.1f} s after the request that "
            "woke it",
        )


# --- stopping ----------------------------------------------------------------------------


def stop_copy_soon(copy: Copy) -> None:
    """Ask a copy to stop; its room is given back once it is observed stopped."""
    if copy.state in COPY_WAITING or copy.state == CopyState.FAILED:
        give_up_room(copy, {copy.state}, CopyState.STOPPED, message="Stopped before it started.")
        return
    if copy.state in COPY_PLACED:
        transitions.move_copy(copy.pk, CopyState.STOPPING, message="Stopping.")
        enqueue("stop_copy", copy.pk)


def finish_stopping(deployment: Deployment) -> None:
    if deployment.copies.exclude(state=CopyState.STOPPED).exists():
        return
    transitions.move_deployment(
        deployment.pk, DeploymentState.STOPPED, message="Stopped: no copy runs."
    )
    if deployment.delete_when_stopped:
        Deployment.objects.filter(pk=deployment.pk).delete()


def observed_stopped(copy: Copy, message: str = "Stopped.") -> None:
    moved = give_up_room(
        copy, {CopyState.STOPPING}, CopyState.STOPPED, message=message, process_id=None
    )
    if moved is not None:
        refresh_state(copy.deployment_id)


def startup_timed_out(copy: Copy) -> Failure:
    """The failure of a copy that did not serve by its deadline (stopped for it)."""
    seconds = (copy.startup_deadline - copy.started_at).total_seconds() if copy.started_at else 0
    return Failure(
        ErrorCode.STARTUP_TIMEOUT,
        False,
        f"The engine did not become ready within {seconds:.0f} s.",
        "Try a smaller model or context, or raise BERTH_STARTUP_TIMEOUT_BASE_S.",
    )


def past_startup_deadline(copy: Copy) -> bool:
    return (
        copy.state == CopyState.STARTING
        and copy.startup_deadline is not None
        and copy.startup_deadline < timezone.now()
    )


def startup_deadline(copy: Copy) -> timedelta:
    """Bigger models and unified-memory machines load slower, so they get longer."""
    size_gib = copy.deployment.variant.size_bytes / GIB
    seconds = settings.STARTUP_TIMEOUT_BASE_S + settings.STARTUP_TIMEOUT_PER_GIB_S * size_gib
    if copy.machine is not None and copy.machine.unified_memory:
        seconds *= 3
    return timedelta(seconds=seconds)


def scale_down_extras(deployment: Deployment) -> None:
    """Fewer copies wanted: those that leave drain first (see start_draining); copies not yet
    serving leave first, then the least loaded, then the newest. More wanted again while some
    drain: they stay, which is quicker than starting new ones. A copy being moved (its old
    and its new place) is the move's: the move counts as one copy."""
    moving = repacking.moving_copies(deployment)
    current = [
        copy
        for copy in deployment.copies.filter(q_live_current_copies())
        if copy.pk not in moving.copy_ids
    ]
    staying = [copy for copy in current if copy.draining_since is None]
    draining = [copy for copy in current if copy.draining_since is not None]
    extra = len(staying) + moving.moves - deployment.copies_wanted
    if extra < 0:
        for copy in draining[:-extra]:
            keep_serving(copy)
        return
    in_flight = load.in_flight_by_copy() if extra else {}
    for copy in sorted(staying, key=lambda c: leaving_order(c, in_flight))[:extra]:
        leave(copy)


def leave(copy: Copy) -> None:
    """A copy that serves drains first (a scale-down or a stop); any other stops now."""
    if copy.state == CopyState.READY:
        start_draining(copy)
    else:
        stop_copy_soon(copy)


def leaving_order(copy: Copy, in_flight: dict[int, int]) -> tuple[bool, int, int]:
    return (copy.state == CopyState.READY, in_flight.get(copy.pk, 0), -copy.ordinal)


def start_draining(copy: Copy) -> None:
    """Take a serving copy out of every gateway's table (they re-read it on this broadcast, or
    at their next refresh); finish_draining stops it once its requests are done."""
    Copy.objects.filter(pk=copy.pk).update(draining_since=timezone.now())
    live.broadcast_on_commit("deployments", "deployment", copy.deployment_id)


def keep_serving(copy: Copy) -> None:
    Copy.objects.filter(pk=copy.pk).update(draining_since=None)
    live.broadcast_on_commit("deployments", "deployment", copy.deployment_id)


def finish_draining(deployment: Deployment) -> None:
    """Stop the draining copies that no gateway sends to any more (a table refresh has passed)
    and that have no request in flight at any gateway process, or whose drain limit passed.
    One that stopped serving meanwhile (unhealthy, restarting) has nothing to finish: at once."""
    draining = list(
        deployment.copies.filter(draining_since__isnull=False).exclude(
            state__in=COPY_STOPPING_OR_STOPPED
        )
    )
    if not draining:
        return
    in_flight, now = load.in_flight_by_copy(), timezone.now()
    for copy in draining:
        assert copy.draining_since is not None
        if copy.state != CopyState.READY:
            stop_copy_soon(copy)
            continue
        drained_s = (now - copy.draining_since).total_seconds()
        if drained_s < settings.GATEWAY_REFRESH_S + 2 * load.REPORT_EVERY_S:
            continue  # a gateway may still route to it, or not have reported what it sent
        if in_flight.get(copy.pk, 0) == 0 or drained_s >= settings.DRAIN_LIMIT_S:
            stop_copy_soon(copy)


def replace_old_generation(deployment: Deployment) -> None:
    """After a size change: stop old copies as new ones serve, or one at a time to make room."""
    old = deployment.copies.filter(generation__lt=deployment.generation).exclude(
        state__in=COPY_STOPPING_OR_STOPPED
    )
    if not old.exists():
        return
    new = deployment.copies.filter(generation=deployment.generation)
    ready_new = new.filter(state=CopyState.READY).count()
    surplus = old.count() + ready_new - deployment.copies_wanted
    waiting_new = new.filter(state=CopyState.PENDING).exists()
    if surplus <= 0 and waiting_new and not old.filter(state=CopyState.STOPPING).exists():
        surplus = 1  # no room to start new copies beside the old: replace one at a time
    for copy in old.order_by("-ordinal")[: max(0, surplus)]:
        stop_copy_soon(copy)


def q_active_deployments() -> Q:
    return Q(state__in=DEPLOYMENT_PLACEABLE) | Q(state=DeploymentState.STOPPING)
