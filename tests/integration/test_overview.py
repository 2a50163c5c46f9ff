"""The fleet overview, the home page: failing deployments first, deployments by state, GPU
memory per cluster and product, a card per GPU with the copies on it (another team's shown as
"another team"), the last hour's traffic and the teams that used the most, each for what the
user may see; live over Channels with the real Redis layer."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from bs4 import BeautifulSoup
from django.utils import timezone

from console.models import Role
from deployments.choices import CopyState, DeploymentState
from deployments.guard import state_change_allowed
from deployments.models import Copy, Deployment, Reservation
from deployments.transitions import move_deployment
from gateway.models import MinuteFigures, UsageRecord
from tests import factories
from tests.conftest import logged_in
from tests.integration.test_live import connect, fresh_channel_layer, joined  # noqa: F401

GIB = 2**30


def placed(name: str, team, state: str, held_gib: int = 0, gpu: int = 0, message: str = ""):
    """A deployment in `state` whose copy 0 holds `held_gib` of GPU `gpu` of the cluster lab."""
    deployment = factories.make_deployment(name, team)
    with state_change_allowed():  # as if it had been placed and had started
        Deployment.objects.filter(pk=deployment.pk).update(state=state, last_message=message)
        copy = Copy.objects.create(deployment=deployment, ordinal=0, state=CopyState.READY)
    if held_gib:
        unit = deployment.cluster.machines.get().accelerators.get(index=gpu)
        Reservation.objects.create(copy=copy, machine=unit.machine, accelerator=unit,
                                   reserved_bytes=held_gib * GIB, share=Decimal("0.5"))  # fmt: skip
    return deployment


def used(team, deployment, minutes_ago: int, requests: int, tokens: int) -> None:
    at = timezone.now() - timedelta(minutes=minutes_ago)
    MinuteFigures.objects.create(deployment=deployment, deployment_name=deployment.name,
                                 minute=at.replace(second=0, microsecond=0), requests=requests,
                                 generated_tokens=tokens)  # fmt: skip
    for _ in range(requests):
        UsageRecord.objects.create(at=at, team=team, deployment=deployment, status=200, duration_s=1,
                                   deployment_name=deployment.name, model=deployment.name,
                                   prompt_tokens=10, completion_tokens=tokens // requests)  # fmt: skip


@pytest.fixture
def fleet(db, red, bob):
    green = factories.make_team("green")
    factories.make_cluster("lab", gpus=2)
    chat = placed("red-chat", red, DeploymentState.DEPLOYED, held_gib=40, gpu=0)
    placed("red-wait", red, DeploymentState.ERROR, message="No copy serves; 1 waits for room.")
    placed("red-broken", red, DeploymentState.FAILED, message="Failed to start: out of memory.")
    batch = placed("green-batch", green, DeploymentState.DEPLOYED, held_gib=20, gpu=1)
    used(red, chat, minutes_ago=5, requests=3, tokens=7200)
    used(red, chat, minutes_ago=120, requests=1, tokens=50)  # older than the hour
    used(green, batch, minutes_ago=2, requests=4, tokens=9000)
    return {"chat": chat, "green": green}


def page_of(user) -> BeautifulSoup:
    answer = logged_in(user).get("/")
    assert answer.status_code == 200
    return BeautifulSoup(answer.content, "html.parser")


def words(element) -> str:
    return " ".join(element.get_text(" ").split())


def test_an_operator_sees_the_failing_first_and_their_teams_figures(fleet, bob):
    page = page_of(bob)
    assert words(page.select_one("#deploy-model")) == "Deploy a model"  # bob operates in red
    assert [li["data-deployment"] for li in page.select(".needs-a-look li")] == [
        "red-broken", "red-wait"
    ]  # fmt: skip
    assert words(page.select_one('[data-deployment="red-broken"] p')) == (
        "Failed to start: out of memory."
    )
    counts = {li["data-state-count"]: words(li) for li in page.select("[data-state-count]")}
    assert counts == {"DEPLOYED": "Deployed 1", "ERROR": "Error 1", "FAILED": "Failed 1"}
    assert words(page.select_one("#hour-requests")) == "Requests 3"
    assert words(page.select_one("#hour-tokens")) == "Generated tokens a second 2.00"
    assert [words(li) for li in page.select(".top-teams li")] == ["red: 3 requests, 7230 tokens"]
    room = page.select_one('[data-room="lab NVIDIA-H100-80GB-HBM3"]')
    assert words(room).endswith("60.00 GiB reserved, 99.29 GiB free")
    first, second = page.select('[data-gpu="lab-m1/0"]'), page.select('[data-gpu="lab-m1/1"]')
    assert words(first[0].figcaption) == "GPU 0 · NVIDIA-H100-80GB-HBM3 · 39.65 GiB free"
    share = first[0].select_one(".gpu-share")
    assert (words(share), share["data-percent"]) == ("red-chat copy 0 40.00 GiB", "50")
    drawn = first[0].select_one(".gpu-fill rect")
    assert (drawn["x"], drawn["width"]) == ("0", "50")  # its part of the card
    other = second[0].select_one(".gpu-share")
    assert (words(other), other["data-percent"]) == ("another team 20.00 GiB", "25")
    # The hour's 3 requests came 5 minutes ago: 5 bars before the last (this minute), full height.
    bars = page.select(".minute-bars rect")
    assert [(b["x"], b["height"]) for b in bars if b["height"] != "0"] == [("54", "100")]
    assert "green-batch" not in str(page)


def test_a_platform_admin_sees_every_team(fleet, alice):
    page = page_of(alice)
    assert [words(li) for li in page.select(".top-teams li")] == [
        "green: 4 requests, 9040 tokens", "red: 3 requests, 7230 tokens"
    ]  # fmt: skip
    assert words(page.select_one("#hour-requests")) == "Requests 7"
    share = page.select_one('[data-gpu="lab-m1/1"] .gpu-share')
    assert words(share) == "green-batch copy 0 20.00 GiB"


def test_an_outsider_sees_the_gpus_room_but_no_deployment(fleet, dave):
    page = page_of(dave)
    assert page.select(".needs-a-look li") == []
    assert words(page.select_one("#all-well")) == "Every deployment is as asked."
    assert [words(s) for s in page.select(".gpu-share")] == [
        "another team 40.00 GiB", "another team 20.00 GiB"
    ]  # fmt: skip
    assert page.select(".top-teams li") == []
    assert "red-chat" not in str(page) and "Deploy a model" not in str(page)


def test_an_empty_fleet_says_what_to_do(db, bob):
    page = page_of(bob)
    assert words(page.select_one(".empty-state")) == (
        "Nothing to look over yet. Add a cluster, then deploy a model: its GPUs, copies and "
        "traffic show here."
    )


def test_anonymous_is_sent_to_log_in(db, client):
    answer = client.get("/")
    assert (answer.status_code, answer["Location"]) == (302, "/login/?next=/")


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_overview_follows_a_state_change_live_for_each_user(red, bob):
    def set_up():
        factories.make_cluster("lab", gpus=1)
        outsider = factories.make_user("eve")
        viewer = factories.make_user("vic")
        factories.add_member(viewer, red, Role.VIEWER)
        return placed("red-chat", red, DeploymentState.DEPLOYED, held_gib=40), outsider, viewer

    chat, outsider, viewer = await sync_to_async(set_up)()
    as_viewer, as_outsider = connect(viewer, "fleet"), connect(outsider, "fleet")
    caught_up = await joined(as_viewer)
    assert 'id="fleet-overview" hx-swap-oob="true"' in caught_up
    assert "Every deployment is as asked." in caught_up
    await joined(as_outsider)

    def degrade() -> None:
        move_deployment(chat.pk, DeploymentState.DEGRADED, message="0 of 1 copies serve.")

    await sync_to_async(degrade)()
    seen = BeautifulSoup(await as_viewer.receive_from(5), "html.parser")
    assert [li["data-deployment"] for li in seen.select(".needs-a-look li")] == ["red-chat"]
    assert words(seen.select_one('[data-deployment="red-chat"] p')) == "0 of 1 copies serve."
    theirs = await as_outsider.receive_from(5)
    assert "red-chat" not in theirs and "another team" in theirs
    await as_viewer.disconnect()
    await as_outsider.disconnect()
