"""The Ray cluster backend: Berth places, Ray runs.

Discovery reads Ray's state API through the dashboard. Everything that needs a Ray connection
(launch, stop, observe, logs) is asked of the cluster's driver process over its Unix socket
(clusters/backends/ray/driver.py; the watcher holding the cluster's lock runs it), because Ray
connects a process to one cluster. A copy is an actor in a placement group of its own, pinned to
the planned node; its engine listens on the node's loopback and the actor relays to it, on the
node's address, checking the engine key.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from clusters.backends.base import (
    INFEASIBLE,
    RESTARTING,
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
from clusters.backends.local import parse_metrics
from clusters.backends.logparse import LineState, parse_lines
from clusters.backends.ray.dashboard import (
    accelerator_type,
    alive_nodes,
    discover,
    machine_name,
    node_address,
)

DRIVER_SOCKET = "ray-driver.sock"
NO_ROOM = (
    "Ray has not found room for it yet: another deployment, or work outside Berth, may be "
    "using the accelerators it needs"
)


@dataclass(frozen=True)
class RayCluster:
    """What the backend needs of a Ray cluster's row (no Django here)."""

    address: str
    dashboard_url: str
    gpu_memory_gib: Mapping[str, float]
    state_dir: Path
    simulated_engines: bool = False
    token: str = field(default="", repr=False)


def namespace_of(install_id: str) -> str:
    """The Ray namespace of one install's actors."""
    return f"berth-{install_id}"


# What actor_name makes: "<deployment>-<ordinal>-copy<copy id>".
ACTOR_NAME = re.compile(r"(?P<deployment>.+)-(?P<ordinal>\d+)-copy(?P<copy>\d+)")


def actor_name(spec_or_handle: CopySpec | CopyHandle, deployment: str = "") -> str:
    """Named after the deployment and ordinal, and the copy (names are unique in Berth's
    namespace; a copy id is never used twice)."""
    if isinstance(spec_or_handle, CopySpec):
        spec = spec_or_handle
        return f"{spec.deployment_name}-{spec.ordinal}-copy{spec.copy_id}"
    return spec_or_handle.pod_name


class RayBackend:
    def __init__(self, cluster: RayCluster) -> None:
        self.cluster = cluster
        self.log_seen: dict[int, tuple[str, int, LineState]] = {}

    def __repr__(self) -> str:
        return f"RayBackend({self.cluster.address!r})"

    # ---------------------------------------------------------------- the driver

    @property
    def socket_path(self) -> Path:
        return self.cluster.state_dir / DRIVER_SOCKET

    def ask(self, op: str, timeout: float = 60, **arguments: Any) -> Any:
        """One request to the cluster's driver; BackendError with its words when it fails."""
        if not self.socket_path.exists():
            raise BackendError(
                "The Ray driver of this cluster is not running: the watcher starts it (is the "
                "watcher running?)"
            )
        with socket.socket(socket.AF_UNIX) as connection:
            connection.settimeout(timeout)
            try:
                connection.connect(str(self.socket_path))
                stream = connection.makefile("rwb")
                stream.write(json.dumps({"op": op, **arguments}).encode() + b"\n")
                stream.flush()
                answer = json.loads(stream.readline() or b"{}")
            except (OSError, ValueError) as error:
                raise BackendError(f"The Ray driver did not answer: {error}") from error
        if not answer.get("ok"):
            raise BackendError(f"Ray: {answer.get('error', 'no answer')}")
        return answer["result"]

    # ---------------------------------------------------------------- discovery and files

    def discover(self) -> Discovery:
        cluster = self.cluster
        return discover(
            cluster.dashboard_url, cluster.token, cluster.gpu_memory_gib, self.measured_gpus()
        )

    def measured_gpus(self) -> dict[str, Any]:
        """Each GPU node's GPUs as NVML reports them there, by node id (the driver measures
        them); none before the driver runs: discovery then goes by the declared memory."""
        if not self.socket_path.exists():
            return {}
        try:
            return dict(self.ask("gpus", timeout=90).get("nodes", {}))
        except BackendError:
            return {}

    def prepare_files(
        self, machine: str, files: ModelFiles, progress: Progress | None = None
    ) -> FilesResult:
        # A Ray node's engine fetches the model into its own cache as it starts.
        return FilesResult(True, message="The engine fetches the files on its node.")

    # ---------------------------------------------------------------- copies

    def launch(self, spec: CopySpec) -> CopyHandle:
        node = self.node_of(spec.machine)
        argv, env = self.engine_command(spec, accelerator_type(node))
        key = next(iter(spec.secret_env.values()), "")
        name = actor_name(spec)
        self.ask(
            "launch",
            name=name,
            gpus=self.gpus_of(spec),
            node_id=str(node.node_id),
            argv=argv,
            env=env,
            cwd=str(Path.cwd()) if self.cluster.simulated_engines else None,
            key=key,
            secret_env=dict(spec.secret_env),
        )
        return CopyHandle(spec.copy_id, machine=spec.machine, pod_name=name)

    @staticmethod
    def gpus_of(spec: CopySpec) -> float:
        """A share of one GPU, or n whole GPUs (tensor parallel)."""
        if len(spec.gpu_indexes) > 1:
            return float(len(spec.gpu_indexes))
        return spec.memory_share if 0 < spec.memory_share < 1 else 1.0

    def node_of(self, machine: str) -> Any:
        for node in alive_nodes(self.cluster.dashboard_url, self.cluster.token, timeout=10):
            if machine_name(node) == machine:
                return node
        raise BackendError(f"Ray reports no alive node {machine} now")

    def engine_command(self, spec: CopySpec, gpu_type: str) -> tuple[list[str], dict[str, str]]:
        """The argv and environment the actor starts: Berth's as rendered, or for a cluster that
        runs the engine simulator (demos, tests), the simulator's for the same command line."""
        if not self.cluster.simulated_engines:
            return list(spec.argv), dict(spec.env)
        from clusters.backends.simulator import engine_argv
        from clusters.simulator.contract import build_env

        declared = self.cluster.gpu_memory_gib.get(gpu_type, 80)
        hardware = build_env(gpu_memory=int(declared * (1 << 30)), gpu_name=gpu_type or None)
        return engine_argv(spec.argv), {"PYTHONPATH": str(Path.cwd()), **hardware, **spec.env}

    def stop(self, handle: CopyHandle) -> None:
        if handle.pod_name:
            self.ask("stop", name=handle.pod_name, timeout=90)

    def running_engines(self, install_id: str) -> list[RunningEngine]:
        """This install's live actors (its driver lists its own namespace only)."""
        listed = self.ask("running").get("actors", [])
        now = datetime.now(UTC)
        engines = []
        for actor in listed:
            named = ACTOR_NAME.fullmatch(actor.get("name") or "")
            if named is None:
                continue  # not a copy's actor
            started = actor.get("started_at")
            engines.append(
                RunningEngine(
                    CopyHandle(int(named["copy"]), pod_name=named[0], install_id=install_id),
                    datetime.fromtimestamp(started, UTC) if started else now,
                    named["deployment"],
                )
            )
        return engines

    def observe(self, handles: Sequence[CopyHandle]) -> list[Observation]:
        named = [h for h in handles if h.pod_name]
        if not named:
            return []
        seen = self.ask("observe", names=[h.pod_name for h in named])
        return [observation(h, seen.get(h.pod_name) or {}) for h in named]

    def logs(self, handle: CopyHandle, since: datetime | None) -> list[LogRecord]:
        """The engine's lines Ray kept for the actor, those not read before, oldest first."""
        if not handle.pod_name:
            return []
        found = self.ask("logs", name=handle.pod_name)
        actor, lines = found.get("actor_id", ""), found.get("lines", [])
        seen_actor, count, state = self.log_seen.get(
            handle.copy_id, ("", 0, LineState(last_at=datetime.now(UTC)))
        )
        if actor != seen_actor or len(lines) < count:
            count = 0  # a restarted actor writes a log of its own
        parsed, state = parse_lines(lines[count:], state)
        self.log_seen[handle.copy_id] = (actor, len(lines), state)
        return [
            LogRecord(handle.copy_id, "engine", line.level, line.at, line.text, handle.machine)
            for line in parsed
        ]

    def metrics(self, handle: CopyHandle) -> list[MetricSample]:
        if not handle.port or not handle.machine:
            return []
        url = f"http://{node_address(handle.machine)}:{handle.port}/metrics"
        headers = {"Authorization": f"Bearer {handle.api_key}"} if handle.api_key else {}
        try:
            reply = httpx.get(url, headers=headers, timeout=2)
        except httpx.HTTPError:
            return []
        return parse_metrics(reply.text) if reply.status_code == 200 else []


def observation(handle: CopyHandle, seen: dict[str, Any]) -> Observation:
    """What Ray and the engine say of one copy, in the console's words."""
    copy_id, actor = handle.copy_id, seen.get("actor")
    if seen.get("group") == "RESCHEDULING":
        # Its node left the cluster: Ray tries to place the group again (pinned to that node,
        # it cannot). The copy stops serving; the lost machine's copies are placed again by
        # the reconciler once discovery no longer reports the node.
        return Observation(copy_id, "waiting", reason=RESTARTING, message=NODE_GONE)
    if seen.get("scheduling") == "INFEASIBLE":
        # Berth's plan placed it, so this is a disagreement between the two: the copy fails
        # with Ray's words rather than waiting for room that will never come.
        return Observation(
            copy_id,
            "exited",
            reason=INFEASIBLE,
            message="Ray can never place it where Berth planned it: no node there has the GPUs "
            f"it asks for ({seen.get('required') or 'see its placement group'}); Berth's plan "
            "should have refused it first",
        )
    if seen.get("group") == "PENDING" or actor in (None, "PENDING_CREATION"):
        if seen.get("group") is None and actor is None:
            return Observation(copy_id, "gone", message="Ray has no actor of this copy")
        return Observation(copy_id, "waiting", reason="NoResources", message=NO_ROOM)
    if actor == "DEAD":
        return Observation(
            copy_id, "exited", reason="ActorDied", message=death_words(seen.get("death_cause"))
        )
    status = seen.get("status") or {}
    ready = actor == "ALIVE" and status.get("healthy")
    restarts = int(seen.get("restarts") or 0)
    if actor == "RESTARTING" or (not ready and restarts):
        # Restarting, or restarted with its engine not answering yet: Ray is trying again.
        # Ray counts a restart when it begins (RESTARTING already carries it).
        number = max(restarts, 1)
        return Observation(
            copy_id,
            "waiting",
            reason=RESTARTING,
            message=f"A start failed: the engine exited; Ray is trying again (restart {number})",
            port=status.get("relay_port"),  # a restarted actor's relay listens anew
        )
    return Observation(
        copy_id,
        "ready" if ready else "starting",
        pid=status.get("pid"),
        port=status.get("relay_port"),
        gpu_uuids=tuple(
            f"ray-{str(status.get('node_id', ''))[:16]}-{gpu}" for gpu in status.get("gpu_ids", [])
        ),
    )


NODE_GONE = "Its Ray node is gone; Ray is trying to place it again"


def death_words(cause: Any) -> str:
    text = str(cause or "")
    if "RAY_KILL" in text:
        return "Stopped by Ray (ray.kill)."
    if "exited" in text.lower() or "exit" in text.lower():
        return "The engine exited and Ray gave up restarting it."
    return f"Ray reports the copy dead: {text[:300]}" if text else "Ray reports the copy dead."
