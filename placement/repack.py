"""Re-packing: the fewest moves of other copies after which a request fits (then the fewest
bytes to load), for a request that does not fit now but would on a less fragmented cluster.

A move is make-before-break: the copy starts at its new place while the old one still holds its
room, so each move needs its target's room free in the state before it, and a sequence may need
an order (a copy moves out of the way of the next); the plan gives that order, and no state
along it over-commits a GPU. A copy moves within its own size: to a GPU (or n GPUs of one
machine) of the same product, as a share of a shared GPU, a whole untouched GPU, or n untouched
GPUs of one machine. Copies whose deployment says `movable: false` never move. MIG slices,
time-sliced, MPS and unified-memory units are neither sources nor targets of moves.

The search is exhaustive up to MOST_MOVES moves where a state offers at most BRANCHING moves
(beyond, the moves that free the most room where their copy was come first), depth by depth so
that the first depth with a plan has the fewest moves. It stops at the budget with the best plan
found, and says when it found none.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

from placement.fit import plan
from placement.types import Accelerator, Inventory, PlacementRequest, PlanResult, Reservation
from placement.units import ClusterState, Kind, MachineState, Room, build_state, share_units

MOST_MOVES = 3
# Moves tried from each state: all of them where there are no more; else those that free the
# most room where the copy was (a cluster of thousands of copies has millions of sequences).
BRANCHING = 24
MOVABLE_KINDS = (Kind.SHARED, Kind.WHOLE)


@dataclass(frozen=True)
class HeldCopy:
    """A copy that holds room now: its reservations (one per GPU it uses)."""

    deployment: str
    copy: int
    machine: str
    reservations: tuple[Reservation, ...]
    movable: bool = True

    @property
    def accelerators(self) -> tuple[int, ...]:
        return tuple(sorted(r.accelerator for r in self.reservations))

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.reservations)

    @property
    def whole(self) -> bool:
        return len(self.reservations) > 1 or self.reservations[0].share >= 1


@dataclass(frozen=True, order=True)
class Move:
    deployment: str
    copy: int
    from_machine: str
    from_accelerators: tuple[int, ...]
    to_machine: str
    to_accelerators: tuple[int, ...]
    bytes: int


@dataclass(frozen=True)
class Repack:
    """The moves to run, in order, and the plan of the request after them; or why none."""

    moves: tuple[Move, ...]
    result: PlanResult
    found: bool
    message: str = ""


def held_copies(inventory: Inventory) -> list[HeldCopy]:
    """The reservations grouped by the copy that holds them (those naming none are fixed)."""
    groups: dict[tuple[str, int], list[Reservation]] = {}
    for reservation in inventory.reservations:
        if reservation.deployment:
            groups.setdefault((reservation.deployment, reservation.copy), []).append(reservation)
    return [
        HeldCopy(deployment, copy, rows[0].machine, tuple(rows), all(r.movable for r in rows))
        for (deployment, copy), rows in sorted(groups.items())
    ]


def fits(inventory: Inventory, request: PlacementRequest) -> PlanResult | None:
    result = plan(inventory, request)
    return result if len(result.placed) == request.copies else None


def plan_with_moves(
    inventory: Inventory, request: PlacementRequest, budget_s: float = 0.2
) -> Repack:
    """The request's plan, after the fewest moves that make it fit (none when it fits now)."""
    now = plan(inventory, request)
    if len(now.placed) == request.copies:
        return Repack((), now, True)
    search = Search(inventory, request, time.monotonic() + budget_s, now.estimate.total_bytes)
    best = search.best()
    if best is None:
        why = "the search ran out of time" if search.out_of_time else "none exists"
        message = f"No moves of at most {MOST_MOVES} copies make it fit: {why}."
        return Repack((), now, False, message)
    moves, after = best
    result = fits(after, request)
    assert result is not None  # the search checked it
    return Repack(moves, result, True)


class Search:
    def __init__(
        self, inventory: Inventory, request: PlacementRequest, deadline: float, need: int
    ) -> None:
        self.inventory, self.request, self.deadline = inventory, request, deadline
        self.need = need  # bytes one copy's estimate takes on each of its GPUs
        self.out_of_time = False

    def may_fit(self, inventory: Inventory) -> bool:
        """A quick look before the plan: some GPU has the estimate's bytes free (whole GPUs:
        some machine has the untouched GPUs a copy takes)."""
        state = build_state(inventory)
        if self.request.accelerators_per_copy < 1:
            # The units of a group have the same room: one look per group (not per GPU).
            return any(group.count and group.free_bytes >= self.need for group in state.groups)
        most = max(
            (self.untouched_holding(state, machine) for machine in state.machines), default=0
        )
        return most >= self.request.tensor_parallel

    def untouched_holding(self, state: ClusterState, machine: MachineState) -> int:
        """The machine's GPUs with nothing on them and the estimate's bytes."""
        types = machine.shape.types
        return sum(1 for p in state.pristine_positions(machine) if types[p].memory >= self.need)

    def best(self) -> tuple[tuple[Move, ...], Inventory] | None:
        """Fewest moves first, then fewest bytes: depth by depth, every candidate at a depth."""
        for depth in range(1, MOST_MOVES + 1):
            found = [
                (moves, after)
                for moves, after in self.sequences(self.inventory, depth, frozenset())
                if self.may_fit(after) and fits(after, self.request)
            ]
            if found:
                return min(found, key=lambda pair: (sum(m.bytes for m in pair[0]), pair[0]))
            if self.out_of_time:
                return None
        return None

    def sequences(
        self, inventory: Inventory, depth: int, moved: frozenset[tuple[str, int]]
    ) -> Iterator[tuple[tuple[Move, ...], Inventory]]:
        """Every sequence of exactly `depth` moves from `inventory` (each copy moved once)."""
        if depth == 0:
            yield (), inventory
            return
        for move, after in self.single_moves(inventory, moved):
            if time.monotonic() > self.deadline:
                self.out_of_time = True
                return
            key = (move.deployment, move.copy)
            for rest, final in self.sequences(after, depth - 1, moved | {key}):
                yield (move, *rest), final

    def single_moves(
        self, inventory: Inventory, moved: frozenset[tuple[str, int]]
    ) -> Iterator[tuple[Move, Inventory]]:
        """Each movable copy to each distinct place free for it now (places that differ only
        by name are tried once: the first by name); past BRANCHING of them, those that leave
        the most room free where the copy was (what the request needs) first."""
        rooms = Rooms(inventory)
        candidates = []
        for held in held_copies(inventory):
            if not held.movable or (held.deployment, held.copy) in moved:
                continue
            if not rooms.movable(held):
                continue
            freed = rooms.free_after_leaving(held)
            for machine, accelerators in rooms.targets(held):
                move = Move(
                    held.deployment,
                    held.copy,
                    held.machine,
                    held.accelerators,
                    machine,
                    accelerators,
                    held.bytes,
                )
                candidates.append((-freed, move.bytes, move, held))
        candidates.sort(key=lambda c: c[:3])
        for _, _, move, held in candidates[:BRANCHING]:
            yield move, moved_inventory(inventory, held, move.to_machine, move.to_accelerators)


class Rooms:
    """Free room per GPU of a state, for the moves' targets."""

    def __init__(self, inventory: Inventory) -> None:
        state = build_state(inventory)
        # (machine, index) -> the GPU's room and accelerator. The rooms are read, never changed:
        # a GPU still in a group shares its group's (no GpuState made per GPU, per state).
        self.gpus: dict[tuple[str, int], tuple[Room, Accelerator]] = {
            (machine.name, machine.shape.indices[p][0]): (
                state.room(machine, p),
                machine.accelerator(p),
            )
            for machine in state.machines
            for p, unit_type in enumerate(machine.shape.types)
            if unit_type.kind in MOVABLE_KINDS
        }

    def free_after_leaving(self, held: HeldCopy) -> int:
        """Bytes free on the copy's (first) GPU once it has left."""
        room, _ = self.gpus[(held.machine, held.accelerators[0])]
        return int(room.free_bytes) + held.reservations[0].bytes

    def movable(self, held: HeldCopy) -> bool:
        return all((held.machine, index) in self.gpus for index in held.accelerators)

    def product(self, held: HeldCopy) -> str:
        _, accelerator = self.gpus[(held.machine, held.accelerators[0])]
        return str(accelerator.product)

    def targets(self, held: HeldCopy) -> Iterator[tuple[str, tuple[int, ...]]]:
        product, seen = self.product(held), set()
        if held.whole:
            yield from self._whole_targets(held, product)
            return
        reservation = held.reservations[0]
        for (machine, index), (room, accelerator) in sorted(self.gpus.items()):
            if (machine, index) == (held.machine, held.accelerators[0]):
                continue
            if room.kind is not Kind.SHARED or accelerator.product != product:
                continue
            too_small = room.free_share < share_units(reservation.share)
            if too_small or room.free_bytes < reservation.bytes:
                continue
            shape = (room.free_bytes, room.free_share, room.memory)
            if shape not in seen:  # the same room elsewhere is the same move
                seen.add(shape)
                yield machine, (index,)

    def _whole_targets(self, held: HeldCopy, product: str) -> Iterator[tuple[str, tuple[int, ...]]]:
        n = len(held.accelerators)
        untouched: dict[str, list[int]] = {}
        for (machine, index), (room, accelerator) in sorted(self.gpus.items()):
            if room.copies == 0 and accelerator.product == product:
                untouched.setdefault(machine, []).append(index)
        seen = set()
        for machine, indexes in untouched.items():
            if machine == held.machine and set(indexes) & set(held.accelerators):
                indexes = [i for i in indexes if i not in held.accelerators]
            if len(indexes) < n:
                continue
            shape = len(indexes)
            if (shape, machine == held.machine) not in seen:
                seen.add((shape, machine == held.machine))
                yield machine, tuple(indexes[:n])


def moved_inventory(
    inventory: Inventory, held: HeldCopy, machine: str, accelerators: tuple[int, ...]
) -> Inventory:
    """The state after the move: the copy's room at its new place, its old room given back."""
    kept = tuple(
        r
        for r in inventory.reservations
        if not (r.deployment == held.deployment and r.copy == held.copy)
    )
    per_gpu = held.reservations[0]
    new = tuple(
        replace(per_gpu, machine=machine, accelerator=index, slice=None) for index in accelerators
    )
    return Inventory(inventory.machines, kept + new, inventory.sharing)


def over_committed(inventory: Inventory) -> list[tuple[str, int]]:
    """GPUs holding more than they have (what no state along a plan may do)."""
    state = build_state(inventory)
    return [
        (gpu.machine.name, gpu.accelerator.index)
        for gpu in state.gpus
        if gpu.free_bytes < 0 or gpu.free_share < 0
    ]


def states_along(inventory: Inventory, moves: tuple[Move, ...]) -> Iterator[Inventory]:
    """Each state a sequence goes through, make-before-break: the new room taken while the old
    is still held, then the old given back."""
    current = inventory
    for move in moves:
        held = next(
            h
            for h in held_copies(current)
            if (h.deployment, h.copy) == (move.deployment, move.copy)
        )
        per_gpu = held.reservations[0]
        both = current.reservations + tuple(
            replace(per_gpu, machine=move.to_machine, accelerator=i, slice=None, copy=-1)
            for i in move.to_accelerators
        )
        yield Inventory(current.machines, both, current.sharing)
        current = moved_inventory(current, held, move.to_machine, move.to_accelerators)
        yield current
