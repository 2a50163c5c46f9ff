"""Configuration as code through the API: GET /export writes deployments as a document, POST
/apply plans it (create, update with the changed fields, unchanged, would not fit, refused,
delete with prune) and carries it out all or nothing; export then apply on an emptied console
gives the same deployments, and a second apply changes nothing."""

from __future__ import annotations

import copy

import pytest
from django.core.management import call_command

from deployments.models import Deployment, Event
from gateway.models import Quota
from tests.integration.test_api import Caller, host_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(db):
    call_command("seed_demo")


def two_hosted(bobs: Caller) -> None:
    assert bobs.post("/deployments", host_body(team="red")).status_code == 202
    other = host_body(team="red", name="small", copies=1, chat_name="", routing="prefix",
                      accelerators_per_copy=0.25, engine_settings={"max_model_len": 4096})  # fmt: skip
    assert bobs.post("/deployments", other).status_code == 202
    deployment = Deployment.objects.get(name="small")
    queue = {"max_waiting": 8, "queue_wait_s": 20}
    assert bobs.post(f"/deployments/{deployment.pk}/queue", queue).status_code == 200


def apply(bobs: Caller, document, **options):
    return bobs.post("/apply", {"document": document, **options})


def test_export_then_apply_on_an_emptied_console_gives_the_same_and_again_changes_nothing(
    demo, bob, red
):
    bobs = Caller(bob)
    two_hosted(bobs)
    exported = bobs.get("/export").json()
    assert exported["version"] == 1
    assert [d["name"] for d in exported["deployments"]] == ["qwen3-8b", "small"]
    assert exported["deployments"][1] == {
        "name": "small", "team": "red", "model": "Qwen/Qwen3-8B", "cluster": "demo",
        "variant": "bf16", "revision": "", "accelerators_per_copy": "0.25", "copies": 1,
        "autoscaling": None, "engine_settings": {"max_model_len": 4096}, "chat_name": "",
        "reply_wait_s": 120, "routing": "prefix", "max_waiting": 8, "queue_wait_s": 20,
        "movable": True, "auto_rollback": False, "quota": None,
    }  # fmt: skip
    Deployment.objects.all().delete()
    done = apply(bobs, exported)
    assert done.status_code == 200, done.content
    assert (done.json()["applied"], done.json()["counts"]["create"]) == (True, 2)
    assert bobs.get("/export").json() == exported  # 0 differences
    again = apply(bobs, exported).json()
    assert [(i["name"], i["action"]) for i in again["items"]] == [
        ("qwen3-8b", "unchanged"), ("small", "unchanged")
    ]  # fmt: skip
    made = Deployment.objects.get(name="small")
    assert [r.number for r in made.revisions.all()] == [1]  # one revision: what it was made as


def test_a_dry_run_says_what_would_change_and_changes_nothing(demo, bob, red):
    bobs = Caller(bob)
    two_hosted(bobs)
    document = bobs.get("/export").json()
    wanted = copy.deepcopy(document)
    wanted["deployments"][0]["routing"] = "session"
    wanted["deployments"][0]["copies"] = 3
    wanted["deployments"].append({**document["deployments"][1], "name": "new-one"})
    wanted["deployments"].append({**document["deployments"][1], "name": "huge",
                                  "accelerators_per_copy": "64"})  # fmt: skip
    events = Event.objects.count()
    plan = apply(bobs, wanted, dry_run=True).json()
    assert (plan["dry_run"], plan["applied"]) == (True, False)
    assert [(i["name"], i["action"]) for i in plan["items"]] == [
        ("qwen3-8b", "update"), ("small", "unchanged"), ("new-one", "create"),
        ("huge", "would_not_fit"),
    ]  # fmt: skip
    assert [c["words"] for c in plan["items"][0]["changes"]] == [
        "copies: 2 → 3", "routing: least_loaded → session"
    ]  # fmt: skip
    assert plan["items"][3]["reason"] == (
        "accelerators_per_copy: 64 do not divide the model's 32 attention heads"
    )
    assert Event.objects.count() == events
    assert not Deployment.objects.filter(name="new-one").exists()


def test_a_plan_with_one_blocked_item_does_nothing_at_all(demo, bob, red):
    bobs = Caller(bob)
    two_hosted(bobs)
    document = bobs.get("/export").json()
    document["deployments"][0]["routing"] = "session"
    document["deployments"].append({**document["deployments"][1], "name": "elsewhere",
                                    "cluster": "nowhere"})  # fmt: skip
    refused = apply(bobs, document)
    assert refused.status_code == 409
    body = refused.json()
    assert body["detail"] == "nothing was applied: fix elsewhere first"
    assert body["plan"]["items"][2] == {
        "name": "elsewhere", "action": "refused", "changes": [],
        "reason": "cluster: there is no cluster named nowhere",
    }  # fmt: skip
    assert Deployment.objects.get(name="qwen3-8b").routing == "least_loaded"


def test_prune_deletes_what_the_file_no_longer_names_only_when_asked(demo, bob, red):
    bobs = Caller(bob)
    two_hosted(bobs)
    document = bobs.get(
        "/export",
    ).json()
    document["deployments"] = document["deployments"][:1]
    kept = apply(bobs, document).json()
    assert [(i["name"], i["action"]) for i in kept["items"]] == [("qwen3-8b", "unchanged")]
    assert Deployment.objects.filter(name="small", delete_when_stopped=False).exists()
    pruned = apply(bobs, document, prune=True).json()
    assert [(i["name"], i["action"]) for i in pruned["items"]] == [
        ("qwen3-8b", "unchanged"), ("small", "delete")
    ]  # fmt: skip
    assert not Deployment.objects.filter(name="small", delete_when_stopped=False).exists()


def test_bad_documents_are_refused_naming_what_is_wrong(demo, bob, carol, red):
    bobs = Caller(bob)
    two_hosted(bobs)
    document = bobs.get("/export").json()
    wrong_version = apply(bobs, {**document, "version": 2})
    assert (wrong_version.status_code, wrong_version.json()["field"]) == (422, "document.version")
    unknown = copy.deepcopy(document)
    unknown["deployments"][1]["colour"] = "red"
    refused = apply(bobs, unknown)
    assert (refused.status_code, refused.json()["field"]) == (422, "document.deployments.1.colour")
    bad_routing = copy.deepcopy(document)
    bad_routing["deployments"][0]["routing"] = "random"
    refused = apply(bobs, bad_routing)
    assert (refused.status_code, refused.json()["field"]) == (
        422, "document.deployments.0.routing"
    )  # fmt: skip
    twice = copy.deepcopy(document)
    twice["deployments"].append(document["deployments"][0])
    refused = apply(bobs, twice)
    assert (refused.status_code, refused.json()) == (
        400,
        {"detail": "deployments: qwen3-8b named more than once; name each deployment once",
         "field": "deployments"},
    )  # fmt: skip
    moved = copy.deepcopy(document)
    moved["deployments"][0]["team"] = "blue"  # bob only views blue
    plan = apply(bobs, moved, dry_run=True).json()
    assert plan["items"][0]["reason"] == "team: you are not an operator of a team named blue"
    by_viewer = apply(Caller(carol), document, dry_run=True).json()
    assert {i["action"] for i in by_viewer["items"]} == {"refused"}


def test_the_files_schema_is_published(demo, bob):
    schema = Caller(bob).get("/apply/schema").json()
    assert schema["required"] == ["version", "deployments"]
    entry = schema["$defs"]["ApplyDeployment"]
    assert entry["additionalProperties"] is False
    assert set(entry["required"]) == {"name", "team", "model", "cluster", "variant",
                                      "accelerators_per_copy"}  # fmt: skip


def test_a_files_quota_is_made_changed_and_refused_in_words(demo, bob, red):
    bobs = Caller(bob)
    two_hosted(bobs)
    document = bobs.get("/export").json()
    document["deployments"][1]["quota"] = {"requests_per_minute": 30}
    plan = apply(bobs, document).json()
    assert [c["words"] for c in plan["items"][1]["changes"]] == [
        "quota: none → requests_per_minute 30"
    ]
    assert Quota.objects.get(deployment__name="small").requests_per_minute == 30
    assert bobs.get("/export").json()["deployments"][1]["quota"] == {
        "tokens_per_day": None, "tokens_per_month": None, "requests_per_minute": 30,
        "tokens_per_minute": None, "shadow": False,
    }  # fmt: skip
    document["deployments"][1]["quota"] = {"shadow": True}
    refused = apply(bobs, document)
    assert refused.status_code == 409
    assert refused.json()["plan"]["items"][1]["reason"] == (
        "quota: limits: set at least one of tokens_per_day, tokens_per_month, "
        "requests_per_minute, tokens_per_minute (each a whole number from 1)"
    )
