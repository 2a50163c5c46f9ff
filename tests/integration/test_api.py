"""The REST API at /api/v1/: what each endpoint answers, who may call it, how it refuses bad
input (a message naming the field, nothing created). That the OpenAPI document tells the truth,
schemathesis checks in test_api_schema.py."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from catalog.models import Model
from clusters.models import Accelerator, Cluster, Machine
from console import keys
from console.models import ApiKey
from deployments.choices import CopyState, DeploymentState
from deployments.models import Copy, Deployment, Event, Reservation
from deployments.transitions import move_copy, move_deployment
from tests import factories

pytestmark = pytest.mark.django_db

API = "/api/v1"
EVERY_PATH = {
    "/api/v1/deployments",
    "/api/v1/deployments/{id}",
    "/api/v1/deployments/{id}/scale",
    "/api/v1/deployments/{id}/autoscaling",
    "/api/v1/deployments/{id}/stop",
    "/api/v1/deployments/{id}/start",
    "/api/v1/deployments/{id}/check",
    "/api/v1/deployments/{id}/retry",
    "/api/v1/deployments/{id}/chat-name",
    "/api/v1/deployments/{id}/reply-wait",
    "/api/v1/deployments/{id}/routing",
    "/api/v1/deployments/{id}/queue",
    "/api/v1/deployments/{id}/engine-settings",
    "/api/v1/deployments/{id}/files",
    "/api/v1/deployments/{id}/logs",
    "/api/v1/deployments/{id}/sync",
    "/api/v1/deployments/{id}/revisions",
    "/api/v1/deployments/{id}/revisions/{number}",
    "/api/v1/deployments/{id}/revisions/{number}/compare/{other}",
    "/api/v1/deployments/{id}/rollback",
    "/api/v1/deployments/{id}/auto-rollback",
    "/api/v1/apply",
    "/api/v1/apply/schema",
    "/api/v1/export",
    "/api/v1/fit-check",
    "/api/v1/estimate",
    "/api/v1/models",
    "/api/v1/models/{id}",
    "/api/v1/models/{id}/download",
    "/api/v1/models/{id}/retry",
    "/api/v1/models/{id}/delete-files",
    "/api/v1/clusters",
    "/api/v1/clusters/{id}",
    "/api/v1/me",
    "/api/v1/keys",
    "/api/v1/keys/{key_id}/revoke",
    "/api/v1/events",
    "/api/v1/usage",
    "/api/v1/cost",
    "/api/v1/quotas",
    "/api/v1/quotas/{quota_id}",
}


@pytest.fixture
def demo(db) -> Cluster:
    call_command("seed_demo")
    return Cluster.objects.get(name="demo")


@pytest.fixture(autouse=True)
def quick_passwords(settings):
    # The cast and the demo users get passwords; the real hasher would take most of each setup.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def qwen() -> Model:
    return Model.objects.get(repo_id="Qwen/Qwen3-8B")


def key_headers(user: Any) -> dict[str, str]:
    _key, secret = ApiKey.issue(user, "test")
    return {"Authorization": f"Bearer {secret}"}


class Caller:
    """An API client acting with one user's API key."""

    def __init__(self, user: Any) -> None:
        self.client = Client()
        self.headers = key_headers(user)

    def get(self, path: str) -> Any:
        return self.client.get(API + path, headers=self.headers)

    def post(self, path: str, body: Any = None) -> Any:
        return self.client.post(
            API + path, body or {}, content_type="application/json", headers=self.headers
        )

    def post_raw(self, path: str, raw: str) -> Any:
        return self.client.post(
            API + path, raw, content_type="application/json", headers=self.headers
        )

    def delete(self, path: str) -> Any:
        return self.client.delete(API + path, headers=self.headers)


def host_body(**changes: Any) -> dict[str, Any]:
    body = {
        "model": "Qwen/Qwen3-8B",
        "variant": "bf16",
        "cluster": "demo",
        "name": "qwen3-8b",
        "copies": 2,
        "accelerators_per_copy": 0.5,
        "engine_settings": {"max_model_len": 8192},
        "chat_name": "qwen",
        "reply_wait_s": 120,
    }
    body.update(changes)
    return body


def on_demo(name: str, team: Any, **fields: Any) -> Deployment:
    return factories.make_deployment(
        name, team, cluster=Cluster.objects.get(name="demo"), model=qwen(), **fields
    )


# --- who may call ----------------------------------------------------------------------------


def test_anonymous_requests_get_401(demo):
    client = Client()
    for response in [
        client.get(f"{API}/deployments"),
        client.post(f"{API}/deployments", host_body(), content_type="application/json"),
        client.get(f"{API}/openapi.json"),
        client.get(f"{API}/docs"),
    ]:
        assert response.status_code == 401
        assert "Authentication required" in response.json()["detail"]
    assert not Deployment.objects.exists()


def test_an_operator_hosts_a_model_and_gets_the_id_and_the_state(demo, bob):
    response = Caller(bob).post("/deployments", host_body())
    assert response.status_code == 202, response.content
    deployment = Deployment.objects.get()
    assert response.json() == {"id": deployment.pk, "state": "REQUESTED", "chosen": {}}
    assert (deployment.team.name, deployment.created_by) == ("red", bob)
    assert (deployment.copies_wanted, deployment.accelerators_per_copy) == (2, Decimal("0.5"))
    assert deployment.engine_settings == {"max_model_len": 8192}
    assert (deployment.chat_name, deployment.reply_wait_s) == ("qwen", 120)
    assert Event.objects.filter(deployment=deployment, actor=bob).exists()


def test_a_session_post_without_the_csrf_token_is_refused(demo, bob):
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    response = client.post(f"{API}/deployments", host_body(), content_type="application/json")
    assert response.status_code == 403
    assert response.json()["detail"].startswith("CSRF check failed")
    assert not Deployment.objects.exists()
    client.get("/account/api-keys/")  # a page with a form sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    response = client.post(
        f"{API}/deployments",
        host_body(),
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 202
    assert Deployment.objects.count() == 1


def test_a_viewers_key_reads_but_changes_nothing(demo, carol, red):
    deployment = on_demo("red-qwen", red)
    carols = Caller(carol)
    assert [d["name"] for d in carols.get("/deployments").json()["items"]] == ["red-qwen"]
    assert carols.get(f"/deployments/{deployment.pk}").status_code == 200
    changes = [
        carols.post(f"/deployments/{deployment.pk}/scale", {"copies": 3}),
        carols.post(f"/deployments/{deployment.pk}/stop"),
        carols.post(f"/deployments/{deployment.pk}/start"),
        carols.post(f"/deployments/{deployment.pk}/check"),
        carols.post(f"/deployments/{deployment.pk}/retry"),
        carols.post(f"/deployments/{deployment.pk}/chat-name", {"chat_name": "mine"}),
        carols.post(f"/deployments/{deployment.pk}/reply-wait", {"reply_wait_s": 60}),
        carols.post(f"/deployments/{deployment.pk}/routing", {"routing": "prefix"}),
        carols.post(f"/deployments/{deployment.pk}/queue", {"max_waiting": 5}),
        carols.post(f"/deployments/{deployment.pk}/engine-settings", {"engine_settings": {}}),
        carols.delete(f"/deployments/{deployment.pk}"),
    ]
    for response in changes:
        assert response.status_code == 403
        assert response.json() == {
            "detail": "Your role in this deployment's team only lets you read it.",
            "field": "",
        }
    refused = carols.post("/deployments", host_body(team="red"))
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "Hosting needs the operator role in a team; you have it in none."
    )
    after = Deployment.objects.get()
    assert (after.copies_wanted, after.state, after.chat_name) == (1, "REQUESTED", "")
    assert not Event.objects.exists()


def test_an_outsider_gets_404_for_another_teams_deployment(demo, dave, bob, blue):
    green = factories.make_team("green")
    deployment = on_demo("green-qwen", green)
    for caller in [Caller(dave), Caller(bob)]:
        assert caller.get("/deployments").json() == {"items": [], "next_cursor": None}
        for response in [
            caller.get(f"/deployments/{deployment.pk}"),
            caller.post(f"/deployments/{deployment.pk}/stop"),
            caller.delete(f"/deployments/{deployment.pk}"),
        ]:
            assert response.status_code == 404
            assert response.json()["detail"] == "No such deployment in your teams."
    viewed = on_demo("blue-qwen", blue)
    assert Caller(bob).post(f"/deployments/{viewed.pk}/stop").status_code == 403
    assert not Event.objects.exists()


def test_a_platform_admin_must_name_the_team_when_there_are_several(demo, alice, red, blue):
    response = Caller(alice).post("/deployments", host_body())
    assert response.status_code == 400
    assert response.json() == {
        "detail": "team: name the team to host in; you can host in blue, demo, red",
        "field": "team",
    }
    assert Caller(alice).post("/deployments", host_body(team="blue")).status_code == 202


# --- bad input -------------------------------------------------------------------------------

BAD_HOSTS = [
    pytest.param(
        {"model": "Qwen/Qwen3-9B"},
        400,
        "model",
        "model: Qwen/Qwen3-9B is not in the catalog; did you mean Qwen/Qwen3-8B",
        id="unknown-model",
    ),
    pytest.param(
        {"variant": "fp4"},
        400,
        "variant",
        "variant: Qwen/Qwen3-8B has no variant fp4; its variants: ",
        id="unknown-variant",
    ),
    pytest.param(
        {"cluster": "mars"},
        400,
        "cluster",
        "cluster: no cluster named mars; clusters: demo",
        id="unknown-cluster",
    ),
    pytest.param(
        {"team": "green"},
        400,
        "team",
        "team: green is not a team you can host in; you can host in red",
        id="unknown-team",
    ),
    pytest.param(
        {"copies": -1},
        422,
        "copies",
        "copies: -1 is not allowed: use 0 to 1000",
        id="negative-copies",
    ),
    pytest.param(
        {"accelerators_per_copy": 0},
        422,
        "accelerators_per_copy",
        "accelerators_per_copy: 0 is not a size: use a share between 0 and 1 (e.g. 0.25, 0.5), "
        "1, or a whole number of accelerators (2, 4, 8)",
        id="share-0",
    ),
    pytest.param(
        {"accelerators_per_copy": 1.5},
        422,
        "accelerators_per_copy",
        "accelerators_per_copy: 1.5 is not a size",
        id="share-1.5",
    ),
    pytest.param(
        {"name": "Qwen3-8B"},
        422,
        "name",
        "name: use lowercase letters, digits and dashes (at most 63)",
        id="name-with-capitals",
    ),
    pytest.param(
        {"reply_wait_s": 5},
        422,
        "reply_wait_s",
        "reply_wait_s: 5 s is not allowed: use 10 to 1800 seconds, or leave it empty",
        id="reply-wait-5",
    ),
    pytest.param(
        {"reply_wait_s": 5000},
        422,
        "reply_wait_s",
        "reply_wait_s: 5000 s is not allowed: use 10 to 1800 seconds",
        id="reply-wait-5000",
    ),
    pytest.param(
        {"engine_settings": {"max_len": 8192}},
        422,
        "engine_settings",
        "engine_settings: max_len: is not a setting Berth knows; known settings: ",
        id="unknown-engine-setting",
    ),
    pytest.param(
        {"engine_settings": {"max_model_len": "long"}},
        422,
        "engine_settings",
        "engine_settings: max_model_len: must be a whole number",
        id="engine-setting-of-the-wrong-type",
    ),
    pytest.param(
        {"copies": "two"},
        422,
        "copies",
        "copies: Input should be a valid integer",
        id="copies-as-text",
    ),
    pytest.param(
        {"copies": True},
        422,
        "copies",
        "copies: Input should be a valid integer",
        id="copies-as-boolean",
    ),
    pytest.param(
        {"accelerators_per_copy": "half"},
        422,
        "accelerators_per_copy",
        "accelerators_per_copy: 'half' is not a size: write it as 0.25, 0.5, 1, 2",
        id="size-as-text",
    ),
    pytest.param(
        {"engine_settings": ["max_model_len", 8192]},
        422,
        "engine_settings",
        "engine_settings: Input should be a valid dictionary",
        id="settings-as-a-list",
    ),
    pytest.param(
        {"reply_wait_s": 60.5},
        422,
        "reply_wait_s",
        "reply_wait_s: Input should be a valid integer",
        id="reply-wait-as-a-fraction",
    ),
    pytest.param(
        {"chat_name": "qwen\x00"},
        422,
        "chat_name",
        "chat_name: use printable characters only",
        id="nul-in-chat-name",
    ),
    pytest.param(
        {"routing": "fastest"},
        422,
        "routing",
        "routing: 'fastest' is not a routing policy: use least_loaded, prefix, session",
        id="unknown-routing",
    ),
    pytest.param(
        {"copie": 2},
        422,
        "copie",
        "copie: Extra inputs are not permitted",
        id="a-misspelt-field",
    ),
]


@pytest.mark.parametrize(("changes", "status", "field", "message"), BAD_HOSTS)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_created(
    demo, bob, changes, status, field, message
):
    body = host_body(**changes)
    response = Caller(bob).post("/deployments", body)
    assert response.status_code == status, response.content
    assert response.json()["field"] == field
    assert response.json()["detail"].startswith(message), response.json()["detail"]
    assert Deployment.objects.count() == 0
    assert Event.objects.count() == 0


def test_a_missing_field_and_a_body_that_is_not_json_are_refused(demo, bob):
    body = host_body()
    del body["model"]  # variant, cluster and name may be left out: Berth chooses them
    missing = Caller(bob).post("/deployments", body)
    assert missing.status_code == 422
    assert missing.json() == {"detail": "model: Field required", "field": "model"}
    broken = Caller(bob).post_raw("/deployments", '{"model": "Qwen/Qwen3-8B",')
    assert broken.status_code == 400
    assert broken.json()["detail"].startswith("body: is not valid JSON")
    not_a_number = Caller(bob).post_raw("/deployments", '{"copies": NaN}')
    assert not_a_number.status_code == 400
    endless = json.dumps(host_body()).replace(
        '"accelerators_per_copy": 0.5', '"accelerators_per_copy": 1e999'
    )
    infinite = Caller(bob).post_raw("/deployments", endless)
    assert infinite.status_code == 422
    assert infinite.json()["detail"] == "accelerators_per_copy: Input should be a finite number"
    assert Deployment.objects.count() == 0


def test_a_taken_name_is_refused(demo, bob, red):
    on_demo("qwen3-8b", red)
    response = Caller(bob).post("/deployments", host_body())
    assert response.status_code == 400
    assert response.json()["detail"] == (
        "name: a deployment named qwen3-8b exists already; pick another name"
    )
    assert Deployment.objects.count() == 1


# --- reading deployments ---------------------------------------------------------------------


def place_copy(copy: Copy, machine: Machine, gpus: list[Accelerator], gib: int, **fields) -> None:
    Copy.objects.filter(pk=copy.pk).update(
        machine=machine, allocated_bytes=gib * 2**30, attempts=1, **fields
    )
    for gpu in gpus:
        Reservation.objects.create(
            copy=copy, machine=machine, accelerator=gpu, reserved_bytes=gib * 2**30, share=1
        )


def test_a_deployment_shows_each_copy_with_where_it_is_placed(demo, bob, red):
    deployment = on_demo(
        "red-qwen", red, accelerators_per_copy=Decimal(2), copies_wanted=2, chat_name="qwen"
    )
    whole, sliced = factories.make_copy(deployment, 0), factories.make_copy(deployment, 1)
    h100 = Machine.objects.get(cluster=demo, name="h100-1")
    place_copy(
        whole,
        h100,
        list(h100.accelerators.filter(index__in=[2, 3]).order_by("index")),
        64,
        gpu_memory_utilization=0.8,
        hardware_class="software_shared",
        sharing_class="whole_gpu",
    )
    h200 = Machine.objects.get(cluster=demo, name="h200-mig")
    mig = Accelerator.objects.get(machine=h200, mig_profile="2g.35gb")
    place_copy(
        sliced,
        h200,
        [mig],
        34,
        gpu_memory_utilization=0.9,
        hardware_class="hardware_isolated",
        sharing_class="mig_2g.35gb",
    )
    response = Caller(bob).get(f"/deployments/{deployment.pk}")
    assert response.status_code == 200
    shown = response.json()
    assert {k: shown[k] for k in ["name", "team", "model", "variant", "cluster", "state"]} == {
        "name": "red-qwen",
        "team": "red",
        "model": "Qwen/Qwen3-8B",
        "variant": deployment.variant.name,
        "cluster": "demo",
        "state": "REQUESTED",
    }
    assert (shown["copies_wanted"], shown["copies_ready"]) == (2, 0)
    assert shown["accelerators_per_copy"] == 2.0
    assert shown["last_error_code"] is None and shown["notices"] == []
    assert shown["copies"] == [
        {
            "ordinal": 0,
            "state": "REQUESTED",
            "topology": "managed_cluster",
            "node_name": "h100-1",
            "gpu_indexes": [2, 3],
            "mig_profile": None,
            "gpu_vendor": "nvidia",
            "hardware_class": "software_shared",
            "sharing_class": "whole_gpu",
            "allocated_capacity_gb": 64.0,
            "gpu_memory_utilization": 0.8,
            "attempts": 1,
            "pending_reason": "",
            "last_error_code": None,
            "last_error_message": "",
            "last_error_at": None,
        },
        {
            "ordinal": 1,
            "state": "REQUESTED",
            "topology": "managed_cluster",
            "node_name": "h200-mig",
            "gpu_indexes": [0],
            "mig_profile": "2g.35gb",
            "gpu_vendor": "nvidia",
            "hardware_class": "hardware_isolated",
            "sharing_class": "mig_2g.35gb",
            "allocated_capacity_gb": 34.0,
            "gpu_memory_utilization": 0.9,
            "attempts": 1,
            "pending_reason": "",
            "last_error_code": None,
            "last_error_message": "",
            "last_error_at": None,
        },
    ]
    listed = Caller(bob).get("/deployments").json()
    assert listed == {"items": [shown], "next_cursor": None}


def test_a_failed_deployment_shows_its_error(demo, bob, red):
    deployment = on_demo("red-qwen", red)
    move_deployment(
        deployment.pk,
        DeploymentState.FAILED,
        message="Does not fit.",
        last_error_code="NoFitError",
        last_error_message="insufficient_capacity: …",
    )
    shown = Caller(bob).get(f"/deployments/{deployment.pk}").json()
    assert (shown["state"], shown["last_error_code"]) == ("FAILED", "NoFitError")
    assert shown["last_error_message"] == "insufficient_capacity: …"
    assert shown["last_message"] == "Does not fit."


# --- changing deployments --------------------------------------------------------------------


def test_an_operator_scales_renames_in_chat_and_sets_the_reply_wait(demo, bob, red):
    deployment = on_demo("red-qwen", red)
    bobs = Caller(bob)
    scaled = bobs.post(f"/deployments/{deployment.pk}/scale", {"copies": 3})
    assert scaled.status_code == 202
    assert scaled.json()["copies_wanted"] == 3
    resized = bobs.post(
        f"/deployments/{deployment.pk}/scale", {"copies": 3, "accelerators_per_copy": 0.5}
    )
    assert resized.json()["accelerators_per_copy"] == 0.5
    chat = bobs.post(f"/deployments/{deployment.pk}/chat-name", {"chat_name": "qwen"})
    assert (chat.status_code, chat.json()["chat_name"]) == (200, "qwen")
    wait = bobs.post(f"/deployments/{deployment.pk}/reply-wait", {"reply_wait_s": 60})
    assert (wait.status_code, wait.json()["reply_wait_s"]) == (200, 60)
    too_short = bobs.post(f"/deployments/{deployment.pk}/reply-wait", {"reply_wait_s": 5})
    assert too_short.status_code == 422
    assert too_short.json()["field"] == "reply_wait_s"
    negative = bobs.post(f"/deployments/{deployment.pk}/scale", {"copies": -2})
    assert negative.json()["detail"] == "copies: -2 is not allowed: use 0 to 1000"
    settings_ = bobs.post(
        f"/deployments/{deployment.pk}/engine-settings",
        {"engine_settings": {"max_model_len": 4096}},
    )
    assert settings_.status_code == 202
    assert settings_.json()["engine_settings"] == {"max_model_len": 4096}
    after = Deployment.objects.get()
    assert (after.copies_wanted, after.accelerators_per_copy) == (3, Decimal("0.5"))
    assert (after.chat_name, after.reply_wait_s) == ("qwen", 60)


def test_an_operator_sets_the_routing_and_a_policy_that_is_not_one_is_refused(demo, bob, red):
    deployment = on_demo("red-qwen", red)
    bobs = Caller(bob)
    assert bobs.get(f"/deployments/{deployment.pk}").json()["routing"] == "least_loaded"
    routed = bobs.post(f"/deployments/{deployment.pk}/routing", {"routing": "prefix"})
    assert (routed.status_code, routed.json()["routing"]) == (200, "prefix")
    assert deployment.events.first().message == "Routing: prefix-aware (prefix)"
    unknown = bobs.post(f"/deployments/{deployment.pk}/routing", {"routing": "round_robin"})
    assert (unknown.status_code, unknown.json()) == (
        422,
        {
            "detail": "routing: 'round_robin' is not a routing policy: use least_loaded, "
            "prefix, session",
            "field": "routing",
        },
    )
    assert Deployment.objects.get().routing == "prefix"


def test_an_operator_sets_the_queue_and_bad_bounds_are_refused_naming_the_field(demo, bob, red):
    deployment = on_demo("red-qwen", red)
    bobs = Caller(bob)
    url = f"/deployments/{deployment.pk}/queue"
    set_ = bobs.post(url, {"max_waiting": 20, "queue_wait_s": 30})
    assert set_.status_code == 200
    assert (set_.json()["max_waiting"], set_.json()["queue_wait_s"]) == (20, 30)
    assert deployment.events.first().message == (
        "Queue when every copy is full: up to 20 requests, each for 30 s"
    )
    for body, field, detail in [
        ({"max_waiting": -1}, "max_waiting", "max_waiting: -1 is not allowed: use 0 (no queue) to 10000"),
        ({"max_waiting": 10001}, "max_waiting", "max_waiting: 10001 is not allowed: use 0 (no queue) to 10000"),
        ({"max_waiting": 5, "queue_wait_s": 0}, "queue_wait_s",
         "queue_wait_s: 0 s is not allowed: use 1 to 1800 seconds, or leave it empty to wait as "
         "long as the reply wait"),
    ]:  # fmt: skip
        refused = bobs.post(url, body)
        assert (refused.status_code, refused.json()) == (422, {"detail": detail, "field": field})
    unset = bobs.post(url, {"max_waiting": 0})
    assert (unset.json()["max_waiting"], unset.json()["queue_wait_s"]) == (0, None)


def test_stop_start_check_and_delete_follow_the_deployments_state(demo, bob, red):
    deployment = on_demo("red-qwen", red)
    bobs = Caller(bob)
    stopped = bobs.post(f"/deployments/{deployment.pk}/stop")
    assert (stopped.status_code, stopped.json()["state"]) == (202, "STOPPING")
    again = bobs.post(f"/deployments/{deployment.pk}/stop")
    assert again.status_code == 400
    assert again.json() == {"detail": "it is already stopping", "field": ""}
    early = bobs.post(f"/deployments/{deployment.pk}/start")
    assert early.json()["detail"] == "only a stopped deployment can be started"
    move_deployment(deployment.pk, DeploymentState.STOPPED)
    started = bobs.post(f"/deployments/{deployment.pk}/start")
    assert (started.status_code, started.json()["state"]) == (202, "REQUESTED")
    checked = bobs.post(f"/deployments/{deployment.pk}/check")
    assert checked.status_code == 202
    deleting = bobs.delete(f"/deployments/{deployment.pk}")
    assert deleting.status_code == 202
    assert deleting.json() == {"id": deployment.pk, "state": "STOPPING"}
    move_deployment(deployment.pk, DeploymentState.STOPPED)
    gone = bobs.delete(f"/deployments/{deployment.pk}")
    assert gone.json() == {"id": deployment.pk, "state": None}
    assert not Deployment.objects.exists()
    assert bobs.get(f"/deployments/{deployment.pk}").status_code == 404


def test_retry_tries_a_failed_deployment_again_and_start_refuses_it(demo, bob, red):
    deployment = on_demo("red-qwen", red)
    copy = factories.make_copy(deployment)
    bobs = Caller(bob)
    early = bobs.post(f"/deployments/{deployment.pk}/retry")
    assert early.status_code == 400
    assert early.json() == {
        "detail": "only a failed deployment can be tried again; it is requested",
        "field": "",
    }
    move_copy(copy.pk, CopyState.FAILED, message="OOM at load.")
    move_deployment(deployment.pk, DeploymentState.FAILED, message="OOM at load.")
    started = bobs.post(f"/deployments/{deployment.pk}/start")
    assert started.status_code == 400
    assert started.json() == {
        "detail": "it failed: try it again with retry (Check now on its page), not start",
        "field": "",
    }
    retried = bobs.post(f"/deployments/{deployment.pk}/retry")
    assert retried.status_code == 202
    assert (retried.json()["state"], retried.json()["last_message"]) == (
        "REQUESTED",
        "Trying again.",
    )
    assert Copy.objects.get(pk=copy.pk).state == CopyState.REQUESTED
    said = Event.objects.filter(deployment=deployment, kind="action", actor_name="bob")
    assert list(said.values_list("message", flat=True)) == ["Retry"]


def test_retry_needs_an_operator_of_the_team_and_an_operate_key(demo, bob, dave, red):
    deployment = on_demo("red-qwen", red)
    move_deployment(deployment.pk, DeploymentState.FAILED, message="Does not fit.")
    outsider = Caller(dave).post(f"/deployments/{deployment.pk}/retry")
    assert (outsider.status_code, outsider.json()["detail"]) == (
        404,
        "No such deployment in your teams.",
    )
    reader = Client().post(
        f"{API}/deployments/{deployment.pk}/retry",
        headers={"Authorization": f"Bearer {keys.issue(bob, 'dashboard', 'read')[1]}"},
    )
    assert reader.status_code == 403
    assert reader.json()["detail"] == (
        "This API key's scope is read: it may read (GET), check a fit and estimate memory, "
        "but not change anything. Use an operate key for this."
    )
    assert Deployment.objects.get().state == DeploymentState.FAILED
    assert not Event.objects.filter(kind="action").exists()


# --- fit checks and estimates ----------------------------------------------------------------


def test_a_fit_check_on_the_demo_cluster_places_qwen_and_reserves_nothing(demo, carol):
    response = Caller(carol).post(
        "/fit-check",
        {
            "model": "Qwen/Qwen3-8B",
            "variant": "bf16",
            "cluster": "demo",
            "copies": 2,
            "accelerators_per_copy": 1,
            "engine_settings": {"max_model_len": 8192},
        },
    )
    assert response.status_code == 200, response.content
    fit = response.json()
    assert fit["fit_now"] >= 1 and fit["fit_empty"] >= fit["fit_now"]
    assert fit["estimate"]["weights_gb"] == pytest.approx(15.26, abs=0.01)
    assert fit["estimate"]["max_model_len"] == 8192
    parts = ["weights_gb", "kv_cache_gb", "activations_gb", "overhead_gb"]
    assert sum(fit["estimate"][p] for p in parts) == pytest.approx(
        fit["estimate"]["total_gb"], abs=0.03
    )
    assert len(fit["placed"]) == 2 and fit["not_placed"] == []
    first = fit["placed"][0]
    assert set(first) == {
        "copy_number",
        "machine",
        "accelerators",
        "slice",
        "allocated_capacity_gb",
        "gpu_memory_utilization",
        "hardware_class",
        "sharing_class",
    }
    assert first["allocated_capacity_gb"] > fit["estimate"]["total_gb"]
    assert not Reservation.objects.exists() and not Deployment.objects.exists()


def test_a_fit_check_says_why_copies_do_not_fit(demo, bob):
    response = Caller(bob).post(
        "/fit-check",
        {
            "model": "Qwen/Qwen3-8B",
            "variant": "bf16",
            "cluster": "demo",
            "copies": 40,
            "accelerators_per_copy": 1,
            "engine_settings": {"max_model_len": 8192},
        },
    )
    fit = response.json()
    # A 17.95 GiB copy of one accelerator fits each of the 8 H100s, each of the 2 time-sliced L4s
    # (0.8 x 22.49 GiB = 17.99 GiB) and the H200's 3g.71gb and 2g.35gb slices: 12. What is left
    # is the H200's two 1g.18gb slices, 16 GiB each: too little room, not too few GPUs.
    assert fit["fit_now"] == 12
    assert len(fit["placed"]) + len(fit["not_placed"]) == 40
    assert {refused["reason"] for refused in fit["not_placed"]} == {"insufficient_capacity"}
    message = fit["not_placed"][0]["message"]
    assert "the most free on any suitable accelerator now is 16.00 GiB (h200-mig GPU 0)" in message


@pytest.mark.parametrize(
    ("changes", "status", "detail"),
    [
        ({"cluster": "mars"}, 400, "cluster: no cluster named mars; clusters: demo"),
        ({"copies": -1}, 422, "copies: -1 is not allowed: use 0 to 1000"),
        ({"accelerators_per_copy": 1.5}, 422, "accelerators_per_copy: 1.5 is not a size"),
        (
            {"engine_settings": {"max_model_len": 50000}},
            422,
            "engine_settings.max_model_len: 50000 is longer than the model's context of 40960 "
            "tokens",
        ),
        (
            {"accelerators_per_copy": 3},
            422,
            "accelerators_per_copy: 3 do not divide the model's 32 attention heads",
        ),
    ],
)
def test_a_bad_fit_check_is_refused_naming_the_field(demo, bob, changes, status, detail):
    body = {"model": "Qwen/Qwen3-8B", "variant": "bf16", "cluster": "demo", **changes}
    response = Caller(bob).post("/fit-check", body)
    assert response.status_code == status
    assert response.json()["detail"].startswith(detail), response.json()["detail"]


def test_an_estimate_gives_the_parts_in_gib(demo, carol):
    response = Caller(carol).post(
        "/estimate",
        {
            "model": "Qwen/Qwen3-8B",
            "variant": "bf16",
            "engine_settings": {"max_model_len": 8192},
            "tensor_parallel": 2,
        },
    )
    assert response.status_code == 200, response.content
    parts = response.json()
    assert parts["weights_gb"] == pytest.approx(15.26 / 2, abs=0.01)
    assert parts["tensor_parallel"] == 2 and parts["max_model_len"] == 8192
    assert parts["kv_cache_bytes_per_token"] > 0 and parts["total_gb"] > parts["weights_gb"]


def test_an_estimate_longer_than_the_models_context_is_422_naming_max_model_len(demo, bob):
    response = Caller(bob).post(
        "/estimate",
        {"model": "Qwen/Qwen3-8B", "variant": "bf16", "engine_settings": {"max_model_len": 50000}},
    )
    assert response.status_code == 422
    assert response.json() == {
        "detail": "engine_settings.max_model_len: 50000 is longer than the model's context of "
        "40960 tokens",
        "field": "engine_settings.max_model_len",
    }


def test_an_estimate_over_gpus_that_do_not_divide_the_heads_is_422(demo, bob):
    body = {"model": "Qwen/Qwen3-8B", "variant": "bf16", "tensor_parallel": 3}
    response = Caller(bob).post("/estimate", body)
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "tensor_parallel: 3 do not divide the model's 32 attention heads"
    )
    zero = Caller(bob).post("/estimate", {**body, "tensor_parallel": 0})
    assert zero.json()["detail"] == "tensor_parallel: Input should be greater than or equal to 1"


# --- the catalog and the clusters ------------------------------------------------------------


def test_models_list_their_variants_and_which_are_on_this_server(demo, carol):
    models = {m["repo_id"]: m for m in Caller(carol).get("/models?limit=200").json()["items"]}
    qwen3 = models["Qwen/Qwen3-8B"]
    assert qwen3["max_context"] == 40960 and qwen3["family"]
    variants = {v["name"]: v for v in qwen3["variants"]}
    assert variants["bf16"]["on_this_server"] is True
    assert variants["bf16"]["size_gb"] == pytest.approx(15.26, abs=0.01)
    assert variants["bf16"]["engine"] == "vllm"
    assert variants["bf16"]["min_compute_capability"] == "8.0"
    assert any(not v["on_this_server"] for m in models.values() for v in m["variants"])


def test_clusters_list_machines_and_gpus_but_never_credentials(demo, carol):
    secret = "apiVersion: v1\nusers: [{name: admin, user: {token: very-secret-token}}]"
    demo.set_kubeconfig(secret)
    demo.save()
    response = Caller(carol).get("/clusters")
    assert "very-secret-token" not in response.content.decode()
    assert "kubeconfig" not in response.content.decode()
    listed = {c["name"]: c for c in response.json()["items"]}
    assert sorted(listed) == ["demo", "local"]  # the demo's simulated cluster and this machine
    cluster = listed["demo"]
    assert (cluster["kind"], cluster["sharing_strategy"]) == ("simulator", "fractional")
    (this_machine,) = listed["local"]["machines"]
    assert [g["vendor"] for g in this_machine["gpus"]] == ["cpu"]
    machines = {m["name"]: m for m in cluster["machines"]}
    assert machines["h100-1"]["gpu_count"] == 4
    assert machines["h100-1"]["gpus"][0]["memory_gb"] == pytest.approx(79.65, abs=0.01)
    assert machines["h100-1"]["gpu_memory_gb"] == pytest.approx(4 * 79.65, abs=0.02)
    mig = machines["h200-mig"]["gpus"][0]["mig_slices"]
    assert [s["profile"] for s in mig] == ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]


def test_a_gpu_discovery_no_longer_reports_is_not_listed(demo, carol):
    Accelerator.objects.filter(machine__name="h100-1", index=3).update(present=False)
    listed = Caller(carol).get("/clusters").json()["items"]
    cluster = next(c for c in listed if c["name"] == "demo")
    h100 = next(m for m in cluster["machines"] if m["name"] == "h100-1")
    assert h100["gpu_count"] == 3 and [g["index"] for g in h100["gpus"]] == [0, 1, 2]


def test_no_engine_api_key_is_ever_shown(demo, bob, red):
    deployment = on_demo("red-qwen", red)
    copy = factories.make_copy(deployment)
    copy.set_engine_api_key("engine-secret-123")
    copy.save()
    for path in ["/deployments", f"/deployments/{deployment.pk}"]:
        assert "engine-secret-123" not in Caller(bob).get(path).content.decode()


# --- the OpenAPI document ----------------------------------------------------------------


def test_the_openapi_document_lists_every_path_and_the_docs_load(as_bob):
    document = as_bob.get(f"{API}/openapi.json").json()
    assert set(document["paths"]) == EVERY_PATH
    assert set(document["components"]["securitySchemes"]) == {"ApiKeyAuth", "SessionWithCsrf"}
    operation_ids = {
        op["operationId"] for path in document["paths"].values() for op in path.values()
    }
    assert {"host", "scale", "stop", "start", "check_now", "delete", "check_fit"} <= operation_ids
    assert as_bob.get(f"{API}/docs").status_code == 200
