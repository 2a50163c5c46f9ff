"""One scenario per NoFit reason, with the exact words the operator reads."""

from __future__ import annotations

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
    Accelerator,
    ClusterSharing,
    Inventory,
    Machine,
    NoFitReason,
    PlacementRequest,
    PlanResult,
    Reservation,
    plan,
)

SPARK = Machine("spark", (h100(0, memory_bytes=gib(119.7)),), gib(128), unified_memory=True)
T4 = Accelerator(0, "nvidia", "Tesla-T4", gib(14.6), "7.5", "535.104.05")
MI300X = Accelerator(0, "amd", "AMD-Instinct-MI300X", gib(191.5), "gfx942")


def first_refusal(inventory: Inventory, wanted: PlacementRequest) -> tuple[NoFitReason, str]:
    result: PlanResult = plan(inventory, wanted)
    assert result.not_placed, "expected a copy that does not fit"
    return result.not_placed[0].reason, result.not_placed[0].message


def test_vendor_mismatch_names_what_the_cluster_has() -> None:
    reason, message = first_refusal(cluster(machine("m1", MI300X)), request(QWEN3_8B))
    assert reason is NoFitReason.VENDOR_MISMATCH
    assert message == (
        "The engine is set up for nvidia accelerators, but this cluster has only amd "
        "accelerators. Pick a variant and engine made for amd accelerators, or a cluster with "
        "nvidia accelerators."
    )


def test_accel_version_unmet_names_the_newest_card_and_a_variant_to_pick() -> None:
    wanted = request(QWEN3_0_6B, min_compute_capability="8.0")
    reason, message = first_refusal(cluster(machine("m1", T4)), wanted)
    assert reason is NoFitReason.ACCEL_VERSION_UNMET
    assert message == (
        "The engine needs compute capability 8.0 or newer, and the newest here is 7.5 "
        "(Tesla-T4). Pick a variant that runs on these accelerators (for example float16 "
        "instead of bfloat16, or one without FP8)."
    )


def test_accel_version_unmet_by_driver_says_to_update_it() -> None:
    wanted = request(QWEN3_0_6B, min_driver="560")
    reason, message = first_refusal(cluster(h100_machine("m1", 1)), wanted)
    assert reason is NoFitReason.ACCEL_VERSION_UNMET
    assert message == (
        "The engine needs driver 560 or newer, and the newest here is 550.90.07. "
        "Update the driver on the cluster's machines."
    )


def test_insufficient_gpu_count_when_no_machine_is_big_enough() -> None:
    reason, message = first_refusal(cluster(h100_machine("m1", 2)), request(QWEN3_32B, 4))
    assert reason is NoFitReason.INSUFFICIENT_GPU_COUNT
    assert message == (
        "Each copy needs 4 accelerators on one machine, but no machine in this cluster has 4: "
        "the largest has 2. Use fewer accelerators per copy (a copy cannot span machines), or "
        "add a machine with more accelerators."
    )


def test_insufficient_gpu_count_when_no_gpu_can_be_used_whole() -> None:
    reason, message = first_refusal(cluster(machine("m1", h100_mig(0))), request(QWEN3_32B, 2))
    assert reason is NoFitReason.INSUFFICIENT_GPU_COUNT
    assert message == (
        "Each copy needs 2 whole accelerators on one machine, but this cluster's accelerators "
        "are only shared as MIG slices, MPS replicas or unified memory, which a copy cannot "
        "span. Use one accelerator or less per copy."
    )


def test_insufficient_gpu_count_when_too_few_are_free() -> None:
    inventory = cluster(h100_machine("m1", 4), reservations=(reserve("m1", 0, 0.25),))
    reason, message = first_refusal(inventory, request(QWEN3_32B, 4))
    assert reason is NoFitReason.INSUFFICIENT_GPU_COUNT
    assert message == (
        "Each copy needs 4 free accelerators on one machine, but the most free on any machine "
        "is 3 (m1). Use fewer accelerators per copy, or stop a deployment on a multi-GPU "
        "machine to free its accelerators."
    )


def test_insufficient_system_memory_on_a_unified_memory_machine() -> None:
    reason, message = first_refusal(cluster(SPARK), request(LLAMA_3_3_70B, 1))
    assert reason is NoFitReason.INSUFFICIENT_SYSTEM_MEMORY
    assert message == (
        "Each copy needs 139.29 GiB (weights 131.50 GiB, context cache 2.50 GiB, working memory "
        "0.66 GiB, engine overhead 4.62 GiB) on one machine, but the engine can be given at "
        "most 96.00 GiB on any unified-memory machine here (its memory less the 8.00 GiB kept "
        "for the system). Make each copy smaller: pick a smaller or more quantized variant, "
        "shorten the longest conversation (now 8192 tokens), or use the 8-bit context cache."
    )


def test_insufficient_system_memory_while_another_copy_holds_it() -> None:
    held = Reservation("spark", 0, gib(100), 0.8)
    reason, message = first_refusal(cluster(SPARK, reservations=(held,)), request(QWEN3_8B, 0.5))
    assert reason is NoFitReason.INSUFFICIENT_SYSTEM_MEMORY
    assert message.startswith(
        "Each copy reserves 60.00 GiB on one machine for the model's 17.95 GiB (weights "
        "15.26 GiB, context cache 1.13 GiB, working memory 0.33 GiB, engine overhead 1.23 GiB), "
        "but the most free on any unified-memory machine now is 20.00 GiB (spark; its memory "
        "less the 8.00 GiB kept for the system). Stop a deployment to free memory"
    )


def test_sharing_not_configured_when_a_gpu_has_the_bytes_but_none_is_whole() -> None:
    inventory = cluster(
        h100_machine("m1", 1),
        reservations=(reserve("m1", 0, 0.25),),
        sharing=ClusterSharing.WHOLE_GPU,
    )
    reason, message = first_refusal(inventory, request(QWEN3_8B, 0.5))
    assert reason is NoFitReason.SHARING_NOT_CONFIGURED
    assert message == (
        "This cluster has no GPU sharing set up, so a copy of 0.5 of an accelerator takes a "
        "whole one, and none that holds it is free. With sharing on, m1 GPU 0 would have "
        "59.40 GiB free, enough for this copy's 39.60 GiB. Ask your cluster admin to enable GPU "
        "sharing (time-slicing or MIG), or stop a deployment to free a whole accelerator."
    )


def test_sharing_not_configured_when_quarters_hold_whole_gpus_they_would_share() -> None:
    """Without sharing each quarter took a whole GPU (share 1, every byte); with sharing a GPU
    would still have three quarters free: sharing, not capacity, is what is missing."""
    quarter_on_whole = Reservation("m1", 0, H100_BYTES, 1.0, asked_share=0.25)
    inventory = cluster(
        h100_machine("m1", 1), reservations=(quarter_on_whole,), sharing=ClusterSharing.WHOLE_GPU
    )
    reason, message = first_refusal(inventory, request(QWEN3_8B, 0.5))
    assert reason is NoFitReason.SHARING_NOT_CONFIGURED
    assert "With sharing on, m1 GPU 0 would have 59.40 GiB free" in message
    whole = Reservation("m1", 0, H100_BYTES, 1.0)  # a copy that asked for all of it
    inventory = cluster(
        h100_machine("m1", 1), reservations=(whole,), sharing=ClusterSharing.WHOLE_GPU
    )
    assert first_refusal(inventory, request(QWEN3_8B, 0.5))[0] is NoFitReason.INSUFFICIENT_CAPACITY


def test_whole_gpu_cluster_with_every_gpu_full_is_short_of_capacity_not_of_sharing() -> None:
    inventory = cluster(
        h100_machine("m1", 1),
        reservations=(reserve("m1", 0, 1.0),),
        sharing=ClusterSharing.WHOLE_GPU,
    )
    reason, _ = first_refusal(inventory, request(QWEN3_8B, 0.5))
    assert reason is NoFitReason.INSUFFICIENT_CAPACITY


def test_insufficient_capacity_when_even_an_empty_gpu_is_too_small() -> None:
    reason, message = first_refusal(cluster(h100_machine("m1", 1)), request(LLAMA_3_3_70B, 1))
    assert reason is NoFitReason.INSUFFICIENT_CAPACITY
    assert message == (
        "Each copy needs 139.29 GiB (weights 131.50 GiB, context cache 2.50 GiB, working memory "
        "0.66 GiB, engine overhead 4.62 GiB) on one accelerator, but the engine can be given at "
        "most 63.36 GiB on any suitable accelerator here. Make each copy smaller: pick a "
        "smaller or more quantized variant, shorten the longest conversation (now 8192 "
        "tokens), use the 8-bit context cache, or split each copy over more accelerators."
    )


def test_insufficient_capacity_while_other_deployments_hold_the_room() -> None:
    inventory = cluster(h100_machine("m1", 1), reservations=(reserve("m1", 0, 0.75),))
    reason, message = first_refusal(inventory, request(QWEN3_8B, 0.5))
    assert reason is NoFitReason.INSUFFICIENT_CAPACITY
    assert message == (
        "Each copy reserves 39.60 GiB on one accelerator for the model's 17.95 GiB (weights "
        "15.26 GiB, context cache 1.13 GiB, working memory 0.33 GiB, engine overhead 1.23 GiB), "
        "but the most free on any suitable accelerator now is 19.80 GiB (m1 GPU 0). Stop a "
        "deployment to free room, or make each copy smaller: pick a smaller or more quantized "
        "variant, shorten the longest conversation (now 8192 tokens), or use the 8-bit context "
        "cache."
    )


def test_of_equally_free_gpus_the_message_names_the_last_machine_by_name() -> None:
    # ... and its first such GPU by index.
    held = (reserve("a", 0, 0.75), reserve("b", 0, 0.75), reserve("b", 1, 0.75))
    inventory = cluster(h100_machine("b", 2), h100_machine("a", 1), reservations=held)
    _, message = first_refusal(inventory, request(QWEN3_8B, 0.5))
    assert "the most free on any suitable accelerator now is 19.80 GiB (b GPU 0)." in message


def test_every_copy_that_does_not_fit_gets_the_reason() -> None:
    result = plan(cluster(h100_machine("m1", 1)), request(QWEN3_8B, 0.5, copies=4))
    assert [n.copy for n in result.not_placed] == [3, 4]
    assert {n.reason for n in result.not_placed} == {NoFitReason.INSUFFICIENT_CAPACITY}


def test_the_free_room_named_is_on_units_that_could_hold_the_copy() -> None:
    # A fifth of an H100 gives the engine too little for Qwen3-8B; a fifth of the Spark's
    # unified memory would do. The Spark is nearly full: its free room is what is short, not
    # the empty H100's, however large.
    held = reserve("spark", 0, 0.9, memory=gib(119.7))
    inventory = cluster(h100_machine("m1", 1), SPARK, reservations=(held,))
    reason, message = first_refusal(inventory, request(QWEN3_8B, 0.2))
    assert reason is NoFitReason.INSUFFICIENT_CAPACITY
    assert message.startswith("Each copy reserves 24.00 GiB on one accelerator for the model's ")
    assert "but the most free on any suitable accelerator now is 12.00 GiB (spark)." in message
