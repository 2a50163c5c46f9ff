"""GPU discovery through NVML, against a hand-written NVML module (there is no GPU here).

The fake exposes the functions of nvidia-ml-py that discovery calls, with the real pynvml error
classes, and describes 8 × H100 80GB where GPUs 6 and 7 run in MIG mode. Without a library or a
driver, discovery reports "no GPUs found on this machine" and never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from clusters.backends import nvml
from clusters.backends.base import NOTICE_DRIVER_NOT_WORKING
from clusters.backends.standalone import StandaloneBackend

MIB = 1 << 20
H100_NAME = "NVIDIA H100 80GB HBM3"
H100_TOTAL = 81559 * MIB
NVML_ERRORS = {
    name: getattr(pynvml, name)
    for name in dir(pynvml)
    if name.startswith("NVMLError") and isinstance(getattr(pynvml, name), type)
}


@dataclass
class FakeMig:
    uuid: str
    profile: str
    memory_mib: int
    used_mib: int = 0
    gpu_instance: int = 1
    processes: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass
class FakeGpu:
    index: int
    used_mib: int = 0
    mig: list[FakeMig | None] | None = None  # None: MIG not supported; a list: MIG enabled
    processes: list[tuple[int, int | None]] = field(default_factory=list)

    @property
    def uuid(self) -> str:
        return f"GPU-1f2e3d4c-0000-0000-0000-00000000000{self.index}"


class FakeNvml:
    """The slice of pynvml that discovery uses; handles are the fake objects themselves."""

    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_DEVICE_MIG_DISABLE = pynvml.NVML_DEVICE_MIG_DISABLE

    def __init__(self, gpus: list[FakeGpu], init_error: Exception | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.initialised = 0
        self.shut_down = 0
        for name, error in NVML_ERRORS.items():
            setattr(self, name, error)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.shut_down += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.90.07"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGpu | FakeMig) -> str:
        if isinstance(handle, FakeMig):
            return f"{H100_NAME} MIG {handle.profile}"
        return H100_NAME

    def nvmlDeviceGetUUID(self, handle: FakeGpu | FakeMig) -> str:
        return handle.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu | FakeMig) -> SimpleNamespace:
        total = handle.memory_mib * MIB if isinstance(handle, FakeMig) else H100_TOTAL
        used = handle.used_mib * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> list[int]:
        if handle.mig is None:
            raise pynvml.NVMLError_NotSupported()
        return [self.NVML_DEVICE_MIG_ENABLE, self.NVML_DEVICE_MIG_ENABLE]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, slot: int) -> FakeMig:
        devices = handle.mig or []
        if slot >= len(devices) or devices[slot] is None:
            raise pynvml.NVMLError_NotFound()
        return devices[slot]  # type: ignore[return-value]

    def nvmlDeviceGetAttributes(self, handle: FakeMig) -> SimpleNamespace:
        slices = int(handle.profile.split("g.")[0])
        return SimpleNamespace(
            gpuInstanceSliceCount=slices,
            computeInstanceSliceCount=slices,
            memorySizeMB=handle.memory_mib,
        )

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeMig) -> int:
        return handle.gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeMig) -> int:
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu | FakeMig) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle.processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeGpu | FakeMig) -> list[Any]:
        raise pynvml.NVMLError_NotSupported()

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        if pid == 999:
            raise pynvml.NVMLError_NoPermission()
        return f"/usr/bin/python3 (pid {pid})"


def eight_h100() -> FakeNvml:
    gpus = [FakeGpu(index) for index in range(8)]
    gpus[0].used_mib = 20_000
    gpus[0].processes = [(4242, 20_000 * MIB), (999, None)]
    gpus[6].mig = [  # an empty slot between the slices, as after a slice was destroyed
        FakeMig("MIG-6a", "3g.40gb", 40_192, used_mib=10_000, processes=[(5151, 10_000 * MIB)]),
        None,
        FakeMig("MIG-6b", "2g.20gb", 19_968, gpu_instance=2),
        FakeMig("MIG-6c", "1g.10gb", 9_856, gpu_instance=3),
    ]
    gpus[7].mig = [FakeMig("MIG-7a", "7g.80gb", 80_896)]
    return FakeNvml(gpus)


# ---------------------------------------------------------------- eight H100, two in MIG mode


def test_eight_h100_are_found_with_memory_as_the_device_reports_it() -> None:
    report = nvml.discover_gpus(eight_h100())
    assert [gpu.index for gpu in report.accelerators] == list(range(8))
    first = report.accelerators[0]
    assert (first.vendor, first.product, first.memory_bytes) == ("nvidia", H100_NAME, H100_TOTAL)
    assert (first.compute_capability, first.driver_version, first.cuda_version) == (
        "9.0",
        "550.90.07",
        "12.4",
    )
    assert first.uuid.startswith("GPU-") and len({gpu.uuid for gpu in report.accelerators}) == 8
    assert report.message == "8 GPUs: 8 × NVIDIA H100 80GB HBM3 (driver 550.90.07, CUDA 12.4)"
    assert (report.driver_version, report.cuda_version) == ("550.90.07", "12.4")


def test_mig_gpus_carry_their_slices_with_profiles_and_memory() -> None:
    report = nvml.discover_gpus(eight_h100())
    classes = [(gpu.hardware_class, gpu.sharing_class) for gpu in report.accelerators]
    assert classes == [("software_shared", "shared")] * 6 + [("hardware_isolated", "mig")] * 2
    six, seven = report.accelerators[6], report.accelerators[7]
    assert [(s.index, s.profile, s.memory_bytes, s.uuid) for s in six.slices] == [
        (0, "3g.40gb", 40_192 * MIB, "MIG-6a"),
        (1, "2g.20gb", 19_968 * MIB, "MIG-6b"),
        (2, "1g.10gb", 9_856 * MIB, "MIG-6c"),
    ]
    assert [(s.profile, s.memory_bytes) for s in seven.slices] == [("7g.80gb", 80_896 * MIB)]
    assert all(not gpu.slices for gpu in report.accelerators[:6])
    device = report.devices[6]
    assert (device.mig_enabled, device.mig_pending) == (True, True)
    assert [mig.gpu_instance_id for mig in device.mig_devices] == [1, 2, 3]


def test_processes_free_memory_and_slice_usage_are_reported() -> None:
    report = nvml.discover_gpus(eight_h100())
    first = report.devices[0]
    assert first.memory_free_bytes == H100_TOTAL - 20_000 * MIB
    assert first.memory_used_bytes == 20_000 * MIB
    assert [(p.pid, p.used_bytes, p.name) for p in first.processes] == [
        (999, None, ""),  # NVML may not name it (no permission) nor say its memory
        (4242, 20_000 * MIB, "/usr/bin/python3 (pid 4242)"),
    ]
    assert report.devices[1].processes == ()
    big_slice = report.devices[6].mig_devices[0]
    assert big_slice.free_bytes == (40_192 - 10_000) * MIB
    assert [(p.pid, p.used_bytes) for p in big_slice.processes] == [(5151, 10_000 * MIB)]


def test_nvml_is_shut_down_after_every_call() -> None:
    fake = eight_h100()
    nvml.discover_gpus(fake)
    assert nvml.free_memory_bytes(0, fake) == H100_TOTAL - 20_000 * MIB
    assert nvml.free_memory_bytes(3, fake) == H100_TOTAL
    assert nvml.free_memory_bytes(42, fake) is None  # no such GPU
    assert fake.initialised == fake.shut_down == 4


def test_a_lost_gpu_is_named_and_the_others_are_still_reported() -> None:
    fake = eight_h100()
    real_name = fake.nvmlDeviceGetName

    def name(handle: FakeGpu | FakeMig) -> str:
        if isinstance(handle, FakeGpu) and handle.index == 3:
            raise pynvml.NVMLError_GpuIsLost()
        return real_name(handle)

    fake.nvmlDeviceGetName = name  # type: ignore[method-assign]
    report = nvml.discover_gpus(fake)
    assert [gpu.index for gpu in report.accelerators] == [0, 1, 2, 4, 5, 6, 7]
    assert "unreadable: GPU 3: GPU is lost" in report.message
    assert fake.shut_down == 1


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "1g.5gb"),
        ("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", "1c.3g.20gb"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "1g.10gb+me"),
    ],
)
def test_the_profile_is_read_from_the_slice_name(name: str, profile: str) -> None:
    assert nvml.mig_profile(name, None) == profile


def test_without_a_profile_in_the_name_it_comes_from_the_attributes() -> None:
    attributes = SimpleNamespace(
        gpuInstanceSliceCount=3, computeInstanceSliceCount=3, memorySizeMB=40_192
    )
    assert nvml.mig_profile("MIG device", attributes) == "3g.40gb"
    shared = SimpleNamespace(
        gpuInstanceSliceCount=3, computeInstanceSliceCount=1, memorySizeMB=19_968
    )
    assert nvml.mig_profile("", shared) == "1c.3g.20gb"


# ---------------------------------------------------------------- no GPU


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (pynvml.NVMLError_LibraryNotFound(), "NVML Shared Library Not Found"),
        (pynvml.NVMLError_DriverNotLoaded(), "Driver Not Loaded"),
        (pynvml.NVMLError_NoPermission(), "Insufficient Permissions"),
    ],
)
def test_no_library_or_no_driver_means_no_gpus_and_says_why(error: Exception, reason: str) -> None:
    fake = FakeNvml([], init_error=error)
    report = nvml.discover_gpus(fake)
    assert report.accelerators == ()
    assert report.message == f"no GPUs found on this machine (NVML: {reason})"
    assert nvml.free_memory_bytes(0, fake) is None


def test_a_driver_with_no_devices_means_no_gpus() -> None:
    fake = FakeNvml([])
    report = nvml.discover_gpus(fake)
    assert report.accelerators == ()
    assert report.message == "no GPUs found on this machine (NVML reports no devices)"
    assert fake.shut_down == 1


def test_an_unexpected_failure_is_reported_not_raised() -> None:
    fake = eight_h100()
    broken: Callable[[], int] = lambda: 1 // 0  # noqa: E731
    fake.nvmlDeviceGetCount = broken  # type: ignore[method-assign]
    report = nvml.discover_gpus(fake)
    assert report.accelerators == ()
    assert report.message.startswith("no GPUs found on this machine (NVML failed:")
    assert fake.shut_down == 1


def test_the_real_library_on_this_machine_never_raises() -> None:
    report = nvml.discover_gpus()
    if not report.accelerators:  # the usual case here: no driver on a CPU machine
        assert report.message.startswith("no GPUs found on this machine (")


# ---------------------------------------------------------------- through the standalone backend


def test_standalone_discovery_is_this_machine_with_its_gpus(tmp_path) -> None:
    discovery = StandaloneBackend(tmp_path, "gpu-box", nvml_module=eight_h100()).discover()
    (machine,) = discovery.machines
    assert machine.name == "gpu-box"
    assert machine.cpu_count > 0 and machine.system_memory_bytes > 0
    assert len(machine.accelerators) == 8
    assert discovery.message.startswith("8 GPUs")


def test_nvidia_devices_whose_driver_does_not_answer_are_not_offered_as_a_cpu_machine(
    tmp_path,
) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").touch()
    fake = FakeNvml([], init_error=pynvml.NVMLError_DriverNotLoaded())
    backend = StandaloneBackend(
        tmp_path, nvml_module=fake, device_nodes=str(tmp_path / "dev" / "nvidia*")
    )
    discovery = backend.discover()
    (machine,) = discovery.machines
    assert machine.accelerators == () and machine.cpu_count > 0
    assert discovery.notices == (NOTICE_DRIVER_NOT_WORKING,)
    assert discovery.message.startswith("no GPUs found on this machine (NVML: Driver Not Loaded)")
    assert "driver is not working" in discovery.message


def test_a_machine_without_nvidia_devices_hosts_on_its_cpu_less_the_reserve(tmp_path) -> None:
    fake = FakeNvml([], init_error=pynvml.NVMLError_LibraryNotFound())
    backend = StandaloneBackend(
        tmp_path,
        nvml_module=fake,
        device_nodes=str(tmp_path / "no-such" / "nvidia*"),
        cpu_reserve_bytes=4 << 30,
    )
    discovery = backend.discover()
    (machine,) = discovery.machines
    (cpu,) = machine.accelerators
    assert (cpu.vendor, cpu.index, cpu.sharing_class) == ("cpu", 0, "shared")
    assert cpu.memory_bytes == machine.system_memory_bytes - (4 << 30)
    assert f"({machine.cpu_count} cores)" in cpu.product
    assert discovery.notices == ()
    assert discovery.message.startswith("no NVIDIA devices on this machine: it hosts on its CPU")
