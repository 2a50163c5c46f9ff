"""The process that is Berth's Ray driver for one Ray cluster: Ray connects a process to one
cluster, so each Ray cluster gets one of these, started and owned by the watcher that holds
the cluster's lock (deployments/watcher.py); web and worker processes ask it over a Unix socket
in the cluster's state folder (clusters/backends/ray/backend.py).

    python -m clusters.backends.ray.driver probe ADDRESS     # connect, print what is there, exit
    python -m clusters.backends.ray.driver serve ADDRESS SOCKET

The cluster's token, where it requires one, comes in the environment (RAY_AUTH_TOKEN), never on
the command line. Each request is one JSON line, answered with one JSON line.
"""

from __future__ import annotations

import json
import os
import socketserver
import sys
import threading
from typing import Any

# Berth's actors live in a Ray namespace of this install's own (see ray_driver.py), so that
# two consoles on one Ray cluster never take each other's copies for their own.
NAMESPACE = os.environ.get("BERTH_RAY_NAMESPACE", "berth")
# Ray restarts an actor whose engine exited this many times before it is dead for good.
RESTARTS = 3


def connect(address: str) -> dict[str, Any]:
    import ray

    context = ray.init(
        address=address,
        namespace=NAMESPACE,
        logging_level="WARNING",
        log_to_driver=False,
        configure_logging=False,
    )
    dashboard = context.dashboard_url or ""
    if dashboard and "://" not in dashboard:
        dashboard = f"http://{dashboard}"
    return {
        "ray_version": ray.__version__,
        "python_version": ".".join(map(str, sys.version_info[:3])),
        "dashboard_url": dashboard,
        "nodes": sum(1 for node in ray.nodes() if node.get("Alive")),
    }


def probe(address: str) -> int:
    try:
        found = connect(address)
    except Exception as error:  # Ray's own words: unreachable, a version mismatch, a token…
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 1
    print(json.dumps(found))
    return 0


# --- the copies ------------------------------------------------------------------------------


def actor_class() -> Any:
    """The copy's actor class, shipped to the nodes by value (they need nothing of Berth's)."""
    import ray
    from ray import cloudpickle

    from clusters.backends.ray import actor

    cloudpickle.register_pickle_by_value(actor)
    return ray.remote(actor.EngineCopy)


def launch(request: dict[str, Any]) -> dict[str, Any]:
    """A placement group of its own, pinned to the planned node by Ray's node-id label (several
    nodes may share an address, so `node:<ip>` would not tell them apart), and the actor in it
    (detached: it outlives this driver, and a new driver finds it by name)."""
    import ray
    from ray.util.placement_group import get_placement_group, placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    name = request["name"]
    try:
        ray.get_actor(name, namespace=NAMESPACE)
        return {"name": name}  # launched already (a retried task): nothing more to do
    except ValueError:
        pass
    gpus = float(request["gpus"])
    # One bundle holding all the copy's GPUs: the actor starts the engine as its child, so
    # the engine sees only the GPUs of the actor's own bundle (an actor cannot span bundles).
    bundles = [{"GPU": gpus}]
    node = {"ray.io/node-id": request["node_id"]}
    try:
        group = get_placement_group(name)  # a launch tried before, and its group kept
    except ValueError:
        group = placement_group(
            bundles,
            strategy="STRICT_PACK",
            name=name,
            lifetime="detached",
            bundle_label_selector=[node] * len(bundles),
        )
    options = {
        "name": name,
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "max_restarts": RESTARTS,
        "num_cpus": 0,
        "num_gpus": gpus,
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_capture_child_tasks=False
        ),
    }
    actor_class().options(**options).remote(
        request["argv"], request["env"], request.get("cwd"), request["key"], request["secret_env"]
    )
    return {"name": name}


def stop(request: dict[str, Any]) -> dict[str, Any]:
    """The engine first (so that it ends cleanly), then the actor and its placement group."""
    import ray
    from ray.util import placement_group_table, remove_placement_group
    from ray.util.placement_group import get_placement_group

    name = request["name"]
    try:
        handle = ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        handle = None
    if handle is not None:
        live = current_actor(name)
        if live is not None and live.state == "ALIVE":  # one restarting cannot answer: killed
            try:
                ray.get(handle.stop.remote(), timeout=30)
            except Exception:  # died meanwhile: it is killed below all the same
                pass
        ray.kill(handle, no_restart=True)
    try:
        group = get_placement_group(name)
    except ValueError:
        return {"stopped": name}
    if placement_group_table(group).get("state") != "REMOVED":
        remove_placement_group(group)
    return {"stopped": name}


def observe(request: dict[str, Any]) -> dict[str, Any]:
    """Each copy as Ray and its engine see it: the group's scheduling state, the actor's state
    (with its restarts and death cause), and from a live actor its status."""
    return {name: observe_one(name) for name in request["names"]}


STATE_ORDER = {
    "ALIVE": 0,
    "RESTARTING": 1,
    "PENDING_CREATION": 2,
    "DEPENDENCIES_UNREADY": 3,
    "DEAD": 4,
}


def current_actor(name: str) -> Any:
    """The copy's actor: a live one before dead ones (a name is free again once its actor is
    dead)."""
    from ray.util.state import list_actors

    actors = list_actors(
        filters=[("name", "=", name), ("ray_namespace", "=", NAMESPACE)],
        detail=True,
        raise_on_missing_output=False,
    )
    return min(actors, key=lambda a: STATE_ORDER.get(a.state, len(STATE_ORDER)), default=None)


def observe_one(name: str) -> dict[str, Any]:
    import ray
    from ray.util import placement_group_table
    from ray.util.placement_group import get_placement_group

    seen: dict[str, Any] = {"name": name}
    try:
        table = placement_group_table(get_placement_group(name))
        seen["group"] = table.get("state")
        seen["scheduling"] = (table.get("stats") or {}).get("scheduling_state")
    except ValueError:
        seen["group"] = None
    newest = current_actor(name)
    if newest is None:
        return seen
    seen.update(
        actor=newest.state,
        actor_id=newest.actor_id,
        restarts=newest.num_restarts,
        death_cause=str(newest.death_cause or ""),
        required=newest.required_resources,
    )
    if newest.state == "ALIVE":
        try:
            seen["status"] = ray.get(ray.get_actor(name, NAMESPACE).status.remote(), timeout=10)
        except Exception as error:
            seen["status_error"] = str(error)
    return seen


def logs(request: dict[str, Any]) -> dict[str, Any]:
    """The engine's lines as Ray keeps them (the actor's output, through Ray's log API), of
    the copy's current actor."""
    from ray.util.state import get_log

    found = current_actor(request["name"])
    if found is None:
        return {"actor_id": "", "lines": []}
    try:
        text = "".join(get_log(actor_id=found.actor_id, tail=request.get("tail", 5000)))
    except Exception as error:  # no log yet (still being created): nothing to read now
        return {"actor_id": found.actor_id, "lines": [], "error": str(error)}
    return {"actor_id": found.actor_id, "lines": text.splitlines()}


def running(_request: dict[str, Any]) -> dict[str, Any]:
    """Berth's live actors in this install's namespace, with when each started (None where
    it does not answer now: it is taken as new)."""
    from ray.util.state import list_actors

    actors = list_actors(
        filters=[("ray_namespace", "=", NAMESPACE), ("state", "=", "ALIVE")],
        raise_on_missing_output=False,
    )
    return {"actors": [{"name": a.name, "started_at": started_at(a.name)} for a in actors]}


def started_at(name: str) -> float | None:
    import ray

    try:
        status = ray.get(ray.get_actor(name, NAMESPACE).status.remote(), timeout=10)
    except Exception:  # gone or restarting since it was listed
        return None
    return float(status["started_at"])


# What NVML reported on each GPU node, by Ray node id: a node's GPUs do not change while it lives.
MEASURED: dict[str, dict[str, Any]] = {}
MEASURE_WAIT_S = 60  # a node may first start a worker process for the task


def gpus(_request: dict[str, Any]) -> dict[str, Any]:
    """Each alive GPU node's GPUs as NVML reports them on the node: a task pinned to the node
    measures it once (node_gpus.py)."""
    import ray
    from ray import cloudpickle
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from clusters.backends.ray import node_gpus

    cloudpickle.register_pickle_by_value(node_gpus)
    measure = ray.remote(num_cpus=0)(node_gpus.gpus_here)
    alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU")]
    asked = {
        node: measure.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
        ).remote()
        for node in alive
        if node not in MEASURED
    }
    if asked:  # every node at once: one that does not answer holds up the others no longer
        ray.wait(list(asked.values()), num_returns=len(asked), timeout=MEASURE_WAIT_S)
    unanswered = {}
    for node, answer in asked.items():
        try:
            MEASURED[node] = ray.get(answer, timeout=0)
        except Exception as error:  # not kept: asked again at the next discovery
            unanswered[node] = {"error": f"the task that reads NVML did not answer ({error})"}
    return {"nodes": {node: MEASURED.get(node) or unanswered[node] for node in alive}}


OPERATIONS = {
    "launch": launch,
    "stop": stop,
    "observe": observe,
    "logs": logs,
    "running": running,
    "gpus": gpus,
}


class Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        for raw in self.rfile:
            try:
                request = json.loads(raw)
                result = OPERATIONS[request["op"]](request)
                answer = {"ok": True, "result": result}
            except Exception as error:
                answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
            self.wfile.write(json.dumps(answer, default=str).encode() + b"\n")
            self.wfile.flush()


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(address: str, socket_path: str) -> int:
    connect(address)
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    with Server(socket_path, Handler) as server:
        os.chmod(socket_path, 0o600)  # only the console's user asks it
        threading.Thread(target=server.serve_forever, daemon=True).start()
        print(f"berth: Ray driver for {address} listening on {socket_path}", flush=True)
        threading.Event().wait()
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"] and len(argv) == 2:
        return probe(argv[1])
    if argv[:1] == ["serve"] and len(argv) == 3:
        return serve(argv[1], argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
