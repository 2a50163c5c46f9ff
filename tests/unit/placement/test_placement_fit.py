"""Table-driven placement scenarios: where copies go, with what budget, and what is recorded."""

from __future__ import annotations

import dataclasses

import pytest
from placement_examples import (
    H100_BYTES,
    LLAMA_3_3_70B,
    QWEN3_0_6B,
    QWEN3_8B,
    QWEN3_32B,
    cluster,
    gib,
    h100,
    h100_machine,
    h100_mig,
    machine,
    request,
    reserve,
)

from placement import (
    ClusterSharing,
    GpuSharing,
    Inventory,
    Machine,
    NoFitReason,
    Placement,
    Policy,
    Reservation,
    plan,
)
from placement.estimate import estimate_copy


def where(placements: tuple[Placement, ...]) -> list[tuple[str, tuple[int, ...]]]:
    return [(p.machine, p.accelerators) for p in placements]


def test_two_half_copies_share_one_gpu_and_a_third_goes_to_the_next() -> None:
    result = plan(cluster(h100_machine("m1", 2)), request(QWEN3_8B, 0.5, copies=3))
    assert where(result.placed) == [("m1", (0,)), ("m1", (0,)), ("m1", (1,))]
    assert [p.share for p in result.placed] == [0.5, 0.5, 0.5]
    assert result.placed[0].allocated_bytes == H100_BYTES // 2
    assert result.placed[0].gpu_memory_utilization == 0.4  # 0.8 x s (DESIGN §4)
    assert (result.placed[0].hardware_class, result.placed[0].sharing_class) == (
        "software_shared",
        "shared",
    )
    assert (result.fit_now, result.fit_empty, result.not_placed) == (4, 4, ())


def test_binpack_fills_a_partly_used_gpu_before_an_untouched_one() -> None:
    inventory = cluster(h100_machine("m1", 2), reservations=(reserve("m1", 1, 0.5),))
    result = plan(inventory, request(QWEN3_0_6B, 0.25, copies=2))
    assert where(result.placed) == [("m1", (1,)), ("m1", (1,))]


def test_spread_puts_copies_on_different_machines() -> None:
    inventory = cluster(h100_machine("m1", 2), h100_machine("m2", 2))
    result = plan(inventory, request(QWEN3_0_6B, 0.25, copies=3, policy=Policy.SPREAD))
    assert [p.machine for p in result.placed] == ["m1", "m2", "m1"]
    assert result.placed[2].accelerators == (1,)  # the least busy GPU of m1
    packed = plan(inventory, request(QWEN3_0_6B, 0.25, copies=3))
    assert where(packed.placed) == [("m1", (0,))] * 3


def test_spread_counts_every_copy_a_gpu_holds_when_it_looks_for_the_least_busy() -> None:
    # m1's GPU held one quarter, then another: the planner must not take it for a GPU that
    # holds one quarter (as m2's does) because it once did.
    inventory = cluster(
        h100_machine("m1", 1),
        h100_machine("m2", 1),
        reservations=(reserve("m1", 0, 0.25), reserve("m1", 0, 0.25), reserve("m2", 0, 0.25)),
    )
    result = plan(inventory, request(QWEN3_0_6B, 0.25, copies=1, policy=Policy.SPREAD))
    assert where(result.placed) == [("m2", (0,))]


def test_existing_reservations_are_honoured() -> None:
    inventory = cluster(
        h100_machine("m1", 2), reservations=(reserve("m1", 0, 0.75), reserve("m1", 1, 0.25))
    )
    result = plan(inventory, request(QWEN3_8B, 0.5, copies=2))
    assert where(result.placed) == [("m1", (1,))]
    assert result.not_placed[0].reason is NoFitReason.INSUFFICIENT_CAPACITY
    assert (result.fit_now, result.fit_empty) == (1, 4)


def test_reservation_bytes_count_even_when_their_share_is_small() -> None:
    # Free room is derived from reservations: bytes and share are both honoured.
    held = Reservation("m1", 0, gib(60), 0.25)
    result = plan(cluster(h100_machine("m1", 1), reservations=(held,)), request(QWEN3_8B, 0.5))
    assert result.placed == ()


def test_whole_gpu_copies_take_untouched_gpus_only() -> None:
    inventory = cluster(h100_machine("m1", 3), reservations=(reserve("m1", 0, 0.25),))
    result = plan(inventory, request(QWEN3_8B, 1, copies=3))
    assert where(result.placed) == [("m1", (1,)), ("m1", (2,))]
    assert result.placed[0].allocated_bytes == H100_BYTES
    assert result.placed[0].share == 1.0
    assert result.placed[0].gpu_memory_utilization == 0.8


def test_tensor_parallel_copy_uses_n_gpus_of_one_machine() -> None:
    inventory = cluster(h100_machine("m1", 2), h100_machine("m2", 4))
    result = plan(inventory, request(LLAMA_3_3_70B, 4, copies=1))
    assert where(result.placed) == [("m2", (0, 1, 2, 3))]
    assert result.estimate.tensor_parallel == 4
    assert result.placed[0].reservations() == tuple(
        Reservation("m2", i, H100_BYTES, 1.0) for i in range(4)
    )


def test_tensor_parallel_never_spans_machines() -> None:
    inventory = cluster(h100_machine("m1", 2), h100_machine("m2", 2))
    result = plan(inventory, request(QWEN3_32B, 4, copies=1))
    assert result.placed == ()
    assert result.not_placed[0].reason is NoFitReason.INSUFFICIENT_GPU_COUNT
    assert (result.fit_now, result.fit_empty) == (0, 0)
    assert result.suggested_accelerators_per_copy == 2


def test_binpack_puts_tensor_parallel_copies_on_the_fullest_machine_that_fits() -> None:
    inventory = cluster(
        h100_machine("m1", 4), h100_machine("m2", 4), reservations=(reserve("m2", 0, 1.0),)
    )
    result = plan(inventory, request(QWEN3_32B, 2, copies=1))
    assert where(result.placed) == [("m2", (1, 2))]


def test_mig_copy_takes_the_smallest_free_slice_that_holds_it() -> None:
    small = request(QWEN3_0_6B, 1, copies=3)
    result = plan(cluster(machine("m1", h100_mig(0))), small)
    assert [p.slice for p in result.placed] == ["1g.10gb", "1g.10gb", "2g.20gb"]
    assert [p.slice_id for p in result.placed] == ["a", "b", "c"]
    first = result.placed[0]
    assert first.allocated_bytes == gib(9.75)
    assert first.gpu_memory_utilization == 0.9  # of the slice (DESIGN §4)
    assert (first.hardware_class, first.sharing_class) == ("hardware_isolated", "mig_1g_10gb")


def test_mig_slice_choice_skips_slices_too_small_for_the_estimate() -> None:
    short = request(QWEN3_8B, 0.5, copies=3, max_model_len=4096)
    # 0.9 x 19.5 GiB holds the copy at 4096 tokens, 0.9 x 9.75 GiB does not.
    assert gib(9.75) * 0.9 < estimate_copy(QWEN3_8B, short.engine).total_bytes < gib(19.5) * 0.9
    result = plan(cluster(machine("m1", h100_mig(0))), short)
    assert [p.slice for p in result.placed] == ["2g.20gb", "3g.40gb"]
    assert result.not_placed[0].reason is NoFitReason.INSUFFICIENT_CAPACITY


def test_a_mig_slice_holds_one_copy_and_taken_slices_stay_taken() -> None:
    taken = Reservation("m1", 0, gib(9.75), 1.0, "1g.10gb")  # only the profile is known
    result = plan(cluster(machine("m1", h100_mig(0)), reservations=(taken,)), request(QWEN3_0_6B))
    assert result.placed[0].slice_id == "b"
    assert result.fit_now == 3


def test_time_sliced_gpu_takes_at_most_replicas_copies() -> None:
    inventory = cluster(machine("m1", h100(0, sharing=GpuSharing.TIME_SLICED, replicas=2)))
    result = plan(inventory, request(QWEN3_0_6B, 0.25, copies=3))
    assert len(result.placed) == 2
    assert result.placed[0].sharing_class == "time_sliced"
    assert result.placed[0].allocated_bytes == int(0.25 * H100_BYTES)


def test_mps_copy_takes_exactly_one_replica_whatever_share_it_asks() -> None:
    inventory = cluster(machine("m1", h100(0, sharing=GpuSharing.MPS, replicas=4)))
    result = plan(inventory, request(QWEN3_0_6B, 0.5, copies=5))
    assert len(result.placed) == 4
    assert {p.share for p in result.placed} == {0.25}
    assert {p.allocated_bytes for p in result.placed} == {H100_BYTES // 4}
    assert result.placed[0].gpu_memory_utilization == 0.2  # 0.8 x 1/4
    assert result.placed[0].sharing_class == "mps"


def test_mps_copy_that_does_not_fit_one_replica_does_not_fit() -> None:
    inventory = cluster(machine("m1", h100(0, sharing=GpuSharing.MPS, replicas=8)))
    result = plan(inventory, request(QWEN3_8B, 1))
    assert result.placed == ()
    assert (result.fit_now, result.fit_empty) == (0, 0)


def test_whole_gpu_cluster_gives_a_share_a_whole_gpu_with_a_notice() -> None:
    inventory = cluster(h100_machine("m1", 2), sharing=ClusterSharing.WHOLE_GPU)
    result = plan(inventory, request(QWEN3_0_6B, 0.25, copies=3))
    assert where(result.placed) == [("m1", (0,)), ("m1", (1,))]
    assert result.placed[0].allocated_bytes == H100_BYTES
    assert (result.placed[0].hardware_class, result.placed[0].sharing_class) == (
        "hardware_isolated",
        "whole_gpu",
    )
    assert result.notices == ("SharingNotConfigured",)
    assert (result.fit_now, result.fit_empty) == (2, 2)
    assert result.suggested_accelerators_per_copy == 1


def test_unified_memory_budgets_against_system_memory_less_8_gib() -> None:
    spark = Machine("spark", (h100(0, memory_bytes=gib(119.7)),), gib(128), unified_memory=True)
    result = plan(cluster(spark), request(QWEN3_8B, 1, copies=2))
    assert where(result.placed) == [("spark", (0,))]
    assert result.placed[0].allocated_bytes == gib(120)
    assert result.placed[0].hardware_class == "unified_memory"
    assert result.placed[0].sharing_class == "unified_memory"


def test_unified_memory_shares_split_the_pool() -> None:
    spark = Machine("spark", (h100(0),), gib(128), unified_memory=True)
    result = plan(cluster(spark), request(QWEN3_8B, 0.25, copies=5))
    assert len(result.placed) == 4
    assert result.placed[0].allocated_bytes == gib(30)


def test_engine_share_set_by_the_operator_is_used_and_bounded() -> None:
    result = plan(
        cluster(h100_machine("m1", 1)), request(QWEN3_8B, 0.5, gpu_memory_utilization=0.45)
    )
    assert result.placed[0].gpu_memory_utilization == 0.45
    with pytest.raises(ValueError, match="at most 0.9 x the copy's share"):
        request(QWEN3_8B, 0.5, gpu_memory_utilization=0.5)


def test_an_engine_share_above_95_percent_carries_a_notice() -> None:
    result = plan(cluster(h100_machine("m1", 1)), request(QWEN3_8B, 1, gpu_memory_utilization=0.97))
    assert result.placed[0].gpu_memory_utilization == 0.97
    assert result.notices == ("EngineShareAbove95",)


def test_the_copy_must_fit_in_the_engine_share_not_only_in_the_reservation() -> None:
    # 0.25 of an H100 reserves 19.8 GiB, but the engine gets 0.2 x 79.2 = 15.84 GiB.
    result = plan(cluster(h100_machine("m1", 1)), request(QWEN3_8B, 0.25))
    assert result.placed == ()
    assert result.fit_empty == 0
    assert result.suggested_accelerators_per_copy == 0.3


def test_zero_copies_is_a_fit_check() -> None:
    result = plan(cluster(h100_machine("m1", 2)), request(QWEN3_8B, 0.5, copies=0))
    assert (result.placed, result.not_placed, result.fit_now, result.fit_empty) == ((), (), 4, 4)


def test_the_plan_does_not_depend_on_the_order_of_machines_or_reservations() -> None:
    machines = (h100_machine("b", 2), h100_machine("a", 2), machine("c", h100_mig(0)))
    held = (reserve("a", 0, 0.5), reserve("b", 1, 0.25), reserve("a", 1, 0.25))
    forward = Inventory(machines, held)
    backward = Inventory(machines[::-1], held[::-1])
    wanted = request(QWEN3_0_6B, 0.25, copies=9)
    assert plan(forward, wanted) == plan(backward, wanted)


def test_placing_a_plans_reservations_leaves_exactly_that_much_less_room() -> None:
    inventory = cluster(h100_machine("m1", 2), machine("m2", h100_mig(0)))
    wanted = request(QWEN3_0_6B, 0.3, copies=5)
    first = plan(inventory, wanted)
    after = dataclasses.replace(inventory, reservations=first.reservations())
    assert plan(after, wanted).fit_now == first.fit_now - 5
