"""Model files on the machines of a cluster: Sync on a deployment's page, and the copy of the
files a copy's start makes on its own machine.

A MachineFiles row per machine, variant and commit is the truth the page shows. Sync queues a
row per ready machine and enqueues a task each (on commit); the task claims its row with a
compare-and-set update (queued → copying), so a task delivered twice copies once. While the
backend copies, the row's bytes are saved at most every PROGRESS_EVERY_S, and every change is
pushed to the pages of the deployments that use these files on that cluster.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from catalog import hub, trust
from catalog.models import ServerModel, ServerModelState
from clusters.backends.base import BackendError, FilesResult, ModelFiles
from clusters.models import Machine, present_gpu_count
from clusters.registry import backend_for
from console import claims, live
from console.models import Team
from deployments import lifecycle
from deployments.choices import CopyState, MachineFilesState
from deployments.models import Copy, Deployment, MachineFiles
from placement.words import plural

PROGRESS_EVERY_S = 0.5


class SyncRefused(ValueError):
    """Sync cannot be done now; the message says why and what to do."""


def model_files(server_copy: ServerModel, team: Team | None = None) -> ModelFiles:
    """The files a backend needs on a machine, as this server's download recorded them; the
    team's Hugging Face token goes with them (a cluster that fetches them itself needs it for
    a gated model)."""
    variant = server_copy.variant
    kept_per_team = team is not None and trust.kept_per_team(variant.model, server_copy.revision)
    access = hub.Access.of_team(team)
    return ModelFiles(
        repo_id=variant.repo_id,
        revision=server_copy.revision,
        variant=variant.name,
        source_path=server_copy.path,
        size_bytes=server_copy.size_bytes or variant.size_bytes,
        files=tuple((str(name), int(size)) for name, size in server_copy.files or ()),
        token_owner=access.team_name,
        token=access.token,
        cache_owner=team.name if team is not None and kept_per_team else "",
    )


def changed(row: MachineFiles) -> None:
    """Push the row to the pages of the deployments that use these files on its cluster."""
    users = Deployment.objects.filter(
        cluster_id=row.machine.cluster_id, variant_id=row.variant_id
    ).values_list("pk", flat=True)
    live.machine_files_changed(list(users), row.pk)


def row_for(machine: Machine, server_copy: ServerModel) -> MachineFiles:
    row, _ = MachineFiles.objects.get_or_create(
        machine=machine,
        variant_id=server_copy.variant_id,
        revision=server_copy.revision,
        defaults={
            "size_bytes": model_files(server_copy).size_bytes,
            "state": MachineFilesState.MISSING,
        },
    )
    return row


# --- Sync ------------------------------------------------------------------------------------


def request_sync(deployment: Deployment) -> str:
    """Queue a copy of the deployment's model files to every ready machine of its cluster
    (a machine that has them checks them again); says what was queued."""
    server_copy = lifecycle.files_on_this_server(deployment)
    if server_copy is None:
        raise SyncRefused(
            "the model is not on this server yet: wait for its download (or try it again "
            "under Models → On this server), then sync"
        )
    machines = list(deployment.cluster.machines.order_by("name"))
    ready = [m for m in machines if m.ready]
    if not ready:
        raise SyncRefused(f"no machine of {deployment.cluster.name} is ready to receive files")
    with transaction.atomic():
        queued = [queue(row_for(machine, server_copy), deployment.team_id) for machine in ready]
    skipped = len(machines) - len(ready)
    words = f"Syncing the model files to {plural(sum(queued), 'machine', 'machines')}"
    if len(ready) - sum(queued):
        words += f" ({len(ready) - sum(queued)} already syncing)"
    if skipped:
        words += f"; {skipped} not ready, left out"
    return words + "."


def queue(row: MachineFiles, team_id: int) -> bool:
    """Queue the row's copy unless one is under way; True when queued."""
    busy = claims.in_work(MachineFilesState.COPYING) | Q(state=MachineFilesState.QUEUED)
    taken = (
        MachineFiles.objects.filter(pk=row.pk)
        .exclude(busy)
        .update(
            state=MachineFilesState.QUEUED, progress_bytes=0, message="", updated_at=timezone.now()
        )
    )
    if taken:
        enqueue(row.pk, team_id)
        changed(row)
    return bool(taken)


def enqueue(row_id: int, team_id: int | None = None) -> None:
    """The task carries the team that asked (whose token a fetch may use), as an id."""
    from deployments import tasks

    transaction.on_commit(lambda: tasks.sync_machine_files.delay(row_id, team_id))


def redispatch_stalled() -> int:
    """Queue again the syncs a dead worker left (for the reconciler to call)."""
    ids = claims.requeue_stalled(MachineFiles, MachineFilesState.QUEUED, MachineFilesState.COPYING)
    for row_id in ids:
        enqueue(row_id)
    return len(ids)


def claim(row_id: int) -> MachineFiles | None:
    if not claims.claim(MachineFiles, row_id, MachineFilesState.QUEUED, MachineFilesState.COPYING):
        return None
    return MachineFiles.objects.select_related("machine__cluster", "variant").get(pk=row_id)


def run_sync(row_id: int, team_id: int | None = None) -> None:
    """The Sync task's body: claim the row, copy (or find) the files, end present or not.
    The token is the asking team's (or, for a sync a dead worker left, the download's)."""
    row = claim(row_id)
    if row is None:
        return
    server_copy = ServerModel.objects.filter(
        variant_id=row.variant_id, revision=row.revision, state=ServerModelState.READY
    ).first()
    if server_copy is None:
        finish(row, FilesResult(False, message="this server no longer keeps the model files"))
        return
    changed(row)
    team = Team.objects.filter(pk=team_id).first() or server_copy.team
    if bring(row, model_files(server_copy, team)).present:
        send_on_waiting(row)


# --- copying ---------------------------------------------------------------------------------


def copy_for_launch(copy: Copy, server_copy: ServerModel) -> FilesResult | None:
    """The files a copy needs on its machine, before it starts (the row shows the copy).

    None when another worker is copying these files to this machine right now: a large model
    takes minutes, and a second worker waiting on the same copy would only be a worker less.
    The worker that copies sends the waiting copies on when it is done (the reconciler does,
    should that worker die).
    """
    row = row_for(copy.machine, server_copy)
    now = timezone.now()
    if not (
        MachineFiles.objects.filter(pk=row.pk)
        .exclude(claims.in_work(MachineFilesState.COPYING))
        .update(state=MachineFilesState.COPYING, updated_at=now)
    ):
        return None
    row.refresh_from_db()
    changed(row)
    result = bring(row, model_files(server_copy, copy.deployment.team), raise_errors=True)
    if result.present:
        send_on_waiting(row, but=copy.pk)
    return result


def send_on_waiting(row: MachineFiles, but: int | None = None) -> None:
    """Copies placed on the row's machine that waited for these files start: the files were
    just found there, so each goes straight to its launch (a claim and a look at the files
    each, one after the other, made the eighth copy of a machine wait for seven)."""
    waiting = Copy.objects.filter(
        state=CopyState.COPYING_FILES,
        machine_id=row.machine_id,
        deployment__variant_id=row.variant_id,
    ).exclude(pk=but)
    for copy_id in waiting.values_list("pk", flat=True):
        lifecycle.enqueue("launch_copy", copy_id)


def being_copied() -> Exists:
    """For a Copy queryset: its machine is receiving its model's files right now."""
    return Exists(
        MachineFiles.objects.filter(
            claims.in_work(MachineFilesState.COPYING),
            machine=OuterRef("machine"),
            variant=OuterRef("deployment__variant"),
        )
    )


def bring(row: MachineFiles, files: ModelFiles, raise_errors: bool = False) -> FilesResult:
    """Ask the backend for the files on the row's machine and record what it said."""
    backend = backend_for(row.machine.cluster)
    progress = ProgressSaver(row)
    try:
        result = backend.prepare_files(row.machine.name, files, progress)
    except BackendError as error:
        finish(row, FilesResult(False, message=str(error)), failed=True)
        if raise_errors:
            raise
        return FilesResult(False, message=str(error))
    finish(row, result)
    return result


class ProgressSaver:
    """Saves the bytes on the machine so far, at most every PROGRESS_EVERY_S (and always keeps
    the row's timestamp fresh, which tells a live copy from one a dead worker left)."""

    def __init__(self, row: MachineFiles) -> None:
        self.row = row
        self.saved_at = 0.0

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now - self.saved_at < PROGRESS_EVERY_S:
            return
        self.saved_at = now
        MachineFiles.objects.filter(pk=self.row.pk, state=MachineFilesState.COPYING).update(
            progress_bytes=max(0, done), updated_at=timezone.now()
        )
        changed(self.row)


def finish(row: MachineFiles, result: FilesResult, failed: bool = False) -> None:
    if result.present:
        state = MachineFilesState.PRESENT
    else:
        state = MachineFilesState.FAILED if failed else MachineFilesState.MISSING
    changes: dict[str, Any] = {"state": state, "message": result.message[:2000]}
    if result.present:
        changes.update(progress_bytes=row.size_bytes, checked_at=timezone.now())
    MachineFiles.objects.filter(pk=row.pk).update(updated_at=timezone.now(), **changes)
    changed(row)


# --- what the page shows ----------------------------------------------------------------------


@dataclass(frozen=True)
class MachineLine:
    machine: Machine
    files: MachineFiles | None


@dataclass(frozen=True)
class FilesSummary:
    """The Machines / Model files panel: every machine of the cluster and the files on it."""

    lines: list[MachineLine]
    server_copy: ServerModel | None

    @property
    def on(self) -> int:
        return sum(
            1 for line in self.lines if line.files and line.files.state == MachineFilesState.PRESENT
        )

    @property
    def of(self) -> int:
        return len(self.lines)

    @property
    def syncing(self) -> int:
        return sum(1 for line in self.lines if line.files and line.files.in_progress)

    @property
    def words(self) -> str:
        if self.server_copy is None:
            return "The model is not on this server yet; Sync can start once it is downloaded."
        if self.of and self.on == self.of:
            return f"On every machine ({self.of})."
        return f"On {self.on} of {plural(self.of, 'machine', 'machines')}."


def summary(deployment: Deployment) -> FilesSummary:
    server_copy = lifecycle.files_on_this_server(deployment)
    machines = list(
        deployment.cluster.machines.annotate(gpu_count=present_gpu_count()).order_by("name")
    )
    rows: dict[int, MachineFiles] = {}
    if server_copy is not None:
        found = MachineFiles.objects.filter(
            machine__in=machines, variant_id=server_copy.variant_id, revision=server_copy.revision
        )
        rows = {row.machine_id: row for row in found}
    lines = [MachineLine(machine, rows.get(machine.pk)) for machine in machines]
    return FilesSummary(lines, server_copy)
