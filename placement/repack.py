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
found, and says when it found none. Past MOST_MOVES, while the budget lasts, it empties a
machine's least used GPUs copy by copy (each to the fullest other GPU with room for it), with
at most MOST_EMPTYING_MOVES moves. The same search frees a whole GPU for consolidation.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cached_property

from placement.fit import plan
from placement.types import Accelerator, Inventory, PlacementRequest, PlanResult, Reservation
from placement.units import ClusterState, Kind, MachineState, Room, build_state, share_units

MOST_MOVES = 3
# Moves tried from each state: all of them where there are no more; else those that free the
# most room where the copy was (a cluster of thousands of copies has millions of sequences).
BRANCHING = 24
MOVABLE_KINDS = (Kind.SHARED, Kind.WHOLE)
# Past MOST_MOVES, the search empties GPUs one after another, with at most this many moves.
MOST_EMPTYING_MOVES = 8


@dataclass(frozen=True)
class HeldCopy:
    """A copy that holds room now: its reservations (one per GPU it uses)."""

    deployment: str
    copy: int
    machine: str
    reservations: tuple[Reservation, ...]
    movable: bool = True

    @cached_property
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
    search = RoomForRequest(
        inventory, request, time.monotonic() + budget_s, now.estimate.total_bytes
    )
    best = search.best()
    if best is None:
        why = "the search ran out of time" if search.out_of_time else "none exists"
        message = f"No moves of other copies make it fit: {why}."
        return Repack((), now, False, message)
    moves, after = best
    result = fits(after, request)
    assert result is not None  # the search checked it
    return Repack(moves, result, True)


class Search:
    """Sequences of moves, depth by depth, until one reaches the goal (`reached`)."""

    def __init__(self, inventory: Inventory, deadline: float) -> None:
        self.inventory, self.deadline = inventory, deadline
        # Sequences are listed until half the budget is spent, so that their end states (the
        # costly part) are looked at in the rest.
        now = time.monotonic()
        self.listing_deadline = now + (deadline - now) / 2
        self._start: tuple[Rooms, list[HeldCopy]] | None = None
        self.out_of_time = False

    def rooms_and_copies(self, inventory: Inventory) -> tuple[Rooms, list[HeldCopy]]:
        """The state's rooms and held copies; the starting state's are made once (every depth
        starts from it)."""
        if inventory is not self.inventory:
            return Rooms(inventory), held_copies(inventory)
        if self._start is None:
            self._start = Rooms(inventory), held_copies(inventory)
        return self._start

    def reached(self, inventory: Inventory) -> bool:
        raise NotImplementedError

    def could_reach(self, moves: tuple[Move, ...]) -> bool:
        """A cheap look at a sequence before its end state is built: False only where the goal
        cannot hold after it."""
        return True

    def best(self) -> tuple[tuple[Move, ...], Inventory] | None:
        """Fewest moves first, then fewest bytes: depth by depth, every candidate at a depth
        looked at in that order."""
        for depth in range(1, MOST_MOVES + 1):
            candidates = [
                (moves, after)
                for moves, after in self.sequences(self.inventory, depth, frozenset())
                if self.could_reach(moves)
            ]
            # The fewest bytes first: the first whose end state reaches the goal is the best.
            candidates.sort(key=lambda pair: (sum(m.bytes for m in pair[0]), pair[0]))
            for moves, after in candidates:
                if time.monotonic() > self.deadline:
                    self.out_of_time = True
                    return None
                if self.reached(after):
                    return moves, after
            if self.out_of_time:
                return None
        return self.emptying()

    def emptying(self) -> tuple[tuple[Move, ...], Inventory] | None:
        """Past MOST_MOVES, within the budget: a machine's least used GPUs emptied one after
        the other (each of their copies, the biggest first, moved to the fullest other GPU of
        its product with room for it) until the goal holds; the machine that takes the fewest
        moves wins, then the fewest bytes. At most MOST_EMPTYING_MOVES moves."""
        found = []
        for machine in self.machines_to_empty():
            if time.monotonic() > self.deadline:
                self.out_of_time = True
                break
            emptied = self.empty_on(machine)
            if emptied is not None:
                found.append(emptied)
        return min(found, key=lambda pair: (len(pair[0]), sum(m.bytes for m in pair[0])),
                   default=None)  # fmt: skip

    def machines_to_empty(self) -> list[str]:
        """Machines by the bytes held on their least used GPU that holds any."""
        least: dict[str, int] = {}
        for (machine, _), (room, _) in Rooms(self.inventory).gpus.items():
            if room.copies:
                used = int(room.memory - room.free_bytes)
                least[machine] = min(least.get(machine, used), used)
        return sorted(least, key=lambda name: (least[name], name))

    def empty_on(self, machine: str) -> tuple[tuple[Move, ...], Inventory] | None:
        state, emptied = self.inventory, set[int]()
        moves: tuple[Move, ...] = ()
        while len(moves) <= MOST_EMPTYING_MOVES and time.monotonic() <= self.deadline:
            rooms = Rooms(state)
            gpu = rooms.least_used(machine, emptied)
            if gpu is None:
                return None
            for held in sorted(rooms.copies_on(state, machine, gpu), key=lambda h: -h.bytes):
                target = rooms.fullest_target(held, machine, emptied | {gpu})
                if not held.movable or target is None:
                    return None
                move = Move(held.deployment, held.copy, held.machine, held.accelerators,
                            target[0], target[1], held.bytes)  # fmt: skip
                state = moved_inventory(state, held, *target)
                moves = (*moves, move)
                rooms = Rooms(state)  # the next copy's target sees this one's new room
            emptied.add(gpu)
            if len(moves) > MOST_EMPTYING_MOVES:
                return None
            if self.reached(state):
                return moves, state
        return None

    def sequences(
        self, inventory: Inventory, depth: int, moved: frozenset[tuple[str, int]]
    ) -> Iterator[tuple[tuple[Move, ...], Inventory]]:
        """Every sequence of exactly `depth` moves from `inventory` (each copy moved once)."""
        if depth == 0:
            yield (), inventory
            return
        for move, after in self.single_moves(inventory, moved):
            if time.monotonic() > self.listing_deadline:
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
        rooms, copies = self.rooms_and_copies(inventory)
        candidates = []
        for held in copies:
            if not held.movable or (held.deployment, held.copy) in moved:
                continue
            if not rooms.movable(held):
                continue
            freed, size = rooms.free_after_leaving(held), held.bytes
            for machine, accelerators in rooms.targets(held):
                # Plain tuples in Move's field order: the same order, cheaper to compare.
                order = (-freed, size, held.deployment, held.copy, held.machine,
                         held.accelerators, machine, accelerators)  # fmt: skip
                candidates.append((order, held))
        for order, held in heapq.nsmallest(BRANCHING, candidates, key=lambda c: c[0]):
            deployment, copy, source, sources, target, targets = order[2:]
            move = Move(deployment, copy, source, sources, target, targets, held.bytes)
            yield move, moved_inventory(inventory, held, move.to_machine, move.to_accelerators)


class RoomForRequest(Search):
    """The fewest moves after which the request fits."""

    def __init__(
        self, inventory: Inventory, request: PlacementRequest, deadline: float, need: int
    ) -> None:
        super().__init__(inventory, deadline)
        self.request = request
        self.need = need  # bytes one copy's estimate takes on each of its GPUs
        rooms, _ = self.rooms_and_copies(inventory)
        # Each GPU's free bytes and copies now, for could_reach.
        self.free_now = {key: int(room.free_bytes) for key, (room, _) in rooms.gpus.items()}
        self.copies_now = {key: room.copies for key, (room, _) in rooms.gpus.items()}
        self.untouched_now: dict[str, int] = {}
        for (machine, _), count in self.copies_now.items():
            self.untouched_now[machine] = self.untouched_now.get(machine, 0) + (count == 0)

    def could_reach(self, moves: tuple[Move, ...]) -> bool:
        """Moves change no room but their GPUs': where the request fits now on none, one of
        them must end with the estimate's bytes free (a share), or a machine with the untouched
        GPUs a copy takes (whole GPUs). Counted from the moves, without building the state."""
        free: dict[tuple[str, int], int] = {}
        copies: dict[tuple[str, int], int] = {}
        for move in moves:
            each = move.bytes // len(move.from_accelerators)
            leaving = [((move.from_machine, i), 1) for i in move.from_accelerators]
            arriving = [((move.to_machine, i), -1) for i in move.to_accelerators]
            for key, sign in leaving + arriving:
                free[key] = free.get(key, self.free_now[key]) + sign * each
                copies[key] = copies.get(key, self.copies_now[key]) - sign
        if self.request.accelerators_per_copy < 1:
            return any(room >= self.need for room in free.values())
        untouched = dict.fromkeys((machine for machine, _ in copies), 0)
        for key, count in copies.items():
            untouched[key[0]] += (count == 0) - (self.copies_now[key] == 0)
        wanted = self.request.tensor_parallel
        return any(
            self.untouched_now.get(machine, 0) + change >= wanted
            for machine, change in untouched.items()
        )

    def reached(self, inventory: Inventory) -> bool:
        return self.may_fit(inventory) and fits(inventory, self.request) is not None

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


class Rooms:
    """Free room per GPU of a state, for the moves' targets; GPUs whose room has the same shape
    are one target (the first by name), so a copy's targets are looked up, not searched for."""

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
        # Per product: the shared GPUs by the shape of their room (free bytes, free share,
        # memory), each shape's GPUs by name; and the untouched GPUs of each machine.
        self.shared: dict[str, dict[tuple[float, float, int], list[tuple[str, int]]]] = {}
        self.untouched: dict[str, dict[str, list[int]]] = {}
        for key, (room, accelerator) in sorted(self.gpus.items()):
            product = str(accelerator.product)
            if room.kind is Kind.SHARED:
                shape = (room.free_bytes, room.free_share, room.memory)
                self.shared.setdefault(product, {}).setdefault(shape, []).append(key)
            if room.copies == 0:
                self.untouched.setdefault(product, {}).setdefault(key[0], []).append(key[1])

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
        product = self.product(held)
        if held.whole:
            yield from self._whole_targets(held, product)
            return
        reservation = held.reservations[0]
        own, needs = (held.machine, held.accelerators[0]), share_units(reservation.share)
        for (free_bytes, free_share, _), gpus in self.shared.get(product, {}).items():
            if free_share < needs or free_bytes < reservation.bytes:
                continue
            # The same room elsewhere is the same move: the first GPU of the shape, not its own.
            first = gpus[0] if gpus[0] != own else (gpus[1] if len(gpus) > 1 else None)
            if first is not None:
                yield first[0], (first[1],)

    def least_used(self, machine: str, emptied: set[int]) -> int | None:
        """The machine's GPU (not yet emptied) that holds copies and the fewest bytes."""
        used = [
            (int(room.memory - room.free_bytes), index)
            for (name, index), (room, _) in self.gpus.items()
            if name == machine and index not in emptied and room.copies
        ]
        return min(used)[1] if used else None

    def copies_on(self, inventory: Inventory, machine: str, gpu: int) -> list[HeldCopy]:
        """The copies holding room on the GPU (None of them may be fixed room)."""
        on = [h for h in held_copies(inventory) if h.machine == machine and gpu in h.accelerators]
        fixed = any(
            not r.deployment and r.machine == machine and r.accelerator == gpu
            for r in inventory.reservations
        )
        return [] if fixed else on

    def fullest_target(
        self, held: HeldCopy, machine: str, keep_free: set[int]
    ) -> tuple[str, tuple[int, ...]] | None:
        """A shared GPU of the copy's product with room for it and the least room besides
        (not one of `keep_free` on `machine`); None for a copy of whole GPUs."""
        if held.whole or not self.movable(held):
            return None
        reservation = held.reservations[0]
        needs, product = share_units(reservation.share), self.product(held)
        shapes = sorted(self.shared.get(product, {}).items(), key=lambda item: item[0][0])
        for (free_bytes, free_share, _), gpus in shapes:
            if free_share < needs or free_bytes < reservation.bytes:
                continue
            for name, index in gpus:
                if (name, index) != (held.machine, held.accelerators[0]) and not (
                    name == machine and index in keep_free
                ):
                    return name, (index,)
        return None

    def _whole_targets(self, held: HeldCopy, product: str) -> Iterator[tuple[str, tuple[int, ...]]]:
        n = len(held.accelerators)
        seen = set()
        for machine, indexes in self.untouched.get(product, {}).items():
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


# --- consolidation: free whole GPUs by packing copies that share GPUs --------------------


@dataclass(frozen=True)
class Fragmentation:
    """Free room on one product's GPUs: in all, on the roomiest GPU, and on untouched GPUs."""

    product: str
    free_bytes: int
    largest_free_bytes: int
    untouched_bytes: int

    @property
    def percent(self) -> int:
        """The share of the free room that lies in pieces (on GPUs some copy already uses)."""
        if not self.free_bytes:
            return 0
        return round(100 * (self.free_bytes - self.untouched_bytes) / self.free_bytes)


def fragmentation(inventory: Inventory) -> list[Fragmentation]:
    """Per product, of the GPUs copies may share or take whole (MIG, MPS and unified memory
    are left out: moves never touch them)."""
    totals: dict[str, list[int]] = {}
    for room, accelerator in Rooms(inventory).gpus.values():
        free = max(0, int(room.free_bytes))
        row = totals.setdefault(str(accelerator.product), [0, 0, 0])
        row[0] += free
        row[1] = max(row[1], free)
        row[2] += free if room.copies == 0 else 0
    return [Fragmentation(product, *row) for product, row in sorted(totals.items())]


def untouched_gpus(inventory: Inventory) -> int:
    return sum(1 for room, _ in Rooms(inventory).gpus.values() if room.copies == 0)


class Consolidation(Search):
    """The fewest moves after which one more GPU has nothing on it."""

    def __init__(self, inventory: Inventory, deadline: float) -> None:
        super().__init__(inventory, deadline)
        self.untouched_now = untouched_gpus(inventory)

    def reached(self, inventory: Inventory) -> bool:
        return untouched_gpus(inventory) > self.untouched_now


def plan_consolidation(inventory: Inventory, budget_s: float = 0.2) -> tuple[tuple[Move, ...], str]:
    """Moves of copies that share GPUs onto others' free room after which one more GPU is
    whole and free, in order; or none, and why."""
    search = Consolidation(inventory, time.monotonic() + budget_s)
    best = search.best()
    if best is None:
        why = "the search ran out of time" if search.out_of_time else "none exists"
        return (), f"No moves of at most {MOST_MOVES} copies free a whole GPU: {why}."
    return best[0], ""
