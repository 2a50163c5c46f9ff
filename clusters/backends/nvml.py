"""GPU discovery on this machine through NVML (``nvidia-ml-py``, module ``pynvml``).

Importable without Django or a GPU. ``discover_gpus()`` never raises: no library, no driver
or any NVML failure gives an empty report whose message starts "no GPUs found on this machine"
and says why. The NVML module is a parameter so tests can hand in a fake (there is no GPU to
test against); everything else takes the real ``pynvml``. Each call initialises NVML and always
shuts it down again (NVML counts its initialisations).

Memory is as the device reports it (NVML's total), never rounded to the marketing size.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from clusters.backends.base import DiscoveredAccelerator, DiscoveredSlice
from placement.words import plural

MIB = 1 << 20
NO_GPUS = "no GPUs found on this machine"
# The profile at the end of a MIG device's name: "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
# "NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", "… MIG 1g.10gb+me".
MIG_PROFILE_IN_NAME = re.compile(r"\bMIG\s+((?:\d+c\.)?\d+g\.\d+gb(?:\+\w+)?)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class GpuProcess:
    """A process using a GPU; used_bytes is None where NVML may not say (containers)."""

    pid: int
    used_bytes: int | None
    name: str = ""


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (slice) of a GPU, as NVML reports it."""

    index: int
    uuid: str
    profile: str
    memory_bytes: int
    free_bytes: int | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class GpuDevice:
    """Everything NVML says about one GPU; `accelerator` is the part placement uses."""

    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    memory_free_bytes: int | None
    memory_used_bytes: int | None
    compute_capability: str
    mig_enabled: bool
    mig_pending: bool
    mig_devices: tuple[MigDevice, ...]
    processes: tuple[GpuProcess, ...]
    accelerator: DiscoveredAccelerator


@dataclass(frozen=True)
class NvmlReport:
    """The GPUs of this machine (empty when there are none) and a sentence about them."""

    accelerators: tuple[DiscoveredAccelerator, ...]
    message: str
    devices: tuple[GpuDevice, ...] = ()
    driver_version: str = ""
    cuda_version: str = ""


def load_nvml(nvml_module: Any = None) -> Any:
    """The given module, or the real pynvml; raises ImportError when it is not installed."""
    if nvml_module is not None:
        return nvml_module
    import pynvml  # type: ignore[import-untyped]

    return pynvml


def no_gpus(reason: str) -> NvmlReport:
    return NvmlReport((), f"{NO_GPUS} ({reason})")


# ---------------------------------------------------------------- small queries


def _optional(nvml: Any, call: str, *args: Any, default: Any = None) -> Any:
    """An NVML query that a GPU may not support (or a binding may lack): default if so."""
    function = getattr(nvml, call, None)
    if function is None:
        return default
    try:
        return function(*args)
    except nvml.NVMLError:
        return default


def _text(value: Any) -> str:
    """Very old bindings returned bytes; current ones str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_version_text(version: int | None) -> str:
    """NVML's integer CUDA version (12040) as CUDA writes it (12.4)."""
    if not version:
        return ""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _cuda_version(nvml: Any) -> str:
    version = _optional(nvml, "nvmlSystemGetCudaDriverVersion_v2")
    if version is None:
        version = _optional(nvml, "nvmlSystemGetCudaDriverVersion")
    return cuda_version_text(version)


def _memory(nvml: Any, handle: Any) -> tuple[int, int | None, int | None]:
    info = nvml.nvmlDeviceGetMemoryInfo(handle)
    return int(info.total), _maybe_int(info.free), _maybe_int(info.used)


def _maybe_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _processes(nvml: Any, handle: Any) -> tuple[GpuProcess, ...]:
    """Compute and graphics processes of a device, one entry per pid."""
    used: dict[int, int | None] = {}
    for call in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for process in _optional(nvml, call, handle, default=[]) or []:
            pid = int(process.pid)
            memory = _maybe_int(getattr(process, "usedGpuMemory", None))
            used[pid] = memory if used.get(pid) is None else used[pid]
    return tuple(
        GpuProcess(pid, memory, _text(_optional(nvml, "nvmlSystemGetProcessName", pid, default="")))
        for pid, memory in sorted(used.items())
    )


def _mig_mode(nvml: Any, handle: Any) -> tuple[bool, bool]:
    """(current, pending); a GPU without MIG raises NotSupported, which means off."""
    mode = _optional(nvml, "nvmlDeviceGetMigMode", handle)
    if not mode:
        return False, False
    enabled = getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
    return mode[0] == enabled, mode[1] == enabled


def mig_profile(name: str, attributes: Any) -> str:
    """The slice's profile from its name (``… MIG 3g.40gb``), else from its attributes.

    The attributes give slice counts and memory; NVIDIA names a profile by its memory rounded
    up to whole GB, so the fallback can differ by one from the official name.
    """
    if match := MIG_PROFILE_IN_NAME.search(name):
        return match.group(1).lower()
    if attributes is None:
        return ""
    gpu_slices = int(attributes.gpuInstanceSliceCount)
    compute_slices = int(attributes.computeInstanceSliceCount)
    gigabytes = math.ceil(int(attributes.memorySizeMB) / 1024)
    prefix = f"{compute_slices}c." if compute_slices and compute_slices != gpu_slices else ""
    return f"{prefix}{gpu_slices}g.{gigabytes}gb"


def _mig_devices(nvml: Any, handle: Any) -> tuple[MigDevice, ...]:
    count = _optional(nvml, "nvmlDeviceGetMaxMigDeviceCount", handle, default=0) or 0
    devices: list[MigDevice] = []
    for slot in range(int(count)):
        mig = _optional(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if mig is None:  # NotFound: an empty slot
            continue
        devices.append(_mig_device(nvml, mig, len(devices)))
    return tuple(devices)


def _mig_device(nvml: Any, mig: Any, index: int) -> MigDevice:
    attributes = _optional(nvml, "nvmlDeviceGetAttributes", mig)
    name = _text(_optional(nvml, "nvmlDeviceGetName", mig, default=""))
    info = _optional(nvml, "nvmlDeviceGetMemoryInfo", mig)
    if info is not None:
        total, free = int(info.total), _maybe_int(info.free)
    else:
        total = int(attributes.memorySizeMB) * MIB if attributes is not None else 0
        free = None
    return MigDevice(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
        profile=mig_profile(name, attributes),
        memory_bytes=total,
        free_bytes=free,
        gpu_instance_id=_optional(nvml, "nvmlDeviceGetGpuInstanceId", mig),
        compute_instance_id=_optional(nvml, "nvmlDeviceGetComputeInstanceId", mig),
        processes=_processes(nvml, mig),
    )


# ---------------------------------------------------------------- one GPU, all GPUs


def _compute_capability(nvml: Any, handle: Any) -> str:
    capability = _optional(nvml, "nvmlDeviceGetCudaComputeCapability", handle)
    return f"{capability[0]}.{capability[1]}" if capability else ""


def read_device(nvml: Any, index: int, driver: str, cuda: str) -> GpuDevice:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = _text(nvml.nvmlDeviceGetName(handle))
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    total, free, used = _memory(nvml, handle)
    capability = _compute_capability(nvml, handle)
    mig_enabled, mig_pending = _mig_mode(nvml, handle)
    migs = _mig_devices(nvml, handle) if mig_enabled else ()
    accelerator = DiscoveredAccelerator(
        index=index,
        vendor="nvidia",
        product=name,
        memory_bytes=total,
        uuid=uuid,
        compute_capability=capability,
        driver_version=driver,
        cuda_version=cuda,
        # A MIG slice is isolated by the hardware; a whole GPU is shared by byte budgets.
        hardware_class="hardware_isolated" if mig_enabled else "software_shared",
        sharing_class="mig" if mig_enabled else "shared",
        slices=tuple(
            DiscoveredSlice(mig.index, mig.profile, mig.memory_bytes, mig.uuid) for mig in migs
        ),
    )
    return GpuDevice(
        index=index,
        name=name,
        uuid=uuid,
        memory_total_bytes=total,
        memory_free_bytes=free,
        memory_used_bytes=used,
        compute_capability=capability,
        mig_enabled=mig_enabled,
        mig_pending=mig_pending,
        mig_devices=migs,
        processes=_processes(nvml, handle),
        accelerator=accelerator,
    )


def _read_all(nvml: Any) -> NvmlReport:
    driver = _text(_optional(nvml, "nvmlSystemGetDriverVersion", default=""))
    cuda = _cuda_version(nvml)
    count = int(nvml.nvmlDeviceGetCount())
    if count == 0:
        return NvmlReport((), f"{NO_GPUS} (NVML reports no devices)", (), driver, cuda)
    devices: list[GpuDevice] = []
    unreadable: list[str] = []
    for index in range(count):
        try:
            devices.append(read_device(nvml, index, driver, cuda))
        except nvml.NVMLError as error:  # e.g. "GPU is lost": report the others
            unreadable.append(f"GPU {index}: {error}")
    accelerators = tuple(device.accelerator for device in devices)
    return NvmlReport(
        accelerators, describe(devices, unreadable, driver, cuda), tuple(devices), driver, cuda
    )


def describe(devices: list[GpuDevice], unreadable: list[str], driver: str, cuda: str) -> str:
    if not devices:
        return f"{NO_GPUS} ({'; '.join(unreadable)})"
    names: dict[str, int] = {}
    for device in devices:
        names[device.name] = names.get(device.name, 0) + 1
    found = ", ".join(f"{count} × {name}" for name, count in names.items())
    text = f"{plural(len(devices), 'GPU', 'GPUs')}: {found} (driver {driver}"
    text += f", CUDA {cuda})" if cuda else ")"
    if unreadable:
        text += f"; unreadable: {'; '.join(unreadable)}"
    return text


def discover_gpus(nvml_module: ModuleType | Any = None) -> NvmlReport:
    """This machine's GPUs, MIG slices, processes and free memory; never raises."""
    try:
        nvml = load_nvml(nvml_module)
    except ImportError:
        return no_gpus("nvidia-ml-py is not installed")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:  # LibraryNotFound, DriverNotLoaded, NoPermission, …
        return no_gpus(f"NVML: {error}")
    except OSError as error:
        return no_gpus(f"NVML: {error}")
    try:
        return _read_all(nvml)
    except Exception as error:  # discovery reports a failure in words; it never takes the caller
        return no_gpus(f"NVML failed: {error}")
    finally:
        _shutdown(nvml)


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # nothing to do about a failed shutdown; the report stands
        pass


def free_memory_bytes(index: int, nvml_module: ModuleType | Any = None) -> int | None:
    """Free memory of GPU `index` right now; None when NVML cannot tell (no library, no GPU)."""
    try:
        nvml = load_nvml(nvml_module)
    except ImportError:
        return None
    try:
        nvml.nvmlInit()
    except (nvml.NVMLError, OSError):
        return None
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        return int(nvml.nvmlDeviceGetMemoryInfo(handle).free)
    except nvml.NVMLError:
        return None
    finally:
        _shutdown(nvml)
