"""Revisions through the API: each change of what a deployment is asked to be is numbered with
who, when and why; two compare field by field and in words; a rollback makes a new revision
equal to the one named, rolling the copies only where it changes what they run; a revision
whose copies never serve is marked failed and, where the deployment asked, rolled back."""

from __future__ import annotations

import pytest

from deployments import actions, lifecycle, revisions
from deployments.choices import CopyState, ErrorCode, EventKind
from deployments.classify import Failure
from deployments.models import Copy, Deployment, Event
from deployments.transitions import move_copy
from gateway.models import Quota
from tests.integration.test_api import Caller, host_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(db):
    from django.core.management import call_command

    call_command("seed_demo")


def revised(bob) -> tuple[Caller, int]:
    """Hosted with a comment, then routed, re-set and scaled: four revisions."""
    bobs = Caller(bob)
    hosted = bobs.post("/deployments", host_body(comment="first try", team="red"))
    assert hosted.status_code == 202, hosted.content
    pk = hosted.json()["id"]
    routed = bobs.post(f"/deployments/{pk}/routing", {"routing": "prefix", "comment": "chats"})
    assert routed.status_code == 200, routed.content
    settings = {"engine_settings": {"max_model_len": 4096}, "comment": "shorter"}
    assert bobs.post(f"/deployments/{pk}/engine-settings", settings).status_code == 202
    assert bobs.post(f"/deployments/{pk}/scale", {"copies": 3}).status_code == 202
    return bobs, pk


def test_each_change_is_a_numbered_revision_with_who_why_and_what_it_changed(demo, bob, red):
    bobs, pk = revised(bob)
    listed = bobs.get(f"/deployments/{pk}/revisions").json()
    assert listed["deployment"] == "qwen3-8b"
    items = listed["items"]
    assert [i["number"] for i in items] == [4, 3, 2, 1]
    assert [i["by"] for i in items] == ["bob"] * 4
    assert [i["comment"] for i in items] == ["", "shorter", "chats", "first try"]
    assert [i["current"] for i in items] == [True, False, False, False]
    assert [i["outcome"] for i in items] == ["pending"] * 4
    assert items[3]["why"] == "Host 2 × 0.5 on demo"
    assert items[3]["changes"] == []
    assert items[3]["spec"] == {
        "variant": "bf16",
        "revision": "",
        "accelerators_per_copy": "0.5",
        "copies": 2,
        "autoscaling": None,
        "engine_settings": {"max_model_len": 8192},
        "chat_name": "qwen",
        "reply_wait_s": 120,
        "routing": "least_loaded",
        "max_waiting": 0,
        "queue_wait_s": None,
        "movable": True,
        "quota": None,
    }
    assert [c["words"] for c in items[2]["changes"]] == ["routing: least_loaded → prefix"]
    assert items[1]["changes"] == [
        {
            "field": "engine_settings",
            "label": "engine settings",
            "before": {"max_model_len": 8192},
            "after": {"max_model_len": 4096},
            "words": "engine settings: max_model_len 8192 → 4096",
        }
    ]
    assert [c["words"] for c in items[0]["changes"]] == ["copies: 2 → 3"]
    one = bobs.get(f"/deployments/{pk}/revisions/3").json()
    assert (one["number"], one["why"]) == (3, "Change engine settings to {'max_model_len': 4096}")
    compared = bobs.get(f"/deployments/{pk}/revisions/1/compare/4").json()
    assert [c["words"] for c in compared["changes"]] == [
        "copies: 2 → 3",
        "engine settings: max_model_len 8192 → 4096",
        "routing: least_loaded → prefix",
    ]


def test_a_scale_to_the_number_it_has_keeps_no_revision(demo, bob, red):
    bobs, pk = revised(bob)
    assert bobs.post(f"/deployments/{pk}/scale", {"copies": 3}).status_code == 202
    assert [i["number"] for i in bobs.get(f"/deployments/{pk}/revisions").json()["items"]] == [
        4, 3, 2, 1
    ]  # fmt: skip


def test_a_rollback_makes_a_new_revision_equal_to_the_one_named_and_rolls_the_copies(
    demo, bob, red
):
    bobs, pk = revised(bob)
    generation = Deployment.objects.get(pk=pk).generation
    rolled = bobs.post(f"/deployments/{pk}/rollback", {"revision": 1, "comment": "too slow"})
    assert rolled.status_code == 202, rolled.content
    after = rolled.json()
    assert (after["routing"], after["copies_wanted"]) == ("least_loaded", 2)
    assert after["engine_settings"] == {"max_model_len": 8192}
    assert Deployment.objects.get(pk=pk).generation == generation + 1
    newest = bobs.get(f"/deployments/{pk}/revisions").json()["items"][0]
    first = bobs.get(f"/deployments/{pk}/revisions/1").json()
    assert (newest["number"], newest["restores"], newest["comment"]) == (5, 1, "too slow")
    assert newest["spec"] == first["spec"]
    assert Event.objects.filter(deployment_id=pk).first().message == (
        "Roll back to revision 1: copies: 3 → 2; engine settings: max_model_len 4096 → 8192; "
        "routing: prefix → least_loaded"
    )


def test_a_rollback_that_changes_only_the_routing_keeps_the_copies(demo, bob, red):
    bobs, pk = revised(bob)
    generation = Deployment.objects.get(pk=pk).generation
    assert bobs.post(f"/deployments/{pk}/rollback", {"revision": 3}).status_code == 202
    assert Deployment.objects.get(pk=pk).generation == generation  # revision 3 ran them too
    assert Deployment.objects.get(pk=pk).copies_wanted == 2


def test_a_rollback_to_what_it_is_or_to_no_revision_is_refused_and_changes_nothing(demo, bob, red):
    bobs, pk = revised(bob)
    same = bobs.post(f"/deployments/{pk}/rollback", {"revision": 4})
    assert (same.status_code, same.json()) == (
        400,
        {"detail": "revision: qwen3-8b is asked to be that now: nothing changes",
         "field": "revision"},
    )  # fmt: skip
    none = bobs.post(f"/deployments/{pk}/rollback", {"revision": 9})
    assert (none.status_code, none.json()) == (
        400,
        {"detail": "revision: qwen3-8b has no revision 9: it has revisions 1 to 4",
         "field": "revision"},
    )  # fmt: skip
    for body, field in [({"revision": 0}, "revision"), ({"revision": "two"}, "revision"),
                        ({}, "revision"), ({"revision": 1, "comment": "x" * 501}, "comment"),
                        ({"revision": 1, "comment": "a\u202eb"}, "comment")]:  # fmt: skip
        refused = bobs.post(f"/deployments/{pk}/rollback", body)
        assert (refused.status_code, refused.json()["field"]) == (422, field), body
    assert len(bobs.get(f"/deployments/{pk}/revisions").json()["items"]) == 4


def test_a_comment_that_is_not_printable_is_refused_before_anything_changes(demo, bob, red):
    bobs, pk = revised(bob)
    refused = bobs.post(f"/deployments/{pk}/routing", {"routing": "session", "comment": "a\x07"})
    assert (refused.status_code, refused.json()) == (
        422,
        {"detail": "comment: use printable characters only", "field": "comment"},
    )
    assert Deployment.objects.get(pk=pk).routing == "prefix"


def test_a_viewer_reads_revisions_but_cannot_roll_back(demo, bob, carol, red):
    _bobs, pk = revised(bob)
    carols = Caller(carol)
    assert len(carols.get(f"/deployments/{pk}/revisions").json()["items"]) == 4
    refused = carols.post(f"/deployments/{pk}/rollback", {"revision": 1})
    assert refused.status_code == 403
    assert Deployment.objects.get(pk=pk).routing == "prefix"


def fail_for_good(copy: Copy) -> None:
    move_copy(copy.pk, CopyState.STARTING, attempts=1)
    lifecycle.fail_copy(
        Copy.objects.get(pk=copy.pk),
        Failure(ErrorCode.OOM, True, "torch.OutOfMemoryError: CUDA out of memory."),
    )


def test_a_revision_whose_copies_never_serve_fails_and_is_rolled_back_where_asked(demo, bob, red):
    bobs, pk = revised(bob)
    on = bobs.post(f"/deployments/{pk}/auto-rollback", {"enabled": True})
    assert (on.status_code, on.json()["auto_rollback"]) == (200, True)
    deployment = Deployment.objects.get(pk=pk)
    served = Copy.objects.create(deployment=deployment, ordinal=9, generation=deployment.generation)
    move_copy(served.pk, CopyState.STARTING)
    move_copy(served.pk, CopyState.READY)
    revisions.copy_served(Copy.objects.get(pk=served.pk))
    assert bobs.post(f"/deployments/{pk}/engine-settings",
                     {"engine_settings": {"max_model_len": 2048}}).status_code == 202  # fmt: skip
    deployment = Deployment.objects.get(pk=pk)
    new = Copy.objects.create(deployment=deployment, ordinal=10, generation=deployment.generation)
    fail_for_good(new)
    items = bobs.get(f"/deployments/{pk}/revisions").json()["items"]
    assert [(i["number"], i["outcome"]) for i in items[:2]] == [(5, "failed"), (4, "served")]
    told = Event.objects.filter(deployment_id=pk, kind=EventKind.SYSTEM).first()
    assert told.message == (
        "Revision 5 failed: its copies never served (torch.OutOfMemoryError: CUDA out of "
        "memory.); rolling back to revision 4, the last that served."
    )
    actions.roll_back_failed(pk, 5)  # what the task the failure sent does
    items = bobs.get(f"/deployments/{pk}/revisions").json()["items"]
    assert (items[0]["number"], items[0]["restores"], items[0]["by"]) == (6, 4, "system")
    assert items[0]["why"] == (
        "Roll back to revision 4: revision 5's copies never served: engine settings: "
        "max_model_len 2048 → 4096"
    )
    assert Deployment.objects.get(pk=pk).engine_settings == {"max_model_len": 4096}


def test_without_auto_rollback_a_failed_revision_stays(demo, bob, red):
    bobs, pk = revised(bob)
    deployment = Deployment.objects.get(pk=pk)
    fail_for_good(Copy.objects.create(deployment=deployment, ordinal=9,
                                      generation=deployment.generation))  # fmt: skip
    assert bobs.get(f"/deployments/{pk}/revisions").json()["items"][0]["outcome"] == "failed"
    told = Event.objects.filter(deployment_id=pk, kind=EventKind.SYSTEM).first()
    assert told.message == (
        "Revision 4 failed: its copies never served (torch.OutOfMemoryError: CUDA out of memory.)."
    )
    bad = bobs.post(f"/deployments/{pk}/auto-rollback", {"enabled": "maybe"})
    assert (bad.status_code, bad.json()["field"]) == (422, "enabled")


def test_a_failed_rollback_to_the_last_that_served_is_not_rolled_back_again(demo, bob, red):
    bobs, pk = revised(bob)
    bobs.post(f"/deployments/{pk}/auto-rollback", {"enabled": True})
    deployment = Deployment.objects.get(pk=pk)
    served = Copy.objects.create(deployment=deployment, ordinal=9, generation=deployment.generation)
    move_copy(served.pk, CopyState.STARTING)
    move_copy(served.pk, CopyState.READY)
    revisions.copy_served(Copy.objects.get(pk=served.pk))  # revision 4 served
    bobs.post(f"/deployments/{pk}/engine-settings", {"engine_settings": {"max_model_len": 2048}})
    assert bobs.post(f"/deployments/{pk}/rollback", {"revision": 4}).status_code == 202
    deployment = Deployment.objects.get(pk=pk)
    fail_for_good(Copy.objects.create(deployment=deployment, ordinal=10,
                                      generation=deployment.generation))  # fmt: skip
    items = bobs.get(f"/deployments/{pk}/revisions").json()["items"]
    assert [(i["number"], i["outcome"]) for i in items[:3]] == [
        (6, "failed"), (5, "pending"), (4, "served")
    ]  # fmt: skip
    told = Event.objects.filter(deployment_id=pk, kind=EventKind.SYSTEM).first()
    assert told.message == (
        "Revision 6 failed: its copies never served (torch.OutOfMemoryError: CUDA out of memory.)."
    )  # it asks for what revision 4 asked: there is nothing left to go back to


def test_a_deployments_quota_is_kept_in_its_revisions_and_rolled_back_with_them(demo, bob, red):
    bobs, pk = revised(bob)
    limits = {"deployment": "qwen3-8b", "tokens_per_day": 1000}
    assert bobs.post("/quotas", limits).status_code == 201
    items = bobs.get(f"/deployments/{pk}/revisions").json()["items"]
    assert (items[0]["number"], items[0]["why"]) == (5, "Quota: 1,000 tokens per day")
    assert [c["field"] for c in items[0]["changes"]] == ["quota"]
    assert items[0]["spec"]["quota"] == {
        "tokens_per_day": 1000, "tokens_per_month": None, "requests_per_minute": None,
        "tokens_per_minute": None, "shadow": False,
    }  # fmt: skip
    assert bobs.post(f"/deployments/{pk}/rollback", {"revision": 4}).status_code == 202
    assert not Quota.objects.filter(deployment_id=pk).exists()
    assert bobs.post(f"/deployments/{pk}/rollback", {"revision": 5}).status_code == 202
    assert Quota.objects.get(deployment_id=pk).tokens_per_day == 1000
