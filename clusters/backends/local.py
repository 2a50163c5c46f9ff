"""What the standalone and simulator backends share: engines run as local processes.

Each copy gets a folder ``STATE_DIR/copies/COPY_ID/`` holding its log (``engine.log``), the
exit status its wrapper writes (``exit``) and a record of the launch (``process.json``: pid,
port, machine, GPUs, start time; never the API key). A new backend instance given the same
state folder finds all of it again from a CopyHandle, so restarting the console never loses a
copy (DESIGN §6). Engines listen on 127.0.0.1 only.

Standard library only (prometheus_client is imported when metrics are read), so that the
standalone backend runs with nothing but nvidia-ml-py installed.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from clusters.backends import isolation, supervisor
from clusters.backends.argv import flag_value, without_flag, without_key
from clusters.backends.base import (
    BackendError,
    CopyHandle,
    CopySpec,
    LogRecord,
    MetricSample,
    Observation,
    RunningEngine,
)
from clusters.backends.logparse import LineState, parse_lines, root_cause_line
from placement.words import gib

ENGINE_HOST = "127.0.0.1"
# A copy on a GPU with this share or more has the GPU to itself; below, it shares the GPU and
# must find its bytes free before it starts (vLLM refuses to start otherwise).
WHOLE_GPU_SHARE = 0.9
# What an engine inherits from the console's environment: enough to run, and no secrets (the
# console's own database URL and keys stay out of every engine).
PASSED_THROUGH = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "TZ",
    "TMPDIR",
    "VIRTUAL_ENV",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "XDG_CACHE_HOME",
    "VLLM_CACHE_ROOT",  # where vLLM's CPU build keeps its compiled kernels between starts
)
# HTTP to the engines never goes through a proxy the console's environment may name.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class WaitForRoom(BackendError):
    """The copy's GPU has too little free memory now; it waits, and is retried, until it has."""


# ---------------------------------------------------------------- checks before a launch


def engine_port(argv: Sequence[str], spec_port: int) -> int:
    """The port the engine will listen on: the argv's ``--port``, which must match the spec's."""
    text = flag_value(argv, "--port")
    if text is None:
        if not spec_port:
            raise BackendError("the engine's command line gives no --port")
        return spec_port
    try:
        port = int(text)
    except ValueError as error:
        raise BackendError(f"--port {text!r} is not a number") from error
    if spec_port and port != spec_port:
        raise BackendError(f"the command line says --port {port} but the copy has port {spec_port}")
    if not 0 < port < 65536:
        raise BackendError(f"--port {port} is not a port an engine can listen on")
    return port


def on_socket(argv: Sequence[str], path: Path) -> list[str]:
    """The engine's command line listening on a Unix socket instead of a port: llama-server
    takes a socket path as its --host, vLLM (and its simulator) take --uds."""
    kept = without_flag(without_flag(argv, "--host"), "--port")
    if argv and Path(argv[0]).name == "llama-server":
        return [*kept, "--host", str(path)]
    return [*kept, "--uds", str(path)]


def check_engine_argv(argv: Sequence[str]) -> None:
    """An argument list (never a shell string) for an engine that listens on 127.0.0.1 only."""
    try:
        supervisor.check_argv(argv)
    except supervisor.SupervisorError as error:
        raise BackendError(str(error)) from error
    host = flag_value(argv, "--host")
    if host != ENGINE_HOST:
        shown = "no --host (all interfaces)" if host is None else f"--host {host}"
        raise BackendError(f"engines listen on {ENGINE_HOST} only; the command line has {shown}")


def shares_its_gpu(spec: CopySpec) -> bool:
    return (
        bool(spec.gpu_indexes) and not spec.mig_slice_uuid and spec.memory_share < WHOLE_GPU_SHARE
    )


def check_room(spec: CopySpec, free_bytes_of: Callable[[int], int | None]) -> None:
    """Before a launch on a shared GPU: each of its GPUs must have the copy's bytes free.

    spec.reserved_bytes is what the copy holds on each of its GPUs (one reservation per GPU).
    A GPU whose free memory cannot be read is not held against the copy: vLLM checks it again.
    """
    if not shares_its_gpu(spec):
        return
    for index in spec.gpu_indexes:
        free = free_bytes_of(index)
        if free is not None and free < spec.reserved_bytes:
            raise WaitForRoom(
                f"{gib(free)} free on GPU {index}, the copy needs "
                f"{gib(spec.reserved_bytes)}; it waits until memory frees up"
            )


def cuda_visible_devices(spec: CopySpec) -> str | None:
    """The GPUs the engine may see: its MIG slice by UUID, or its GPUs by index."""
    if spec.mig_slice_uuid:
        return spec.mig_slice_uuid
    if spec.gpu_indexes:
        return ",".join(str(index) for index in spec.gpu_indexes)
    return None


def engine_environment(
    spec_env: Mapping[str, str],
    visible: str | None,
    base: Mapping[str, str] | None = None,
    secrets: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A small inherited environment, then the copy's own variables and secrets (its engine
    key: the environment is where each engine reads it, never the argv), then its GPUs."""
    base = os.environ if base is None else base
    env = {name: base[name] for name in PASSED_THROUGH if name in base}
    env.update({name: value for name, value in base.items() if name.startswith("LC_")})
    env["PYTHONUNBUFFERED"] = "1"  # vLLM logs through Python: lines reach the file at once
    env.update(spec_env)
    env.update(secrets or {})
    if visible is not None:
        # NVML numbers GPUs by PCI bus; CUDA's default order is "fastest first". Same order here.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


# ---------------------------------------------------------------- talking to an engine


def http_get(url: str, timeout_s: float, api_key: str = "") -> tuple[int, bytes]:
    """Status and body of a GET; raises OSError (URLError) when nothing answers."""
    request = urllib.request.Request(url)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with _DIRECT.open(request, timeout=timeout_s) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as error:
        return int(error.code), b""


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP to an engine listening on a Unix socket."""

    def __init__(self, path: str, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def unix_get(path: str, target: str, timeout_s: float, api_key: str = "") -> tuple[int, bytes]:
    """Status and body of a GET over a Unix socket; raises OSError when nothing answers."""
    connection = UnixHTTPConnection(path, timeout_s)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
        return int(response.status), response.read()
    except http.client.HTTPException as error:
        raise ConnectionError(f"the engine's answer was not HTTP: {error}") from error
    finally:
        connection.close()


def engine_get(handle: CopyHandle, target: str, timeout_s: float) -> tuple[int, bytes]:
    """A GET to a local engine, on its socket or at its port (with its key, where it has one)."""
    if handle.socket:
        return unix_get(handle.socket, target, timeout_s, handle.api_key)
    return http_get(f"http://{ENGINE_HOST}:{handle.port}{target}", timeout_s, handle.api_key)


def probe_health(handle: CopyHandle, timeout_s: float) -> tuple[str, str]:
    """("ready" | "starting" | "unhealthy", why). vLLM listens only once the engine is up, so
    a refused connection while the process lives means it is still starting; a 503 means its
    engine core died (reference/vllm.md §3.5)."""
    try:
        status, _ = engine_get(replace(handle, api_key=""), "/health", timeout_s)
    except (OSError, ValueError):
        return "starting", "the engine is starting (it does not answer yet)"
    if status == 200:
        return "ready", "the engine answers /health"
    return "unhealthy", f"the engine answers /health with {status}"


def parse_metrics(body: str) -> list[MetricSample]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        MetricSample(sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    ]


# ---------------------------------------------------------------- the backend


@dataclass
class LogCursor:
    """Where the last read of a copy's log stopped, so the next one parses only new lines."""

    started_at: str
    offset: int
    state: LineState


class LocalProcessBackend:
    """Launch, observe, read, scrape and stop engines that run as processes on this machine."""

    def __init__(
        self,
        state_dir: str | Path,
        machine_name: str,
        *,
        stop_timeout_s: float = 10.0,
        http_timeout_s: float = 1.0,
        engine_sockets: bool = False,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.machine_name = machine_name
        self.stop_timeout_s = stop_timeout_s
        self.http_timeout_s = http_timeout_s
        # Engines listen on Unix sockets (the console's clusters), or on 127.0.0.1 ports (tests
        # that talk to an engine directly).
        self.engine_sockets = engine_sockets
        self._cursors: dict[int, LogCursor] = {}

    # -------------------------------------------------------- where a copy's files are

    def copy_dir(self, copy_id: int) -> Path:
        return self.state_dir / "copies" / str(copy_id)

    def log_path(self, copy_id: int) -> Path:
        return self.copy_dir(copy_id) / "engine.log"

    def exit_path(self, copy_id: int) -> Path:
        return self.copy_dir(copy_id) / "exit"

    def record_path(self, copy_id: int) -> Path:
        return self.copy_dir(copy_id) / "process.json"

    def read_record(self, copy_id: int) -> dict[str, Any]:
        try:
            return dict(json.loads(self.record_path(copy_id).read_text()))
        except (OSError, ValueError):
            return {}

    def _write_record(self, copy_id: int, record: Mapping[str, Any]) -> None:
        supervisor.write_atomically(self.record_path(copy_id), json.dumps(record, indent=2))

    def _marker(self, copy_id: int) -> str:
        return str(self.exit_path(copy_id))

    def is_running(self, handle: CopyHandle) -> bool:
        return supervisor.is_alive(handle.pid, self._marker(handle.copy_id))

    def live_records(self) -> list[dict[str, Any]]:
        """The records of every copy whose engine runs now (for memory accounting)."""
        records = []
        for folder in sorted((self.state_dir / "copies").glob("*")):
            if not folder.name.isdigit():
                continue
            record = self.read_record(int(folder.name))
            handle = CopyHandle(int(folder.name), pid=record.get("pid"))
            if record and self.is_running(handle):
                records.append(record)
        return records

    def running_engines(self, install_id: str) -> list[RunningEngine]:
        """The running engines whose record carries install_id (a record without one, written
        before ids were kept, is never listed)."""
        return [
            RunningEngine(
                self.handle_of(record),
                datetime.fromisoformat(record["started_at"]),
                record.get("deployment_name", ""),
            )
            for record in self.live_records()
            if install_id and record.get("install_id") == install_id
        ]

    # -------------------------------------------------------- launch

    def handle_of(self, record: Mapping[str, Any]) -> CopyHandle:
        return CopyHandle(
            record["copy_id"], machine=record.get("machine", ""), pid=record.get("pid"),
            port=record.get("port"), socket=record.get("socket", ""),
        )  # fmt: skip

    def running_handle(self, spec: CopySpec) -> CopyHandle | None:
        """The copy's engine if it already runs: a repeated launch returns it (idempotent)."""
        record = self.read_record(spec.copy_id)
        if not record:
            return None
        handle = self.handle_of(record)
        return handle if self.is_running(handle) else None

    def listening_argv(self, spec: CopySpec) -> list[str]:
        """The copy's command line, on its socket where engines listen on sockets."""
        if not self.engine_sockets:
            return list(spec.argv)
        return on_socket(spec.argv, isolation.socket_path(self.state_dir, spec.copy_id))

    def start_engine(
        self,
        spec: CopySpec,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        cwd: Path | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> CopyHandle:
        """Start the engine under the supervisor and write the copy's record. Where users can
        be switched, the engine runs as its team's engine user in a working folder of its own
        (isolation.py); the copy's record, log and exit file stay the console's (0700)."""
        port = engine_port(spec.argv, spec.port)  # as asked, before a socket replaced it
        folder = self.copy_dir(spec.copy_id)
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)
        self.log_path(spec.copy_id).write_bytes(b"")  # each launch has its own log
        self._cursors.pop(spec.copy_id, None)
        user = isolation.engine_user(spec.token_owner)
        tmp = isolation.temporary_folder(self.state_dir, spec.copy_id, user)  # the socket's too
        if user is not None:
            home = isolation.working_folder(self.state_dir, spec.copy_id, user)
            env = {**env, **isolation.environment(home, tmp, user)}
            isolation.make_reachable(argv, spec.model_files)
            cwd = home
        listens_on = str(isolation.socket_path(self.state_dir, spec.copy_id))
        started_at = datetime.now().astimezone()
        try:
            pid = supervisor.start(
                argv,
                cwd=cwd or folder,
                env=env,
                log_path=self.log_path(spec.copy_id),
                exit_path=self.exit_path(spec.copy_id),
                user=(user.uid, user.gid) if user else None,
            )
        except supervisor.SupervisorError as error:
            raise BackendError(str(error)) from error
        machine = spec.machine or self.machine_name
        record = {
            "copy_id": spec.copy_id,
            "pid": pid,
            "port": port,
            "machine": machine,
            "started_at": started_at.isoformat(),
            "argv": without_key(argv),
            "engine_user": user.name if user else "",
            "socket": listens_on if listens_on in argv else "",
            "install_id": spec.install_id,
            "deployment_name": spec.deployment_name,
            **(extra or {}),
        }
        self._write_record(spec.copy_id, record)
        return self.handle_of(record)

    # -------------------------------------------------------- observe

    def observe(self, handles: Sequence[CopyHandle]) -> list[Observation]:
        return [self.observe_one(handle) for handle in handles]

    def observe_one(self, handle: CopyHandle) -> Observation:
        record = self.read_record(handle.copy_id)
        seen = Observation(
            handle.copy_id,
            "gone",
            pid=handle.pid,
            port=handle.port,
            gpu_uuids=tuple(record.get("gpu_uuids", ())),
        )
        if not handle.pid:
            return replace(seen, message="the copy has no process")
        if self.is_running(handle):
            return self._observe_running(handle, seen)
        code = supervisor.exit_code(handle.pid, self.exit_path(handle.copy_id))
        if code is None:
            message = (
                f"process {handle.pid} is gone and left no exit status "
                "(killed from outside, or the machine restarted)"
            )
            return replace(seen, message=message)
        return replace(
            seen,
            status="exited",
            exit_code=code,
            reason="Completed" if code == 0 else "Error",
            message=self._exit_message(handle.copy_id, code),
        )

    def _observe_running(self, handle: CopyHandle, seen: Observation) -> Observation:
        if not handle.port and not handle.socket:
            return replace(seen, status="starting", message="no address to ask")
        health, message = probe_health(handle, self.http_timeout_s)
        if health == "ready":
            return replace(seen, status="ready", message=message)
        # Not serving and not dead yet: "starting"; an engine that answers 503 says so.
        reason = "Unhealthy" if health == "unhealthy" else ""
        return replace(seen, status="starting", reason=reason, message=message)

    def _exit_message(self, copy_id: int, code: int) -> str:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        cause = root_cause_line(supervisor.read_tail(self.log_path(copy_id)))
        return f"the engine {how}: {cause}" if cause else f"the engine {how}"

    # -------------------------------------------------------- logs

    def logs(self, handle: CopyHandle, since: datetime | None) -> list[LogRecord]:
        """Lines the engine printed after `since` (all of them when None), oldest first."""
        cursor = self._cursor_for(handle.copy_id, since)
        lines, offset = supervisor.read_log(self.log_path(handle.copy_id), cursor.offset)
        if offset < cursor.offset:  # the log was started afresh under us: read it all
            cursor = self._fresh_cursor(handle.copy_id)
            lines, offset = supervisor.read_log(self.log_path(handle.copy_id), 0)
        parsed, state = parse_lines(lines, cursor.state)
        self._cursors[handle.copy_id] = LogCursor(cursor.started_at, offset, state)
        machine = handle.machine or self.machine_name
        return [
            LogRecord(handle.copy_id, "engine", line.level, line.at, line.text, machine)
            for line in parsed
            if since is None or line.at > since
        ]

    def _fresh_cursor(self, copy_id: int) -> LogCursor:
        started_at = self.read_record(copy_id).get("started_at", "")
        try:
            first = datetime.fromisoformat(started_at)
        except ValueError:
            first = datetime.now().astimezone()
        return LogCursor(started_at, 0, LineState(last_at=first))

    def _cursor_for(self, copy_id: int, since: datetime | None) -> LogCursor:
        """Continue where the last read stopped when `since` is at or after it; else reparse."""
        cursor = self._cursors.get(copy_id)
        fresh = self._fresh_cursor(copy_id)
        if cursor is None or since is None or cursor.started_at != fresh.started_at:
            return fresh
        return cursor if since >= cursor.state.last_at else fresh

    # -------------------------------------------------------- metrics

    def metrics(self, handle: CopyHandle) -> list[MetricSample]:
        """The engine's /metrics, parsed; nothing when it does not answer."""
        if not handle.port and not handle.socket:
            return []
        try:
            status, body = engine_get(handle, "/metrics", 2.0)
        except (OSError, ValueError):
            return []
        if status != 200:
            return []
        try:
            return parse_metrics(body.decode("utf-8", errors="replace"))
        except ValueError:
            return []

    # -------------------------------------------------------- stop

    def stop(self, handle: CopyHandle) -> None:
        """SIGTERM to the copy's process group, SIGKILL after stop_timeout_s; none left after."""
        if not handle.pid:
            return
        supervisor.stop(
            handle.pid, exit_path=self.exit_path(handle.copy_id), timeout_s=self.stop_timeout_s
        )

    def stop_every_engine(self) -> list[dict[str, Any]]:
        """Stop every engine that runs from this state folder; the records of those stopped.
        (`make stop`: the console is down, so nobody else stops them.)"""
        running = self.live_records()
        for record in running:
            self.stop(self.handle_of(record))
        return running
