"""The API's fit check with `allow_moves`: on a cluster fragmented by two half-GPU copies, a whole
GPU fits after one move, said in words (another team's deployment named to staff only, its size
to others); nothing is moved or reserved; a deployment hosted `movable: false` never moves;
without `allow_moves` the answer is as it was."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command

from catalog.models import Model
from deployments.choices import EventKind
from deployments.models import Deployment, Event, Reservation
from tests import factories
from tests.integration.test_api import Caller

pytestmark = pytest.mark.django_db

QWEN = "Qwen/Qwen3-8B"
ASK = {"model": QWEN, "variant": "bf16", "cluster": "frag", "accelerators_per_copy": 1,
       "engine_settings": {"max_model_len": 8192}}  # fmt: skip


def half_on(deployment: Deployment, gpu_index: int) -> None:
    """Its one copy holding half of GPU `gpu_index` (as placing it there would have)."""
    copy = factories.make_copy(deployment)
    gpu = deployment.cluster.machines.get().accelerators.get(index=gpu_index)
    Reservation.objects.create(copy=copy, machine=gpu.machine, accelerator=gpu,
                               reserved_bytes=gpu.memory_bytes // 2, share=Decimal("0.5"))  # fmt: skip


@pytest.fixture
def fragmented(red, blue):
    call_command("load_catalog")
    cluster = factories.make_cluster("frag", gpus=2)
    model = Model.objects.get(repo_id=QWEN)
    half = {"cluster": cluster, "model": model, "accelerators_per_copy": Decimal("0.5")}
    ours = factories.make_deployment("ours", red, **half)
    theirs = factories.make_deployment("theirs", blue, **half)
    half_on(ours, 0)
    half_on(theirs, 1)
    return ours, theirs


def test_a_whole_gpu_fits_after_one_move_said_in_words_and_nothing_is_moved(fragmented, carol):
    before = list(Reservation.objects.values_list("pk", "accelerator_id"))
    plain = Caller(carol).post("/fit-check", ASK).json()
    assert plain["fit_now"] == 0 and plain["moves"] is None

    answer = Caller(carol).post("/fit-check", {**ASK, "allow_moves": True})
    assert answer.status_code == 200, answer.content
    fit = answer.json()
    assert [p["accelerators"] for p in fit["placed"]] == [[0]] and fit["not_placed"] == []
    assert fit["moves"] == [{"deployment": "ours", "copy": 0, "gb": 39.82,
                             "from": {"machine": "frag-m1", "accelerators": [0]},
                             "to": {"machine": "frag-m1", "accelerators": [1]}}]  # fmt: skip
    assert fit["moves_words"] == (
        "Fits after moving 1 copy: ours copy 0 (frag-m1 GPU 0 → frag-m1 GPU 1); no downtime: "
        "each starts at its new place before the old one stops."
    )
    assert list(Reservation.objects.values_list("pk", "accelerator_id")) == before


def test_another_teams_deployment_is_named_to_staff_only_and_one_that_may_not_move_stays(
    fragmented, carol, alice
):
    ours, theirs = fragmented
    Deployment.objects.filter(pk=ours.pk).update(movable=False)
    fit = Caller(carol).post("/fit-check", {**ASK, "allow_moves": True}).json()
    assert [(m["deployment"], m["copy"]) for m in fit["moves"]] == [(None, None)]
    assert "another team's copy of 0.5 GPU (frag-m1 GPU 1 → frag-m1 GPU 0)" in fit["moves_words"]
    assert "theirs" not in fit["moves_words"]
    staff = Caller(alice).post("/fit-check", {**ASK, "allow_moves": True}).json()
    assert staff["moves"][0]["deployment"] == "theirs"
    assert "theirs copy 0 (frag-m1 GPU 1 → frag-m1 GPU 0)" in staff["moves_words"]

    Deployment.objects.filter(pk=theirs.pk).update(movable=False)
    none = Caller(carol).post("/fit-check", {**ASK, "allow_moves": True}).json()
    assert none["moves"] == [] and none["placed"] == []
    assert none["moves_words"] == "No moves of other copies make it fit: none exists."


def test_movable_is_taken_at_host_and_answered_and_a_bad_value_refused(fragmented, bob):
    assert Caller(bob).get(f"/deployments/{fragmented[0].pk}").json()["movable"] is True
    bad = Caller(bob).post("/fit-check", {**ASK, "allow_moves": "yes"})
    assert bad.status_code == 422 and "allow_moves" in bad.json()["field"]
    refused = Caller(bob).post("/deployments", {"model": QWEN, "variant": "bf16",
                                                "cluster": "frag", "movable": "no"})  # fmt: skip
    assert refused.status_code == 422 and refused.json()["field"] == "movable"


def test_host_and_scale_take_allow_moves_and_refuse_a_bad_value_in_words(fragmented, bob, client):
    ours, _ = fragmented
    refused = Caller(bob).post("/deployments", {"model": QWEN, "variant": "bf16",
                                                "cluster": "frag", "allow_moves": "maybe"})  # fmt: skip
    assert refused.status_code == 422 and refused.json()["field"] == "allow_moves"
    bad_scale = Caller(bob).post(f"/deployments/{ours.pk}/scale", {"copies": 1, "allow_moves": 2})
    assert bad_scale.status_code == 422 and bad_scale.json()["field"] == "allow_moves"
    assert Deployment.objects.get(pk=ours.pk).make_room is False  # nothing half-written

    scaled = Caller(bob).post(f"/deployments/{ours.pk}/scale", {"copies": 2, "allow_moves": True})
    assert scaled.status_code == 202 and scaled.json()["make_room"] is True
    event = Event.objects.filter(deployment=ours, kind=EventKind.ACTION).latest("id")
    assert event.message == "Scale to 2 copies, moving other copies to make room where needed"
    hosted = Caller(bob).post("/deployments", {"model": QWEN, "variant": "bf16", "cluster": "frag",
                                               "name": "big", "allow_moves": True,
                                               "engine_settings": {"max_model_len": 8192}})  # fmt: skip
    assert hosted.status_code == 202, hosted.content
    big = Deployment.objects.get(name="big")
    assert big.make_room is True
    assert (
        Event.objects.filter(deployment=big, kind=EventKind.ACTION)
        .get()
        .message.endswith("on frag, moving other copies to make room where needed")
    )

    client.force_login(bob)
    client.post(f"/deployments/{ours.pk}/scale/", {"copies": "1", "allow_moves": "maybe"})
    assert Deployment.objects.get(pk=ours.pk).copies_wanted == 2  # refused, nothing changed
    page = client.get(f"/deployments/{ours.pk}/").content.decode()
    assert "Not done: allow moves: &#x27;maybe&#x27; is not a yes or no: give true to let other " \
        "copies move to make room, or false." in page  # fmt: skip


def test_the_scale_dialog_offers_the_moves_that_make_room_and_a_box_to_accept_them(
    fragmented, bob, client
):
    ours, _ = fragmented
    mine = factories.make_deployment("mine", ours.team, cluster=ours.cluster, model=ours.model,
                                     copies_wanted=0)  # fmt: skip
    client.force_login(bob)
    url = f"/deployments/{mine.pk}/scale/fit/?copies=1&accelerators_per_copy=1"
    fit = " ".join(client.get(url).content.decode().split())
    assert (
        '<p id="scale-moves">Fits after moving 1 copy: ours copy 0 (frag-m1 GPU 0 → frag-m1 GPU '
        "1); no downtime: each starts at its new place before the old one stops.</p>" in fit
    )
    assert 'name="allow_moves" value="on" >' in fit  # not ticked until the operator ticks it
    ticked = " ".join(client.get(url + "&allow_moves=on").content.decode().split())
    assert 'name="allow_moves" value="on" checked>' in ticked
    half = client.get(f"/deployments/{mine.pk}/scale/fit/?copies=1&accelerators_per_copy=0.5")
    assert "scale-moves" not in half.content.decode()  # it fits now: nothing to move
