"""Kubeconfig text → a checked config and an ApiClient; API failures → words an operator acts on.

The kubeconfig is pasted by an admin and stored encrypted; it is read here and nowhere else, and
never through ~/.kube or the client's global configuration, so two clusters never share state.
Every message that may carry text from the client or the server goes through a Redactor built
from the kubeconfig's own secrets, so no token or certificate data can reach a page or a log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import urllib3
import yaml
from kubernetes import client
from kubernetes.config import ConfigException, load_kube_config_from_dict

from clusters.backends.base import BackendError

REDACTED = "[redacted]"
# Files a kubeconfig may point to: they live on the machine it was written on, not on this server.
FILE_KEYS = {
    "cluster": ("certificate-authority",),
    "user": ("client-certificate", "client-key", "tokenFile"),
}
FLATTEN_HINT = "Export it with `kubectl config view --raw --minify --flatten` and paste that."
NAMESPACE_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class KubeconfigError(BackendError):
    """The kubeconfig text cannot be used; the message says what is wrong and what to do."""


def parse_kubeconfig(text: str) -> dict[str, Any]:
    """The kubeconfig as a dict, or KubeconfigError saying what is wrong with it."""
    document = load_yaml(text)
    for check in (check_sections, check_current_context, check_files_are_embedded):
        check(document)
    return document


def validate_kubeconfig(text: str) -> str | None:
    """None when the kubeconfig can be used, else the message to show."""
    try:
        parse_kubeconfig(text)
    except KubeconfigError as problem:
        return str(problem)
    return None


def load_yaml(text: str) -> dict[str, Any]:
    if not text or not text.strip():
        raise KubeconfigError(f"The kubeconfig is empty. {FLATTEN_HINT}")
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        # str(error) quotes the offending line, which may hold a token: give the place only.
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise KubeconfigError(f"The kubeconfig is not valid YAML{where}. {FLATTEN_HINT}") from None
    if not isinstance(document, dict):
        raise KubeconfigError(
            "The text is not a kubeconfig: expected a YAML mapping with clusters, contexts, "
            f"users and current-context. {FLATTEN_HINT}"
        )
    return document


def named_entries(document: Mapping[str, Any], section: str) -> dict[str, Mapping[str, Any]]:
    """{name: body} of one kubeconfig section (clusters → cluster, users → user, …)."""
    body_key = section[:-1]
    entries = document.get(section) or []
    if not isinstance(entries, list):
        return {}
    return {
        str(entry["name"]): entry.get(body_key) or {}
        for entry in entries
        if isinstance(entry, dict) and entry.get("name")
    }


def check_sections(document: Mapping[str, Any]) -> None:
    for section in ("clusters", "contexts", "users"):
        if not named_entries(document, section):
            raise KubeconfigError(
                f"The kubeconfig has no {section}: a kubeconfig needs at least one named entry "
                f"under each of clusters, contexts and users. {FLATTEN_HINT}"
            )


def check_current_context(document: Mapping[str, Any]) -> None:
    name = document.get("current-context")
    contexts = named_entries(document, "contexts")
    if not name:
        raise KubeconfigError(
            "The kubeconfig has no current-context, so it does not say which cluster to use. "
            "Run `kubectl config use-context <name>` before exporting it, or add a "
            "current-context line."
        )
    if name not in contexts:
        known = ", ".join(sorted(contexts))
        raise KubeconfigError(
            f'The kubeconfig\'s current-context "{name}" is not one of its contexts ({known}).'
        )
    check_context_references(document, str(name), contexts[str(name)])


def check_context_references(
    document: Mapping[str, Any], name: str, context: Mapping[str, Any]
) -> None:
    clusters, users = named_entries(document, "clusters"), named_entries(document, "users")
    cluster_name, user_name = context.get("cluster"), context.get("user")
    if cluster_name not in clusters:
        raise KubeconfigError(
            f'Context "{name}" uses cluster "{cluster_name}", which the kubeconfig does not define.'
        )
    if user_name not in users:
        raise KubeconfigError(
            f'Context "{name}" uses user "{user_name}", which the kubeconfig does not define.'
        )
    server = str(clusters[str(cluster_name)].get("server") or "")
    if not server.startswith(("https://", "http://")):
        raise KubeconfigError(
            f'Cluster "{cluster_name}" has no server address (https://host:port) in the kubeconfig.'
        )
    check_user_credentials(str(user_name), users[str(user_name)])


def check_user_credentials(name: str, user: Mapping[str, Any]) -> None:
    # A program that prints credentials (aws, gcloud, kubelogin…) would have to be installed and
    # logged in on this server; a console must not run commands named in pasted text either.
    for key in ("exec", "auth-provider"):
        if user.get(key):
            raise KubeconfigError(
                f'User "{name}" gets its credentials from a program ({key}), which this console '
                "does not run. Use a service account token instead: create a service account, "
                "bind it to a role, and put `token: <token>` under the user."
            )


def check_files_are_embedded(document: Mapping[str, Any]) -> None:
    for section, keys in FILE_KEYS.items():
        for name, body in named_entries(document, f"{section}s").items():
            for key in keys:
                if body.get(key):
                    raise KubeconfigError(
                        f'The kubeconfig\'s {section} "{name}" refers to a file ({key}) on the '
                        f"machine it was written on, which this server does not have. "
                        f"{FLATTEN_HINT}"
                    )


def current_server(document: Mapping[str, Any]) -> str:
    """The API server's address, without any user:password part, for messages."""
    contexts = named_entries(document, "contexts")
    context = contexts.get(str(document.get("current-context")), {})
    cluster = named_entries(document, "clusters").get(str(context.get("cluster")), {})
    parts = urlsplit(str(cluster.get("server") or ""))
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class Redactor:
    """Replaces every secret of a kubeconfig (tokens, passwords, key and certificate data)."""

    def __init__(self, secrets: set[str]) -> None:
        # Longest first, so a secret that contains another is replaced whole.
        self.secrets = sorted((s for s in secrets if len(s) >= 6), key=len, reverse=True)

    @classmethod
    def for_kubeconfig(cls, document: Mapping[str, Any]) -> Redactor:
        return cls(set(secret_values(document)))

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text


def secret_values(document: Mapping[str, Any]) -> Iterator[str]:
    for user in named_entries(document, "users").values():
        yield from strings_in(user)
    for cluster in named_entries(document, "clusters").values():
        for key, value in cluster.items():
            if key.endswith("-data") and isinstance(value, str):
                yield value


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def new_api_client(document: dict[str, Any], retries: int) -> client.ApiClient:
    """An ApiClient of its own for this kubeconfig (the client's global config is not touched)."""
    configuration = client.Configuration()
    try:
        load_kube_config_from_dict(
            document, client_configuration=configuration, persist_config=False
        )
    except (ConfigException, ValueError, TypeError) as error:
        redact = Redactor.for_kubeconfig(document)
        raise KubeconfigError(f"The kubeconfig could not be loaded: {redact(str(error))}") from None
    # Few retries: an unreachable server should be reported in seconds, not minutes.
    configuration.retries = retries
    return client.ApiClient(configuration)


def check_namespace(namespace: str) -> str | None:
    if NAMESPACE_PATTERN.match(namespace or ""):
        return None
    return (
        f'"{namespace}" is not a valid namespace name: use lowercase letters, digits and dashes '
        "(at most 63 characters), starting and ending with a letter or digit."
    )


# --- API failures in words ---------------------------------------------------------------------


def describe_failure(error: Exception, doing: str, server: str, namespace: str) -> str:
    """What went wrong while `doing` (e.g. "list nodes"), and what to do about it."""
    if isinstance(error, client.ApiException):
        return describe_api_error(error, doing, namespace)
    if isinstance(error, urllib3.exceptions.HTTPError):
        return (
            f"Cannot reach the Kubernetes API server at {server}: {why_unreachable(error)}. "
            "Check the server address in the kubeconfig and that this console's network can "
            "reach it (firewall, VPN, private endpoint)."
        )
    return f"Could not {doing}: {type(error).__name__}."


def describe_api_error(error: client.ApiException, doing: str, namespace: str) -> str:
    said = server_message(error)
    said = f' The server said: "{said}"' if said else ""
    if error.status == 401:
        return (
            "The API server rejected the kubeconfig's credentials (401 Unauthorized): the token "
            "or client certificate is wrong or has expired. Export a fresh kubeconfig or create "
            f"a new service account token.{said}"
        )
    if error.status == 403:
        return (
            f"The kubeconfig's user may not {doing} (403 Forbidden). Berth needs get, list and "
            f'watch on nodes and pods in all namespaces, and in namespace "{namespace}" also '
            "pods/log, pods/proxy, services/proxy, get on persistentvolumeclaims, create, get, "
            "list and delete on deployments, services and jobs, and create, patch and delete "
            "on secrets. Ask the cluster's admin for a ClusterRole and "
            f"bindings with these rights, or use a kubeconfig of a user that has them.{said}"
        )
    return (
        f"The API server answered {error.status} {error.reason or ''} when asked to {doing}.{said}"
    )


def server_message(error: client.ApiException) -> str:
    """The `message` of the Status the API server sent, if it sent one."""
    try:
        status = json.loads(error.body or "")
    except (TypeError, ValueError):
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return str(message)[:300] if message else ""


def why_unreachable(error: Exception) -> str:
    reason = getattr(error, "reason", None) or error
    text = str(reason).lower()
    # Text first: urllib3's NewConnectionError (a refused connection) is a ConnectTimeoutError.
    if "refused" in text:
        return "the connection was refused"
    if "name or service not known" in text or "name resolution" in text or "nodename" in text:
        return "its host name does not resolve"
    if isinstance(reason, urllib3.exceptions.SSLError) or "certificate" in text:
        return "its TLS certificate was not accepted (check certificate-authority-data)"
    if isinstance(reason, urllib3.exceptions.ReadTimeoutError):
        return "it accepted the connection but did not answer in time"
    if isinstance(reason, urllib3.exceptions.ConnectTimeoutError):
        return "it did not answer in time"
    return "the connection failed"
