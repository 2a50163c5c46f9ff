"""The one door for live updates: every broadcast to the pages goes through `broadcast`.

A broadcast carries what changed (kind, id, seq), never HTML: each consumer renders the partial
for its own user. Callers register it to run on commit, so nothing is announced for a change
that was rolled back.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

MODELS_GROUP = "models"  # the On this server page: every download's row
# A message of the deployments group: a deployment was hosted (open lists add its row).
DEPLOYMENT_ADDED = "deployment_added"


# The fleet overview (the home page): told of every deployment's and copy's change of state.
FLEET_GROUP = "fleet"


def fleet_changed() -> None:
    broadcast_on_commit(FLEET_GROUP, "fleet", 0)


def deployment_group(deployment_id: int) -> str:
    return f"deployment-{deployment_id}"


def model_group(model_id: int) -> str:
    return f"model-{model_id}"


def broadcast(group: str, kind: str, id: int, seq: int = 0) -> None:
    """Tell every consumer in `group` that `kind` `id` changed (up to `seq` for logs)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "live.changed", "kind": kind, "id": id, "seq": seq}
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # A live update is an addition: a broken layer must not fail the change.
        log.exception("broadcast to %s failed", group)


def broadcast_on_commit(group: str, kind: str, id: int, seq: int = 0) -> None:
    transaction.on_commit(lambda: broadcast(group, kind, id, seq))


def server_model_changed(server_model_id: int, model_id: int) -> None:
    """A download moved (state or bytes): its model's page and On this server hear of it."""
    broadcast_on_commit(model_group(model_id), "server_model", server_model_id)
    broadcast_on_commit(MODELS_GROUP, "server_model", server_model_id)


def machine_files_changed(deployment_ids: list[int], machine_files_id: int) -> None:
    """Model files on a machine moved (Sync, or a copy's files): the deployments' pages hear."""
    for deployment_id in deployment_ids:
        broadcast_on_commit(deployment_group(deployment_id), "files", machine_files_id)


ACCESS_GROUP = "access"  # the gateway forgets what it cached of a user's keys


def user_group(user_id: int) -> str:
    """The user's open sockets, which check again what the user may see."""
    return f"user-{user_id}"


def access_changed(user_id: int, kind: str = "user") -> None:
    """A user's keys or roles changed (a key revoked, a membership changed), or, with kind
    "logout", the user logged out: the gateway and the user's sockets hear of it."""
    broadcast_on_commit(ACCESS_GROUP, "user", user_id)
    broadcast_on_commit(user_group(user_id), kind, user_id)
