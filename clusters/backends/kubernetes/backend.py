"""KubernetesBackend: the cluster I/O, with the official (blocking) `kubernetes` client.

Every call carries a timeout. Selectors are sent (a real API server filters by them) and the
results are filtered here again, so nothing depends on the server honouring them. Blocking
loops (watch_pods, follow_logs) are meant for a thread of the watcher, never its event loop.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client, watch

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
from clusters.backends.kubernetes.discovery import BERTH, MANAGED_BY, discovery_from, is_berth_pod
from clusters.backends.kubernetes.engine_output import log_record, log_records, metric_samples
from clusters.backends.kubernetes.filljob import (
    build_fill_job,
    bytes_reported,
    fill_job_name,
    job_outcome,
)
from clusters.backends.kubernetes.kubeconfig import (
    KubeconfigError,
    Redactor,
    check_namespace,
    current_server,
    describe_failure,
    new_api_client,
    parse_kubeconfig,
    validate_kubeconfig,
)
from clusters.backends.kubernetes.manifests import (
    COPY_ID_LABEL,
    DEFAULT_ENGINE_IMAGE,
    DEFAULT_PORT,
    DEPLOYMENT_LABEL,
    ENGINE_CONTAINER,
    INSTALL_LABEL,
    ManifestSettings,
    build_deployment,
    build_engine_key_secret,
    build_network_policy,
    build_service,
    token_secret_name,
)
from clusters.backends.kubernetes.pods import PodTracker, copy_id_of, current_pod, observe_copy

log = logging.getLogger("berth.kubernetes")

BERTH_SELECTOR = f"{MANAGED_BY}={BERTH}"
API_FAILURES = (client.ApiException, urllib3.exceptions.HTTPError)
# A quiet stream ends in one of these; the loop resumes from where it was.
STREAM_ENDED = (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError)
LOG_TAIL_LINES = 2000
LONG_AGO = datetime(1970, 1, 1, tzinfo=UTC)


class WatchExpired(Exception):
    """The API server no longer has the resource version the watch asked for (410 Gone)."""


@dataclass(frozen=True)
class ConnectionCheck:
    ok: bool
    message: str


@dataclass
class LogCursor:
    """The time of the last log line passed on, so a reopened stream does not repeat it."""

    at: datetime | None


@dataclass(frozen=True)
class ObjectKind:
    """The client calls for one kind of object Berth creates per copy."""

    name: str
    read: Callable[..., Any]
    create: Callable[..., Any]
    delete: Callable[..., Any]
    list: Callable[..., Any]


def aware(moment: datetime) -> datetime:
    """Naive times are taken as UTC, the zone the kubelet stamps lines in."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def labels_of(item: Any) -> dict[str, str]:
    return dict((item.metadata and item.metadata.labels) or {})


def owner_of(item: Any) -> str:
    return str(labels_of(item).get(COPY_ID_LABEL, ""))


def belongs_to(item: Any, copy_id: int, install_id: str = "") -> bool:
    """Checked here too, not only by the label selector (what a proxy or an old API server
    does with a selector is not ours to trust)."""
    labels = labels_of(item)
    return (
        labels.get(MANAGED_BY) == BERTH
        and labels.get(COPY_ID_LABEL) == str(copy_id)
        and (not install_id or labels.get(INSTALL_LABEL) == install_id)
    )


def started_by(item: Any, install_id: str) -> bool:
    labels = labels_of(item)
    return (
        bool(install_id)
        and labels.get(MANAGED_BY) == BERTH
        and labels.get(INSTALL_LABEL) == install_id
        and owner_of(item).isdigit()
    )


class KubernetesBackend:
    """One cluster, one namespace. Raises BackendError (with words) when the kubeconfig is bad."""

    def __init__(
        self,
        kubeconfig_text: str,
        namespace: str,
        engine_image: str = DEFAULT_ENGINE_IMAGE,
        *,
        model_cache_claim: str = "berth-model-cache",
        hf_token_secret: str = "berth-hf-token",
        engine_client_cidrs: tuple[str, ...] = (),
        connect_timeout_s: float = 5.0,
        request_timeout_s: float = 30.0,
        watch_timeout_s: float = 15.0,
        fill_poll_s: float = 5.0,
        fill_timeout_s: float = 3600.0,
    ) -> None:
        document = parse_kubeconfig(kubeconfig_text)
        problem = check_namespace(namespace)
        if problem:
            raise BackendError(problem)
        self.namespace = namespace
        self.server = current_server(document)
        self.redact = Redactor.for_kubeconfig(document)
        self.api = new_api_client(document, retries=2)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.networking = client.NetworkingV1Api(self.api)
        self.fill_poll_s, self.fill_timeout_s = fill_poll_s, fill_timeout_s
        self.settings = ManifestSettings(
            image=engine_image,
            model_cache_claim=model_cache_claim,
            hf_token_secret=hf_token_secret,
            engine_client_cidrs=engine_client_cidrs,
        )
        self.timeout = (connect_timeout_s, request_timeout_s)
        # Also how long a stop_event may wait to be noticed by watch_pods and follow_logs.
        self.watch_timeout_s = watch_timeout_s
        self.deployments = ObjectKind(
            "Deployment",
            self.apps.read_namespaced_deployment,
            self.apps.create_namespaced_deployment,
            self.apps.delete_namespaced_deployment,
            self.apps.list_namespaced_deployment,
        )
        self.jobs = ObjectKind(
            "Job",
            self.batch.read_namespaced_job,
            self.batch.create_namespaced_job,
            self.batch.delete_namespaced_job,
            self.batch.list_namespaced_job,
        )
        self.services = ObjectKind(
            "Service",
            self.core.read_namespaced_service,
            self.core.create_namespaced_service,
            self.core.delete_namespaced_service,
            self.core.list_namespaced_service,
        )
        self.secrets = ObjectKind(
            "Secret",
            self.core.read_namespaced_secret,
            self.core.create_namespaced_secret,
            self.core.delete_namespaced_secret,
            self.core.list_namespaced_secret,
        )
        self.network_policies = ObjectKind(
            "NetworkPolicy",
            self.networking.read_namespaced_network_policy,
            self.networking.create_namespaced_network_policy,
            self.networking.delete_namespaced_network_policy,
            self.networking.list_namespaced_network_policy,
        )

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> KubernetesBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def explain(self, error: Exception, doing: str) -> str:
        return self.redact(describe_failure(error, doing, self.server, self.namespace))

    def failure(self, error: Exception, doing: str) -> BackendError:
        return BackendError(self.explain(error, doing))

    # --- discovery -----------------------------------------------------------------------------

    def discover(self) -> Discovery:
        try:
            nodes = self.core.list_node(_request_timeout=self.timeout).items
        except API_FAILURES as error:
            return Discovery((), message=self.explain(error, "list nodes"), reachable=False)
        pods, note = self.pods_everywhere()
        return discovery_from(nodes, pods, note, self.namespace)

    def pods_everywhere(self) -> tuple[list[Any], str]:
        """All pods (to subtract what other workloads hold), or none and a note why not."""
        try:
            return self.core.list_pod_for_all_namespaces(_request_timeout=self.timeout).items, ""
        except API_FAILURES as error:
            why = self.explain(error, "list pods in all namespaces")
            return [], f"GPUs that other workloads hold could not be subtracted: {why}"

    # --- model files ----------------------------------------------------------------------------

    def shared_cache_claim(self) -> str:
        """The claim that holds one cache for every node, or "" when the namespace has none
        (no claim by that name, or one a single node at a time can mount)."""
        claim = self.settings.model_cache_claim
        if not claim:
            return ""
        try:
            found = self.core.read_namespaced_persistent_volume_claim(
                claim, self.namespace, _request_timeout=self.timeout
            )
        except client.ApiException as error:
            if error.status == 404:
                return ""
            raise self.failure(error, f"read PersistentVolumeClaim {claim}") from None
        except urllib3.exceptions.HTTPError as error:
            raise self.failure(error, f"read PersistentVolumeClaim {claim}") from None
        modes = (found.spec and found.spec.access_modes) or []
        return claim if "ReadWriteMany" in modes else ""

    def storage(self, token_owner: str = "") -> ManifestSettings:
        """The settings with the cache this namespace actually has (shared, or per node) and
        the Secret of the team whose token the pods may use."""
        return replace(
            self.settings,
            model_cache_claim=self.shared_cache_claim(),
            hf_token_secret=token_secret_name(token_owner, self.settings),
        )

    def write_token_secret(self, owner: str, token: str) -> None:
        """The team's Hugging Face token as its Secret in the namespace (gone when it has none)."""
        if not owner or not self.settings.hf_token_secret:
            return
        name = token_secret_name(owner, self.settings)
        try:
            if not token:
                self.core.delete_namespaced_secret(
                    name, self.namespace, _request_timeout=self.timeout
                )
                return
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": {MANAGED_BY: BERTH},
                },
                "stringData": {self.settings.hf_token_key: token},
            }
            self.put_secret(body)
        except client.ApiException as error:
            if error.status == 404 and not token:
                return
            words = self.explain(error, f"write the Secret {name}")
            raise BackendError(words.replace(token, "[the token]") if token else words) from None
        except urllib3.exceptions.HTTPError as error:
            raise self.failure(error, f"write the Secret {name}") from None

    def fill_scope(self, settings: ManifestSettings, machine: str) -> str | None:
        return None if settings.model_cache_claim else machine

    def prepare_files(
        self, machine: str, files: ModelFiles, progress: Progress | None = None
    ) -> FilesResult:
        """Fill the model cache the copy's pod will mount, with a Job, and wait for it.

        A Job that failed before is replaced (its partial files stay in the cache and the new
        one continues them); one that succeeded is the record that the files are there.
        """
        self.write_token_secret(files.token_owner, files.token)
        settings = self.storage(files.token_owner)
        scope = self.fill_scope(settings, machine)
        name = fill_job_name(files, scope)
        job = self.read(self.jobs, name)
        if job is not None and job_outcome(job)[0] == "failed":
            self.delete(self.jobs, name)
            job = None
        if job is None:
            self.create_job(build_fill_job(files, scope, self.namespace, settings))
        return self.wait_for_fill(name, machine, files, progress)

    def fill_bytes(self, job_name: str) -> int | None:
        """How many bytes the Job's pod reported so far (its last log lines), if it said."""
        try:
            pods = self.core.list_namespaced_pod(
                self.namespace, label_selector=f"job-name={job_name}", _request_timeout=self.timeout
            ).items
            mine = [p for p in pods if (p.metadata.labels or {}).get("job-name") == job_name]
            if not mine:
                return None
            newest = max(mine, key=lambda pod: pod.metadata.creation_timestamp or LONG_AGO)
            text = self.core.read_namespaced_pod_log(
                newest.metadata.name, self.namespace, tail_lines=5, _request_timeout=self.timeout
            )
        except API_FAILURES:
            return None  # the progress is an addition: the Job's status says how it ends
        return bytes_reported(text if isinstance(text, str) else "")

    def create_job(self, body: dict[str, Any]) -> None:
        try:
            self.batch.create_namespaced_job(self.namespace, body, _request_timeout=self.timeout)
        except client.ApiException as error:
            if error.status != 409:  # 409: another copy on this node started the same fill
                raise self.failure(error, f"create Job {body['metadata']['name']}") from None
        except urllib3.exceptions.HTTPError as error:
            raise self.failure(error, f"create Job {body['metadata']['name']}") from None

    def wait_for_fill(
        self, name: str, machine: str, files: ModelFiles, progress: Progress | None
    ) -> FilesResult:
        began = time.monotonic()
        while True:
            job = self.read(self.jobs, name)
            if job is None:
                raise BackendError(f"Job {name} that fills the model cache was deleted")
            outcome, reason = job_outcome(job)
            if outcome == "succeeded":
                if progress is not None:
                    progress(files.size_bytes)
                return FilesResult(True, message=f"job {name} filled the model cache")
            if outcome == "failed":
                raise BackendError(
                    f"Job {name} that fills the model cache on {machine} failed ({reason}). "
                    f"Its pod's log says why: kubectl -n {self.namespace} logs job/{name}"
                )
            if time.monotonic() - began > self.fill_timeout_s:
                raise BackendError(
                    f"Job {name} has not filled the model cache on {machine} after "
                    f"{self.fill_timeout_s / 60:.0f} min; see kubectl -n {self.namespace} "
                    f"describe job/{name}"
                )
            if progress is not None:
                progress(self.fill_bytes(name) or 0)  # 0 when unknown: the wait is still alive
            time.sleep(self.fill_poll_s)

    # --- launch and stop -----------------------------------------------------------------------

    def launch(self, spec: CopySpec) -> CopyHandle:
        """Create the copy's Deployment and Service; what already exists for it is kept."""
        node = self.node_facts(spec.machine)
        settings = self.storage(spec.token_owner)
        deployment = build_deployment(spec, node, self.namespace, settings)
        service = build_service(spec, self.namespace)
        if spec.secret_env:
            self.write_engine_key(build_engine_key_secret(spec, self.namespace))
        # The fence first: the engine's pod never listens unguarded.
        policy = build_network_policy(spec, self.namespace, settings)
        self.ensure(self.network_policies, policy, spec.copy_id)
        self.ensure(self.deployments, deployment, spec.copy_id)
        self.ensure(self.services, service, spec.copy_id)
        port = service["spec"]["ports"][0]["port"]
        return CopyHandle(spec.copy_id, machine=spec.machine, port=port)

    def write_engine_key(self, body: dict[str, Any]) -> None:
        """The copy's key Secret with this launch's key: a pod that starts (again) reads the
        key the console now holds for the copy."""
        try:
            self.put_secret(body)
        except API_FAILURES as error:
            raise self.failure(error, f"write the Secret {body['metadata']['name']}") from None

    def put_secret(self, body: dict[str, Any]) -> None:
        """Create the Secret, or give the one that exists this body's values."""
        try:
            self.core.create_namespaced_secret(self.namespace, body, _request_timeout=self.timeout)
        except client.ApiException as error:
            if error.status != 409:
                raise
            changed = {"stringData": body["stringData"]}  # the API server merges it into data
            self.core.patch_namespaced_secret(
                body["metadata"]["name"], self.namespace, changed, _request_timeout=self.timeout
            )

    def node_facts(self, name: str) -> dict[str, Any]:
        try:
            node = self.core.read_node(name, _request_timeout=self.timeout)
        except client.ApiException as error:
            if error.status == 404:
                raise BackendError(f'Node "{name}" is no longer in the cluster.') from None
            raise self.failure(error, f'read node "{name}"') from None
        except urllib3.exceptions.HTTPError as error:
            raise self.failure(error, f'read node "{name}"') from None
        return {
            "labels": dict(node.metadata.labels or {}),
            "allocatable": dict((node.status and node.status.allocatable) or {}),
        }

    def ensure(self, kind: ObjectKind, body: dict[str, Any], copy_id: int) -> None:
        name = body["metadata"]["name"]
        existing = self.read(kind, name)
        if existing is not None and owner_of(existing) == str(copy_id):
            return
        if existing is not None:
            # A leftover of an earlier copy with the same deployment name and ordinal.
            log.info("Replacing %s %s left by copy %s", kind.name, name, owner_of(existing))
            self.delete(kind, name)
        try:
            kind.create(self.namespace, body, _request_timeout=self.timeout)
        except client.ApiException as error:
            if error.status == 409 and existing is None:
                return  # a concurrent launch of this copy created it first
            raise self.failure(error, f"create {kind.name} {name}") from None
        except urllib3.exceptions.HTTPError as error:
            raise self.failure(error, f"create {kind.name} {name}") from None

    def read(self, kind: ObjectKind, name: str) -> Any | None:
        try:
            return kind.read(name, self.namespace, _request_timeout=self.timeout)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise self.failure(error, f"read {kind.name} {name}") from None
        except urllib3.exceptions.HTTPError as error:
            raise self.failure(error, f"read {kind.name} {name}") from None

    def delete(self, kind: ObjectKind, name: str) -> None:
        # Background: the Deployment goes now and its pod after; the pod's end is what
        # observe reports as "gone", which is when Berth releases the copy's room.
        options = client.V1DeleteOptions(propagation_policy="Background")
        try:
            kind.delete(name, self.namespace, body=options, _request_timeout=self.timeout)
        except client.ApiException as error:
            if error.status != 404:
                raise self.failure(error, f"delete {kind.name} {name}") from None
        except urllib3.exceptions.HTTPError as error:
            raise self.failure(error, f"delete {kind.name} {name}") from None

    def names_of_copy(self, kind: ObjectKind, copy_id: int, install_id: str = "") -> list[str]:
        selector = f"{BERTH_SELECTOR},{COPY_ID_LABEL}={copy_id}"
        if install_id:
            selector += f",{INSTALL_LABEL}={install_id}"
        try:
            items = kind.list(
                self.namespace, label_selector=selector, _request_timeout=self.timeout
            ).items
        except API_FAILURES as error:
            raise self.failure(error, f"list {kind.name}s") from None
        return [item.metadata.name for item in items if belongs_to(item, copy_id, install_id)]

    def stop(self, handle: CopyHandle) -> None:
        """Delete the copy's Deployment, Service, key Secret and NetworkPolicy (found by
        label); missing ones are fine."""
        for kind in (self.deployments, self.services, self.secrets, self.network_policies):
            for name in self.names_of_copy(kind, handle.copy_id, handle.install_id):
                self.delete(kind, name)

    def running_engines(self, install_id: str) -> list[RunningEngine]:
        """The copies' Deployments labelled with install_id (what keeps their pods running)."""
        selector = f"{BERTH_SELECTOR},{INSTALL_LABEL}={install_id}"
        try:
            items = self.apps.list_namespaced_deployment(
                self.namespace, label_selector=selector, _request_timeout=self.timeout
            ).items
        except API_FAILURES as error:
            raise self.failure(error, "list deployments") from None
        return [
            RunningEngine(
                CopyHandle(int(owner_of(item)), install_id=install_id),
                # No creation time read: taken as new, so that it waits out the grace period.
                aware(item.metadata.creation_timestamp or datetime.now(UTC)),
                labels_of(item).get(DEPLOYMENT_LABEL, ""),
            )
            for item in items
            if started_by(item, install_id)
        ]

    # --- observation ---------------------------------------------------------------------------

    def berth_pods(self) -> Any:
        try:
            result = self.core.list_namespaced_pod(
                self.namespace, label_selector=BERTH_SELECTOR, _request_timeout=self.timeout
            )
        except API_FAILURES as error:
            raise self.failure(error, "list pods") from None
        result.items = [pod for pod in result.items if is_berth_pod(pod)]
        return result

    def copies_with_deployment(self) -> set[int]:
        try:
            items = self.apps.list_namespaced_deployment(
                self.namespace, label_selector=BERTH_SELECTOR, _request_timeout=self.timeout
            ).items
        except API_FAILURES as error:
            raise self.failure(error, "list deployments") from None
        return {int(owner_of(item)) for item in items if owner_of(item).isdigit()}

    def observe(self, handles: Sequence[CopyHandle]) -> list[Observation]:
        pods_by_copy: dict[int | None, list[Any]] = {}
        for pod in self.berth_pods().items:
            pods_by_copy.setdefault(copy_id_of(pod), []).append(pod)
        deployed = self.copies_with_deployment()
        return [
            observe_copy(h.copy_id, pods_by_copy.get(h.copy_id, []), h.copy_id in deployed)
            for h in handles
        ]

    def deployment_exists(self, name: str) -> bool:
        try:
            return self.read(self.deployments, name) is not None
        except BackendError:
            return True  # unsure: better "starting" a moment longer than a false "gone"

    def watch_pods(
        self, on_event: Callable[[Observation], None], stop_event: threading.Event
    ) -> None:
        """Call on_event with each change of a copy's observation until stop_event is set.

        List, then watch from the list's resource version; on 410 Gone (the version is too
        old) list again and carry on. Other failures are logged and retried with a backoff.
        """
        tracker = PodTracker(on_event, self.deployment_exists)
        failures = 0
        while not stop_event.is_set():
            try:
                version = self.relist(tracker)
                failures = 0
                self.follow_pod_events(tracker, version, stop_event)
            except WatchExpired:
                log.info("The pod watch in %s expired (410 Gone); listing again", self.namespace)
            except (BackendError, *API_FAILURES) as error:
                failures += 1
                text = (
                    str(error)
                    if isinstance(error, BackendError)
                    else self.explain(error, "watch pods")
                )
                log.warning("Watching pods in %s failed: %s", self.namespace, text)
                stop_event.wait(min(30.0, 0.5 * 2**failures))

    def relist(self, tracker: PodTracker) -> str | None:
        result = self.berth_pods()
        tracker.replace_all(result.items)
        return result.metadata.resource_version if result.metadata else None

    def follow_pod_events(
        self, tracker: PodTracker, version: str | None, stop_event: threading.Event
    ) -> None:
        while not stop_event.is_set():
            since = {"resource_version": version} if version else {}
            stream = watch.Watch().stream(
                self.core.list_namespaced_pod,
                self.namespace,
                label_selector=BERTH_SELECTOR,
                allow_watch_bookmarks=True,
                # Given, the client leaves 410 to us instead of retrying it once by itself.
                timeout_seconds=max(1, int(self.watch_timeout_s)),
                _request_timeout=(self.timeout[0], self.watch_timeout_s + 1),
                **since,
            )
            try:
                for event in stream:
                    version = self.apply_pod_event(tracker, event, version)
                    if stop_event.is_set():
                        return
            except client.ApiException as error:
                if error.status == 410:
                    raise WatchExpired from None
                raise
            except STREAM_ENDED:
                pass  # a quiet stream timed out; watch again from the last version

    def apply_pod_event(
        self, tracker: PodTracker, event: dict[str, Any], version: str | None
    ) -> str | None:
        kind, raw = event["type"], event.get("raw_object") or {}
        if kind == "ERROR":
            if raw.get("code") == 410:
                raise WatchExpired
            raise client.ApiException(status=raw.get("code"), reason=raw.get("message"))
        if kind == "BOOKMARK":
            return (raw.get("metadata") or {}).get("resourceVersion") or version
        pod = event["object"]
        if is_berth_pod(pod):
            tracker.apply(kind, pod)
        return pod.metadata.resource_version or version

    # --- logs and metrics ----------------------------------------------------------------------

    def pod_name_of(self, handle: CopyHandle) -> str:
        """The copy's current pod (it changes when Kubernetes replaces it), else the handle's."""
        pods = [pod for pod in self.berth_pods().items if copy_id_of(pod) == handle.copy_id]
        pod = current_pod(pods)
        return pod.metadata.name if pod is not None else handle.pod_name

    def log_window(self, since: datetime | None, now: datetime) -> dict[str, int]:
        if since is None:
            return {"tail_lines": LOG_TAIL_LINES}
        # Whole seconds, one more than needed; lines up to `since` are dropped afterwards.
        return {"since_seconds": max(1, math.ceil((now - since).total_seconds()) + 1)}

    def logs(self, handle: CopyHandle, since: datetime | None) -> list[LogRecord]:
        pod = self.pod_name_of(handle)
        if not pod:
            return []
        since = aware(since) if since else None
        now = datetime.now(UTC)
        try:
            response = self.core.read_namespaced_pod_log(
                pod,
                self.namespace,
                container=ENGINE_CONTAINER,
                timestamps=True,
                _preload_content=False,
                _request_timeout=self.timeout,
                **self.log_window(since, now),
            )
        except client.ApiException as error:
            if error.status in (400, 404):
                return []  # the container has not started yet, or the pod is gone
            raise self.failure(error, f"read the logs of pod {pod}") from None
        except urllib3.exceptions.HTTPError as error:
            raise self.failure(error, f"read the logs of pod {pod}") from None
        lines = response.data.decode("utf-8", "replace").splitlines()
        return log_records(handle.copy_id, handle.machine, lines, since, now)

    def follow_logs(
        self,
        handle: CopyHandle,
        on_line: Callable[[LogRecord], None],
        stop_event: threading.Event,
        since: datetime | None = None,
    ) -> None:
        """Call on_line for each new line until stop_event is set or the container ends.

        A quiet stream times out and is opened again from the last line's time, so the loop
        notices stop_event within watch_timeout_s. When the container ends (a crash, a stop)
        this returns; the watcher follows the next pod, if any, with a new call.
        """
        pod = self.pod_name_of(handle)
        cursor = LogCursor(aware(since) if since else None)
        while pod and not stop_event.is_set():
            try:
                self.stream_log(handle, pod, on_line, stop_event, cursor)
                return
            except STREAM_ENDED:
                continue
            except client.ApiException as error:
                if error.status in (400, 404):
                    return
                raise self.failure(error, f"follow the logs of pod {pod}") from None
            except urllib3.exceptions.HTTPError as error:
                raise self.failure(error, f"follow the logs of pod {pod}") from None

    def stream_log(
        self,
        handle: CopyHandle,
        pod: str,
        on_line: Callable[[LogRecord], None],
        stop_event: threading.Event,
        cursor: LogCursor,
    ) -> None:
        now = datetime.now(UTC)
        level = "INFO"
        lines = watch.Watch().stream(
            self.core.read_namespaced_pod_log,
            name=pod,
            namespace=self.namespace,
            container=ENGINE_CONTAINER,
            timestamps=True,
            _request_timeout=(self.timeout[0], self.watch_timeout_s + 1),
            **self.log_window(cursor.at, now),
        )
        for line in lines:
            record = log_record(handle.copy_id, handle.machine, line, level, now)
            if record is None:
                continue
            level = record.level
            # A reopened stream starts a second early; lines already passed on are skipped.
            if cursor.at is None or record.at > cursor.at:
                on_line(record)
                cursor.at = record.at
            if stop_event.is_set():
                return

    def metrics(self, handle: CopyHandle) -> list[MetricSample]:
        """The engine's /metrics, fetched through the API server's proxy; [] when unreachable."""
        try:
            text = self.proxy_get(handle, "metrics")
            return metric_samples(text) if text else []
        except (BackendError, ValueError, *API_FAILURES):
            return []

    def proxy_get(self, handle: CopyHandle, path: str) -> str:
        # The pod's proxy answers while the pod runs; the Service's only once it is ready.
        if handle.pod_name:
            try:
                response = self.core.connect_get_namespaced_pod_proxy_with_path(
                    f"{handle.pod_name}:{handle.port or DEFAULT_PORT}",
                    self.namespace,
                    path,
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )
                return str(response.data.decode("utf-8", "replace"))
            except client.ApiException as error:
                if error.status != 404:
                    raise
        return self.service_get(handle, path)

    def service_get(self, handle: CopyHandle, path: str) -> str:
        names = self.names_of_copy(self.services, handle.copy_id)
        if not names:
            return ""
        port = handle.port or DEFAULT_PORT
        response = self.core.connect_get_namespaced_service_proxy_with_path(
            f"{names[0]}:{port}",
            self.namespace,
            path,
            _preload_content=False,
            _request_timeout=self.timeout,
        )
        return str(response.data.decode("utf-8", "replace"))


# --- checking a kubeconfig before it is saved -------------------------------------------------


def test_connection(
    kubeconfig_text: str, namespace: str, timeout_s: float = 5.0
) -> ConnectionCheck:
    """Can Berth reach the cluster and read what it needs? The message says what to do if not."""
    problem = validate_kubeconfig(kubeconfig_text) or check_namespace(namespace)
    if problem:
        return ConnectionCheck(False, problem)
    document = parse_kubeconfig(kubeconfig_text)
    server, redact = current_server(document), Redactor.for_kubeconfig(document)
    try:
        api = new_api_client(document, retries=0)
    except KubeconfigError as error:
        return ConnectionCheck(False, str(error))
    core, timeout = client.CoreV1Api(api), (timeout_s, timeout_s)
    doing = "list nodes"
    try:
        nodes = core.list_node(_request_timeout=timeout).items
        doing = f'list pods in namespace "{namespace}"'
        core.list_namespaced_pod(namespace, limit=1, _request_timeout=timeout)
    except API_FAILURES as error:
        return ConnectionCheck(False, redact(describe_failure(error, doing, server, namespace)))
    finally:
        api.close()
    gpu_nodes = discovery_from(nodes, []).machines
    with_gpus = sum(1 for m in gpu_nodes if m.accelerators or not m.capacity_known)
    return ConnectionCheck(
        True,
        f"Connected to {server}: {len(nodes)} nodes, {with_gpus} with GPUs; "
        f'pods in namespace "{namespace}" can be read.',
    )


# pytest collects functions named test_*, even imported ones; this one is not a test.
test_connection.__test__ = False  # type: ignore[attr-defined]
