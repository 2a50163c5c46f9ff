"""The Ray cluster backend: discovery from Ray's state API. Copies do not run on Ray yet
(Cluster.runs_no_copies_yet refuses hosting before any of the methods below would be asked),
so there is never a copy of Berth's on a Ray cluster to launch, observe or stop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from clusters.backends.base import (
    BackendError,
    CopyHandle,
    CopySpec,
    Discovery,
    FilesResult,
    LogRecord,
    MetricSample,
    ModelFiles,
    Observation,
    Progress,
    RunningEngine,
)
from clusters.backends.ray.dashboard import discover

NOT_YET = "Berth does not run copies on Ray clusters yet"


class RayBackend:
    def __init__(self, address: str, token: str, gpu_memory_gib: Mapping[str, float]) -> None:
        self.address = address
        self._token = token  # never in a repr or a record
        self.gpu_memory_gib = dict(gpu_memory_gib)

    def __repr__(self) -> str:
        return f"RayBackend({self.address!r})"

    def discover(self) -> Discovery:
        return discover(self.address, self._token, self.gpu_memory_gib)

    def prepare_files(
        self, machine: str, files: ModelFiles, progress: Progress | None = None
    ) -> FilesResult:
        raise BackendError(NOT_YET)

    def launch(self, spec: CopySpec) -> CopyHandle:
        raise BackendError(NOT_YET)

    def stop(self, handle: CopyHandle) -> None:
        raise BackendError(NOT_YET)

    def running_engines(self, install_id: str) -> list[RunningEngine]:
        return []  # none of Berth's: it starts none on Ray

    def observe(self, handles: Sequence[CopyHandle]) -> list[Observation]:
        return [Observation(handle.copy_id, "gone", message=NOT_YET) for handle in handles]

    def logs(self, handle: CopyHandle, since: datetime | None) -> list[LogRecord]:
        return []

    def metrics(self, handle: CopyHandle) -> list[MetricSample]:
        return []
