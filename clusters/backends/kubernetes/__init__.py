"""The Kubernetes backend: one Deployment + Service per copy, discovery from node labels.

Plain Python (no Django): the console builds the CopySpecs and writes what comes back. The
parts are split by domain: kubeconfig (checking it, messages), discovery (nodes → machines),
manifests (copy → Deployment and Service), pods (pod → observation), engine_output (log lines,
metrics) and backend (the client I/O).
"""

from clusters.backends.kubernetes.backend import (
    ConnectionCheck,
    KubernetesBackend,
    test_connection,
)
from clusters.backends.kubernetes.discovery import KubernetesMachine, discovery_from
from clusters.backends.kubernetes.kubeconfig import KubeconfigError, validate_kubeconfig
from clusters.backends.kubernetes.manifests import (
    DEFAULT_ENGINE_IMAGE,
    ManifestSettings,
    build_deployment,
    build_service,
    object_name,
)

__all__ = [
    "DEFAULT_ENGINE_IMAGE",
    "ConnectionCheck",
    "KubeconfigError",
    "KubernetesBackend",
    "KubernetesMachine",
    "ManifestSettings",
    "build_deployment",
    "build_service",
    "discovery_from",
    "object_name",
    "test_connection",
    "validate_kubeconfig",
]
