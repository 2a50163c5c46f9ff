"""The fleet's figures on the console's /metrics, read from the rows: deployments and copies by
state, each GPU's memory and the room reserved on it, and the downloads and copies of model
files under way. Only the whole fleet's readers (platform admins, the scrape token) get them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db.models import Count, QuerySet

from catalog.models import SERVER_MODEL_IN_PROGRESS, ServerModel, Variant
from clusters.models import Accelerator
from console.choices import StateChoices
from console.prometheus import family
from deployments.choices import MACHINE_FILES_IN_PROGRESS, CopyState, DeploymentState
from deployments.models import Copy, Deployment, MachineFiles, Reservation


def text() -> str:
    """Blocking: the fleet's families in Prometheus' text format."""
    lines = by_state(
        "berth_deployments", "Deployments in each state.", DeploymentState, Deployment.objects
    )
    lines += by_state("berth_copies", "Copies in each state.", CopyState, Copy.objects)
    lines += accelerator_families()
    lines += download_families()
    return "\n".join(lines) + "\n"


def by_state(metric: str, doc: str, states: type[StateChoices], rows: QuerySet) -> list[str]:
    """Every state's count, 0 included: a state nothing is in reads 0, not missing."""
    counted = dict(rows.values_list("state").annotate(n=Count("pk")).order_by())
    return family(metric, "gauge", doc, (({"state": s}, counted.get(s, 0)) for s in states.values))


def accelerator_families() -> list[str]:
    """Per GPU (its slices' reservations count towards it): its memory, the room copies reserve
    on it, and how many copies hold room there."""
    gpus = list(
        Accelerator.objects.filter(parent__isnull=True)
        .select_related("machine__cluster")
        .order_by("machine__cluster__name", "machine__name", "index")
    )
    reserved: dict[int, int] = defaultdict(int)
    holders: dict[int, set[int]] = defaultdict(set)
    for gpu_id, parent_id, copy_id, held in Reservation.objects.filter(
        accelerator__isnull=False
    ).values_list("accelerator_id", "accelerator__parent_id", "copy_id", "reserved_bytes"):
        whole = parent_id or gpu_id
        reserved[whole] += held
        holders[whole].add(copy_id)
    labels = [(gpu, gpu_labels(gpu)) for gpu in gpus]
    return [
        *family(
            "berth_accelerator_memory_bytes",
            "gauge",
            "A GPU's memory.",
            ((lab, gpu.memory_bytes) for gpu, lab in labels),
        ),  # fmt: skip
        *family(
            "berth_accelerator_reserved_bytes",
            "gauge",
            "GPU memory reserved by copies.",
            ((lab, reserved[gpu.pk]) for gpu, lab in labels),
        ),  # fmt: skip
        *family(
            "berth_accelerator_copies",
            "gauge",
            "Copies holding room on a GPU.",
            ((lab, len(holders[gpu.pk])) for gpu, lab in labels),
        ),  # fmt: skip
    ]


def gpu_labels(gpu: Accelerator) -> dict[str, str]:
    machine = gpu.machine
    return {
        "cluster": machine.cluster.name,
        "machine": machine.name,
        "gpu": str(gpu.index),
        "product": gpu.product,
    }


def download_families() -> list[str]:
    """Files on their way: downloads to this server, and copies to a cluster's machines."""
    samples = [*server_downloads(), *machine_copies()]
    return [
        *family(
            "berth_download_progress_bytes",
            "gauge",
            "Bytes of a model's files moved so far.",
            ((labels, done) for labels, done, _size in samples),
        ),  # fmt: skip
        *family(
            "berth_download_size_bytes",
            "gauge",
            "Bytes of a model's files in all.",
            ((labels, size) for labels, _done, size in samples),
        ),  # fmt: skip
    ]


def server_downloads() -> Iterable[tuple[dict[str, str], int, int]]:
    rows = ServerModel.objects.filter(state__in=SERVER_MODEL_IN_PROGRESS).select_related(
        "variant__model"
    )
    for row in rows.order_by("pk"):
        yield files_labels(row.variant, "this server"), row.progress_bytes, row.size_bytes


def machine_copies() -> Iterable[tuple[dict[str, str], int, int]]:
    rows = MachineFiles.objects.filter(state__in=MACHINE_FILES_IN_PROGRESS).select_related(
        "variant__model", "machine"
    )
    for row in rows.order_by("pk"):
        yield files_labels(row.variant, row.machine.name), row.progress_bytes, row.size_bytes


def files_labels(variant: Variant, to: str) -> dict[str, str]:
    return {"model": variant.model.repo_id, "variant": variant.name, "to": to}
