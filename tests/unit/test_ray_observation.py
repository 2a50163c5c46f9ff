"""What the Ray driver reports of a copy (placement group, actor, engine status), in the
console's words: the mapping the watcher acts on (tests/integration/test_ray_copies.py sees
the same states on a real Ray cluster)."""

from __future__ import annotations

from clusters.backends.base import INFEASIBLE, RESTARTING, CopyHandle
from clusters.backends.ray.backend import NO_ROOM, NODE_GONE, observation
from deployments.choices import ErrorCode
from deployments.models import Copy
from deployments.watcher import failure_of

HANDLE = CopyHandle(7, machine="10.0.0.5-abcdef12", pod_name="qwen-0-copy7")


def test_a_group_ray_cannot_place_now_waits_with_rays_reason():
    seen = observation(HANDLE, {"group": "PENDING", "scheduling": "NO_RESOURCES", "actor": None})
    assert (seen.status, seen.message) == ("waiting", NO_ROOM)


def test_a_group_ray_can_never_place_fails_as_no_fit_saying_the_plan_should_have_refused():
    seen = observation(HANDLE, {"group": "PENDING", "scheduling": "INFEASIBLE",
                                "required": {"GPU": 8.0}})  # fmt: skip
    assert (seen.status, seen.reason) == ("exited", INFEASIBLE)
    assert "{'GPU': 8.0}" in seen.message and "should have refused it first" in seen.message
    failure = failure_of(Copy(), seen)
    assert (failure.code, failure.permanent) == (ErrorCode.NO_FIT, True)


def test_a_live_healthy_actor_is_ready_where_its_relay_listens_with_rays_gpu_ids():
    status = {"node_id": "n" * 40, "healthy": True, "relay_port": 41000, "pid": 99,
              "gpu_ids": ["0", "1"]}  # fmt: skip
    seen = observation(HANDLE, {"group": "CREATED", "actor": "ALIVE", "status": status})
    assert (seen.status, seen.port, seen.pid) == ("ready", 41000, 99)
    assert seen.gpu_uuids == ("ray-" + "n" * 16 + "-0", "ray-" + "n" * 16 + "-1")
    unhealthy = observation(HANDLE, {"group": "CREATED", "actor": "ALIVE",
                                     "status": {**status, "healthy": False}})  # fmt: skip
    assert unhealthy.status == "starting"


def test_a_restarting_actor_says_ray_is_trying_again_and_a_dead_one_why():
    restarting = observation(HANDLE, {"group": "CREATED", "actor": "RESTARTING", "restarts": 1})
    assert restarting.status == "waiting"
    assert (
        restarting.message == "A start failed: the engine exited; Ray is trying again (restart 1)"
    )
    killed = observation(HANDLE, {"group": None, "actor": "DEAD", "death_cause": "… RAY_KILL …"})
    assert (killed.status, killed.message) == ("exited", "Stopped by Ray (ray.kill).")
    gone = observation(HANDLE, {"group": None, "actor": None})
    assert gone.status == "gone"


def test_a_restarted_actor_whose_engine_does_not_answer_yet_is_still_ray_trying_again():
    status = {"node_id": "n" * 40, "healthy": False, "relay_port": 41002, "pid": 100}
    seen = observation(HANDLE, {"group": "CREATED", "actor": "ALIVE", "restarts": 1,
                                "status": status})  # fmt: skip
    assert (seen.status, seen.reason, seen.port) == ("waiting", RESTARTING, 41002)
    assert seen.message == "A start failed: the engine exited; Ray is trying again (restart 1)"
    healthy = observation(HANDLE, {"group": "CREATED", "actor": "ALIVE", "restarts": 1,
                                   "status": {**status, "healthy": True}})  # fmt: skip
    assert healthy.status == "ready"


def test_a_group_whose_node_died_is_not_a_no_fit_but_ray_trying_again():
    seen = observation(HANDLE, {"group": "RESCHEDULING", "scheduling": "INFEASIBLE",
                                "actor": "RESTARTING", "restarts": 0})  # fmt: skip
    assert (seen.status, seen.reason, seen.message) == ("waiting", RESTARTING, NODE_GONE)
