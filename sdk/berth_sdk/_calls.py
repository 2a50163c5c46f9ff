"""The API's calls as data, shared by the synchronous and the asynchronous clients: each
function builds a Request or reads an answer, and neither sends nor waits. The clients only
send what these build and wait where they must, so both behave alike by construction."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeVar
from urllib.parse import quote

from berth_sdk.errors import DeploymentFailedError, NotFoundError
from berth_sdk.results import Autoscaling, Cluster, Deployment, Json, Model, Revision

from ._http import Request

T = TypeVar("T")
DeploymentRef = int | str | Deployment  # an id, a name, or a deployment already read
ModelRef = int | str | Model  # a catalog id, a repository id (Qwen/Qwen3-8B), or a model
ClusterRef = int | str | Cluster  # an id, a name, or a cluster already read
Size = float | int | str | Decimal
MOST_PER_PAGE = 200  # the API's ?limit= at most


def given(**params: Any) -> dict[str, str]:
    """The query parameters that were given, as the API reads them."""
    return {name: text(value) for name, value in params.items() if value is not None}


def text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.isoformat(timespec="minutes")
    return str(value)


def number(size: Size) -> float | int | str:
    """A size as JSON carries it: a Decimal as its text, which the API reads exactly."""
    return str(size) if isinstance(size, Decimal) else size


def in_path(name: str) -> str:
    return quote(name, safe="")


def commented(body: dict[str, Any], comment: str) -> dict[str, Any]:
    """A change's body with why it is made, kept with its revision: sent only when said."""
    return {**body, "comment": comment} if comment else body


# --- finding what a reference names --------------------------------------------------------


def deployment_named(name: str) -> Request:
    return Request("GET", "/deployments", given(q=name, limit=MOST_PER_PAGE))


def picked_deployment(name: str, data: Json) -> Deployment:
    for item in data.get("items", []):
        if item.get("name") == name:
            return Deployment.from_api(item)
    raise NotFoundError(
        404,
        f"no deployment named {name} in your teams; list_deployments() (berth ls) lists them",
        "deployment",
    )


def model_by_id(model_id: int) -> Request:
    return Request("GET", f"/models/{model_id}")


def model_by_repo(repo_id: str) -> Request:
    return Request("GET", "/models", given(repo_id=repo_id))


def picked_model(repo_id: str, data: Json) -> Model:
    for item in data.get("items", []):
        if item.get("repo_id") == repo_id:
            return Model.from_api(item)
    raise NotFoundError(
        404,
        f"{repo_id} is not in the catalog; models.list(search=…) (berth models --search) finds "
        "it, models.add(repo_id) adds it",
        "model",
    )


def cluster_by_id(cluster_id: int) -> Request:
    return Request("GET", f"/clusters/{cluster_id}")


def cluster_named(name: str) -> Request:
    return Request("GET", "/clusters", given(q=name, limit=MOST_PER_PAGE))


def picked_cluster_id(name: str, data: Json) -> int:
    for item in data.get("items", []):
        if item.get("name") == name:
            return int(item["id"])
    raise NotFoundError(
        404, f"no cluster named {name}; clusters.list() (berth ls) lists them", "cluster"
    )


def default_variant(model: Model) -> str:
    """The variant an estimate or fit check uses when none is named: the first whose files
    are on this server, else the model's first (the catalog lists the smallest first)."""
    if not model.variants:
        raise NotFoundError(404, f"{model.repo_id} has no variants in the catalog", "variant")
    here = [variant for variant in model.variants if variant.on_this_server]
    return (here or model.variants)[0].name


# --- deployments ---------------------------------------------------------------------------


def host(
    repo_id: str,
    *,
    variant: str | None,
    cluster: str | None,
    copies: int,
    accelerators_per_copy: Size | None,
    chat_name: str | None,
    engine_settings: Mapping[str, Any] | None,
    name: str | None,
    team: str | None,
    revision: str | None,
    autoscaling: Autoscaling | None = None,
    allow_moves: bool = False,
    routing: str | None = None,
    comment: str = "",
) -> Request:
    """What is left None is left to the console, which chooses it and says why."""
    body: dict[str, Any] = {"model": repo_id, "copies": copies}
    if accelerators_per_copy is not None:
        body["accelerators_per_copy"] = number(accelerators_per_copy)
    optional = {"variant": variant, "cluster": cluster, "name": name, "team": team}
    optional |= {"chat_name": chat_name, "revision": revision, "routing": routing}
    body |= {key: value for key, value in optional.items() if value is not None}
    if engine_settings is not None:
        body["engine_settings"] = dict(engine_settings)
    if autoscaling is not None:
        body["autoscaling"] = autoscaling_body(autoscaling)
    if allow_moves:
        body["allow_moves"] = True
    return Request("POST", "/deployments", body=commented(body, comment))


def deployment(pk: int) -> Request:
    return Request("GET", f"/deployments/{pk}")


def deployments(
    state: str | None, cluster: int | None, model: int | None, q: str | None, sort: str | None
) -> Request:
    params = given(state=state, cluster=cluster, model=model, q=q, sort=sort)
    return Request("GET", "/deployments", {**params, "limit": str(MOST_PER_PAGE)})


def scale(
    pk: int,
    copies: int,
    accelerators_per_copy: Size | None,
    allow_moves: bool = False,
    comment: str = "",
) -> Request:
    size = None if accelerators_per_copy is None else number(accelerators_per_copy)
    body: dict[str, Any] = {"copies": copies, "accelerators_per_copy": size}
    if allow_moves:
        body["allow_moves"] = True
    return Request("POST", f"/deployments/{pk}/scale", body=commented(body, comment))


def autoscaling_body(policy: Autoscaling | None) -> dict[str, Any] | None:
    return None if policy is None else dataclasses.asdict(policy)


def set_autoscaling(pk: int, policy: Autoscaling | None, comment: str = "") -> Request:
    body = {"autoscaling": autoscaling_body(policy)}
    return Request("POST", f"/deployments/{pk}/autoscaling", body=commented(body, comment))


def set_routing(pk: int, routing: str, comment: str = "") -> Request:
    body = commented({"routing": routing}, comment)
    return Request("POST", f"/deployments/{pk}/routing", body=body)


def set_queue(pk: int, max_waiting: int, queue_wait_s: int | None, comment: str = "") -> Request:
    body = {"max_waiting": max_waiting, "queue_wait_s": queue_wait_s}
    return Request("POST", f"/deployments/{pk}/queue", body=commented(body, comment))


# --- revisions -----------------------------------------------------------------------------


def revisions(pk: int) -> Request:
    return Request("GET", f"/deployments/{pk}/revisions")


def listed_revisions(data: Json) -> list[Revision]:
    """Newest first, as the console lists them."""
    return [Revision.from_api(item) for item in data.get("items", [])]


def revision(pk: int, revision_number: int) -> Request:
    return Request("GET", f"/deployments/{pk}/revisions/{revision_number}")


def compare_revisions(pk: int, revision_number: int, other: int) -> Request:
    return Request("GET", f"/deployments/{pk}/revisions/{revision_number}/compare/{other}")


def roll_back(pk: int, revision_number: int, comment: str) -> Request:
    body = commented({"revision": revision_number}, comment)
    return Request("POST", f"/deployments/{pk}/rollback", body=body)


def set_auto_rollback(pk: int, enabled: bool) -> Request:
    return Request("POST", f"/deployments/{pk}/auto-rollback", body={"enabled": enabled})


def action(pk: int, act: str) -> Request:
    """stop, start, check or retry: an action without a body."""
    return Request("POST", f"/deployments/{pk}/{act}")


def delete(pk: int) -> Request:
    return Request("DELETE", f"/deployments/{pk}")


def log_lines(pk: int, after: int | None, filters: Mapping[str, str | None]) -> Request:
    params = given(after=after, **filters)
    return Request("GET", f"/deployments/{pk}/logs", {**params, "limit": str(MOST_PER_PAGE)})


def events(filters: Mapping[str, Any]) -> Request:
    return Request("GET", "/events", given(**filters))


def usage(
    group_by: str | None,
    since: datetime | str | None,
    until: datetime | str | None,
    bucket: str | None,
) -> Request:
    return Request(
        "GET", "/usage", given(group_by=group_by, bucket=bucket, **{"from": since, "to": until})
    )


def cost(group_by: str | None, first: date | str | None, last: date | str | None) -> Request:
    return Request("GET", "/cost", given(group_by=group_by, **{"from": first, "to": last}))


def settled(current: Deployment) -> bool:
    """Whether waiting for it is over: True once DEPLOYED (or IDLE: it wakes on a request);
    raised when it will not serve."""
    if current.state.is_ready:
        return True
    if current.state.is_failed or current.state.is_stopped:
        raise DeploymentFailedError(current)
    return False


def check_wait(timeout_seconds: float, poll_interval_seconds: float) -> None:
    if timeout_seconds < 0:
        raise ValueError(f"timeout_seconds must be 0 or more, not {timeout_seconds}")
    if poll_interval_seconds <= 0:
        raise ValueError(f"poll_interval_seconds must be more than 0, not {poll_interval_seconds}")


# --- placement -----------------------------------------------------------------------------


def settings_with(
    engine_settings: Mapping[str, Any] | None, max_model_len: int | None
) -> dict[str, Any]:
    settings = dict(engine_settings or {})
    if max_model_len is not None:
        settings["max_model_len"] = max_model_len
    return settings


def estimate(repo_id: str, variant: str, settings: Mapping[str, Any], tp: int) -> Request:
    body = {"model": repo_id, "variant": variant, "engine_settings": dict(settings)}
    return Request("POST", "/estimate", body={**body, "tensor_parallel": tp})


def fit_check(
    repo_id: str,
    variant: str,
    cluster: str,
    copies: int,
    accelerators_per_copy: Size | None,
    settings: Mapping[str, Any],
    allow_moves: bool = False,
) -> Request:
    """A size left None is the console's choice (see host)."""
    body = {"model": repo_id, "variant": variant, "cluster": cluster, "copies": copies}
    asked: dict[str, Any] = {**body, "engine_settings": dict(settings)}
    if accelerators_per_copy is not None:
        asked["accelerators_per_copy"] = number(accelerators_per_copy)
    if allow_moves:
        asked["allow_moves"] = True
    return Request("POST", "/fit-check", body=asked)


# --- catalog and clusters ------------------------------------------------------------------


def models(filters: Mapping[str, Any]) -> Request:
    return Request("GET", "/models", {**given(**filters), "limit": str(MOST_PER_PAGE)})


def add_model(repo_id: str, revision: str | None, team: str | None) -> Request:
    """revision and team only when given (the console's defaults: main, and no Hugging Face
    token, which reads public repositories only)."""
    return Request("POST", "/models", body={"repo_id": repo_id, **given_only(revision, team)})


def download_model(model_id: int, variant: str, revision: str | None, team: str | None) -> Request:
    body = {"variant": variant, **given_only(revision, team)}
    return Request("POST", f"/models/{model_id}/download", body=body)


def delete_files(model_id: int, variant: str) -> Request:
    return Request("POST", f"/models/{model_id}/delete-files", body={"variant": variant})


def given_only(revision: str | None, team: str | None) -> dict[str, str]:
    optional = {"revision": revision, "team": team}
    return {name: value for name, value in optional.items() if value is not None}


def model_action(model_id: int, act: str, variant: str) -> Request:
    """download or retry one variant of a model."""
    return Request("POST", f"/models/{model_id}/{act}", body={"variant": variant})


def clusters(filters: Mapping[str, Any]) -> Request:
    return Request("GET", "/clusters", {**given(**filters), "limit": str(MOST_PER_PAGE)})


def me() -> Request:
    return Request("GET", "/me")


def with_cursor(request: Request, cursor: str) -> Request:
    return Request(request.method, request.path, {**request.params, "cursor": cursor})
