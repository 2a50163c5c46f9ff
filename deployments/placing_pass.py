"""A reconciler pass's new copies, placed together: one locked snapshot per cluster.

Placing deployments one by one reads the cluster, plans and writes for each (some forty
queries a placement). A pass that finds many deployments wanting copies, and nothing else (no
copy waiting, failing, draining or of an older size), places them here instead, cluster by
cluster, oldest first: the cluster's row is locked once, its snapshot read once, every plan made
against it with the copies planned before added, and the copies, their reservations, their
moves to COPYING_FILES and their Events written in a few statements.

First come, first served holds: on each cluster the batch stops at the first deployment that
wants room and is not this simple, or that does not fit whole; that one and every later one go
the one-by-one way (reconciler.converge), so none of them is passed by a younger one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from django.db import transaction
from django.db.models import Count, Max, Q

import placement
from catalog.models import ServerModel, ServerModelState
from clusters.models import Accelerator, Cluster, Machine
from deployments import lifecycle, transitions
from deployments.choices import (
    DEPLOYMENT_PLACEABLE,
    CopyState,
    DeploymentState,
)
from deployments.models import Copy, Deployment, Reservation, record_held
from deployments.placing import (
    copy_fields,
    engine_vendor,
    for_vendor,
    placed_words,
    request_for,
    reservation_size,
)
from deployments.snapshot import inventory_for, placed_to_inventory

# (state, generation, how many) of a deployment's copies, as the reconciler counts them.
CopyCounts = list[tuple[str, int, int]]


def only_wants_new_copies(deployment: Deployment, copies: CopyCounts) -> bool:
    """Wants more copies, and every copy it has serves at the current size: placing new ones
    is all a converge would do."""
    if deployment.state not in DEPLOYMENT_PLACEABLE:
        return False
    running = [(s, g, n) for s, g, n in copies if s != CopyState.STOPPED]
    current_ready = all(s == CopyState.READY and g == deployment.generation for s, g, _ in running)
    return current_ready and sum(n for _, _, n in running) < deployment.copies_wanted


def wants_room(deployment: Deployment) -> bool:
    return deployment.state in DEPLOYMENT_PLACEABLE


def batches(
    unsettled: Iterable[Deployment], counts: dict[int, CopyCounts]
) -> dict[int, list[Deployment]]:
    """Per cluster, the oldest deployments that only want new copies, up to the first one
    that wants room some other way (`unsettled` comes oldest first)."""
    by_cluster: dict[int, list[Deployment]] = {}
    closed: set[int] = set()
    for deployment in unsettled:
        cluster_id = deployment.cluster_id
        if cluster_id in closed:
            continue
        if only_wants_new_copies(deployment, counts.get(deployment.pk, [])):
            by_cluster.setdefault(cluster_id, []).append(deployment)
        elif wants_room(deployment):
            closed.add(cluster_id)
    return by_cluster


def place_batches(unsettled: list[Deployment], counts: dict[int, CopyCounts]) -> set[int]:
    """Place the batches of every cluster; the deployments placed (nothing else to do for
    them in this pass)."""
    placed: set[int] = set()
    for cluster_id, deployments in batches(unsettled, counts).items():
        placed |= place_batch(cluster_id, [d.pk for d in deployments])
    if placed:
        lifecycle.refresh_states(sorted(placed))
    return placed


@dataclass
class Planned:
    """One deployment's new copies (unsaved) and where each goes."""

    deployment: Deployment
    copies: list[Copy]
    placed: tuple[placement.Placement, ...]


def place_batch(cluster_id: int, deployment_ids: list[int]) -> set[int]:
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=cluster_id)  # cluster lock first
        deployments = locked_deployments(deployment_ids)
        planned = plan_in_order(cluster, deployments)
        if not planned:
            return set()
        write(cluster, planned)
    return {p.deployment.pk for p in planned}


def locked_deployments(ids: list[int]) -> list[Deployment]:
    """The batch's deployments, locked, still placeable and with their files on this server
    (the one-by-one way says how the download goes), oldest first."""
    locked = Deployment.objects.select_for_update(of=("self",)).select_related("model", "variant")
    rows = list(
        locked.filter(pk__in=ids, state__in=DEPLOYMENT_PLACEABLE).order_by("created_at", "pk")
    )
    kept = ready_files(rows)
    ready = []
    for deployment in rows:  # stops at the first without files: it keeps its turn
        if deployment.state == DeploymentState.REQUESTED and not any(
            lifecycle.kept_files_match(deployment, *files)
            for files in kept.get(deployment.variant_id, [])
        ):
            break
        ready.append(deployment)
    return ready


def ready_files(deployments: list[Deployment]) -> dict[int, list[tuple[str, str]]]:
    """(revision, requested revision) of the files kept on this server, per variant."""
    rows = ServerModel.objects.filter(
        variant_id__in={d.variant_id for d in deployments}, state=ServerModelState.READY
    ).values_list("variant_id", "revision", "requested_revision")
    kept: dict[int, list[tuple[str, str]]] = {}
    for variant_id, revision, requested in rows:
        kept.setdefault(variant_id, []).append((revision, requested))
    return kept


def plan_in_order(cluster: Cluster, deployments: list[Deployment]) -> list[Planned]:
    """Plan each deployment's missing copies against the snapshot and the copies planned
    before it; stop at the first that does not fit whole (it goes the one-by-one way)."""
    live, highest = copies_so_far([d.pk for d in deployments])
    inventory = inventory_for(cluster)
    vendor = engine_vendor(cluster)
    planned = []
    for deployment in deployments:
        missing = deployment.copies_wanted - live.get(deployment.pk, 0)
        if missing <= 0:
            break
        result = placement.plan(inventory, for_vendor(request_for(deployment, missing), vendor))
        if len(result.placed) < missing:
            break
        lifecycle.record_notices(deployment, result.notices)
        first = highest.get(deployment.pk, -1) + 1
        copies = [
            Copy(deployment=deployment, ordinal=first + n, generation=deployment.generation)
            for n in range(missing)
        ]
        planned.append(Planned(deployment, copies, result.placed))
        added = tuple(
            held
            for copy, placed in zip(copies, result.placed, strict=True)
            for held in placed_to_inventory(placed, deployment, copy.ordinal)
        )
        inventory = replace(inventory, reservations=inventory.reservations + added)
    return planned


def copies_so_far(ids: list[int]) -> tuple[dict[int, int], dict[int, int]]:
    """Per deployment: its live copies of the current generation, and its highest ordinal."""
    rows = Copy.objects.filter(deployment_id__in=ids).values("deployment_id")
    current = lifecycle.q_live_current_copies()
    live, highest = {}, {}
    for row in rows.annotate(live=Count("id", filter=current), highest=Max("ordinal")).order_by():
        live[row["deployment_id"]] = row["live"]
        highest[row["deployment_id"]] = row["highest"]
    return live, highest


def write(cluster: Cluster, planned: list[Planned]) -> None:
    """The copies, their reservations and their moves to COPYING_FILES, in a few statements."""
    copies = Copy.objects.bulk_create([copy for p in planned for copy in p.copies])
    placements = [placed for p in planned for placed in p.placed]
    machines, gpus = rows_for(cluster, placements)
    reservations = []
    moves = []
    for copy, placed in zip(copies, placements, strict=True):
        machine = machines[placed.machine]
        for gpu in accelerators_of(placed, machine, gpus):
            reservations.append(reserved(copy, machine, gpu, placed))
        fields = copy_fields(placed, machine)
        moves.append(
            transitions.Move(copy.pk, CopyState.COPYING_FILES, placed_words(placed), fields)
        )
    record_held(Reservation.objects.bulk_create(reservations))
    transitions.move_copies(moves)
    for copy in copies:
        lifecycle.enqueue("prepare_copy", copy.pk)


def reserved(
    copy: Copy, machine: Machine, gpu: Accelerator, placed: placement.Placement
) -> Reservation:
    return Reservation(copy=copy, machine=machine, accelerator=gpu, **reservation_size(placed))


def rows_for(
    cluster: Cluster, placements: list[placement.Placement]
) -> tuple[dict[str, Machine], dict[tuple[int, int] | str, Accelerator]]:
    """The machines and GPUs (and MIG slices, by id) the placements name, in two queries."""
    names = {p.machine for p in placements}
    machines = {m.name: m for m in Machine.objects.filter(cluster=cluster, name__in=names)}
    slice_ids = [int(p.slice_id) for p in placements if p.slice_id is not None]
    found = Accelerator.objects.filter(
        Q(machine__in=machines.values(), parent__isnull=True) | Q(pk__in=slice_ids)
    )
    gpus: dict[tuple[int, int] | str, Accelerator] = {}
    for gpu in found:
        if gpu.pk in slice_ids:
            gpus[str(gpu.pk)] = gpu
        if gpu.parent_id is None:
            gpus[(gpu.machine_id, gpu.index)] = gpu
    return machines, gpus


def accelerators_of(
    placed: placement.Placement, machine: Machine, gpus: dict[tuple[int, int] | str, Accelerator]
) -> list[Accelerator]:
    if placed.slice_id is not None:
        return [gpus[placed.slice_id]]
    return [gpus[(machine.pk, index)] for index in placed.accelerators]
