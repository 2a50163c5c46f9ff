"""The protocol every cluster backend implements, and the plain values that cross it.

Backends import no Django: the console turns rows into these values (a CopySpec), calls the
backend, and writes what comes back (Discovery, Observation, LogRecord) into rows itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

NOTICE_SHARING_NOT_CONFIGURED = "SharingNotConfigured"
NOTICE_PARTIAL_DISCOVERY = "PartialDiscovery"
NOTICE_DRIVER_NOT_WORKING = "DriverNotWorking"

HardwareClass = Literal["hardware_isolated", "software_shared", "unified_memory"]
# whole_gpu | shared | time_sliced | mps | mig | unified_memory
SharingClass = str


@dataclass(frozen=True)
class DiscoveredSlice:
    """A MIG slice of a GPU, as the device (or the node's labels) report it."""

    index: int
    profile: str
    memory_bytes: int
    uuid: str = ""


@dataclass(frozen=True)
class DiscoveredAccelerator:
    """One GPU (or accelerator) of a machine, memory as reported by the device."""

    index: int
    vendor: str
    product: str
    memory_bytes: int
    uuid: str = ""
    compute_capability: str = ""
    driver_version: str = ""
    cuda_version: str = ""
    hardware_class: HardwareClass = "software_shared"
    sharing_class: SharingClass = "whole_gpu"
    replicas: int = 1
    slices: tuple[DiscoveredSlice, ...] = ()


@dataclass(frozen=True)
class DiscoveredMachine:
    """A machine as discovery sees it. Without GPU capacity facts it receives no placements."""

    name: str
    ready: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)
    cpu_count: int = 0
    system_memory_bytes: int = 0
    unified_memory: bool = False
    accelerators: tuple[DiscoveredAccelerator, ...] = ()
    capacity_known: bool = True


@dataclass(frozen=True)
class Discovery:
    """What a cluster reported: its machines, notices (in DESIGN's vocabulary) and a message."""

    machines: tuple[DiscoveredMachine, ...]
    notices: tuple[str, ...] = ()
    message: str = ""
    reachable: bool = True


@dataclass(frozen=True)
class CopySpec:
    """Everything a backend needs to start one copy; built by the console from the rows."""

    copy_id: int
    deployment_name: str
    ordinal: int
    argv: tuple[str, ...]  # the engine's command line: an argument list, never a shell string
    env: Mapping[str, str]
    machine: str
    gpu_indexes: tuple[int, ...] = ()
    mig_slice_uuid: str = ""
    mig_profile: str = ""
    memory_share: float = 0.0  # --gpu-memory-utilization given to the engine
    reserved_bytes: int = 0
    port: int = 0
    token_owner: str = ""  # the team whose Hugging Face token the copy may use (its name only)
    on_cpu: bool = False  # placed on a CPU machine (vendor cpu): no GPU is made visible to it
    # The model's files on this machine (a folder or a GGUF), which a local engine's user may
    # read; "" when the engine fetches them itself.
    model_files: str = ""
    # This install's id (clusters/registry.install_id): engines carry it, so that an install
    # sweeps only engines it started itself.
    install_id: str = ""
    # The team whose own cache on a cluster holds the model ("" → the shared cache): gated
    # weights and models that run their own code are kept per team (catalog/trust.py).
    cache_owner: str = ""
    # The copy's secrets (its engine key) by variable: local engines get them in their
    # environment, pods from a Secret; never on a command line, in a record or in a repr.
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class CopyHandle:
    """How a backend finds a launched copy again (also after the console restarts)."""

    copy_id: int
    machine: str = ""
    pid: int | None = None
    port: int | None = None
    pod_name: str = ""
    # A local engine listening on a Unix socket (only the console's user and the engine's own
    # may enter its folder): where it is; the port is then not listened on.
    socket: str = ""
    # The copy's engine key, for what the engine guards with it (llama.cpp's /metrics).
    api_key: str = field(default="", repr=False, compare=False)
    # Given, a stop touches only what carries this install's id (a sweep of strays must never
    # stop another install's engine that has the same copy id).
    install_id: str = ""


@dataclass(frozen=True)
class RunningEngine:
    """An engine a backend finds running that carries an install's id (see running_engines)."""

    handle: CopyHandle
    started_at: datetime
    deployment_name: str = ""


@dataclass(frozen=True)
class ModelFiles:
    """One variant's files at one revision: what must be on a machine before a copy starts."""

    repo_id: str
    revision: str = ""  # the commit this server's download pinned ("" → the default branch)
    variant: str = ""  # one repository may hold several variants (GGUF files, say)
    source_path: str = ""  # the folder this server keeps them in ("" when it keeps none)
    size_bytes: int = 0
    files: tuple[tuple[str, int], ...] = ()  # (path in the repository, bytes)
    token_owner: str = ""  # the team whose Hugging Face token fetches them (gated models)
    cache_owner: str = ""  # the team whose own cache on a cluster keeps them ("" → shared)
    token: str = field(default="", repr=False, compare=False)  # that token: never shown or logged

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.files)

    @property
    def key(self) -> str:
        """A short name for these files that is the same on every machine and in every run."""
        what = f"{self.repo_id}\n{self.revision}\n{self.variant}"
        return hashlib.sha256(what.encode()).hexdigest()[:16]

    def words(self) -> str:
        return f"{self.repo_id} {self.variant}".strip()


# Told the bytes on the machine so far, as a copy of model files goes on.
Progress = Callable[[int], None]


@dataclass(frozen=True)
class FilesResult:
    """Whether a copy's model files are on its machine, and which are missing if not."""

    present: bool
    missing: tuple[str, ...] = ()
    message: str = ""


# An Observation's reason when the platform says it can never place the copy where Berth
# planned it (Ray's INFEASIBLE): a NoFit, not a crash.
INFEASIBLE = "Infeasible"
# An Observation's reason when the platform starts a copy's engine again by itself (Ray restarts
# an actor whose engine exited): the copy stops serving until its engine answers again.
RESTARTING = "Restarting"
ObservedStatus = Literal["starting", "ready", "exited", "unschedulable", "waiting", "gone"]
# What an observation says of an engine that holds no memory any more.
ENGINE_GONE = frozenset({"exited", "gone"})


@dataclass(frozen=True)
class Observation:
    """What a backend saw of one copy."""

    copy_id: int
    status: ObservedStatus
    exit_code: int | None = None
    reason: str = ""  # e.g. OOMKilled, CrashLoopBackOff, Unschedulable, ImagePullBackOff
    message: str = ""
    pid: int | None = None
    port: int | None = None
    pod_name: str = ""
    gpu_uuids: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogRecord:
    """One line a copy printed (engine) or its backend reported (serving)."""

    copy_id: int
    stream: Literal["serving", "engine"]
    level: str
    at: datetime
    text: str
    machine: str = ""


@dataclass(frozen=True)
class MetricSample:
    name: str
    labels: Mapping[str, str]
    value: float


class BackendError(Exception):
    """A backend could not do what was asked; the message says why in words."""


class ClusterBackend(Protocol):
    """What placement, the lifecycle and the pages need from any kind of cluster."""

    def discover(self) -> Discovery: ...

    def prepare_files(
        self, machine: str, files: ModelFiles, progress: Progress | None = None
    ) -> FilesResult: ...

    def launch(self, spec: CopySpec) -> CopyHandle: ...

    def stop(self, handle: CopyHandle) -> None: ...

    def running_engines(self, install_id: str) -> list[RunningEngine]:
        """Every engine running now that was launched with this install id (whatever copy it
        was for): what the reconciler compares with the copies it knows."""
        ...

    def observe(self, handles: Sequence[CopyHandle]) -> list[Observation]: ...

    def logs(self, handle: CopyHandle, since: datetime | None) -> list[LogRecord]: ...

    def metrics(self, handle: CopyHandle) -> list[MetricSample]: ...
