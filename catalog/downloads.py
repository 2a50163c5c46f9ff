"""Downloads: a variant's files from the Hugging Face hub to this server, one row per download.

The ServerModel row is the truth. `request_download` creates it queued and enqueues the Celery
task on commit; the task claims it with a compare-and-set update (queued → downloading), so a
task delivered twice downloads once. It resolves the revision to a commit, lists exactly the
variant's files, and fetches them with huggingface_hub's snapshot_download (allow-patterns,
resumable: partial files stay under the folder's .cache and a later attempt continues them)
while the worker's main thread saves the progress and speed every second. Every change of
state or progress tells the deployments that wait for it (the signal
`catalog.signals.server_files_changed`, which deployments connects), on commit.
"""

from __future__ import annotations

import glob
import logging
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for_future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from huggingface_hub import snapshot_download
from huggingface_hub.utils import disable_progress_bars

from catalog import hub, signals
from catalog.hub import Access, HubProblem
from catalog.models import SERVER_MODEL_RETRYABLE, ServerModel, ServerModelState, Variant
from catalog.variants import RepoFile, select_files
from console import audit, claims, live

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 1.0


class DownloadRefused(ValueError):
    """The action cannot be done now; the message says why."""


@dataclass(frozen=True)
class Plan:
    """What one attempt fetches: the commit and exactly the variant's files."""

    sha: str
    files: tuple[RepoFile, ...]
    folder: Path

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def models_dir() -> Path:
    return Path(getattr(settings, "MODELS_DIR", settings.BASE_DIR / "var" / "models"))


def files_changed(row_id: int) -> None:
    """Deployments waiting for these files go on, fail, or say how far the download got; the
    pages that show the download get its new state and bytes pushed to them."""
    transaction.on_commit(lambda: signals.server_files_changed.send(ServerModel, row_id=row_id))
    model_id = ServerModel.objects.filter(pk=row_id).values_list("variant__model_id", flat=True)
    for model in model_id:
        live.server_model_changed(row_id, model)


def enqueue(row_id: int) -> None:
    from catalog import tasks

    transaction.on_commit(lambda: tasks.download_model.delay(row_id))


# --- actions ---------------------------------------------------------------------------------


def request_download(
    variant: Variant, revision: str = "", team: Any = None, actor: Any = None
) -> ServerModel:
    """The variant's files at `revision` (main when empty) on this server, or on their way.

    Idempotent: the row queued, downloading or ready for this variant and requested revision
    comes back as it is; a failed one (or one whose files went missing) is queued again.
    """
    revision = (revision or "").strip()
    if revision and not hub.valid_revision(revision):
        raise DownloadRefused(f"“{revision}” is not a branch, tag or commit name.")
    with transaction.atomic():
        row, created = ServerModel.objects.get_or_create(
            variant=variant,
            requested_revision=revision,
            defaults={"state": ServerModelState.QUEUED, "team": team, "requested_by": actor},
        )
        if created:
            enqueue(row.pk)
            files_changed(row.pk)
            audit.record(actor, audit.DOWNLOAD_REQUESTED, str(row), "Queued.", team=team)
        elif row.state in SERVER_MODEL_RETRYABLE:
            row = requeue(row, team, actor)
    return row


def requeue(row: ServerModel, team: Any = None, actor: Any = None) -> ServerModel:
    """Queue a failed download (or files gone missing) again; the partial files are kept."""
    changes: dict[str, Any] = {"state": ServerModelState.QUEUED, "error": "", "bytes_per_s": 0}
    changes.update(updated_at=timezone.now(), finished_at=None)
    if team is not None:  # the latest requester's token, e.g. a team that has one now
        changes["team"] = team
    if actor is not None:
        changes["requested_by"] = actor
    if not ServerModel.objects.filter(pk=row.pk, state__in=SERVER_MODEL_RETRYABLE).update(
        **changes
    ):
        raise DownloadRefused("Only a failed download or missing files can be tried again.")
    enqueue(row.pk)
    files_changed(row.pk)
    return ServerModel.objects.get(pk=row.pk)


def try_again(row: ServerModel, actor: Any) -> ServerModel:
    with transaction.atomic():
        again = requeue(row, actor=actor)
        audit.record(actor, audit.DOWNLOAD_RETRIED, str(again), "Queued again.", team=again.team)
        return again


def forget_files(row: ServerModel, actor: Any) -> str:
    """Delete the files Berth downloaded and forget the row; says what was done. Whether a
    deployment still uses them is the caller's check (deployments.actions.delete_server_files)."""
    if row.in_progress:
        raise DownloadRefused("The download is still running: wait until it ends.")
    folder = Path(row.path) if row.path else None
    ServerModel.objects.filter(pk=row.pk).delete()
    log.info("%s deleted the files of %s (%s)", actor, row, row.path)
    if folder is None or not is_ours(folder):
        words = f"{row.variant} is no longer on this server; its files under {folder} stay."
    else:
        if not ServerModel.objects.filter(path=row.path).exists():
            shutil.rmtree(folder, ignore_errors=True)
        words = f"Deleted the files of {row.variant}."
    audit.record(actor, audit.FILES_DELETED, str(row), words, team=row.team)
    return words


def is_ours(folder: Path) -> bool:
    """Berth deletes only what it downloaded: folders under MODELS_DIR, never an admin's path."""
    return folder.resolve().is_relative_to(models_dir().resolve())


def mark_must_redownload(row_id: int, reason: str) -> None:
    """The files went missing (seen at launch): the row must be downloaded again."""
    changes = {
        "state": ServerModelState.MUST_REDOWNLOAD,
        "error": reason,
        "updated_at": timezone.now(),
    }
    if ServerModel.objects.filter(pk=row_id, state=ServerModelState.READY).update(**changes):
        files_changed(row_id)


def redispatch_stalled() -> int:
    """Queue again the downloads a dead worker left (for the reconciler to call).

    A running download saves its progress every second, so a row quiet for claims.STALLED_AFTER has
    lost its worker (or its task). It goes back to queued with a fresh timestamp, so that the
    task can claim it and it is sent at most once per period however often this runs.
    """
    ids = claims.requeue_stalled(ServerModel, ServerModelState.QUEUED, ServerModelState.DOWNLOADING)
    for row_id in ids:
        enqueue(row_id)
    return len(ids)


# --- the task --------------------------------------------------------------------------------


def claim(row_id: int) -> ServerModel | None:
    """queued → downloading, or a stalled download taken over; None when someone else has it."""
    fresh = {"started_at": timezone.now(), "bytes_per_s": 0, "error": ""}
    if not claims.claim(
        ServerModel, row_id, ServerModelState.QUEUED, ServerModelState.DOWNLOADING, **fresh
    ):
        return None
    files_changed(row_id)
    return ServerModel.objects.select_related("variant", "team").get(pk=row_id)


def folder_for(variant: Variant, sha: str) -> Path:
    folder = (models_dir() / variant.repo_id / variant.name / sha).resolve()
    if not folder.is_relative_to(models_dir().resolve()):
        raise DownloadRefused(f"{variant.repo_id} does not name a folder under MODELS_DIR.")
    return folder


def plan_for(row: ServerModel, access: Access) -> Plan:
    variant = row.variant
    listing = hub.read_listing(variant.repo_id, row.requested_revision, access)
    chosen = select_files(variant.format, variant.gguf_file, listing.files)
    if not any(f.path.endswith((".safetensors", ".gguf")) for f in chosen):
        wanted = variant.gguf_file or "safetensors weights"
        raise HubProblem(
            HubProblem.NO_WEIGHTS,
            f"{variant.repo_id} at {listing.sha[:12]} has no {wanted} for variant "
            f"{variant.name}: the repository changed; pick another variant or revision.",
        )
    return Plan(listing.sha, tuple(chosen), folder_for(variant, listing.sha))


def record_plan(row_id: int, plan: Plan) -> None:
    """The commit is pinned before the first byte, so a resumed attempt continues the same
    files; the size is what the progress bar counts towards."""
    ServerModel.objects.filter(pk=row_id, state=ServerModelState.DOWNLOADING).update(
        revision=plan.sha,
        size_bytes=plan.size,
        files=[[f.path, f.size] for f in plan.files],
        path=str(plan.folder),
        updated_at=timezone.now(),
    )
    files_changed(row_id)


def bytes_in(folder: Path) -> int:
    """Bytes on disk so far, partial files (under .cache/huggingface) included."""
    if not folder.exists():
        return 0
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file() and path.suffix not in (".lock", ".metadata"):
                total += path.stat().st_size
        except OSError:
            continue  # a partial file renamed while we looked
    return total


class Progress:
    """Saves how far the download got and how fast, at most once a second."""

    def __init__(self, row_id: int, plan: Plan) -> None:
        self.row_id, self.plan = row_id, plan
        self.last_bytes, self.last_at = bytes_in(plan.folder), time.monotonic()
        self.speed = 0.0

    def save(self) -> None:
        """Saved every time (the timestamp tells a live download from one a dead worker
        left); the deployments that wait hear of it only when the bytes moved."""
        done = min(bytes_in(self.plan.folder), self.plan.size)
        now = time.monotonic()
        rate = (done - self.last_bytes) / max(now - self.last_at, 1e-3)
        self.speed = rate if not self.speed else 0.5 * self.speed + 0.5 * rate
        moved = done != self.last_bytes
        self.last_bytes, self.last_at = done, now
        ServerModel.objects.filter(pk=self.row_id, state=ServerModelState.DOWNLOADING).update(
            progress_bytes=done, bytes_per_s=max(0, int(self.speed)), updated_at=timezone.now()
        )
        if moved:
            files_changed(self.row_id)


def fetch(row: ServerModel, plan: Plan, access: Access) -> None:
    """snapshot_download in a thread; this thread saves progress until it ends."""
    disable_progress_bars()  # the worker's log is for events, not progress bars
    patterns = [glob.escape(f.path) for f in plan.files]
    progress = Progress(row.pk, plan)
    with ThreadPoolExecutor(max_workers=1) as pool:
        job = pool.submit(
            snapshot_download,
            row.variant.repo_id,
            revision=plan.sha,
            local_dir=plan.folder,
            allow_patterns=patterns,
            token=access.token or False,
            endpoint=hub.endpoint(),
            max_workers=4,
        )
        while not wait_for_future([job], timeout=PROGRESS_EVERY_S).done:
            progress.save()
        job.result()


def finish(row_id: int, plan: Plan) -> None:
    size = sum((plan.folder / f.path).stat().st_size for f in plan.files)
    now = timezone.now()
    ServerModel.objects.filter(pk=row_id, state=ServerModelState.DOWNLOADING).update(
        state=ServerModelState.READY,
        size_bytes=size,
        progress_bytes=size,
        bytes_per_s=0,
        finished_at=now,
        updated_at=now,
    )
    files_changed(row_id)


def fail(row_id: int, message: str) -> None:
    now = timezone.now()
    ServerModel.objects.filter(pk=row_id, state=ServerModelState.DOWNLOADING).update(
        state=ServerModelState.FAILED, error=message, bytes_per_s=0, finished_at=now, updated_at=now
    )
    files_changed(row_id)


def run(row_id: int) -> None:
    """The download task's body: claim, pin the commit, fetch, and end ready or failed."""
    row = claim(row_id)
    if row is None:
        return
    access = Access.of_team(row.team)
    try:
        plan = plan_for(row, access)
        record_plan(row_id, plan)
        fetch(row, plan, access)
        finish(row_id, plan)
    except Exception as error:
        fail(row_id, failure_words(error, row, access))


def failure_words(error: Exception, row: ServerModel, access: Access) -> str:
    try:
        return hub.problem_from(error, row.variant.repo_id, row.requested_revision, access).message
    except Exception:
        pass
    if isinstance(error, DownloadRefused):
        return str(error)
    # Not a hub problem (a full disk, a bug): say it, and keep the trace in the log.
    log.error("download #%s of %s failed", row.pk, row.variant, exc_info=error)
    if isinstance(error, OSError):
        return f"Cannot write the files under {models_dir()}: {error}. Free some space, then retry."
    return f"The download stopped: {type(error).__name__}: {error}"
