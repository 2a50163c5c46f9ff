"""The table of deployments and their ready copies that the gateway routes by, cached.

Built from the database in a worker thread (never on the event loop) and swapped in whole, so a
request always sees one consistent table. It is rebuilt when something changes: a deployment's
broadcast, a copy that failed to connect, or a short periodic check (BERTH_GATEWAY_REFRESH_S)
that also catches what no broadcast announces (a changed chat name or reply wait).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings

from clusters.backends.kubernetes.manifests import DEFAULT_PORT, object_name
from clusters.backends.ray.dashboard import node_address
from clusters.models import ClusterKind
from deployments.choices import (
    DEPLOYMENT_ACTIVE,
    DEPLOYMENT_RUNNING,
    CopyState,
    DeploymentState,
    RoutingPolicy,
)
from deployments.launching import served_name
from deployments.models import Copy, Deployment
from gateway import errors
from gateway.keys import Caller
from placement.types import EngineSettings

# A deployment that is stopping, stopped or failed gets no traffic, even from a copy that
# still answers: its operator asked for it to go.
ROUTABLE = DEPLOYMENT_ACTIVE
DEFAULT_BLOCK_SIZE = 16  # vLLM's, and the one its --block-size defaults to
# vLLM's sequences at once when --max-num-seqs is not given: the estimate's (placement).
DEFAULT_MAX_NUM_SEQS = EngineSettings.max_num_seqs


@dataclass(frozen=True)
class Upstream:
    """One ready copy: where it listens and the key it wants (clients never see that key)."""

    copy_id: int
    deployment_id: int
    url: str
    headers: dict[str, str]  # the copy's own key, which clients never see
    socket: str = ""  # a local engine's Unix socket, which the URL's host then stands for


@dataclass(frozen=True)
class Route:
    """One deployment as the gateway routes to it."""

    id: int
    name: str
    team_id: int
    team_name: str
    created: int
    chat_name: str
    state: str
    served_name: str
    reply_wait_s: int
    upstreams: tuple[Upstream, ...]
    waking_since: float | None = None  # epoch seconds: woken from IDLE, no copy serves yet
    last_cold_start_s: float | None = None
    routing: str = RoutingPolicy.LEAST_LOADED  # gateway/routing.py
    block_size: int = DEFAULT_BLOCK_SIZE  # the engine's, in tokens: what its prefix cache keeps
    # gateway/queueing.py: requests a copy's engine runs at once, and the queue when all are
    # full (0: no queue)
    copy_capacity: int = DEFAULT_MAX_NUM_SEQS
    max_waiting: int = 0
    queue_wait_s: int | None = None

    @property
    def state_label(self) -> str:
        return str(DeploymentState(self.state).label)

    @property
    def wakes_on_request(self) -> bool:
        """Idle, or woken and starting: a request waits for its copy (gateway/waking.py)."""
        if self.state == DeploymentState.IDLE:
            return True
        return self.waking_since is not None and self.state in DEPLOYMENT_RUNNING

    @property
    def on_offer(self) -> bool:
        return bool(self.upstreams) or self.wakes_on_request


@dataclass(frozen=True)
class Table:
    """Every deployment by name, and the deployments behind each chat name."""

    routes: dict[str, Route] = field(default_factory=dict)
    chats: dict[str, tuple[Route, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, routes: Iterable[Route]) -> Table:
        by_name = {route.name: route for route in routes}
        chats: dict[str, list[Route]] = {}
        for route in by_name.values():
            if route.chat_name:
                chats.setdefault(route.chat_name, []).append(route)
        return cls(by_name, {name: tuple(group) for name, group in chats.items()})

    def resolve(self, model: str, caller: Caller) -> list[Route] | None:
        """The deployments a model name means to this caller: chat names are looked up first,
        within one of the caller's teams (a chat name never joins two teams' deployments)."""
        group = [r for r in self.chats.get(model, ()) if caller.may_use(r.team_id)]
        if len({r.team_id for r in group}) > 1:
            raise errors.chat_name_in_two_teams(model, [(r.team_name, r.name) for r in group])
        if group:
            return group
        route = self.routes.get(model)
        if route is not None and caller.may_use(route.team_id):
            return [route]
        return None

    def on_offer(self, caller: Caller) -> list[str]:
        """The names this caller can send requests to now (an idle deployment's too: a request
        wakes it): chat names, then deployment names."""
        serving = [r for r in self.routes.values() if r.on_offer and caller.may_use(r.team_id)]
        teams_by_chat: dict[str, set[int]] = {}
        for route in serving:
            if route.chat_name:
                teams_by_chat.setdefault(route.chat_name, set()).add(route.team_id)
        # A chat name two of the caller's teams offer means nothing to it: not on offer.
        chats = sorted(name for name, teams in teams_by_chat.items() if len(teams) == 1)
        return chats + sorted(r.name for r in serving if r.name not in teams_by_chat)


def upstream_url(copy: Copy) -> str:
    """Where a copy listens: on this machine for local and simulated engines, at its Service
    inside a Kubernetes cluster (the console must then run in that cluster), at its node's
    address on Ray."""
    cluster = copy.deployment.cluster
    if cluster.kind == ClusterKind.RAY and copy.machine_id:
        return f"http://{node_address(copy.machine.name)}:{copy.port}"  # its actor's relay
    if cluster.kind == ClusterKind.KUBERNETES:
        host = f"{object_name(copy.deployment.name, copy.ordinal)}.{cluster.namespace}.svc"
        return f"http://{host}:{copy.port or DEFAULT_PORT}"
    if copy.socket_path:
        return "http://localhost"  # reached through its socket (Upstream.socket)
    return f"http://127.0.0.1:{copy.port}"


class KeyBox:
    """Decrypted engine keys by copy, so a refresh decrypts only copies it has not seen."""

    def __init__(self) -> None:
        self.keys: dict[tuple[int, str], dict[str, str]] = {}

    def headers(self, copy: Copy) -> dict[str, str]:
        index = (copy.pk, copy.engine_api_key_encrypted)
        if index not in self.keys:
            secret = copy.engine_api_key()
            self.keys[index] = {"Authorization": f"Bearer {secret}"} if secret else {}
        return self.keys[index]

    def keep_only(self, copies: Iterable[Copy]) -> None:
        alive = {(c.pk, c.engine_api_key_encrypted) for c in copies}
        self.keys = {k: v for k, v in self.keys.items() if k in alive}


def load_table(keys: KeyBox) -> Table:
    """Blocking: read deployments and their ready copies into a new table."""
    ready = list(
        # A draining copy takes no new request: it is leaving (deployments/lifecycle.py).
        Copy.objects.filter(state=CopyState.READY, port__isnull=False, draining_since=None)
        .select_related("deployment__cluster", "machine")
        .order_by("deployment_id", "ordinal")
    )
    keys.keep_only(ready)
    by_deployment: dict[int, list[Upstream]] = {}
    for copy in ready:
        if copy.deployment.state in ROUTABLE:
            url, key = upstream_url(copy), keys.headers(copy)
            found = Upstream(copy.pk, copy.deployment_id, url, key, copy.socket_path)
            by_deployment.setdefault(copy.deployment_id, []).append(found)
    # Stopped deployments stay in the table, so that asking for one says it is stopped.
    rows = Deployment.objects.select_related("team").only(
        "id",
        "name",
        "team__name",
        "created_at",
        "chat_name",
        "state",
        "reply_wait_s",
        "waking_since",
        "last_cold_start_s",
        "routing",
        "engine_settings",
        "max_waiting",
        "queue_wait_s",
    )
    return Table.of(route_of(row, by_deployment.get(row.pk, [])) for row in rows)


def route_of(deployment: Deployment, upstreams: list[Upstream]) -> Route:
    return Route(
        id=deployment.pk,
        name=deployment.name,
        team_id=deployment.team_id,
        team_name=deployment.team.name,
        created=int(deployment.created_at.timestamp()),
        chat_name=deployment.chat_name,
        state=deployment.state,
        served_name=served_name(deployment),
        reply_wait_s=deployment.reply_wait_s or settings.GATEWAY_REPLY_WAIT_S,
        upstreams=tuple(upstreams),
        waking_since=deployment.waking_since.timestamp() if deployment.waking_since else None,
        last_cold_start_s=deployment.last_cold_start_s,
        routing=deployment.routing,
        block_size=positive_setting(deployment.engine_settings, "block_size", DEFAULT_BLOCK_SIZE),
        copy_capacity=positive_setting(
            deployment.engine_settings, "max_num_seqs", DEFAULT_MAX_NUM_SEQS
        ),
        max_waiting=deployment.max_waiting,
        queue_wait_s=deployment.queue_wait_s,
    )


def positive_setting(engine_settings: dict[str, object], name: str, default: int) -> int:
    value = engine_settings.get(name)
    return value if isinstance(value, int) and value > 0 else default
