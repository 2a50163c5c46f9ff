"""Re-packing (placement/repack.py) on crafted fragmented clusters: the fewest moves, then the
fewest bytes; an order when one is needed; none when none exists; copies that may not move stay;
and no state along a plan over-commits a GPU (also as a property over random clusters)."""

from __future__ import annotations

import dataclasses
import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from placement_examples import (
    QWEN3_0_6B,
    QWEN3_8B,
    cluster,
    h100,
    h100_machine,
    h100_mig,
    machine,
    request,
    reserve,
)

from placement import Inventory, Reservation, plan
from placement.cli import main
from placement.repack import (
    fragmentation,
    over_committed,
    plan_consolidation,
    plan_with_moves,
    states_along,
)
from placement.scenario import scenario_to_json


def held(
    machine: str, index: int, share: float, deployment: str, movable: bool = True
) -> Reservation:
    return dataclasses.replace(reserve(machine, index, share), deployment=deployment, copy=1,
                               movable=movable)  # fmt: skip


def moved(repack) -> list[tuple[str, str, tuple[int, ...], str, tuple[int, ...]]]:
    return [
        (m.deployment, m.from_machine, m.from_accelerators, m.to_machine, m.to_accelerators)
        for m in repack.moves
    ]


def never_over_committed(inventory: Inventory, moves) -> None:
    for state in states_along(inventory, moves):
        assert over_committed(state) == [], state


WHOLE_GPU = request(QWEN3_8B, 1.0)


def test_two_half_used_gpus_make_one_whole_gpu_with_one_move() -> None:
    inventory = cluster(h100_machine("m1", 2),
                        reservations=(held("m1", 0, 0.5, "a"), held("m1", 1, 0.5, "b")))  # fmt: skip
    assert plan(inventory, WHOLE_GPU).placed == ()  # it does not fit now
    repack = plan_with_moves(inventory, WHOLE_GPU)
    assert repack.found and len(repack.moves) == 1
    assert moved(repack) == [("a", "m1", (0,), "m1", (1,))]  # equal bytes: the first by name
    assert [(p.machine, p.accelerators) for p in repack.result.placed] == [("m1", (0,))]
    never_over_committed(inventory, repack.moves)


def test_the_fewest_moves_win_over_a_gpu_that_needs_more() -> None:
    # GPU 0 would need both its copies moved; GPU 1's single copy fits beside GPU 2's.
    inventory = cluster(h100_machine("m1", 3), reservations=(
        held("m1", 0, 0.3, "a"), held("m1", 0, 0.3, "b"), held("m1", 1, 0.4, "c"),
        held("m1", 2, 0.5, "d")))  # fmt: skip
    repack = plan_with_moves(inventory, WHOLE_GPU)
    assert moved(repack) == [("c", "m1", (1,), "m1", (0,))]
    never_over_committed(inventory, repack.moves)


def test_two_moves_when_no_single_move_frees_a_gpu() -> None:
    inventory = cluster(h100_machine("m1", 3), reservations=(
        held("m1", 0, 0.3, "a"), held("m1", 0, 0.3, "b"), held("m1", 1, 0.6, "c"),
        held("m1", 2, 0.6, "d")))  # fmt: skip
    repack = plan_with_moves(inventory, WHOLE_GPU)
    assert repack.found and len(repack.moves) == 2
    assert {m.deployment for m in repack.moves} == {"a", "b"}
    never_over_committed(inventory, repack.moves)


def test_a_sequence_that_needs_an_order_gets_it_and_ties_go_to_the_fewest_bytes() -> None:
    # Two GPUs of one machine for a tensor-parallel copy: three moves at least. The cheapest
    # frees m1 (1.3 GPUs of copies moved: a, b, and c out of their way), not m2 (1.4): a joins
    # c on m2 GPU 0, c moves on, then b takes its place; b cannot go before c has left.
    inventory = cluster(h100_machine("m1", 2), h100_machine("m2", 2), reservations=(
        held("m1", 0, 0.5, "a"), held("m1", 1, 0.5, "b"), held("m2", 0, 0.3, "c"),
        held("m2", 1, 0.6, "x")))  # fmt: skip
    repack = plan_with_moves(inventory, request(QWEN3_8B, 2.0))
    assert repack.found and len(repack.moves) == 3
    assert sorted(m.deployment for m in repack.moves) == ["a", "b", "c"]
    assert sum(m.bytes for m in repack.moves) == sum(
        r.bytes for r in inventory.reservations if r.deployment in "abc"
    )
    assert [(p.machine, p.accelerators) for p in repack.result.placed] == [("m1", (0, 1))]
    never_over_committed(inventory, repack.moves)


def test_none_is_found_when_there_is_nowhere_to_move_and_it_says_so() -> None:
    inventory = cluster(h100_machine("m1", 1), reservations=(held("m1", 0, 0.5, "a"),))
    repack = plan_with_moves(inventory, WHOLE_GPU)
    assert not repack.found and repack.moves == ()
    assert repack.message == "No moves of other copies make it fit: none exists."
    assert repack.result.not_placed  # the plan without moves, with its reason


def test_a_copy_that_may_not_move_stays_and_another_moves_instead() -> None:
    inventory = cluster(h100_machine("m1", 2), reservations=(
        held("m1", 0, 0.5, "a", movable=False), held("m1", 1, 0.5, "b")))  # fmt: skip
    repack = plan_with_moves(inventory, WHOLE_GPU)
    assert moved(repack) == [("b", "m1", (1,), "m1", (0,))]
    frozen = cluster(h100_machine("m1", 2), reservations=(
        held("m1", 0, 0.5, "a", movable=False), held("m1", 1, 0.5, "b", movable=False)))  # fmt: skip
    assert not plan_with_moves(frozen, WHOLE_GPU).found


def test_room_that_names_no_copy_never_moves() -> None:
    inventory = cluster(
        h100_machine("m1", 2), reservations=(reserve("m1", 0, 0.5), reserve("m1", 1, 0.5))
    )
    assert not plan_with_moves(inventory, WHOLE_GPU).found


GPUS = [("m0", 0), ("m0", 1), ("m1", 0), ("m1", 1)]
PERCENTS = st.sampled_from([20, 25, 30, 40, 50, 60])  # shares of a GPU, in hundredths


@st.composite
def gpu_to_free(draw) -> tuple[Inventory, int, bool]:
    """Two machines of two H100s, every GPU but one (`freed`) holding one or two copies, and
    up to three copies on `freed` each with room waiting for it on another GPU: moving those
    there, one by one in any order, frees `freed` for a whole-GPU request, so a plan of that
    many moves exists (the case says how many, and whether the other copies may move). At most
    eight copies, each with at most three places to go: the search looks at every sequence
    (BRANCHING is 24)."""
    freed = draw(st.sampled_from(GPUS))
    others = [gpu for gpu in GPUS if gpu != freed]
    others_movable = draw(st.booleans())
    used = dict.fromkeys(GPUS, 0)
    reservations = []
    for n, gpu in enumerate(others):
        for percent in draw(st.lists(PERCENTS, min_size=1, max_size=2 if n < 2 else 1)):
            if used[gpu] + percent <= 100:
                name = f"stays-{len(reservations)}"
                reservations.append(held(*gpu, percent / 100, name, movable=others_movable))
                used[gpu] += percent
    waiting = dict(used)  # with the room promised to the copies that will move there
    witness_moves = 0
    for percent, first_choice in draw(
        st.lists(st.tuples(PERCENTS, st.sampled_from(others)), min_size=1, max_size=3)
    ):
        turn = others.index(first_choice)
        with_room = [gpu for gpu in others[turn:] + others[:turn] if waiting[gpu] + percent <= 100]
        if with_room and used[freed] + percent <= 100:
            reservations.append(held(*freed, percent / 100, f"moves-{witness_moves}"))
            used[freed] += percent
            waiting[with_room[0]] += percent
            witness_moves += 1
    inventory = cluster(
        h100_machine("m0", 2), h100_machine("m1", 2), reservations=tuple(reservations)
    )
    return inventory, witness_moves, others_movable


@settings(max_examples=60, deadline=None)
@given(gpu_to_free())
def test_where_moves_can_free_a_gpu_a_plan_is_found_and_no_state_along_it_over_commits(
    case: tuple[Inventory, int, bool],
) -> None:
    inventory, witness_moves, others_movable = case
    # A budget no loaded test machine runs out of: the search ends at its first plan anyway.
    repack = plan_with_moves(inventory, request(QWEN3_0_6B, 1.0), budget_s=60)
    assert repack.found, repack.message
    assert len(repack.result.placed) == 1
    if others_movable:
        # Freeing another GPU may take fewer moves, never more than the plan known to work; and
        # none only where `freed` is empty (every other GPU holds a copy).
        assert min(witness_moves, 1) <= len(repack.moves) <= witness_moves
    else:
        assert len(repack.moves) == witness_moves  # only the copies on `freed` can move: all do
    never_over_committed(inventory, repack.moves)


def test_the_command_line_answers_the_moves_in_order_and_refuses_bad_fields() -> None:
    inventory = cluster(h100_machine("m1", 2),
                        reservations=(held("m1", 0, 0.5, "a"), held("m1", 1, 0.5, "b")))  # fmt: skip
    from placement.scenario import Scenario

    data = scenario_to_json(Scenario(dataclasses.replace(WHOLE_GPU, allow_moves=True), inventory))
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan"], io.StringIO(json.dumps(data)), out, err) == 0, err.getvalue()
    answer = json.loads(out.getvalue())
    assert answer["moves"] == [{"deployment": "a", "copy": 1, "from": {"machine": "m1", "accelerators": [0]},
                                "to": {"machine": "m1", "accelerators": [1]}, "gb": 39.6}]  # fmt: skip
    assert [p["machine"] for p in answer["placed"]] == ["m1"]
    without = json.loads(json.dumps(data))
    without["request"].pop("allow_moves")
    out = io.StringIO()
    assert main(["plan"], io.StringIO(json.dumps(without)), out, io.StringIO()) == 0
    assert "moves" not in json.loads(out.getvalue()) and json.loads(out.getvalue())["placed"] == []

    for change, words in (
        (
            lambda d: d["request"].update(allow_moves="yes"),
            "request.allow_moves: must be true or false",
        ),
        (lambda d: d["cluster"]["reservations"][0].pop("deployment"), "copy: needs the deployment"),
        (
            lambda d: d["cluster"]["reservations"][0].update(movable=1),
            "movable: must be true or false",
        ),
        (lambda d: d["cluster"]["reservations"][0].update(copy=-1), "copy: must not be negative"),
    ):
        bad = json.loads(json.dumps(data))
        change(bad)
        err = io.StringIO()
        assert main(["plan"], io.StringIO(json.dumps(bad)), io.StringIO(), err) == 2
        assert words in err.getvalue(), err.getvalue()


# --- consolidation: moves that free a whole GPU ------------------------------------------


def test_consolidation_packs_two_half_used_gpus_into_one_and_frees_the_other() -> None:
    inventory = cluster(h100_machine("m1", 2),
                        reservations=(held("m1", 0, 0.25, "a"), held("m1", 1, 0.5, "b")))  # fmt: skip
    moves, why = plan_consolidation(inventory)
    assert why == ""
    # The smaller copy moves: the fewest bytes to load again.
    assert [(m.deployment, m.to_accelerators) for m in moves] == [("a", (1,))]
    never_over_committed(inventory, moves)


def test_consolidation_finds_nothing_when_no_copy_fits_beside_another() -> None:
    inventory = cluster(h100_machine("m1", 2),
                        reservations=(held("m1", 0, 0.75, "a"), held("m1", 1, 0.75, "b")))  # fmt: skip
    moves, why = plan_consolidation(inventory)
    assert moves == ()
    assert why == "No moves of at most 3 copies free a whole GPU: none exists."


def test_consolidation_never_moves_a_copy_that_may_not_move() -> None:
    inventory = cluster(h100_machine("m1", 2), reservations=(
        held("m1", 0, 0.25, "a", movable=False), held("m1", 1, 0.5, "b", movable=False)))  # fmt: skip
    assert plan_consolidation(inventory)[0] == ()


def test_fragmentation_counts_the_free_room_that_lies_in_pieces() -> None:
    inventory = cluster(h100_machine("m1", 3),
                        reservations=(held("m1", 0, 0.5, "a"), held("m1", 1, 0.5, "b")))  # fmt: skip
    [h100] = fragmentation(inventory)
    # An H100 here is round(79.2 × 2**30) = 85_040_352_461 bytes; half of one reserves
    # int(0.5 × 85_040_352_461) = 42_520_176_230, leaving 42_520_176_231 on each of GPUs 0 and 1.
    # Free: 2 × 42_520_176_231 + 85_040_352_461 (GPU 2) = 170_080_704_923, of which
    # 85_040_352_462 lies in pieces: 50.0000000003 %, 50 rounded.
    assert h100.product == "NVIDIA-H100-80GB-HBM3"
    assert h100.free_bytes == 170_080_704_923
    assert h100.largest_free_bytes == 85_040_352_461  # the untouched GPU 2
    assert h100.untouched_bytes == 85_040_352_461
    assert h100.percent == 50
    assert fragmentation(cluster(h100_machine("m1", 2)))[0].percent == 0


def test_past_three_moves_the_search_empties_a_gpu_copy_by_copy_within_the_budget() -> None:
    # GPU 0 holds four eighths; GPU 1 half a GPU that may not move: only 4 moves free GPU 0.
    small = [dataclasses.replace(reserve("m1", 0, 0.125), deployment=name, copy=1)
             for name in "abcd"]  # fmt: skip
    inventory = cluster(h100_machine("m1", 2),
                        reservations=(*small, held("m1", 1, 0.5, "fixed", movable=False)))  # fmt: skip
    repack = plan_with_moves(inventory, WHOLE_GPU)
    assert repack.found, repack.message
    assert sorted(moved(repack)) == [(name, "m1", (0,), "m1", (1,)) for name in "abcd"]
    assert [(p.machine, p.accelerators) for p in repack.result.placed] == [("m1", (0,))]
    never_over_committed(inventory, repack.moves)


def test_emptying_stops_at_eight_moves() -> None:
    tiny = [dataclasses.replace(reserve("m1", 0, 0.05), deployment=f"t{i}", copy=1)
            for i in range(9)]  # fmt: skip
    fixed = held("m1", 1, 0.5, "fixed", movable=False)
    inventory = cluster(h100_machine("m1", 2), reservations=(*tiny, fixed))
    # A budget no loaded test machine runs out of: the answer is that none exists, not late.
    repack = plan_with_moves(inventory, WHOLE_GPU, budget_s=60)
    assert not repack.found  # nine moves would empty GPU 0
    assert repack.message == "No moves of other copies make it fit: none exists."


def test_a_tensor_parallel_copy_moves_whole_to_untouched_gpus_of_another_machine() -> None:
    # m1's four GPUs are what a 4-GPU copy needs; a 2-GPU copy holds two of them.
    pair = tuple(dataclasses.replace(reserve("m1", i, 1.0), deployment="tp", copy=1)
                 for i in (0, 1))  # fmt: skip
    inventory = cluster(h100_machine("m1", 4), h100_machine("m2", 2), reservations=pair)
    four = request(QWEN3_8B, 4.0)
    assert plan(inventory, four).placed == ()
    repack = plan_with_moves(inventory, four)
    assert moved(repack) == [("tp", "m1", (0, 1), "m2", (0, 1))]
    assert [(p.machine, p.accelerators) for p in repack.result.placed] == [("m1", (0, 1, 2, 3))]
    never_over_committed(inventory, repack.moves)


def test_copies_in_mig_slices_neither_move_nor_take_moves() -> None:
    # GPU 0 is in MIG slices, each used by a copy; GPU 1 is half used by a copy that has
    # nowhere to go but GPU 0, which moves never touch: neither way makes a GPU whole.
    in_slices = tuple(dataclasses.replace(reserve("m1", 0, 0.1), slice=s, deployment=f"mig-{s}",
                                          copy=1) for s in "abcd")  # fmt: skip
    inventory = cluster(machine("m1", h100_mig(0), h100(1)),
                        reservations=(*in_slices, held("m1", 1, 0.5, "b")))  # fmt: skip
    assert plan(inventory, WHOLE_GPU).placed == ()
    repack = plan_with_moves(inventory, WHOLE_GPU)
    assert not repack.found and repack.moves == ()
    assert plan_consolidation(inventory) == (
        (),
        "No moves of at most 3 copies free a whole GPU: none exists.",
    )
