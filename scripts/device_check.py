"""Device check for a machine with a real NVIDIA GPU: what the standalone backend would see and do.

    python scripts/device_check.py [--require-gpu]

Prints, as JSON: the standalone backend's discovery of this machine, every field NVML reported
(GPUs, MIG mode and slices, processes, free memory), the free memory of each GPU as the launch
check reads it, and the command line and GPU environment a copy of a small model would be
launched with. Nothing is started. Needs only ``pip install nvidia-ml-py`` (no Django, no other
package). Exits 0; with --require-gpu, exits 1 when no GPU was found.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clusters.backends import nvml  # noqa: E402
from clusters.backends.base import BackendError, CopySpec  # noqa: E402
from clusters.backends.local import (  # noqa: E402
    check_engine_argv,
    check_room,
    cuda_visible_devices,
    engine_environment,
)
from clusters.backends.standalone import StandaloneBackend  # noqa: E402
from clusters.backends.supervisor import free_port  # noqa: E402

SAMPLE_SHARE = 0.8
SHOWN_ENV = ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED")


def as_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def print_section(title: str, value: Any) -> None:
    print(f"== {title}")
    print(json.dumps(as_json(value), indent=2, default=str))


def sample_spec(report: nvml.NvmlReport) -> CopySpec:
    """A copy of Qwen3-0.6B on the first GPU (its first MIG slice if the GPU runs MIG)."""
    port = free_port()
    argv = (
        "vllm", "serve", "Qwen/Qwen3-0.6B", "--served-model-name", "qwen",
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "4096", "--gpu-memory-utilization", str(SAMPLE_SHARE),
    )  # fmt: skip
    first = report.accelerators[0] if report.accelerators else None
    mig_slice = first.slices[0] if first and first.slices else None
    return CopySpec(
        copy_id=0,
        deployment_name="device-check",
        ordinal=0,
        argv=argv,
        env={},
        machine="this-machine",
        gpu_indexes=(first.index,) if first else (),
        mig_slice_uuid=mig_slice.uuid if mig_slice else "",
        mig_profile=mig_slice.profile if mig_slice else "",
        memory_share=SAMPLE_SHARE,
        reserved_bytes=int(SAMPLE_SHARE * first.memory_bytes) if first else 0,
        port=port,
    )


def launch_plan(spec: CopySpec) -> dict[str, Any]:
    """What launch() would check and run, without running it."""
    check_engine_argv(spec.argv)
    env = engine_environment({}, cuda_visible_devices(spec))
    try:
        check_room(spec, lambda index: nvml.free_memory_bytes(index))
        room = "enough free memory: the copy would start now"
    except BackendError as waiting:
        room = str(waiting)
    return {
        "argv": list(spec.argv),
        "env": {name: env[name] for name in SHOWN_ENV if name in env},
        "free_memory_check": room,
    }


def main(args: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--require-gpu", action="store_true", help="exit 1 without a GPU")
    options = parser.parse_args(args)

    with tempfile.TemporaryDirectory(prefix="berth-device-check-") as state_dir:
        discovery = StandaloneBackend(state_dir).discover()
    print_section("standalone discovery", discovery)
    report = nvml.discover_gpus()
    print_section("NVML report (every field)", report)
    free = {str(gpu.index): nvml.free_memory_bytes(gpu.index) for gpu in report.accelerators}
    print_section("free memory per GPU (bytes)", free)
    print_section("sample launch (not started)", launch_plan(sample_spec(report)))
    print(f"== {report.message}")
    if options.require_gpu and not report.accelerators:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
