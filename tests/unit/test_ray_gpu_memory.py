"""A Ray node's GPU memory: as NVML measures it on the node (the smallest of its GPUs: Ray picks
which one a copy gets), else as the admin declared it for the node's accelerator type; where
neither says, the words name NVML's reason and how to declare it. NVML itself is the real
binding, on this machine without a driver."""

from __future__ import annotations

from clusters.backends.ray.dashboard import gpu_memory_bytes, unknown_memory_words
from clusters.backends.ray.node_gpus import gpus_here

MIB = 1 << 20
L4 = {"devices": [{"index": 0, "name": "NVIDIA L4", "memory_bytes": 23034 * MIB},
                  {"index": 1, "name": "NVIDIA L4", "memory_bytes": 23028 * MIB}]}  # fmt: skip


def test_measured_memory_wins_over_the_declared_and_is_the_smallest_gpus():
    assert gpu_memory_bytes(L4, declared_gib=24) == 23028 * MIB
    assert gpu_memory_bytes({"error": "NVML does not start there: …"}, 24) == 24 << 30
    assert gpu_memory_bytes({}, None) is None


def test_unknown_memory_is_said_with_nvmls_reason_and_how_to_declare_it():
    words = unknown_memory_words(
        {"A100": "NVML does not start there: NVML Shared Library Not Found"}
    )
    assert words == (
        "GPU memory unknown for accelerator type A100 (NVML on their nodes: NVML does not start "
        "there: NVML Shared Library Not Found): those nodes get no copies. Declare it per type "
        "(admin, or addcluster --gpu-memory TYPE=GiB)."
    )
    assert "(not measured yet)" in unknown_memory_words({"H100": ""})


def test_on_a_machine_without_an_nvidia_driver_nvml_says_so_and_nothing_is_measured():
    assert gpus_here() == {"error": "NVML does not start there: NVML Shared Library Not Found"}
