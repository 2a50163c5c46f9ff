"""The API's fit check with `allow_moves`: on a cluster fragmented by two half-GPU copies, a whole
GPU fits after one move, said in words (another team's deployment named to staff only, its size
to others); nothing is moved or reserved; a deployment hosted `movable: false` never moves;
without `allow_moves` the answer is as it was."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command

from catalog.models import Model
from deployments.models import Deployment, Reservation
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
    assert none["moves_words"] == "No moves of at most 3 copies make it fit: none exists."


def test_movable_is_taken_at_host_and_answered_and_a_bad_value_refused(fragmented, bob):
    assert Caller(bob).get(f"/deployments/{fragmented[0].pk}").json()["movable"] is True
    bad = Caller(bob).post("/fit-check", {**ASK, "allow_moves": "yes"})
    assert bad.status_code == 422 and "allow_moves" in bad.json()["field"]
    refused = Caller(bob).post("/deployments", {"model": QWEN, "variant": "bf16",
                                                "cluster": "frag", "movable": "no"})  # fmt: skip
    assert refused.status_code == 422 and refused.json()["field"] == "movable"
