"""Pods (client model objects) → Observations. Pure, apart from the tracker's callback.

The fields read are the standard ones (reference/gpu-clusters.md §3.3): the phase, the
PodScheduled condition, the engine container's state and last state, readiness, and the
pod-level reason (Evicted, UnexpectedAdmissionError).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import V1ContainerStatus, V1Pod

from clusters.backends.base import Observation
from clusters.backends.kubernetes.discovery import is_berth_pod
from clusters.backends.kubernetes.manifests import COPY_ID_LABEL, ENGINE_CONTAINER, INSTANCE_LABEL

log = logging.getLogger("berth.kubernetes")

# The container never ran: a wrong image or a missing Secret or ConfigMap needs the operator.
CANNOT_START = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}
GPU_UUID = re.compile(r"\b(?:GPU|MIG)-[0-9a-fA-F][0-9a-fA-F-]{7,}")
EPOCH = datetime.min.replace(tzinfo=UTC)


def copy_id_of(pod: V1Pod) -> int | None:
    labels = (pod.metadata and pod.metadata.labels) or {}
    value = labels.get(COPY_ID_LABEL, "")
    return int(value) if is_berth_pod(pod) and value.isdigit() else None


def engine_status(pod: V1Pod) -> V1ContainerStatus | None:
    statuses = (pod.status and pod.status.container_statuses) or []
    named = [s for s in statuses if s.name == ENGINE_CONTAINER]
    return (named or statuses or [None])[0]


def engine_port(pod: V1Pod) -> int | None:
    for container in (pod.spec and pod.spec.containers) or []:
        for port in container.ports or []:
            return int(port.container_port)
    return None


def gpu_uuids(pod: V1Pod) -> tuple[str, ...]:
    """The GPUs the device plugin gave the pod, where the pod shows them (env or annotations)."""
    texts = list(((pod.metadata and pod.metadata.annotations) or {}).values())
    for container in (pod.spec and pod.spec.containers) or []:
        texts += [e.value or "" for e in container.env or [] if e.name == "NVIDIA_VISIBLE_DEVICES"]
    found = [uuid for text in texts for uuid in GPU_UUID.findall(text)]
    return tuple(dict.fromkeys(found))


def unschedulable_message(pod: V1Pod) -> str | None:
    for condition in (pod.status and pod.status.conditions) or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            if condition.reason == "Unschedulable":
                return condition.message or "No node can take the pod."
    return None


def observe_pod(copy_id: int, pod: V1Pod) -> Observation:
    """What one pod says about its copy."""
    seen = {
        "copy_id": copy_id,
        "pod_name": pod.metadata.name,
        "port": engine_port(pod),
        "gpu_uuids": gpu_uuids(pod),
    }
    status = pod.status
    phase, reason = (status.phase, status.reason) if status else (None, None)
    if reason in ("Evicted", "UnexpectedAdmissionError") or (reason or "").startswith("OutOf"):
        return Observation(
            status="exited", reason=reason or "", message=status.message or "", **seen
        )
    unschedulable = unschedulable_message(pod)
    if unschedulable is not None:
        return Observation(
            status="unschedulable", reason="Unschedulable", message=unschedulable, **seen
        )
    container = engine_status(pod)
    from_container = observe_container(container, seen) if container else None
    if from_container:
        return from_container
    return observe_phase(phase, container, seen)


def observe_container(container: V1ContainerStatus, seen: dict[str, Any]) -> Observation | None:
    state, last = container.state, container.last_state
    terminated = state and state.terminated
    if terminated:
        return Observation(
            status="exited",
            reason=terminated.reason or "Error",
            exit_code=terminated.exit_code,
            message=terminated.message or "",
            **seen,
        )
    waiting = state and state.waiting
    if waiting and waiting.reason == "CrashLoopBackOff":
        # The last run's end says why it crashed; OOMKilled there matters more than the backoff.
        ended = last and last.terminated
        reason = "OOMKilled" if ended and ended.reason == "OOMKilled" else "CrashLoopBackOff"
        message = waiting.message or f"restarted {container.restart_count} times"
        code = ended.exit_code if ended else None
        return Observation(status="exited", reason=reason, exit_code=code, message=message, **seen)
    if waiting and waiting.reason in CANNOT_START:
        return Observation(
            status="waiting", reason=waiting.reason, message=waiting.message or "", **seen
        )
    return None


def observe_phase(
    phase: str | None, container: V1ContainerStatus | None, seen: dict[str, Any]
) -> Observation:
    if phase == "Succeeded":
        return Observation(status="exited", reason="Completed", exit_code=0, **seen)
    if phase == "Failed":
        return Observation(status="exited", reason="Failed", **seen)
    if phase == "Running" and container and container.ready:
        return Observation(status="ready", **seen)
    waiting = container and container.state and container.state.waiting
    reason = (waiting.reason or "") if waiting else ""
    if phase == "Unknown":
        return Observation(status="waiting", reason="NodeUnreachable", **seen)
    return Observation(status="starting", reason=reason, **seen)


def current_pod(pods: Iterable[V1Pod]) -> V1Pod | None:
    """The pod that speaks for a copy: alive, then not being deleted, then ready, then newest.

    An evicted pod stays listed (Failed) beside the one its Deployment made to replace it.
    """

    def rank(pod: V1Pod) -> tuple[bool, bool, bool, datetime]:
        alive = not (pod.status and pod.status.phase in ("Succeeded", "Failed"))
        container = engine_status(pod)
        ready = bool(container and container.ready)
        created = pod.metadata.creation_timestamp or EPOCH
        return (alive, pod.metadata.deletion_timestamp is None, ready, created)

    return max(pods, key=rank, default=None)


def observe_copy(copy_id: int, pods: Iterable[V1Pod], has_deployment: bool) -> Observation:
    pod = current_pod(pods)
    if pod is not None:
        return observe_pod(copy_id, pod)
    if has_deployment:
        # The Deployment exists but Kubernetes has not created (or has just replaced) its pod.
        return Observation(copy_id=copy_id, status="starting", message="Waiting for the pod.")
    return Observation(copy_id=copy_id, status="gone")


class PodTracker:
    """Berth's pods as a watch reports them; calls on_event when a copy's observation changes.

    A copy's observation is made from all its pods, so the replacement pod that a Deployment
    creates and the old pod's deletion, in whichever order they arrive, never read as "gone".
    Repeated events that change nothing (every re-watch replays ADDED) are not passed on.
    """

    def __init__(
        self,
        on_event: Callable[[Observation], None],
        deployment_exists: Callable[[str], bool],
    ) -> None:
        self.on_event = on_event
        self.deployment_exists = deployment_exists
        self.pods: dict[int, dict[str, V1Pod]] = {}
        self.sent: dict[int, Observation] = {}

    def apply(self, event_type: str, pod: V1Pod) -> None:
        copy_id = copy_id_of(pod)
        if copy_id is None:
            return
        pods = self.pods.setdefault(copy_id, {})
        if event_type == "DELETED":
            pods.pop(pod.metadata.name, None)
        else:
            pods[pod.metadata.name] = pod
        self.emit(copy_id, instance_name(pod))

    def replace_all(self, pods: Iterable[V1Pod]) -> None:
        """After a re-list: the listed pods are all there is (deletions missed are applied)."""
        fresh: dict[int, dict[str, V1Pod]] = {}
        names: dict[int, str] = {}
        for pod in pods:
            copy_id = copy_id_of(pod)
            if copy_id is not None:
                fresh.setdefault(copy_id, {})[pod.metadata.name] = pod
                names[copy_id] = instance_name(pod)
        for copy_id, old in self.pods.items():
            names.setdefault(copy_id, next((instance_name(p) for p in old.values()), ""))
        affected = set(self.pods) | set(fresh)
        self.pods = fresh
        for copy_id in sorted(affected):
            self.emit(copy_id, names.get(copy_id, ""))

    def emit(self, copy_id: int, deployment_name: str) -> None:
        pods = self.pods.get(copy_id, {})
        exists = bool(pods) or (bool(deployment_name) and self.deployment_exists(deployment_name))
        observation = observe_copy(copy_id, pods.values(), exists)
        if not pods:
            self.pods.pop(copy_id, None)
        if self.sent.get(copy_id) == observation:
            return
        try:
            self.on_event(observation)
        except Exception:  # the watch must outlive a failing consumer; it logs, never stops
            log.exception("Handling the observation of copy %s failed", copy_id)
            return
        self.sent[copy_id] = observation


def instance_name(pod: V1Pod) -> str:
    return str(((pod.metadata and pod.metadata.labels) or {}).get(INSTANCE_LABEL, ""))
